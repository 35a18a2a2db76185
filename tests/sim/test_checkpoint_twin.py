"""Checkpoint-aware consolidation in the twin (engine/checkpoint.py, D38): a small long GPU job left alone on an
8-GPU node moves to a node with room when its checkpoint is recent, and keeps the node when it never checkpoints
within the budget; the work the engine says a move loses is the work the twin charges."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named
from gpuscale.sim.workloads import JobSpec

HOUR = 3600.0


def _scenario() -> dict[str, Any]:
    pool = {"name": "a100", "instance_type": "a2-highgpu-8g", "usd_per_hour": 29.39, "max_size": 4,
            "zones": ["us-central1-a"], "gpu": {"model": "nvidia-tesla-a100", "count": 8},
            "allocatable": {"cpu": "90", "memory": "1300Gi", "pods": 110}}
    cpu = {"name": "cpu", "instance_type": "n2-standard-8", "usd_per_hour": 0.4, "min_size": 1, "max_size": 2,
           "zones": ["us-central1-a"], "allocatable": {"cpu": "8", "memory": "32Gi", "pods": 110}}
    return {"name": "checkpoint", "duration": "8h", "seed": 1, "config": {"pools": [cpu, pool]},
            "profiles": {"cpu": "cpu", "a100": "gpu-large"}}


def _job(name: str, gpus: int, submit_s: float, duration_s: float, checkpoint_s: float) -> JobSpec:
    return JobSpec(name=name, submit_s=submit_s, duration_s=duration_s, checkpoint_s=checkpoint_s,
                   requests=Resources.of({"cpu": 1000 * gpus, "memory": gpus * 2**30, "nvidia.com/gpu": gpus}))


class _Watch:
    """The engine as the twin calls it, keeping the loss each removal says it costs."""

    def __init__(self) -> None:
        self.store = IncrementalStore()
        self.lost_gpu_minutes = 0.0
        self.moves: list[float] = []

    def __call__(self, snapshot: Snapshot, pools: tuple[NodePool, ...], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        plan = decide(snapshot, pools, state, policy, now, store=self.store)
        for removal in plan.scale_down:
            for reason in removal.reasons:
                if reason.code is ReasonCode.CHECKPOINTED_MOVE:
                    self.lost_gpu_minutes += reason.numbers["lost_gpu_minutes"]
                    self.moves.append(now)
        return plan


def _run(checkpoint_s: float) -> tuple[_Watch, float, float]:
    """A 1-GPU job for 6 h shares a node with a 7-GPU job for 30 min; a 4-GPU job for 6 h comes at 10 min and gets a
    second node. When the short job ends, the small one is alone on the first node, which the second has room for."""
    base, config = parse_scenario(_scenario(), "test")
    jobs = (_job("small", 1, 0.0, 6 * HOUR, checkpoint_s), _job("short", 7, 0.0, 0.5 * HOUR, 0.0),
            _job("other", 4, 600.0, 6 * HOUR, 0.0))
    watch = _Watch()
    result = simulate(dataclasses.replace(base, jobs=jobs), policy_named("gpuscale", config), decide=watch)
    return watch, result.lost_gpu_hours, result.gpu_hours_provisioned


def test_a_recently_checkpointed_small_job_is_consolidated_an_old_one_is_not() -> None:
    recent, recent_lost, recent_gpu_hours = _run(900.0)
    never, never_lost, never_gpu_hours = _run(10 * HOUR)  # checkpoints too rarely: no move fits the budget
    assert len(recent.moves) == 1 and recent.moves[0] < 1.5 * HOUR, recent.moves
    assert never.moves == [] and never_lost == 0.0
    assert recent_gpu_hours < never_gpu_hours - 8 * 3, (recent_gpu_hours, never_gpu_hours)
    # the twin charges what the engine estimated (plus the drain's few seconds)
    assert recent_lost > 0.0
    assert abs(recent_lost * 60 - recent.lost_gpu_minutes) <= 2.0, (recent_lost * 60, recent.lost_gpu_minutes)
