"""`PdbBudget.shortfall` and `spend` against the rule written out: evicting pods together needs one disruption of each
PDB covering each pod, and a budget short of that names the first such PDB by key; spending leaves the old budget as it
was. Evicting nothing (most scale-down candidates evict nothing) is answered at once: no shortfall, the budget itself,
even where a budget has no disruption left."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.drain import PdbBudget
from gpuscale.engine.reasons import ReasonCode
from tests.engine.test_drain import pdb, pod

_APPS = ["a", "b", "c"]


@settings(max_examples=200, deadline=None)
@given(allowed=st.lists(st.integers(-1, 3), min_size=len(_APPS), max_size=len(_APPS)),
       apps=st.lists(st.sampled_from([*_APPS, "none"]), max_size=6), twice=st.booleans())
def test_shortfall_and_spend_follow_the_rule(allowed: list[int], apps: list[str], twice: bool) -> None:
    budget = PdbBudget([pdb(f"pdb-{app}", left, labels={"app": app}) for app, left in zip(_APPS, allowed, strict=True)])
    if twice:  # a budget already spent on one pod of each app that has a disruption left
        budget = budget.spend([pod(f"first-{app}", labels={"app": app})
                               for app, left in zip(_APPS, allowed, strict=True) if left > 0])
    before = dict(budget.remaining())
    pods = [pod(f"p{i}", labels={"app": app}) for i, app in enumerate(apps)]
    needed = {f"default/pdb-{app}": apps.count(app) for app in _APPS if app in apps}
    short = sorted(key for key, count in needed.items() if count > before[key])
    reason = budget.shortfall(pods)
    if short:
        assert reason is not None and reason.code is ReasonCode.PDB
        assert reason.numbers == {"needed": needed[short[0]], "allowed": before[short[0]]}
        assert f"PodDisruptionBudget {short[0]} " in reason.message
    else:
        assert reason is None
    spent = budget.spend(pods)
    assert spent.remaining() == {key: left - needed.get(key, 0) for key, left in before.items()}
    assert budget.remaining() == before  # never changed
    if not pods:
        assert spent is budget


def test_evicting_nothing_needs_nothing_even_from_an_exhausted_budget() -> None:
    budget = PdbBudget([pdb(allowed=0)])
    assert budget.shortfall(()) is None and budget.shortfall([]) is None
    assert budget.spend(()) is budget and budget.spend(()).left("default/budget") == 0
