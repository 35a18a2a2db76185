"""Benchmark and acceptance table: the FGD paper's packing experiment (ATC'23, Fig. 7/9) on an openb trace.

Runs every policy × seed (default: the paper's six policies, seeds 42–51, trace `openb_pod_list_default`), then
prints per policy the mean and median unallocated GPU % at 100 % arrived, the fragmented GPU % at 90 % arrived,
the failed pods, the paper's numbers next to them and the seconds per run. With `--expected` (the artifact's
`experiments/analysis/expected_results/` directory) it also checks every run's curve against the artifact's own
per-seed curve and reports the points that differ. Run:

    .venv/bin/python bench/fgd.py [--trace openb_pod_list_gpushare40] [--seeds 42-51] [--policies fgd,bestfit]
                                  [--workers 2] [--expected DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from gpuscale.engine.placement import POLICIES, policy_name
from gpuscale.report.pack import pack_json
from gpuscale.sim.openb import bundled
from gpuscale.sim.pack import run_pack

TRACES_DIR = Path(os.environ.get("GPUSCALE_TRACES", Path(__file__).resolve().parents[1].parent / "shared" / "traces")
                  ) / "alibaba-gpu-v2023" / "csv"
"""`../shared/traces` beside the repo, or `$GPUSCALE_TRACES` (a worktree elsewhere)."""
DEFAULT_TRACE = "openb_pod_list_default"
PAPER_DEFAULT = {  # mean (median) unallocated GPU % at 100 % arrived; frag % of all GPUs at 90 % arrived
    "random": (13.70, 13.75, 14.48), "dotprod": (9.38, 9.45, 9.43), "clustering": (8.35, 8.42, 8.45),
    "packing": (8.22, 8.20, 8.37), "bestfit": (7.14, 7.09, 7.41), "fgd": (4.77, 4.77, 5.00),
}
ARTIFACT_POLICY = {"random": "01-Random", "dotprod": "02-DotProd", "clustering": "03-GpuClustering",
                   "packing": "04-GpuPacking", "bestfit": "05-BestFit", "fgd": "06-FGD"}
EXPECTED_FILES = {"allocated_pct": "analysis_allo_discrete.csv", "frag_pct": "analysis_frag_discrete.csv",
                  "frag_ratio_pct": "analysis_frag_ratio_discrete.csv"}


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high) + 1) if high else [int(low)])
    return seeds


def trace_path(name: str) -> Path:
    if name == DEFAULT_TRACE and not (TRACES_DIR / f"{name}.csv").exists():
        return bundled(f"{name}.csv")
    return TRACES_DIR / f"{name}.csv"


def one_run(job: tuple[str, str, str, int]) -> dict[str, Any]:
    nodes, pods, policy, seed = job
    start = time.perf_counter()
    result = run_pack(Path(nodes), Path(pods), policy, seed)
    seconds = time.perf_counter() - start
    at90 = result.point(90)
    return {"policy": result.policy, "seed": seed, "unallocated": result.unallocated_pct,
            "frag90": at90.frag_pct if at90 else float("nan"), "failed": result.failed_pods, "pods": result.pods,
            "seconds": seconds, "json": pack_json(result)}


def read_expected(directory: Path, trace: str) -> dict[tuple[str, int], dict[str, dict[str, float]]]:
    """(artifact policy, seed) → metric → arrived % → value, from the artifact's expected_results CSVs."""
    out: dict[tuple[str, int], dict[str, dict[str, float]]] = defaultdict(dict)
    for metric, file in EXPECTED_FILES.items():
        with (directory / file).open(newline="") as f:
            for row in csv.DictReader(f):
                if row["workload"] == trace:
                    out[(row["sc_policy"], int(row["seed"]))][metric] = {
                        k: float(v) for k, v in row.items() if k.isdigit() and v != ""}
    return out


def compare(run: dict[str, Any], expected: dict[str, dict[str, float]]) -> int:
    """Points whose allocated %, frag % or frag ratio differs from the artifact's by ≥ 0.01."""
    bad = 0
    for point in run["json"]["points"]:
        key = str(point["arrived_pct"])
        for metric, values in expected.items():
            if key in values and abs(values[key] - point[metric]) > 0.0051:
                bad += 1
                break
    return bad


