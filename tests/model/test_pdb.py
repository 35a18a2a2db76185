"""`gpuscale.model.pdb`: which pods a budget covers (policy/v1 selector semantics)."""

from __future__ import annotations

import pytest

from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.selectors import LabelSelector
from tests.builders import selector


@pytest.mark.parametrize(("sel", "namespace", "labels", "covers"), [
    (selector({"app": "x"}), "ml", {"app": "x"}, True),
    (selector({"app": "x"}), "other", {"app": "x"}, False),  # budgets are namespaced
    (selector({"app": "x"}), "ml", {"app": "y"}, False),
    (LabelSelector(), "ml", {"anything": "at-all"}, True),  # empty selector: every pod of the namespace
    (LabelSelector(nothing=True), "ml", {"app": "x"}, False),  # null selector: no pod
])
def test_covers(sel: LabelSelector, namespace: str, labels: dict[str, str], covers: bool) -> None:
    pdb = PodDisruptionBudget(namespace="ml", name="b", selector=sel, disruptions_allowed=1)
    assert pdb.key == "ml/b"
    assert pdb.covers(namespace, labels) is covers
