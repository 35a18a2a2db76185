"""Twin comparison on fractional GPUs: what fragmentation-aware placement saves in GPU-hours.

Runs the bundled `sharing` scenario (openb pod shapes on a Helios demand curve, T4- and V100-like pools that share
GPUs by fraction) for several seeds with three policies:

- `ca-defaults`: Cluster Autoscaler's behaviour, kube-scheduler's default scoring (least allocated), first fit;
- `gpuscale-nofrag`: the `gpuscale` preset with fragmentation-aware placement switched off everywhere (the twin's
  scheduler bin-packs GPUs by count, the engine's what-ifs use first fit and best-fit devices);
- `gpuscale`: the preset — GPU pods placed by our policy (FGD's score with packing tie-breaks) in the scheduler, in
  scale-up estimation and in scale-down's destinations.

Prints, per policy, the means over seeds of provisioned / allocated / idle GPU-hours, cost, p95 pending→running of
GPU pods, pods that never ran, evictions. Run:

    .venv/bin/python bench/twin_sharing.py [--seeds 1-3] [--hours 12] [--workers 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from gpuscale.sim.run import TwinPolicy, simulate
from gpuscale.sim.scenario import load_scenario, policy_named

POLICIES = ("ca-defaults", "gpuscale-nofrag", "gpuscale")


def policy(name: str, config: Any) -> TwinPolicy:
    if name == "gpuscale-nofrag":
        base = policy_named("gpuscale", config)
        return dataclasses.replace(base, name=name, gpu_placement=None,
                                   policy=dataclasses.replace(base.policy, gpu_placement=None))
    return policy_named(name, config)


def one_run(job: tuple[str, int, float]) -> dict[str, Any]:
    name, seed, hours = job
    setup, config = load_scenario("sharing", seed=seed)
    setup = dataclasses.replace(setup, duration_s=hours * 3600.0)
    started = time.perf_counter()
    result = simulate(setup, policy(name, config))
    waits = [p.pending_to_running_s for p in result.pods if p.gpus > 0 and p.pending_to_running_s is not None]
    return {"policy": name, "seed": seed, "provisioned": result.gpu_hours_provisioned,
            "allocated": result.gpu_hours_allocated,
            "idle": result.gpu_hours_provisioned - result.gpu_hours_allocated, "cost": result.cost_usd,
            "p95_pending_s": float(np.percentile(waits, 95)) if waits else 0.0, "never_ran": result.never_ran,
            "evictions": result.evictions, "scale_ups": result.scale_ups, "scale_downs": result.scale_downs,
            "wall_s": time.perf_counter() - started}


def parse_seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high) + 1)) if high else [int(s) for s in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--hours", type=float, default=12.0)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    jobs = [(p, s, args.hours) for s in seeds for p in args.policies.split(",")]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(one_run, jobs))
    print(f"sharing scenario, {args.hours:g} h, seeds {args.seeds}: {len(jobs)} runs in "
          f"{time.perf_counter() - started:.0f}s wall; {platform.machine()} ({os.cpu_count()} CPUs) python "
          f"{platform.python_version()}; {datetime.date.today().isoformat()}")
    print(f"{'policy':<17}{'GPU-h prov':>11}{'alloc':>8}{'idle':>8}{'cost $':>9}{'p95 pend s':>11}"
          f"{'never ran':>10}{'evict':>7}{'s/run':>7}")
    for name in args.policies.split(","):
        mine = [r for r in runs if r["policy"] == name]

        def mean(key: str, rows: list[dict[str, Any]] = mine) -> float:
            return statistics.fmean(r[key] for r in rows)

        print(f"{name:<17}{mean('provisioned'):>11.1f}{mean('allocated'):>8.1f}{mean('idle'):>8.1f}"
              f"{mean('cost'):>9.0f}{mean('p95_pending_s'):>11.0f}{mean('never_ran'):>10.1f}"
              f"{mean('evictions'):>7.1f}{mean('wall_s'):>7.0f}")
    print("per seed (provisioned GPU-h, p95 pending s):")
    for seed in seeds:
        cells = [f"{r['policy']} {r['provisioned']:.1f} / {r['p95_pending_s']:.0f}" for r in runs if r["seed"] == seed]
        print(f"  seed {seed}: " + "; ".join(cells))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
