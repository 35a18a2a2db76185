"""YAML as gpuscale reads it: YAML 1.2's core schema for numbers and booleans, and budgets against hostile files.

PyYAML implements YAML 1.1, where `2:30` is the base-60 number 150, `yes`, `on` and `n` are booleans and `010` is
octal 8. Configuration files written today follow YAML 1.2 (as Kubernetes' own YAML reader does for JSON-compatible
documents): here `true`/`false` are the only booleans, integers are decimal, `0o17` or `0x1f`, floats are decimal
with an optional exponent or `.inf`/`.nan`, and everything else is a string (a field that wants a number then says
so). Timestamps, `<<` merges and `null` keep PyYAML's safe rules.

Budgets, counted while composing, before any Python object is built: nesting (`MAX_DEPTH`, aliases included) and
what aliases add to a document (`ALIAS_NODES` nodes: a "billion laughs" file is refused at its first levels).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpuscale.inputs.files import MAX_DEPTH, excerpt, one_line

ALIAS_NODES = 100_000
"""Nodes that aliases may add to one document, counting every expansion of an anchor."""

_BOOL, _INT, _FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_INT_TEXT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT_TEXT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
                         r"|\.(?:nan|NaN|NAN)")


class YamlLimitError(yaml.MarkedYAMLError):
    """A budget was exceeded; `problem` says which, `problem_mark` where."""


class Yaml12Loader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2 core-schema scalars and nesting/alias budgets."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._physical = 0
        self._measure: dict[int, tuple[int, int]] = {}  # id(node) → (expanded size, expanded depth)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlLimitError(problem=f"nested deeper than {MAX_DEPTH} levels",
                                 problem_mark=self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._physical += 1
        if node is not None:
            self._measure_node(node)
        return node

    def _measure_node(self, node: Node) -> None:
        """Size and depth of `node` with every alias expanded, from its children's (composed before it)."""
        if isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, SequenceNode):
            children = list(node.value)
        else:
            children = []
        measured = [self._measure.get(id(child), (1, 1)) for child in children]
        size = 1 + sum(s for s, _ in measured)
        depth = 1 + max((d for _, d in measured), default=0)
        self._measure[id(node)] = (size, depth)
        if depth > MAX_DEPTH:
            raise YamlLimitError(problem=f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded",
                                 problem_mark=node.start_mark)
        if size > self._physical + ALIAS_NODES:
            raise YamlLimitError(problem=f"its aliases expand to more than {ALIAS_NODES} extra nodes",
                                 problem_mark=node.start_mark)


def _construct_mapping(loader: Yaml12Loader, node: Node, deep: bool = False) -> dict[Any, Any]:
    """A mapping whose keys are unique as written: PyYAML keeps the last of two `max_size:` lines silently; so does
    a `<<` merge, on purpose (its keys are defaults)."""
    if isinstance(node, MappingNode):
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           f"duplicate key {excerpt(key.value)}", key.start_mark)
                seen.add(key.value)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)  # type: ignore[arg-type]


Yaml12Loader.construct_mapping = _construct_mapping  # type: ignore[assignment,method-assign]
Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
Yaml12Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Yaml12Loader.add_implicit_resolver(_INT, re.compile(rf"^(?:{_INT_TEXT.pattern})$"), list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(_FLOAT, re.compile(rf"^(?:{_FLOAT_TEXT.pattern})$"), list("-+0123456789."))


def _scalar(loader: Yaml12Loader, node: Node) -> str:
    if not isinstance(node, ScalarNode):
        raise ConstructorError(None, None, f"expected a scalar, got a {type(node).__name__}", node.start_mark)
    return str(loader.construct_scalar(node))


def _construct_bool(loader: Yaml12Loader, node: Node) -> bool:
    text = _scalar(loader, node)
    if text.lower() not in ("true", "false"):
        raise ConstructorError(None, None, f"not a YAML 1.2 boolean: {excerpt(text)}", node.start_mark)
    return text.lower() == "true"


def _construct_int(loader: Yaml12Loader, node: Node) -> int:
    text = _scalar(loader, node)
    if _INT_TEXT.fullmatch(text) is None or len(text) > 400:
        raise ConstructorError(None, None, f"not a YAML 1.2 integer: {excerpt(text)}", node.start_mark)
    base = 8 if text.startswith("0o") else 16 if text.startswith("0x") else 10
    return int(text[2:] if base != 10 else text, base)


def _construct_float(loader: Yaml12Loader, node: Node) -> float:
    text = _scalar(loader, node)
    if _FLOAT_TEXT.fullmatch(text) is None or len(text) > 400:
        raise ConstructorError(None, None, f"not a YAML 1.2 float: {excerpt(text)}", node.start_mark)
    return float(text.replace(".inf", "inf").replace(".Inf", "inf").replace(".INF", "inf").lstrip(".")
                 if "inf" in text.lower() or "nan" in text.lower() else text)


Yaml12Loader.add_constructor(_BOOL, _construct_bool)
Yaml12Loader.add_constructor(_INT, _construct_int)
Yaml12Loader.add_constructor(_FLOAT, _construct_float)


def load(text: str) -> Any:
    """The single document in `text` (None when empty). Raises `yaml.YAMLError`; see `describe`."""
    return yaml.load(text, Loader=Yaml12Loader)


def load_all(text: str) -> list[Any]:
    """Every non-empty document in `text`. Raises `yaml.YAMLError`; see `describe`."""
    return [doc for doc in yaml.load_all(text, Loader=Yaml12Loader) if doc is not None]


def describe(err: yaml.YAMLError) -> tuple[str | None, str]:
    """Where (`line L column C`, or None) and what, on one line, for any error the loader raises."""
    if isinstance(err, yaml.reader.ReaderError):
        return f"character {err.position}", one_line(f"bad YAML: {err.reason} (#x{ord(err.character):04x})"
                                                     if isinstance(err.character, str) else f"bad YAML: {err.reason}")
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else None
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or str(err)
    return where, one_line(f"bad YAML: {problem}", 300)
