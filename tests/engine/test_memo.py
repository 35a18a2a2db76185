"""The decision memo only saves work: with it, every plan of a twin run equals the plan computed without it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from gpuscale.engine.decide import decide
from gpuscale.engine.memo import DecideMemo
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import load_scenario, policy_named
from tests.builders import make_pod


def _checked(counts: dict[str, int]) -> Callable[[Snapshot, Sequence[NodePool], EngineState, Policy, float], Plan]:
    """The engine's decide with a memo (the plan the twin acts on), checked against a fresh decide every tick."""
    memo = DecideMemo()

    def both(snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy, now: float) -> Plan:
        plan = decide(snapshot, pools, state, policy, now, memo=memo)
        assert plan == decide(snapshot, pools, state, policy, now), f"plans differ at t={now}"
        counts["ticks"] += 1
        counts["acted"] += bool(plan.scale_up or plan.scale_down or plan.mark_unneeded or plan.clear_unneeded)
        counts["patched"] += bool(memo._facts_change and memo._facts_change[1])  # a few nodes' facts and rows redone
        return plan

    return both


@pytest.mark.parametrize(("scenario", "hours"), [("default", 8.0), ("sharing", 4.0)])
def test_memoised_plans_equal_fresh_ones(scenario: str, hours: float) -> None:
    counts = {"ticks": 0, "acted": 0, "patched": 0}
    setup, config = load_scenario(scenario)
    simulate(replace(setup, duration_s=hours * 3600), policy_named("gpuscale", config), decide=_checked(counts))
    assert counts["ticks"] > 100
    assert counts["acted"] > 5  # the run scaled and marked nodes: the plans compared were not all empty
    assert counts["patched"] > 5  # and the memo's patch paths ran


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


def test_a_pod_no_pool_fits_is_judged_again_when_the_pools_change() -> None:
    """Pool verdicts are kept from decision to decision only for the very same pools: a pool that grows takes the
    pod the memo saw fit nowhere."""
    small = NodePool(name="cpu", allocatable=Resources.of(cpu=4000, memory=2**34, pods=10), max_size=5)
    big = replace(small, allocatable=Resources.of(cpu=16_000, memory=2**34, pods=10))
    pod = replace(make_pod("big", cpu="8"), unschedulable=True, created_s=0.0)
    snapshot = Snapshot(cluster=Cluster(pods=(pod,)))
    memo = DecideMemo()
    for now in (100.0, 110.0):
        plan = decide(snapshot, [small], EngineState(), Policy(), now, memo=memo)
        assert not plan.scale_up and plan.unplaceable[0].reasons[0].code is ReasonCode.NO_POOL_FITS
    grown = decide(snapshot, [big], EngineState(), Policy(), 120.0, memo=memo)
    assert grown == decide(snapshot, [big], EngineState(), Policy(), 120.0)
    assert [s.pool for s in grown.scale_up] == ["cpu"] and not grown.unplaceable
