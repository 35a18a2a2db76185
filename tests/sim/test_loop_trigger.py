"""The twin's trigger (D39): with a batch window a pod that turns Unschedulable between two scans is decided when
its window closes (`batch_idle_s` after the last pod of a burst), in one decision for the whole burst;
`ca-defaults` (no window) decides at the scans only, after CA's age check."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscale.config import preset_policy
from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.sim import run
from gpuscale.sim.cloud import CloudPool
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.workloads import JobSpec

GI = 2**30
CPU = NodePool(name="cpu", allocatable=Resources.of({"cpu": 16_000, "memory": 64 * GI, "pods": 110}),
               usd_per_hour=0.8, max_size=4)
BURST = tuple(JobSpec(name=f"batch-{i}", kind="batch", submit_s=103.0 + 0.4 * i,
                      requests=Resources.of({"cpu": 4000, "memory": GI}), duration_s=600.0) for i in range(3))
"""Three pods 0.4 s apart from 103 s, between the scans at 100 s and 110 s; one node holds them all."""
SETUP = run.TwinSetup(name="trigger", pools=(CloudPool(pool=CPU, profile=PROFILES["cpu"]),), duration_s=1800.0,
                      seed=1, jobs=BURST)


def _decisions(policy: Policy) -> list[tuple[float, Plan]]:
    """Every decision of the twin run under `policy`: its time and plan."""
    plans: list[tuple[float, Plan]] = []

    def recorded(snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, chosen: Policy,
                 now: float) -> Plan:
        plan = decide(snapshot, pools, state, chosen, now)
        plans.append((now, plan))
        return plan

    run.simulate(SETUP, run.TwinPolicy(name="p", policy=policy), decide=recorded)
    return plans


def _scale_ups(policy: Policy) -> list[tuple[float, Plan]]:
    return [(t, p) for t, p in _decisions(policy) if p.scale_up]


def test_a_burst_between_scans_is_one_decision_at_its_window_end() -> None:
    [(at, plan)] = _scale_ups(preset_policy("gpuscale"))
    assert abs(at - (103.8 + Policy().batch_idle_s)) < 1e-6  # the last pod's arrival + the idle window, not the scan
    assert [(s.pool, s.nodes, len(s.pods)) for s in plan.scale_up] == [("cpu", 1, 3)]


def test_ca_defaults_decides_at_the_scans_only() -> None:
    [(at, plan)] = _scale_ups(preset_policy("ca-defaults"))
    assert at == 110.0 and [(s.pool, len(s.pods)) for s in plan.scale_up] == [("cpu", 3)]


def test_the_next_scan_comes_a_scan_interval_after_a_woken_decision() -> None:
    """As the controller's loop sleeps `scan_interval_s` after every tick: the burst's decision moves the scans on."""
    times = [t for t, _ in _decisions(preset_policy("gpuscale"))]
    woken = 103.8 + Policy().batch_idle_s
    interval = run.TwinPolicy(name="p", policy=preset_policy("gpuscale")).settings.scan_interval_s
    after = [t for t in times if t > woken - 1e-6]
    assert abs(after[0] - woken) < 1e-6 and abs(after[1] - (woken + interval)) < 1e-6, times[:16]
