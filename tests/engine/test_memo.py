"""The decision memo only saves work: with it, every plan of a twin run equals the plan computed without it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

import gpuscale.sim.run as run_module
from gpuscale.engine.decide import decide
from gpuscale.engine.memo import DecideMemo
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.loop.tick import Autoscaler
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.sim.scenario import load_scenario, policy_named


class _Checked(Autoscaler):
    """The twin's autoscaler, deciding twice per tick: with its memo (the plan it acts on) and afresh."""

    ticks = 0
    acted = 0

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        memoised = self._decide

        def both(snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
                 now: float) -> Plan:
            plan = memoised(snapshot, pools, state, policy, now)
            assert plan == decide(snapshot, pools, state, policy, now), f"plans differ at t={now}"
            _Checked.ticks += 1
            _Checked.acted += bool(plan.scale_up or plan.scale_down or plan.mark_unneeded or plan.clear_unneeded)
            return plan

        self._decide = both


@pytest.mark.parametrize(("scenario", "hours"), [("default", 8.0), ("sharing", 4.0)])
def test_memoised_plans_equal_fresh_ones(monkeypatch: pytest.MonkeyPatch, scenario: str, hours: float) -> None:
    monkeypatch.setattr(run_module, "Autoscaler", _Checked)
    _Checked.ticks = _Checked.acted = 0
    setup, config = load_scenario(scenario)
    run_module.simulate(replace(setup, duration_s=hours * 3600), policy_named("gpuscale", config))
    assert _Checked.ticks > 100
    assert _Checked.acted > 5  # the run scaled and marked nodes: the plans compared were not all empty


def test_memo_derives_again_when_a_node_or_pool_changes() -> None:
    pool = NodePool(name="cpu", allocatable=Resources.of(cpu=4000, pods=10))
    node = Node(name="n1", allocatable=pool.allocatable, labels={"gpuscale.io/pool": "cpu"}, ready=False)
    memo = DecideMemo()
    first = memo.facts([node], {}, {"cpu": pool})["n1"]
    assert memo.facts([node], {}, {"cpu": pool})["n1"] is first
    ready = replace(node, ready=True)
    assert memo.facts([ready], {}, {"cpu": pool})["n1"].phase != first.phase
    other = replace(pool, allocatable=Resources.of(cpu=8000, pods=10))
    assert memo.facts([ready], {}, {"cpu": other})["n1"].pool is other
    assert memo.facts([ready], {"n1": "gpu"}, {"cpu": other})["n1"].pool is None
