"""Hand-made `SimResult` values for the report tests and the browser check (`python -m tests.report.demo`).

`make_pod`/`make_series`/`make_result` build small values where a test states only what it is about;
`make_day_result` builds a plausible run (a few hundred pods, samples every minute) from a tiny deterministic
generator, so the same arguments always give the same result without any randomness source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuscale.lifecycle.phases import Phase
from gpuscale.sim.result import Notable, PodRecord, Series, SimResult


def make_pod(key: str = "ns/p-0", *, workload: str = "batch", created_s: float = 0.0, running_s: float | None = 10.0,
             new_node: bool = False, pool: str | None = "gpu-a100", gpus: float = 1.0, team: str = "",
             phases: Mapping[str, float] | None = None) -> PodRecord:
    return PodRecord(key=key, workload=workload, team=team, pool=pool if running_s is not None else None, gpus=gpus,
                     created_s=created_s, running_s=running_s, new_node=new_node, phases=dict(phases or {}))


def make_series(t_s: Sequence[float] = (0.0, 60.0, 120.0), *, nodes_by_pool: Mapping[str, Sequence[int]] | None = None,
                pending: Sequence[int] | None = None, cost_usd: Sequence[float] | None = None,
                provisioned: Sequence[float] | None = None, allocated: Sequence[float] | None = None) -> Series:
    n = len(t_s)
    return Series(t_s=tuple(t_s),
                  nodes_by_pool={k: tuple(v) for k, v in (nodes_by_pool or {"gpu-a100": [1] * n}).items()},
                  pending_pods=tuple(pending or [0] * n), cost_usd=tuple(cost_usd or [0.0] * n),
                  gpus_provisioned=tuple(provisioned or [8.0] * n), gpus_allocated=tuple(allocated or [4.0] * n))


def make_result(**overrides: Any) -> SimResult:
    values: dict[str, Any] = {
        "scenario": "unit", "policy": "default", "seed": 7, "duration_s": 120.0, "cost_usd": 12.5,
        "cost_by_pool": {"gpu-a100": 12.5}, "gpu_hours_provisioned": 10.0, "gpu_hours_allocated": 6.0,
        "gpu_hours_useful": 5.0,
        "gpu_hours_by_pool": {"gpu-a100": {"provisioned": 10.0, "allocated": 6.0, "useful": 5.0, "idle": 4.0,
                                           "hindsight_bound": 8.0}},
        "gpu_hours_hindsight_bound": 8.0,
        "pods": (make_pod(),), "evictions": 0, "lost_gpu_hours": 0.0, "scale_ups": 1, "scale_downs": 0,
        "stockouts": 0, "backoffs": 0, "never_ran": 0, "sim_events": 100, "wall_s": 0.25, "series": make_series(),
        "scale_ups_by_pool": {"gpu-a100": 1},
    }
    values.update(overrides)
    return SimResult(**values)


class Lcg:
    """A 64-bit linear congruential generator: deterministic test data without a randomness source."""

    def __init__(self, seed: int) -> None:
        self.state = (seed * 6364136223846793005 + 1442695040888963407) % 2**64

    def uniform(self, lo: float = 0.0, hi: float = 1.0) -> float:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2**64
        return lo + (hi - lo) * (self.state >> 11) / 2**53

    def lognormal(self, median: float, spread: float) -> float:
        u1, u2 = max(self.uniform(), 1e-12), self.uniform()
        return median * math.exp(spread * math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2))


POOLS = {"gpu-a100": (8, 32.77), "gpu-l4": (1, 0.85), "cpu-general": (0, 0.38)}
"""pool → (GPUs per node, USD per node-hour)."""
WORKLOADS = (("inference", "gpu-l4", 1), ("training", "gpu-a100", 8), ("batch", "gpu-a100", 2),
             ("batch", "cpu-general", 0))


def _phases(rng: Lcg, boot_scale: float, stockout: bool) -> dict[str, float]:
    return {Phase.BLOCKED: rng.uniform(600, 2400) if stockout else 0.0, Phase.DECISION: rng.uniform(2, 15),
            Phase.REQUEST: rng.uniform(1, 4), Phase.CAPACITY: rng.lognormal(20, 0.8) * boot_scale,
            Phase.BOOT: rng.uniform(50, 90), Phase.REGISTRATION: rng.uniform(10, 30),
            Phase.NODE_READY: rng.uniform(5, 20), Phase.GPU_REGISTRATION: rng.uniform(40, 120),
            Phase.BIND: rng.uniform(0.2, 2), Phase.IMAGE_PULL: rng.lognormal(90, 0.7),
            Phase.CONTAINER_START: rng.uniform(2, 10)}


def make_day_result(policy: str = "gpuscale", *, seed: int = 1, pods: int = 400, days: float = 1.0,
                    sample_s: float = 60.0, warm: float = 0.0, boot_scale: float = 1.0) -> SimResult:
    """A run of `days` with `pods` pods arriving on a diurnal curve; `warm` (0..1) is the share of pods that find
    existing capacity, `boot_scale` stretches capacity acquisition. Totals are consistent with the series."""
    rng = Lcg(seed)
    duration_s = days * 86400
    records, notable = [], []
    for i in range(pods):
        kind, pool, gpus = WORKLOADS[i % len(WORKLOADS)]
        created = duration_s * (i + rng.uniform()) / pods
        if rng.uniform() < 0.01:
            records.append(make_pod(f"ml/{kind}-{i}", workload=kind, created_s=created, running_s=None, new_node=True,
                                    gpus=gpus, team=f"team-{i % 3}"))
            continue
        new_node = rng.uniform() >= warm
        stockout = new_node and rng.uniform() < 0.03
        phases = _phases(rng, boot_scale, stockout) if new_node else {
            Phase.BIND: rng.uniform(0.2, 2), Phase.IMAGE_PULL: rng.lognormal(8, 1.2), Phase.CONTAINER_START: 3.0}
        if stockout:
            notable.append(Notable(t_s=created + 30, kind="stockout",
                                   message=f"{pool} in us-east-1a out of capacity; fell back to us-east-1b"))
        records.append(make_pod(f"ml/{kind}-{i}", workload=kind, created_s=created,
                                running_s=created + sum(phases.values()), new_node=new_node, pool=pool, gpus=gpus,
                                team=f"team-{i % 3}", phases={str(k): v for k, v in phases.items()}))
    series = _day_series(rng, duration_s, sample_s, warm)
    hours = {p: {"provisioned": 0.0, "allocated": 0.0, "idle": 0.0} for p in POOLS}
    step_h = sample_s / 3600
    for pool, (per_node, _) in POOLS.items():
        provisioned = sum(series.nodes_by_pool[pool]) * per_node * step_h
        hours[pool] = {"provisioned": provisioned, "allocated": provisioned * 0.7, "idle": provisioned * 0.3,
                       "hindsight_bound": provisioned * 0.8}
    cost = {p: sum(series.nodes_by_pool[p]) * usd * step_h for p, (_, usd) in POOLS.items()}
    return SimResult(
        scenario="diurnal-ml", policy=policy, seed=seed, duration_s=duration_s, cost_usd=sum(cost.values()),
        cost_by_pool=cost, gpu_hours_provisioned=sum(h["provisioned"] for h in hours.values()),
        gpu_hours_allocated=sum(h["allocated"] for h in hours.values()), gpu_hours_by_pool=hours,
        gpu_hours_hindsight_bound=sum(h["hindsight_bound"] for h in hours.values()),
        pods=tuple(records), evictions=int(3 * (1 - warm)), lost_gpu_hours=round(2.5 * (1 - warm), 3),
        scale_ups=sum(1 for r in records if r.new_node), scale_downs=40, stockouts=len(notable), backoffs=len(notable),
        never_ran=sum(1 for r in records if r.running_s is None), sim_events=pods * 40, wall_s=1.5, series=series,
        notable=tuple(notable), scale_ups_by_pool={"gpu-a100": 60, "gpu-l4": 25, "cpu-general": 12},
        queue_wait_by_team={"team-0": {"p50": 95.0, "p95": 610.0}, "team-1": {"p50": 80.0, "p95": 420.5}})


def _day_series(rng: Lcg, duration_s: float, sample_s: float, warm: float) -> Series:
    t_s = [i * sample_s for i in range(int(duration_s // sample_s) + 1)]
    nodes: dict[str, list[int]] = {p: [] for p in POOLS}
    pending, cost, provisioned, allocated = [], [], [], []
    total, drift, queue = 0.0, 0.0, 0.0
    for t in t_s:
        load = 0.5 - 0.45 * math.cos(2 * math.pi * t / 86400)
        drift = 0.97 * drift + rng.uniform(-0.25, 0.25)
        queue = 0.9 * queue + rng.uniform(0, 1.2) * load * (1 - warm)
        counts = {"gpu-a100": round(2 + 10 * load + 2 * warm + drift),
                  "gpu-l4": round(3 + 14 * load + 3 * warm + 2 * drift), "cpu-general": 4}
        for pool, count in counts.items():
            nodes[pool].append(count)
        total += sum(counts[p] * usd for p, (_, usd) in POOLS.items()) * sample_s / 3600
        gpus = sum(counts[p] * per for p, (per, _) in POOLS.items())
        pending.append(max(0, round(queue + 3 * load * (1 - warm))))
        cost.append(total)
        provisioned.append(float(gpus))
        allocated.append(float(gpus) * (0.62 + 0.25 * load))
    return Series(t_s=tuple(t_s), nodes_by_pool={p: tuple(v) for p, v in nodes.items()}, pending_pods=tuple(pending),
                  cost_usd=tuple(cost), gpus_provisioned=tuple(provisioned), gpus_allocated=tuple(allocated))