def summarise(runs: Sequence[dict[str, Any]], policies: Sequence[str], trace: str,
              expected: dict[tuple[str, int], dict[str, dict[str, float]]] | None) -> None:
    header = (f"{'policy':<11}{'unalloc mean':>13}{'median':>8}{'paper':>16}{'Δ mean':>8}{'frag@90':>9}"
              f"{'paper':>7}{'failed':>8}{'s/run':>7}")
    if expected:
        header += f"{'exact seeds':>13}"
    print(header)
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        unalloc = [r["unallocated"] for r in mine]
        mean, median = statistics.fmean(unalloc), statistics.median(unalloc)
        paper = paper_numbers(policy, trace, [r["seed"] for r in mine], expected)
        line = (f"{policy:<11}{mean:>13.2f}{median:>8.2f}"
                f"{f'{paper[0]:.2f} ({paper[1]:.2f})' if paper else '–':>16}"
                f"{f'{mean - paper[0]:+.2f}' if paper else '–':>8}"
                f"{statistics.fmean(r['frag90'] for r in mine):>9.2f}{f'{paper[2]:.2f}' if paper else '–':>7}"
                f"{statistics.fmean(r['failed'] for r in mine):>8.0f}"
                f"{statistics.fmean(r['seconds'] for r in mine):>7.2f}")
        if expected:
            exact = [r for r in mine if (ARTIFACT_POLICY.get(policy), r["seed"]) in expected]
            same = sum(1 for r in exact if compare(r, expected[(ARTIFACT_POLICY[policy], r["seed"])]) == 0)
            line += f"{f'{same}/{len(exact)}':>13}"
        print(line)


def paper_numbers(policy: str, trace: str, seeds: Sequence[int],
                  expected: dict[tuple[str, int], dict[str, dict[str, float]]] | None) -> tuple[float, ...] | None:
    if expected and all((ARTIFACT_POLICY.get(policy), s) in expected for s in seeds):
        rows = [expected[(ARTIFACT_POLICY[policy], s)] for s in seeds]
        unalloc = [100 - r["allocated_pct"]["100"] for r in rows]
        frag90 = statistics.fmean(r["frag_pct"]["90"] for r in rows)
        return statistics.fmean(unalloc), statistics.median(unalloc), frag90
    if trace == DEFAULT_TRACE and policy in PAPER_DEFAULT:
        return PAPER_DEFAULT[policy]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=DEFAULT_TRACE, help="openb pod list name (without .csv)")
    parser.add_argument("--nodes", type=Path, default=None, help="node CSV (default: openb_node_list_gpu_node)")
    parser.add_argument("--seeds", default="42-51", help="e.g. 42-51 or 42,45")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--expected", type=Path, help="the artifact's experiments/analysis/expected_results/")
    parser.add_argument("--json", type=Path, help="write every run's pack JSON here")
    args = parser.parse_args()
    policies = [policy_name(p) for p in args.policies.split(",")]
    nodes = args.nodes or bundled("openb_node_list_gpu_node.csv")
    jobs = [(str(nodes), str(trace_path(args.trace)), p, s) for p in policies for s in parse_seeds(args.seeds)]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(one_run, jobs))
    wall = time.perf_counter() - start
    print(f"trace {args.trace}: {len(jobs)} runs on {args.workers} workers in {wall:.1f}s wall; "
          f"machine {platform.machine()} ({os.cpu_count()} CPUs) python {platform.python_version()}; "
          f"{datetime.date.today().isoformat()}")
    expected = read_expected(args.expected, args.trace) if args.expected else None
    summarise(runs, policies, args.trace, expected)
    if expected:
        for r in runs:
            key = (ARTIFACT_POLICY.get(r["policy"], ""), r["seed"])
            if key in expected and (bad := compare(r, expected[key])):
                print(f"  differs from the artifact: {r['policy']} seed {r['seed']}: {bad} points")
    if args.json:
        args.json.write_text(json.dumps([r["json"] for r in runs], indent=1))


if __name__ == "__main__":
    main()
