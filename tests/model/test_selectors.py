"""`gpuscale.model.selectors` against apimachinery `labels.Requirement.Matches` and component-helpers nodeaffinity."""

from __future__ import annotations

import pytest

from gpuscale.model.selectors import (
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    parse_int64,
)
from tests.builders import pod_term, req, selector, term

LABELS = {"zone": "a", "gpu-count": "8", "tier": "gpu", "odd": "1_000", "big": "9223372036854775808"}

REQUIREMENTS = [
    # requirement, matches LABELS?
    (req("zone", "In", "a"), True),
    (req("zone", "In", "b", "a"), True),
    (req("zone", "In", "b"), False),
    (req("missing", "In", "a"), False),
    (req("zone", "NotIn", "b"), True),
    (req("zone", "NotIn", "a", "b"), False),
    (req("missing", "NotIn", "a"), True),  # an absent label is not in any set
    (req("zone", "Exists"), True),
    (req("missing", "Exists"), False),
    (req("zone", "DoesNotExist"), False),
    (req("missing", "DoesNotExist"), True),
    (req("gpu-count", "Gt", "7"), True),
    (req("gpu-count", "Gt", "8"), False),
    (req("gpu-count", "Lt", "9"), True),
    (req("gpu-count", "Lt", "8"), False),
    (req("gpu-count", "Gt", "-1"), True),
    (req("gpu-count", "Gt", "+7"), True),  # strconv.ParseInt takes a sign
    (req("gpu-count", "Gt", "007"), True),
    (req("missing", "Gt", "0"), False),
    (req("missing", "Lt", "100"), False),
    (req("zone", "Gt", "0"), False),  # a label that is not an integer never matches Gt/Lt
    (req("zone", "Lt", "0"), False),
    (req("odd", "Gt", "0"), False),  # "1_000" is not an int64 to Go, though Python's int() takes it
    (req("big", "Gt", "0"), False),  # out of int64 range
    (req("gpu-count", "Gt", "seven"), False),  # a non-integer requirement value never matches
    (req("gpu-count", "Gt", "1", "2"), False),  # Gt/Lt need exactly one value
]


@pytest.mark.parametrize(("requirement", "expected"), REQUIREMENTS)
def test_requirement_matches(requirement: Requirement, expected: bool) -> None:
    assert requirement.matches(LABELS) is expected


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("42", 42), ("-42", -42), ("+42", 42), ("007", 7), ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)), ("0000000000000000000000001", 1),
    ("9223372036854775808", None), ("1_000", None), (" 1", None), ("1 ", None), ("", None), ("+", None),
    ("1.0", None), ("0x10", None), ("٣", None), ("1e3", None),
])
def test_parse_int64_is_strconv_parseint(text: str, value: int | None) -> None:
    assert parse_int64(text) == value


NODE = ("gpu-node-1", {"zone": "a", "tier": "gpu", "gpu-count": "8"})

TERMS = [
    # term, matches NODE?
    (term(), False),  # an empty term selects nothing
    (term(req("zone", "In", "a")), True),
    (term(req("zone", "In", "a"), req("tier", "In", "gpu")), True),  # expressions are ANDed
    (term(req("zone", "In", "a"), req("tier", "In", "cpu")), False),
    (term(fields=[req("metadata.name", "In", "gpu-node-1")]), True),
    (term(fields=[req("metadata.name", "In", "other")]), False),
    (term(fields=[req("metadata.name", "NotIn", "other")]), True),
    (term(fields=[req("metadata.name", "NotIn", "gpu-node-1")]), False),
    (term(req("zone", "In", "a"), fields=[req("metadata.name", "In", "gpu-node-1")]), True),
    (term(req("zone", "In", "b"), fields=[req("metadata.name", "In", "gpu-node-1")]), False),  # fields AND labels
    (term(req("zone", "In", "a"), fields=[req("metadata.name", "In", "other")]), False),
    (term(req("gpu-count", "Gt", "4"), req("gpu-count", "Lt", "16")), True),
]


