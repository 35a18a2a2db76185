"""Benchmark: the digital twin on 7 simulated days of a 1,000-GPU cluster (≥ 50,000 pods).

Workload: openb pod shapes (Alibaba 2023) arriving along the Helios `vc3sl` demand curve scaled so its p95 is
1,000 GPUs (docs/traces.md), plus a chat inference service. Pools: CPU, 8×A100, 1×T4 and a time-sliced T4 pool for
fractional-GPU pods. Prints simulated events per second, pods, wall time and the run's headline numbers.
Run: `.venv/bin/python bench/twin.py [--days 7] [--gpus 1000]`; `--scenario NAME` runs a bundled scenario (or a
scenario file) under the `gpuscale` preset instead (e.g. `zones`: topology spread and volumes).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from functools import partial
from typing import Any

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.report.twin import result_json
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import load_scenario, parse_scenario, policy_named

GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def scenario(days: float, gpus: float, shape: str = "t4x1") -> dict[str, object]:
    def gpu_pool(name: str, accel: str, count: int, cpu: str, memory: str, price: float, max_size: int,
                 resource: dict[str, int]) -> dict[str, object]:
        return {"name": name, "usd_per_hour": price, "max_size": max_size, "zones": ["zone-a", "zone-b"],
                "labels": {"cloud.google.com/gke-accelerator": accel}, "taints": GPU_TAINT,
                "gpu": {"model": accel, "count": count},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": 110, **resource}}

    cpu = {"name": "cpu", "usd_per_hour": 0.835, "min_size": 1, "max_size": 400,
           "allocatable": {"cpu": "32", "memory": "128Gi", "pods": 110}}
    # Scenario allocatable values are quantities: `gpuscale.io/gpu-milli: 1` is one GPU (1,000 milli).
    pools = {
        # Many small nodes: 8×A100 for whole GPUs, 1×T4 nodes for whole GPUs and a time-sliced 1×T4 pool for fractions.
        "t4x1": [cpu, gpu_pool("a100", "nvidia-tesla-a100", 8, "96", "680Gi", 29.39, 200, {}),
                 gpu_pool("t4", "nvidia-tesla-t4", 1, "16", "60Gi", 0.75, 600, {}),
                 gpu_pool("t4-shared", "nvidia-tesla-t4-shared", 1, "16", "60Gi", 0.75, 600,
                          {"gpuscale.io/gpu-milli": 1})],
        # The openb cluster's own two main node types (549 × 8-GPU G2, 387 × 2-GPU T4 of its 1,213 GPU nodes), both
        # sharing GPUs by fraction as openb nodes do.
        "openb": [cpu, gpu_pool("g2", "nvidia-tesla-a100", 8, "96", "384Gi", 29.39, 200, {"gpuscale.io/gpu-milli": 8}),
                  gpu_pool("t4", "nvidia-tesla-t4", 2, "104", "512Gi", 1.50, 400, {"gpuscale.io/gpu-milli": 2})],
    }[shape]
    return {
        "name": f"bench-{days:g}d-{gpus:g}gpu" + ("" if shape == "t4x1" else f"-{shape}"),
        "duration": f"{days * 24:g}h", "seed": 7,
        "config": {"pools": pools},
        "workload": {
            "helios": {"vc": "vc3sl", "scale_to_gpus": gpus},
            "services": [{"name": "chat", "peak_rps": 300, "rps_per_replica": 6, "max_replicas": 80}],
        },
    }


class _Timed:
    """The engine's decide (with its memo, as the loop runs it), with the CPU time of each decision counted."""

    def __init__(self) -> None:
        self.decisions = 0
        self.cpu_s = 0.0
        self._decide = partial(decide, store=IncrementalStore())

    def __call__(self, *args: Any) -> Plan:
        started = time.process_time()
        try:
            return self._decide(*args)
        finally:
            self.decisions += 1
            self.cpu_s += time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--gpus", type=float, default=1000.0)
    parser.add_argument("--shape", choices=("t4x1", "openb"), default="t4x1",
                        help="node shapes: many 1-GPU T4 nodes (default), or openb's 8-GPU and 2-GPU nodes")
    parser.add_argument("--scenario", help="a bundled scenario or scenario file instead of the bench's (its duration)")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.scenario:
        setup, config = load_scenario(args.scenario)
        args.days = setup.duration_s / 86_400
    else:
        setup, config = parse_scenario(scenario(args.days, args.gpus, args.shape), "bench")
    built = time.perf_counter() - start
    timed = _Timed()
    start, cpu = time.perf_counter(), time.process_time()
    result = simulate(setup, policy_named("gpuscale", config), decide=timed)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    report = result_json(result, include_wall=False)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()} python {platform.python_version()} ({sys.base_prefix}), "
          f"{os.cpu_count()} CPUs, load {load}")
    print(f"scenario {setup.name}: {len(setup.jobs)} jobs generated in {built:.1f}s")
    print(f"simulated {args.days:g} days in {wall:.1f}s wall ({cpu:.1f}s CPU): {len(result.pods)} pods, "
          f"{result.sim_events} events, "
          f"{result.sim_events / wall:,.0f} events/s, {len(result.pods) / wall:,.0f} pods/s")
    decisions, decide_s = timed.decisions, timed.cpu_s
    print(f"engine: {decisions} decisions, {decide_s:.1f}s CPU ({1000 * decide_s / max(decisions, 1):.1f} ms each); "
          f"the rest of the twin {cpu - decide_s:.1f}s CPU")
    print(f"cost ${report['cost_usd']:,.0f}; GPU-hours {report['gpu_hours']['provisioned']:,.0f} provisioned, "
          f"{report['gpu_hours']['allocated']:,.0f} allocated; p95 pending→running "
          f"{report['pending_to_running_s']['p95']}s; scale-ups {result.scale_ups}, never ran {result.never_ran}")


if __name__ == "__main__":
    main()
