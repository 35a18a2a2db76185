"""A quiet cluster with a backed-off pool: the twin does not decide at every scan while the pool is backed off (the
pending pod waits, nothing changes), is woken when the backoff ends (with a batch window the loop wakes at the plan's
time, D39), scales up there, and gets the very result of a twin that decides at every scan."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.report.twin import result_json
from gpuscale.sim import run
from gpuscale.sim.cloud import CloudPool, Spell
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.workloads import JobSpec

GI = 2**30
CPU = NodePool(name="cpu", allocatable=Resources.of({"cpu": 16_000, "memory": 64 * GI, "pods": 110}),
               usd_per_hour=0.8, max_size=4)
POLICY = Policy(backoff_initial_s=120.0)
SETUP = run.TwinSetup(
    name="backoff", pools=(CloudPool(pool=CPU, profile=PROFILES["cpu"]),), duration_s=3600.0, seed=1,
    jobs=(JobSpec(name="batch", kind="batch", submit_s=100.0, requests=Resources.of({"cpu": 4000, "memory": GI}),
                  duration_s=600.0),),
    spells=(Spell(pool="cpu", start_s=0.0, end_s=200.0),))
"""No capacity until 200 s: the first scale-up (as the batch window closes) is refused and the pool backs off for
120 s."""


class _Calls:
    """The engine's decide, remembering when it was called and what it planned."""

    def __init__(self) -> None:
        self.memo = IncrementalStore()
        self.plans: list[tuple[float, Plan]] = []

    def __call__(self, snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        plan = decide(snapshot, pools, state, policy, now, store=self.memo)
        self.plans.append((now, plan))
        return plan


def test_a_backed_off_pool_decides_again_when_its_backoff_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls()
    twin_policy = run.TwinPolicy(name="p", policy=POLICY)
    skipping = run.simulate(SETUP, twin_policy, decide=calls)
    assert skipping.stockouts == 1 and skipping.backoffs == 1 and skipping.scale_ups == 1
    [(failed_at, _)] = [(t, p) for t, p in calls.plans if p.scale_up][:1]
    [(ordered_at, _)] = [(t, p) for t, p in calls.plans if p.scale_up][1:]
    assert failed_at == 100.0 + POLICY.batch_idle_s  # the pod's batch window closes (D39), not at the 110 s scan
    until = failed_at + POLICY.backoff_initial_s
    assert ordered_at == until  # woken when the backoff ends, between two scans
    scan = failed_at + twin_policy.settings.scan_interval_s  # the scans move on with the woken decision
    between = [t for t, _ in calls.plans if failed_at < t < until]
    assert between == [scan]  # once after the refusal (the scan that backed the pool off), then quiet
    assert [p.next_at_s for t, p in calls.plans if t == scan] == [until]

    monkeypatch.setattr(run._Loop, "_needed", lambda self: True)
    every = run.simulate(SETUP, run.TwinPolicy(name="p", policy=POLICY))
    assert result_json(skipping, include_wall=False) | {"sim_events": 0} == (
        result_json(every, include_wall=False) | {"sim_events": 0})
