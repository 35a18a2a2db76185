"""CEL device selectors as kube-scheduler v1.37 evaluates them (k8s.io/dynamic-resource-allocation/cel), on
cel-expr-python, the CEL project's binding of its C++ runtime (docs/decisions.md, D41).

The environment: one variable `device` with `driver`, `allowMultipleAllocations`, `attributes` and `capacity`;
`attributes[domain][id]` is a string, int, bool or version (`semver`), `capacity[domain][id]` a `quantity`. An
attribute published without a domain belongs to the driver's. A domain the device does not publish reads as an empty
map, so `"x" in device.attributes["other.example.com"]` is false and `device.attributes["other.example.com"].x` a
runtime error ("no such key"), while `"other.example.com" in device.attributes` stays false. cel-expr-python's maps
cannot answer a missing key with a default, so each `device.attributes[…]` / `device.capacity[…]` lookup of the
expression is rewritten to `[?…].orValue(dyn({}))` before it is compiled (the original is compiled first, so compile
errors point at the text the user wrote). Kubernetes' `quantity` and `semver` libraries are provided as tagged maps
(`{"quantity": [numerator, denominator]}`, `{"semver": [major, minor, patch, prerelease]}`, canonical, so `==` is
Kubernetes' semantic equality) with their member functions written in Python; cel-go's bindings (`cel.bind`),
strings and optional extensions come from the library.

Not provided (a compile error names them): Kubernetes' lists, regex (`find`, `findAll`), URL, IP/CIDR, format and
sets libraries, two-variable comprehensions and list-type attributes (`DRAListTypeAttributes`, off by default in
v1.37). The runtime cost limit (1,000,000) is not enforced: selectors over a device's few attributes stay far below.
A quantity or version compared with `==` to a value of another type is false here, an error ("no such overload") in
Kubernetes (its types refuse the comparison; tagged maps cannot).

tests/engine/dra/test_cel_kubernetes.py holds this module to Kubernetes' own environment (the Go library, built by
scripts/celref.sh): same outcomes and runtime error words on the documented expressions and more.

Runtime errors come back worded as cel-go words the common ones ("no such key: x", with Kubernetes' hint, "no such
overload"); `compile` caches per expression string and `Compiled` caches the answer per device shape (driver,
attributes, capacity), so the thousands of identical GPUs of a pool cost one evaluation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from gpuscale.model.dra import Device, DeviceCapacity, Version
from gpuscale.model.quantity import QuantityError, parse_quantity

NO_SUCH_KEY_HINT = (". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with "
                    "has() for optional fields")
"""What Kubernetes appends to a "no such key" runtime error (cel.EnhanceRuntimeError)."""

_SHAPE_CACHE_LIMIT = 200_000
"""Answers kept per expression; past it the cache starts again (shapes are few: a pool's devices differ by index)."""


@dataclass(frozen=True, slots=True)
class CompileError:
    """The expression does not compile; `message` as Kubernetes words it ("compilation failed: ERROR: <input>:1:5:
    …", or "must evaluate to bool or the unknown type, not string")."""

    expression: str
    message: str


class SelectorError(Exception):
    """A selector failed at run time on a device: kube-scheduler aborts that pod's scheduling with this error. The
    message is the CEL error alone ("no such key: productName. consider …"); the allocator adds which claim or class,
    selector and device."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --- Kubernetes' quantity and semver libraries, over tagged maps -----------------------------------------------------

_QUANTITY = "quantity"
_SEMVER = "semver"
_INT64 = (-(2**63), 2**63 - 1)


def _quantity(value: Fraction) -> dict[str, list[int]]:
    return {_QUANTITY: [value.numerator, value.denominator]}


def _parse_cel_quantity(text: str) -> dict[str, list[int]]:
    try:
        return _quantity(parse_quantity(text))
    except QuantityError as e:
        raise ValueError(str(e)) from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


_IDENTIFIER = re.compile(r"[0-9A-Za-z-]+")


def parse_semver(text: str) -> tuple[int, int, int, str]:
    """Strict semantic version 2.0.0 (blang/semver's `Parse`, which Kubernetes uses): major, minor, patch and the
    pre-release text; build metadata is checked and dropped (it takes no part in comparison or equality). Errors are
    worded as blang's."""
    if not text:
        raise ValueError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major, minor = (_number(p, n) for p, n in ((parts[0], "major"), (parts[1], "minor")))
    rest = parts[2]
    cut = min((i for i in (rest.find("-"), rest.find("+")) if i >= 0), default=len(rest))
    patch = _number(rest[:cut], "patch")
    tail, pre, build = rest[cut:], "", None
    if tail.startswith("-"):
        pre, plus, after = tail[1:].partition("+")
        build = after if plus else None
        _check_prerelease(pre)
    elif tail.startswith("+"):
        build = tail[1:]
    for part in build.split(".") if build is not None else ():
        if not part:
            raise ValueError("Build meta data is empty")
        if not _IDENTIFIER.fullmatch(part):
            raise ValueError(f'Invalid character(s) found in build meta data "{part}"')
    return major, minor, patch, pre


def _check_prerelease(pre: str) -> None:
    for part in pre.split("."):
        if not part:
            raise ValueError("Prerelease is empty")
        if not _IDENTIFIER.fullmatch(part):
            raise ValueError(f'Invalid character(s) found in prerelease "{part}"')
        if part.isdigit() and len(part) > 1 and part[0] == "0":
            raise ValueError(f'Numeric PreRelease version must not contain leading zeroes "{part}"')


def _number(text: str, name: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(f'Invalid character(s) found in {name} number "{text}"')
    if len(text) > 1 and text[0] == "0":
        raise ValueError(f'{name.capitalize()} number must not contain leading zeroes "{text}"')
    return int(text)


def _semver(text: str) -> dict[str, list[object]]:
    return {_SEMVER: list(parse_semver(text))}


def _is_semver(text: str) -> bool:
    try:
        parse_semver(text)
    except ValueError:
        return False
    return True


def _pre_key(pre: str) -> tuple[tuple[int, int | str], ...]:
    """Pre-release precedence (semver 2.0 §11): numeric identifiers below alphanumeric ones, numerically."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split("."))


def _semver_cmp(a: list[Any], b: list[Any]) -> int:
    if a[:3] != b[:3]:
        return -1 if a[:3] < b[:3] else 1
    if a[3] == b[3]:
        return 0
    if not a[3] or not b[3]:  # a release ranks above its pre-releases
        return 1 if not a[3] else -1
    ka, kb = _pre_key(a[3]), _pre_key(b[3])
    return 0 if ka == kb else (-1 if ka < kb else 1)


def _compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    if _QUANTITY in a and _QUANTITY in b:
        x, y = Fraction(*a[_QUANTITY]), Fraction(*b[_QUANTITY])
        return (x > y) - (x < y)
    if _SEMVER in a and _SEMVER in b:
        return _semver_cmp(list(a[_SEMVER]), list(b[_SEMVER]))
    raise ValueError("no such overload")


def _quantity_value(q: Mapping[str, Any]) -> Fraction:
    if _QUANTITY not in q:
        raise ValueError("no such overload")
    return Fraction(*q[_QUANTITY])


def _as_integer(q: Mapping[str, Any]) -> int:
    value = _quantity_value(q)
    if value.denominator != 1 or not _INT64[0] <= value <= _INT64[1]:
        raise ValueError("cannot convert value to integer")
    return int(value)


def _plus(q: Mapping[str, Any], other: Any, sign: int) -> dict[str, list[int]]:
    delta = Fraction(other) if isinstance(other, int) else _quantity_value(other)
    return _quantity(_quantity_value(q) + sign * delta)


def _semver_part(index: int) -> Callable[[Mapping[str, Any]], int]:
    def part(v: Mapping[str, Any]) -> int:
        if _SEMVER not in v:
            raise ValueError("no such overload")
        return int(v[_SEMVER][index])
    return part


def _functions() -> list[Any]:
    tagged = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    string, boolean, integer = cel.Type.STRING, cel.Type.BOOL, cel.Type.INT

    def function(name: str, returns: Any, params: list[Any], impl: Callable[..., Any], *, member: bool = False,
                 suffix: str = "") -> Any:
        overload = cel.Overload(f"dra_{name}{suffix}", returns, params, is_member=member, impl=impl)
        return cel.FunctionDecl(name, [overload])

    def member(name: str, returns: Any, impl: Callable[..., Any]) -> Any:
        return function(name, returns, [tagged], impl, member=True)

    return [
        function("quantity", tagged, [string], _parse_cel_quantity),
        function("isQuantity", boolean, [string], _is_quantity),
        function("semver", tagged, [string], _semver),
        function("isSemver", boolean, [string], _is_semver),
        function("compareTo", integer, [tagged, tagged], _compare, member=True),
        function("isGreaterThan", boolean, [tagged, tagged], lambda a, b: _compare(a, b) > 0, member=True),
        function("isLessThan", boolean, [tagged, tagged], lambda a, b: _compare(a, b) < 0, member=True),
        _arithmetic("add", tagged, integer, 1),
        _arithmetic("sub", tagged, integer, -1),
        member("isInteger", boolean, lambda q: _quantity_value(q).denominator == 1),
        member("asInteger", integer, _as_integer),
        member("asApproximateFloat", cel.Type.DOUBLE, lambda q: float(_quantity_value(q))),
        member("major", integer, _semver_part(0)),
        member("minor", integer, _semver_part(1)),
        member("patch", integer, _semver_part(2)),
    ]


def _arithmetic(name: str, tagged: Any, integer: Any, sign: int) -> Any:
    """`quantity.add` / `sub` of a quantity or an int."""
    return cel.FunctionDecl(name, [
        cel.Overload(f"dra_{name}_quantity", tagged, [tagged, tagged], is_member=True,
                     impl=lambda a, b: _plus(a, b, sign)),
        cel.Overload(f"dra_{name}_int", tagged, [tagged, integer], is_member=True,
                     impl=lambda a, b: _plus(a, b, sign))])


@lru_cache(maxsize=1)
def _env() -> Any:
    return cel.NewEnv(variables={"device": cel.Type.DYN}, functions=_functions(),
                      extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional()])


# --- the expression ---------------------------------------------------------------------------------------------------

_LOOKUP = re.compile(r"device\s*\.\s*(?:attributes|capacity)\s*\[")
_STRING_START = re.compile(r"(?:[rR][bB]?|[bB][rR]?)?('''|\"\"\"|'|\")")


def _skip_string(text: str, i: int) -> int | None:
    """The index after the string literal starting at `i`, or None when none starts there."""
    m = _STRING_START.match(text, i)
    if m is None or (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and m.group(0)[0] not in "'\""):
        return None
    quote, raw = m.group(1), "r" in m.group(0).lower()
    j = m.end()
    while j < len(text):
        if text.startswith(quote, j):
            return j + len(quote)
        j += 2 if text[j] == "\\" and not raw else 1
    return len(text)


def _closing_bracket(text: str, start: int) -> int | None:
    """The index of the `]` closing the `[` just before `start`, strings and nesting respected."""
    depth, i = 1, start
    while i < len(text):
        after = _skip_string(text, i)
        if after is not None:
            i = after
            continue
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return i
        i += 1
    return None


def with_domain_defaults(expression: str) -> str:
    """`expression` with every `device.attributes[X]` / `device.capacity[X]` read as `[?X].orValue(dyn({}))`: a domain
    the device does not publish is an empty map, as Kubernetes' map with a default answers it."""
    out: list[str] = []
    i = 0
    while i < len(expression):
        after = _skip_string(expression, i)
        if after is not None:
            out.append(expression[i:after])
            i = after
            continue
        m = _LOOKUP.match(expression, i)
        preceded = i > 0 and (expression[i - 1].isalnum() or expression[i - 1] in "_.")
        end = _closing_bracket(expression, m.end()) if m is not None and not preceded else None
        if m is None or end is None:
            out.append(expression[i])
            i += 1
            continue
        out.append(f"{m.group(0)}?{with_domain_defaults(expression[m.end():end])}].orValue(dyn({{}}))")
        i = end + 1
    return "".join(out)


def _library_message(text: str) -> str:
    """cel-expr-python's status text without its status code (`INVALID_ARGUMENT: … [INVALID_ARGUMENT]`)."""
    text = re.sub(r"^[A-Z_]+: ", "", text.strip())
    return re.sub(r" \[[A-Z_]+\]$", "", text)


_CEL_GO_WORDS = {"divide by zero": "division by zero", "modulus by zero": "modulus by zero"}
_KEY_NOT_FOUND = re.compile(r'Key not found in map : "?(.*?)"?$')


def runtime_message(text: str) -> str:
    """A cel-expr-python runtime error in cel-go's words where they differ, with Kubernetes' hint for missing keys."""
    message = _library_message(text)
    m = _KEY_NOT_FOUND.search(message)
    if m is not None:
        return f"no such key: {m.group(1)}{NO_SUCH_KEY_HINT}"
    if message.startswith("No matching overloads found"):
        return "no such overload"
    return _CEL_GO_WORDS.get(message, message)


@dataclass(frozen=True, slots=True, eq=False)
class Compiled:
    """A selector that compiled; `matches` evaluates it on one device, its answers cached per device shape."""

    expression: str
    program: Any
    answers: dict[object, bool | str]
    reads: tuple[tuple[str, str], ...] | None = None
    """The attributes and capacities the expression reads (`("attributes", "domain/id")`), when every use of
    `device` is a plain lookup of one; None: it may read anything (the whole device is its shape)."""

    def matches(self, device: Device, driver: str) -> bool:
        """Whether the selector selects `device` (of `driver`). Raises `SelectorError` when the expression fails on
        it (a missing attribute, a type mismatch, a result that is not a bool), as CEL does."""
        shape = device_shape(device, driver) if self.reads is None else _read_shape(device, driver, self.reads)
        answer = self.answers.get(shape)
        if answer is None:
            answer = self._evaluate(device, driver)
            if len(self.answers) >= _SHAPE_CACHE_LIMIT:
                self.answers.clear()
            self.answers[shape] = answer
        if isinstance(answer, str):
            raise SelectorError(answer)
        return answer

    def _evaluate(self, device: Device, driver: str) -> bool | str:
        try:
            result = self.program.eval(data={"device": cel_input(device, driver)})
        except Exception as e:  # the binding raises for values it cannot take (a failed conversion)
            return runtime_message(str(e))
        value = result.value()
        if result.type() == cel.Type.ERROR:
            return runtime_message(str(value))
        if not isinstance(value, bool):
            kind = result.type().name().lower()
            return f"CEL result of type {kind} could not be converted to bool: unsupported native conversion from " \
                f"{kind} to 'bool'"
        return value


@lru_cache(maxsize=4096)
def compile(expression: str) -> Compiled | CompileError:
    """The selector compiled once per expression string, or why it does not compile (never raises)."""
    env = _env()
    try:
        checked = env.compile(expression)
    except Exception as e:
        return CompileError(expression, f"compilation failed: {_library_message(str(e))}")
    returns = checked.return_type()
    if returns not in (cel.Type.BOOL, cel.Type.DYN):
        return CompileError(expression, f"must evaluate to bool or the unknown type, not {returns.name().lower()}")
    try:
        program = env.compile(with_domain_defaults(expression))
    except Exception as e:  # the rewrite keeps the grammar; a failure here is ours, said as such
        return CompileError(expression, f"compilation failed: {_library_message(str(e))} (after gpuscale's rewrite)")
    return Compiled(expression, program, {}, reads_of(expression))


_DEVICE_WORD = re.compile(r"(?<![\w.])device\b")
_NAME = r"""(?:"([^"\\]*)"|'([^'\\]*)')"""
_PLAIN_READ = re.compile(r"device\s*\.\s*(?:(driver|allowMultipleAllocations)\b|(attributes|capacity)\s*\[\s*"
                         + _NAME + r"\s*\]\s*(?:\.\s*\??\s*([A-Za-z_]\w*)|\[\s*" + _NAME + r"\s*\]))")


def _outside_strings(expression: str) -> str:
    """The expression with every string literal's content blanked (quotes kept), to find code words."""
    out, i = [], 0
    while i < len(expression):
        after = _skip_string(expression, i)
        if after is None:
            out.append(expression[i])
            i += 1
            continue
        out.append(expression[i] + " " * (after - i - 2) + expression[after - 1])
        i = after
    return "".join(out)


def reads_of(expression: str) -> tuple[tuple[str, str], ...] | None:
    """What the expression reads of the device when each `device` is `device.driver`,
    `device.allowMultipleAllocations` or `device.attributes["domain"].id` (`.?id`, `["id"]`, and the same for
    `capacity`); None otherwise (`cel.bind` of a domain, `in device.attributes`, a computed key …)."""
    code = _outside_strings(expression)
    words = [m.start() for m in _DEVICE_WORD.finditer(code)]
    reads: list[tuple[str, str]] = []
    for start in words:
        m = _PLAIN_READ.match(expression, start)
        if m is None or _outside_strings(m.group(0)) != code[start:m.end()]:
            return None
        if m.group(2) is not None:
            domain = m.group(3) if m.group(3) is not None else m.group(4)
            ident = next(g for g in (m.group(5), m.group(6), m.group(7)) if g is not None)
            reads.append((m.group(2), f"{domain}/{ident}"))
    return tuple(sorted(set(reads)))


_MISSING = ("missing",)


def _read_shape(device: Device, driver: str, reads: tuple[tuple[str, str], ...]) -> object:
    """The values the expression reads: devices alike in them get one answer (a `uuid` elsewhere does not matter)."""
    values: list[object] = [driver, device.allow_multiple_allocations]
    for kind, name in reads:
        if kind == "attributes":
            value = device.attributes.get(name)
            values.append(_MISSING if value is None else (type(value).__name__,
                                                           value.text if isinstance(value, Version) else value))
        else:
            capacity = device.capacity.get(name)
            values.append(_MISSING if capacity is None else capacity.value_milli)
    return ("reads", *values)


# --- the device as CEL sees it ----------------------------------------------------------------------------------------

def _attribute(value: object) -> object:
    return _semver(value.text) if isinstance(value, Version) else value


def _capacity(value: DeviceCapacity) -> dict[str, list[int]]:
    return _quantity(Fraction(value.value_milli, 1000))


def cel_input(device: Device, driver: str) -> dict[str, object]:
    """The `device` variable: attributes and capacity grouped by domain (model names are fully qualified)."""
    attributes: dict[str, dict[str, object]] = {}
    for name, value in device.attributes.items():
        domain, _, ident = name.rpartition("/")
        attributes.setdefault(domain, {})[ident] = _attribute(value)
    capacity: dict[str, dict[str, object]] = {}
    for name, quantity in device.capacity.items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain, {})[ident] = _capacity(quantity)
    return {"driver": driver, "allowMultipleAllocations": device.allow_multiple_allocations,
            "attributes": attributes, "capacity": capacity}


_SHAPES: dict[tuple[int, str], tuple[Device, object]] = {}
"""Each device's shape by identity (the device kept, so its id is not reused while cached): devices are immutable and
live as long as their snapshot, so one decision after another asks for the same objects."""


def device_shape(device: Device, driver: str) -> object:
    """What a selector's answer depends on (not the device's name): equal shapes get equal answers."""
    key = (id(device), driver)
    hit = _SHAPES.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    if len(_SHAPES) >= _SHAPE_CACHE_LIMIT:
        _SHAPES.clear()
    shape = (driver, device.allow_multiple_allocations,
             tuple(sorted((k, type(v).__name__, v.text if isinstance(v, Version) else v)
                          for k, v in device.attributes.items())),
             tuple(sorted((k, c.value_milli) for k, c in device.capacity.items())))
    _SHAPES[key] = (device, shape)
    return shape
