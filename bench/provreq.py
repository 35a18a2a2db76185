"""Benchmark: what ProvisioningRequests add to one decision at scale.

The cluster of `bench/engine.py` (5,000 nodes, 150,000 running pods, 2,000 pending, openb shapes) plus `--requests`
ProvisioningRequests for 8-GPU pods of the `gpu-g2` pool: a third Provisioned and holding a booking, a third
check-capacity, a third best-effort-atomic (4 pods each, a gang). Prints the median time of `prepare` (bookings,
check-capacity answers, synthetic gangs) and of `decide` on the prepared cluster, against `decide` alone.
Run: `.venv/bin/python bench/provreq.py`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from engine import TOLERATE, build
from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.provreq import (
    BEST_EFFORT_ATOMIC,
    CHECK_CAPACITY,
    PROVISIONED,
    TRUE,
    Condition,
    PodSet,
    ProvisioningRequest,
    prepare,
)
from gpuscale.engine.state import EngineState
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.resources import Resources

NOW = 3600.0
T = TypeVar("T")


def requests(n: int) -> list[ProvisioningRequest]:
    template = Pod(namespace="team", name="ppt", requests=Resources.of({"cpu": 8000, "memory": 64 * 2**30,
                                                                        "nvidia.com/gpu": 8}),
                   constraints=SchedulingConstraints(tolerations=TOLERATE), labels={"app": "train"})
    out = []
    for i in range(n):
        kind = i % 3
        conditions = {PROVISIONED: Condition(type=PROVISIONED, status=TRUE, reason="Provisioned", message="",
                                             since_s=NOW - 60)} if kind == 0 else {}
        out.append(ProvisioningRequest(namespace="team", name=f"r{i}",
                                       class_name=CHECK_CAPACITY if kind == 1 else BEST_EFFORT_ATOMIC,
                                       pod_sets=(PodSet(template_name="ppt", template=template, count=4),),
                                       conditions=conditions, created_s=NOW - 120))
    return out


def median_of(runs: int, call: Callable[[], T]) -> tuple[float, T]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--running", type=int, default=150_000)
    parser.add_argument("--pending", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cluster, pools = build(args.nodes, args.running, args.pending, seed=11)
    by_name = {p.name: p for p in pools}
    policy = replace(Policy(), new_gpu_pod_delay_s=0.0)
    reqs = requests(args.requests)
    plain, _ = median_of(args.runs, lambda: decide(Snapshot(cluster=cluster), pools, EngineState(), policy, NOW))
    prep_s, prepared = median_of(args.runs, lambda: prepare(cluster, reqs, by_name, {}, NOW))
    with_s, plan = median_of(args.runs, lambda: decide(Snapshot(cluster=prepared.cluster), pools, EngineState(),
                                                       policy, NOW))
    print(f"nodes={len(cluster.nodes)} pods={len(cluster.pods)} requests={len(reqs)} "
          f"booked={sum(prepared.booked.values())} synthetic={len(prepared.synthetic)}")
    print(f"scale_up={[(s.pool, s.nodes) for s in plan.scale_up]}")
    print(f"decide alone median={plain:.3f}s; prepare median={prep_s:.3f}s; decide on prepared median={with_s:.3f}s")


if __name__ == "__main__":
    main()
