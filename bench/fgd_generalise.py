"""Generalisation check of our `gpuscale` placement policy: FGD vs gpuscale on every openb pod list.

Our policy was designed on the default trace (openb_pod_list_default). This runs FGD and gpuscale on each of the other
22 openb pod lists the FGD paper's data ships (cpu*, gpushare*, gpuspec*, multigpu*) for seeds 42–51 and prints, per
trace, the mean unallocated GPU % at 100 % arrived, how many seeds ours wins / ties / loses, and the mean failed pods.
It reuses `bench/fgd.py`'s runner. Run (≈ 3 s per run; 440 runs):

    .venv/bin/python bench/fgd_generalise.py [--traces cpu0,gpuspec05] [--seeds 42-51] [--workers 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fgd import DEFAULT_TRACE, TRACES_DIR, one_run, parse_seeds, trace_path
from gpuscale.sim.openb import bundled


def all_traces() -> list[str]:
    names = sorted(p.stem for p in TRACES_DIR.glob("openb_pod_list_*.csv"))
    return names or [DEFAULT_TRACE]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default="", help="comma-separated suffixes (cpu0,gpuspec05); default: all")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the per-run summaries here")
    args = parser.parse_args()
    traces = ([f"openb_pod_list_{t}" for t in args.traces.split(",")] if args.traces else all_traces())
    seeds = parse_seeds(args.seeds)
    nodes = str(bundled("openb_node_list_gpu_node.csv"))
    jobs = [(nodes, str(trace_path(t)), p, s) for t in traces for p in ("fgd", "gpuscale") for s in seeds]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(one_run, jobs))
    wall = time.perf_counter() - start
    for job, run in zip(jobs, runs, strict=True):
        run["trace"] = Path(job[1]).stem.removeprefix("openb_pod_list_")
        del run["json"]
    print(f"{len(jobs)} runs on {args.workers} worker(s) in {wall:.0f}s wall; machine {platform.machine()} "
          f"({os.cpu_count()} CPUs) python {platform.python_version()}; {datetime.date.today().isoformat()}")
    print(f"{'trace':<13}{'FGD':>7}{'ours':>7}{'Δ':>7}{'wins/ties/losses':>18}{'failed FGD':>12}{'ours':>7}")
    deltas: list[float] = []
    for trace in dict.fromkeys(r["trace"] for r in runs):
        by: dict[str, dict[int, dict[str, Any]]] = {"fgd": {}, "gpuscale": {}}
        for r in runs:
            if r["trace"] == trace:
                by[r["policy"]][r["seed"]] = r
        fgd = statistics.fmean(r["unallocated"] for r in by["fgd"].values())
        ours = statistics.fmean(r["unallocated"] for r in by["gpuscale"].values())
        diff = [by["gpuscale"][s]["unallocated"] - by["fgd"][s]["unallocated"] for s in seeds]
        wins, ties = sum(d < 0 for d in diff), sum(d == 0 for d in diff)
        deltas.append(ours - fgd)
        print(f"{trace:<13}{fgd:>7.2f}{ours:>7.2f}{ours - fgd:>+7.2f}"
              f"{f'{wins}/{ties}/{len(diff) - wins - ties}':>18}"
              f"{statistics.fmean(r['failed'] for r in by['fgd'].values()):>12.0f}"
              f"{statistics.fmean(r['failed'] for r in by['gpuscale'].values()):>7.0f}")
    print(f"mean Δ over {len(deltas)} traces: {statistics.fmean(deltas):+.3f}; "
          f"ours better on {sum(d < 0 for d in deltas)}, worse on {sum(d > 0 for d in deltas)}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
