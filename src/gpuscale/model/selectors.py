"""Node selector terms and label selectors, matched as `k8s.io/component-helpers` and apimachinery match them.

Node affinity: a pod's `nodeSelector` must match AND its required node affinity; the required terms are ORed, the
expressions inside a term ANDed; a term with no expressions and no fields selects nothing; `Gt`/`Lt` compare the node
label as an int64 (a label that is not one, e.g. `1_000` or `9223372036854775808`, does not match). `matchFields`
supports `metadata.name` with `In`/`NotIn` and one value only, as the API does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


_INT64 = re.compile(r"[+-]?[0-9]+")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_label_value(text: str) -> bool:
    """A label value as the API server accepts it: ≤ 63 of `[-A-Za-z0-9_.]`, alphanumeric at both ends, or empty."""
    return len(text) <= 63 and _LABEL_VALUE.fullmatch(text) is not None


def label_key_problem(key: str) -> str | None:
    """Why `key` is no label key (an optional DNS-subdomain prefix and `/`, then a non-empty name shaped as a value),
    or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or _DNS_SUBDOMAIN.fullmatch(prefix) is None):
        return f"{key!r}: the label key's prefix must be a DNS subdomain"
    if not name or not is_label_value(name):
        return f"{key!r} is not a label key"
    return None


def parse_int64(text: str) -> int | None:
    """`text` as Go's `strconv.ParseInt(text, 10, 64)` reads it, or None: ASCII digits with an optional sign, within
    int64. Stricter than Python's `int`, which also takes `1_000`, spaces and non-ASCII digits."""
    if _INT64.fullmatch(text) is None or len(text.lstrip("+-").lstrip("0")) > 19:
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """One `key operator values` expression. `Gt`/`Lt` carry exactly one integer value (validated on input)."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op is SelectorOperator.EXISTS:
            return self.key in labels
        if op is SelectorOperator.DOES_NOT_EXIST:
            return self.key not in labels
        present = self.key in labels
        if op is SelectorOperator.IN:
            return present and labels[self.key] in self.values
        if op is SelectorOperator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if not present or len(self.values) != 1:
            return False
        have, want = parse_int64(labels[self.key]), parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op is SelectorOperator.GT else have < want


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorTerm:
    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()
    """Only `metadata.name` is a valid field key; it is matched against the node name."""

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        if not all(r.matches(labels) for r in self.match_expressions):
            return False
        fields = {"metadata.name": node_name}
        return all(r.matches(fields) for r in self.match_fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeAffinity:
    """A pod's node constraints: `nodeSelector` plus required node-affinity terms (`None` = no required affinity)."""

    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[NodeSelectorTerm, ...] | None = None

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        if self.required_terms is None:
            return True
        return any(term.matches(node_name, labels) for term in self.required_terms)

    def is_empty(self) -> bool:
        return not self.node_selector and self.required_terms is None


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelector:
    """`metav1.LabelSelector`: matchLabels AND matchExpressions; an empty selector matches everything.

    `nothing` is the nil selector where the API gives it that meaning (a PDB or affinity term without a selector).
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PodAffinityTerm:
    """A required (anti-)affinity term: pods matching `selector` in `namespaces`, per `topology_key` domain.

    `namespaces` empty and `namespace_selector` None means the pod's own namespace, as the API defines it;
    `all_namespaces` is an empty `namespaceSelector` ({}), which selects every namespace.
    """

    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False

    def selects(self, own_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
        if not self.all_namespaces:
            allowed = self.namespaces or (own_namespace,)
            if namespace not in allowed:
                return False
        return self.selector.matches(labels)