@pytest.mark.parametrize(("t", "expected"), TERMS)
def test_node_selector_term(t: NodeSelectorTerm, expected: bool) -> None:
    assert t.matches(*NODE) is expected


AFFINITIES = [
    # affinity, matches NODE?
    (NodeAffinity(), True),
    (NodeAffinity(node_selector=(("zone", "a"),)), True),
    (NodeAffinity(node_selector=(("zone", "a"), ("tier", "gpu"))), True),
    (NodeAffinity(node_selector=(("zone", "b"),)), False),
    (NodeAffinity(node_selector=(("missing", ""),)), False),  # nodeSelector needs the label, even for ""
    (NodeAffinity(required_terms=()), False),  # an empty nodeSelectorTerms list matches nothing
    (NodeAffinity(required_terms=(term(),)), False),
    (NodeAffinity(required_terms=(term(), term(req("zone", "In", "a")))), True),  # terms are ORed
    (NodeAffinity(required_terms=(term(req("zone", "In", "b")), term(req("tier", "In", "gpu")))), True),
    (NodeAffinity(required_terms=(term(req("zone", "In", "b")), term(req("tier", "In", "cpu")))), False),
    # nodeSelector AND required terms
    (NodeAffinity(node_selector=(("zone", "a"),), required_terms=(term(req("tier", "In", "gpu")),)), True),
    (NodeAffinity(node_selector=(("zone", "b"),), required_terms=(term(req("tier", "In", "gpu")),)), False),
    (NodeAffinity(node_selector=(("zone", "a"),), required_terms=(term(req("tier", "In", "cpu")),)), False),
]


@pytest.mark.parametrize(("affinity", "expected"), AFFINITIES)
def test_node_affinity(affinity: NodeAffinity, expected: bool) -> None:
    assert affinity.matches(*NODE) is expected


def test_node_affinity_is_empty() -> None:
    assert NodeAffinity().is_empty()
    assert not NodeAffinity(required_terms=()).is_empty()
    assert not NodeAffinity(node_selector=(("a", "b"),)).is_empty()


LABEL_SELECTORS = [
    (LabelSelector(), {"app": "x"}, True),  # empty selector: everything
    (LabelSelector(), {}, True),
    (LabelSelector(nothing=True), {"app": "x"}, False),  # nil selector: nothing
    (selector({"app": "x"}), {"app": "x", "other": "y"}, True),
    (selector({"app": "x"}), {"app": "y"}, False),
    (selector({"app": "x"}), {}, False),
    (selector({"app": "x"}, req("tier", "In", "gpu")), {"app": "x", "tier": "gpu"}, True),
    (selector({"app": "x"}, req("tier", "In", "gpu")), {"app": "x"}, False),
    (selector(None, req("tier", "DoesNotExist")), {"app": "x"}, True),
]


@pytest.mark.parametrize(("sel", "labels", "expected"), LABEL_SELECTORS)
def test_label_selector(sel: LabelSelector, labels: dict[str, str], expected: bool) -> None:
    assert sel.matches(labels) is expected


POD_TERM_NAMESPACES = [
    # term, own namespace, other pod's namespace, selects?
    (pod_term({"app": "x"}), "ml", "ml", True),  # no namespaces: the pod's own
    (pod_term({"app": "x"}), "ml", "web", False),
    (pod_term({"app": "x"}, namespaces=["web"]), "ml", "web", True),
    (pod_term({"app": "x"}, namespaces=["web"]), "ml", "ml", False),
    (pod_term({"app": "x"}, all_namespaces=True), "ml", "anything", True),  # namespaceSelector: {}
]


@pytest.mark.parametrize(("t", "own", "other", "expected"), POD_TERM_NAMESPACES)
def test_pod_affinity_term_namespaces(t: PodAffinityTerm, own: str, other: str, expected: bool) -> None:
    assert t.selects(own, other, {"app": "x"}) is expected
    assert t.selects(own, other, {"app": "y"}) is False
