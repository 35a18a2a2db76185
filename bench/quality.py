"""Decision quality of the autoscaling presets on real demand curves the bundled scenarios do not contain.

For each Helios "Earth" virtual-cluster curve in `../shared/traces/helios-earth-vc-sequences/` (10 curves, per-minute
running + pending GPUs, May 2020; docs/traces.md §4), the twin replays jobs that follow the curve over one window,
with pod shapes from an openb pod list, under each preset (`ca-defaults`, `gpuscale`), for several seeds. The same
pools, rules and defaults for every curve; nothing is tuned per curve.

* **Window rule** (`pick_window`): of all windows of `--days` days starting on a whole hour, the one whose hourly mean
  demand has the highest variance (ties: the earliest). It picks the stretch with the largest ups and downs.
* **Shapes**: openb `multigpu50` (Alibaba 2023, the FGD artifact's list with half the GPU demand in multi-GPU pods):
  its whole-GPU pods of 1, 2, 4 or 8 GPUs and its CPU-only pods, those that fit the pools' nodes; fractional-GPU pods
  are left out (the A100 pool does not share GPUs). One pod per job (openb has no gangs); the list has no timestamps,
  so lifetimes are `Durations.LOGNORMAL` (TWIN-DEFAULTS §4–5). `--shapes default` takes openb's default list instead
  (98 % 1-GPU pods, with their own lifetimes; the copy bundled in `gpuscale/data/openb/`).
* **Checkpoints**: every GPU job checkpoints every uniform(900 s, 3,600 s) (TWIN-DEFAULTS §5, as the synthetic
  training mix), drawn from its own child generator, so the jobs are the same with or without them.
* **Pools**: `a100` (a2-highgpu-8g, 8 × A100, $29.39/h), `a100-4g`, `a100-2g`, `a100-1g` (a2-highgpu-4g/2g/1g,
  $14.69, $7.347, $3.673/h: the same price file as the 8g, TWIN-DEFAULTS §1), all with the GPU taint, min 0, and
  `cpu` (n2-standard-64, $3.108/h, min 1); max sizes 1.5 × the window's peak demand (in that pool's nodes) + 2 nodes,
  so limits never bind. `--pools 8g` keeps only the 8-GPU pool (the setup before the smaller pools). Start-up
  profiles: the twin's `gpu-large` for every A100 pool and `cpu` (docs/twin.md). The curve is scaled so that its p95
  over the whole month is `--gpus`.
* **Seeds**: a seed draws the jobs and drives the twin (start-up delays, stockouts).

Per curve, policy and seed it measures: cost, provisioned / allocated / idle GPU-hours, efficiency (allocated /
provisioned) and the hindsight efficiency (allocated / the hindsight bound, `gpuscale.sim.hindsight`), p50/p95
pending→bound (the capacity wait) and pending→running of GPU pods, pods that never ran, evictions, lost GPU-hours,
scale-ups. Then per curve the means over seeds, and the summary: gpuscale / ca-defaults ratios (geometric mean and
median over curve × seed runs), wins and losses per curve, and issue #28's targets.

Run (from the repo root, `../shared` next to it):

    PYTHONPATH=src .venv/bin/python bench/quality.py                                 # 10 curves, 2 days, seeds 1-3
    PYTHONPATH=src .venv/bin/python bench/quality.py --curves 2 --days 0.25 --seeds 1  # quick look
    ... --json OUT.json   (every run's figures and the summary)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.sim.helios import DemandCurve, Durations, openb_helios_jobs, read_demand_curve, scaled_demand
from gpuscale.sim.openb import OpenbPod, bundled, read_pods
from gpuscale.sim.run import TwinSetup, simulate
from gpuscale.sim.scenario import parse_scenario, policy_named
from gpuscale.sim.workloads import JobSpec

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
CURVES_DIR = TRACES / "helios-earth-vc-sequences"
OPENB_DIR = TRACES / "alibaba-gpu-v2023" / "csv"
POLICIES = ("ca-defaults", "gpuscale")
BASELINE, CANDIDATE = POLICIES
GPU_MODEL = "nvidia-tesla-a100"
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
A100 = {"cpu_milli": 95_690, "memory_mib": 630 * 1024, "gpus": 8}
"""a2-highgpu-8g allocatable, as the bundled default scenario gives it."""
A100_SMALL = {
    "a100-4g": ("a2-highgpu-4g", 14.69354, {"cpu_milli": 47_810, "memory_mib": 303 * 1024, "gpus": 4}),
    "a100-2g": ("a2-highgpu-2g", 7.34677, {"cpu_milli": 23_870, "memory_mib": 148 * 1024, "gpus": 2}),
    "a100-1g": ("a2-highgpu-1g", 3.673385, {"cpu_milli": 11_900, "memory_mib": 72 * 1024, "gpus": 1}),
}
"""The smaller A100 machine types: instance type, on-demand us-central1 USD/h (TWIN-DEFAULTS §1's price file, the
2026-08-03 refresh that gives the 8g its 29.39) and allocatable (48/24/12 vCPU, 340/170/85 GB less GKE's kubelet
reservations, as the bundled default scenario's smaller A100 pools give them)."""
POOL_SETS = ("all", "8g")
CPU_NODE = {"cpu_milli": 63_770, "memory_mib": 240 * 1024}
"""n2-standard-64 (64 vCPU, 256 GB) less the kubelet's reservations, rounded down."""
CHECKPOINT_S = (900.0, 3_600.0)
"""Checkpoint interval of GPU jobs, uniform (TWIN-DEFAULTS §5, as `synthetic.TrainingMix`)."""
WHOLE_GPU_SHAPES = (1, 2, 4, 8)


# ------------------------------------------------------------------------------------------------------- workload
def pick_window(curve: DemandCurve, days: float) -> int:
    """The start minute of the window of `days` days, starting on a whole hour, whose hourly mean demand varies most
    (population variance; ties: the earliest). Windows under an hour compare per-minute variance."""
    minutes = max(1, round(days * 1440))
    if minutes > len(curve.gpus):
        raise SystemExit(f"--days {days:g}: longer than curve {curve.name} ({len(curve.gpus) / 1440:g} days)")
    gpus = np.asarray(curve.gpus, dtype=float)
    per = 60 if minutes >= 60 else 1
    best, best_var = 0, -1.0
    for start in range(0, len(gpus) - minutes + 1, 60):
        window = gpus[start:start + minutes]
        usable = len(window) // per * per
        var = float(np.var(window[:usable].reshape(-1, per).mean(axis=1)))
        if var > best_var + 1e-9:
            best, best_var = start, var
    return best


def shapes(which: str) -> tuple[list[OpenbPod], int]:
    """The openb pods the benchmark draws from (whole-GPU pods of 1/2/4/8 GPUs and CPU pods that fit a node), and how
    many of the list's pods were left out."""
    pods = read_pods(bundled("openb_pod_list_default.csv") if which == "default"
                     else OPENB_DIR / f"openb_pod_list_{which}.csv")

    def fits(p: OpenbPod) -> bool:
        node = A100 if p.num_gpu else CPU_NODE
        return p.cpu_milli <= node["cpu_milli"] and p.memory_mib <= node["memory_mib"]

    kept = [p for p in pods if (p.num_gpu == 0 or (p.num_gpu in WHOLE_GPU_SHAPES and p.gpu_milli == 1000)) and fits(p)]
    return kept, len(pods) - len(kept)


def jobs_for(curve: DemandCurve, pods: Sequence[OpenbPod], *, start_minute: int, duration_s: float, gpus: float,
             seed: int, lifetimes: Durations) -> list[JobSpec]:
    """The curve's jobs for one seed, each GPU job with a checkpoint interval drawn from a second child generator."""
    draw, checkpoints = np.random.default_rng(seed).spawn(2)
    jobs = openb_helios_jobs(draw, pods, curve, start_minute=start_minute, duration_s=duration_s,
                             scale_to_gpus=gpus, gpu_model=GPU_MODEL, durations=lifetimes)
    intervals = checkpoints.uniform(*CHECKPOINT_S, len(jobs)).tolist()
    return [dataclasses.replace(j, checkpoint_s=round(c, 3)) if j.requests.gpu_count() else j
            for j, c in zip(jobs, intervals, strict=True)]


def _a100_pool(name: str, instance_type: str, usd_per_hour: float, node: dict[str, int],
               peak_gpus: float) -> dict[str, Any]:
    return {"name": name, "instance_type": instance_type, "usd_per_hour": usd_per_hour,
            "max_size": math.ceil(1.5 * peak_gpus / node["gpus"]) + 2, "zones": ["us-central1-a"],
            "labels": {"cloud.google.com/gke-nodepool": name, "cloud.google.com/gke-accelerator": GPU_MODEL},
            "taints": GPU_TAINT, "gpu": {"model": GPU_MODEL, "count": node["gpus"]},
            "allocatable": {"cpu": f"{node['cpu_milli']}m", "memory": f"{node['memory_mib']}Mi", "pods": 110}}


def scenario(name: str, peak_gpus: float, duration_s: float, seed: int, pool_set: str = "all") -> dict[str, Any]:
    """The pools (no workload: the jobs are added to the setup)."""
    small = A100_SMALL if pool_set == "all" else {}
    pools = [
        {"name": "cpu", "instance_type": "n2-standard-64", "usd_per_hour": 3.108, "min_size": 1, "max_size": 50,
         "zones": ["us-central1-a"], "labels": {"cloud.google.com/gke-nodepool": "cpu"},
         "allocatable": {"cpu": f"{CPU_NODE['cpu_milli']}m", "memory": f"{CPU_NODE['memory_mib']}Mi", "pods": 110}},
        _a100_pool("a100", "a2-highgpu-8g", 29.39, A100, peak_gpus),
        *(_a100_pool(key, kind, price, node, peak_gpus) for key, (kind, price, node) in small.items()),
    ]
    return {"name": name, "duration": f"{duration_s:g}s", "seed": seed, "config": {"pools": pools},
            "profiles": {"cpu": "cpu", "a100": "gpu-large", **{key: "gpu-large" for key in small}}}


# ------------------------------------------------------------------------------------------------------------ runs
@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    curve_path: str
    start_minute: int
    duration_s: float
    gpus: float
    seed: int
    shapes: str
    pools: str = "all"


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def run_case(case: Case) -> list[dict[str, Any]]:
    """Every policy on one curve and seed (the same jobs for all)."""
    curve = read_demand_curve(Path(case.curve_path))
    pods, _ = shapes(case.shapes)
    lifetimes = Durations.LOGNORMAL if case.shapes != "default" else Durations.OPENB
    jobs = jobs_for(curve, pods, start_minute=case.start_minute, duration_s=case.duration_s, gpus=case.gpus,
                    seed=case.seed, lifetimes=lifetimes)
    peak = float(scaled_demand(curve, start_minute=case.start_minute, duration_s=case.duration_s,
                               scale_to_gpus=case.gpus).max())
    base, config = parse_scenario(scenario(f"quality-{curve.name}", peak, case.duration_s, case.seed, case.pools),
                                  "bench")
    setup: TwinSetup = dataclasses.replace(base, jobs=tuple(jobs))
    rows = []
    for name in POLICIES:
        started = time.perf_counter()
        result = simulate(setup, policy_named(name, config))
        gpu_pods = [p for p in result.pods if p.gpus > 0]
        running = [w for p in gpu_pods if (w := p.pending_to_running_s) is not None]
        bound = [b for p in gpu_pods if (b := p.pending_to_bound_s) is not None]
        rows.append({
            "curve": curve.name, "policy": name, "seed": case.seed, "start_minute": case.start_minute,
            "jobs": len(jobs), "gpu_jobs": sum(1 for j in jobs if j.requests.gpu_count()),
            "cost_usd": result.cost_usd, "gpu_hours_provisioned": result.gpu_hours_provisioned,
            "gpu_hours_allocated": result.gpu_hours_allocated, "gpu_hours_idle": result.gpu_hours_idle,
            "gpu_hours_hindsight_bound": result.gpu_hours_hindsight_bound,
            "efficiency": result.efficiency, "hindsight_efficiency": result.hindsight_efficiency,
            "p50_bound_s": _pct(bound, 50), "p95_bound_s": _pct(bound, 95),
            "p50_running_s": _pct(running, 50), "p95_running_s": _pct(running, 95),
            "gpu_hours_useful": result.gpu_hours_useful, "never_ran": result.never_ran,
            "evictions": result.evictions, "lost_gpu_hours": result.lost_gpu_hours,
            "scale_ups": result.scale_ups, "scale_downs": result.scale_downs, "pods": len(result.pods),
            "wall_s": time.perf_counter() - started,
        })
    return rows


# --------------------------------------------------------------------------------------------------------- summary
def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def geomean(values: Sequence[float]) -> float | None:
    kept = [v for v in values if v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in kept)) if kept else None


RATIO_KEYS = ("cost_usd", "gpu_hours_provisioned", "gpu_hours_idle", "p95_bound_s", "p95_running_s",
              "p50_bound_s", "p50_running_s")


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """gpuscale / ca-defaults per run (curve × seed) and per curve (means over seeds), and issue #28's targets."""
    by = {(r["curve"], r["seed"], r["policy"]): r for r in rows}
    runs = sorted({(c, s) for c, s, _ in by})
    per_run = {key: [x for c, s in runs if (x := ratio(by[c, s, CANDIDATE][key], by[c, s, BASELINE][key]))
                     is not None] for key in RATIO_KEYS}
    curves = sorted({c for c, _ in runs})

    def curve_mean(curve: str, policy: str, key: str) -> float | None:
        values = [by[c, s, policy][key] for c, s in runs if c == curve and by[c, s, policy][key] is not None]
        return statistics.fmean(values) if values else None

    per_curve = {c: {key: ratio(curve_mean(c, CANDIDATE, key), curve_mean(c, BASELINE, key)) for key in RATIO_KEYS}
                 for c in curves}
    idle = [per_curve[c]["gpu_hours_idle"] for c in curves]
    cost = [per_curve[c]["cost_usd"] for c in curves]
    lost = sum(by[c, s, CANDIDATE]["lost_gpu_hours"] for c, s in runs)
    # Lost work against useful GPU-hours where the twin reports them (issue #28 item 3), else against allocated.
    work_key = "gpu_hours_useful" if all(r["gpu_hours_useful"] is not None for r in rows) else "gpu_hours_allocated"
    allocated = sum(by[c, s, CANDIDATE][work_key] for c, s in runs)
    idle_geo = geomean(per_run["gpu_hours_idle"])
    wait_geo = geomean(per_run["p95_bound_s"])
    worst = max((v for v in idle if v is not None), default=None)
    return {
        "runs": len(runs), "curves": len(curves),
        "geomean": {key: geomean(v) for key, v in per_run.items()},
        "median": {key: statistics.median(v) if v else None for key, v in per_run.items()},
        "per_curve": per_curve,
        "idle_wins": _count(idle, below=True), "idle_losses": _count(idle, below=False),
        "cost_wins": _count(cost, below=True), "cost_losses": _count(cost, below=False),
        "lost_share_of": work_key, "lost_share": lost / allocated if allocated > 0 else None,
        "targets": {
            "idle geomean <= 0.80": idle_geo is not None and idle_geo <= 0.80,
            "p95 capacity wait geomean <= 1.00": wait_geo is not None and wait_geo <= 1.0,
            f"lost <= 0.5 % of {work_key.removeprefix('gpu_hours_')}": allocated > 0 and lost / allocated <= 0.005,
            "no curve idle > 1.05": worst is not None and worst <= 1.05,
        },
    }


def _count(ratios: Sequence[float | None], *, below: bool) -> int:
    """Curves where gpuscale's figure is below (a win) or above (a loss) ca-defaults'."""
    return sum(1 for v in ratios if v is not None and (v < 1 if below else v > 1))


def _f(value: float | None, spec: str, width: int) -> str:
    return f"{'—':>{width}}" if value is None else f"{value:>{width}{spec}}"


def print_tables(rows: Sequence[dict[str, Any]], summary: dict[str, Any]) -> None:
    print(f"{'curve':<7}{'policy':<12}{'seed':>4}{'cost $':>9}{'GPU-h':>8}{'idle':>7}{'eff':>6}{'bound':>6}"
          f"{'bnd p50':>8}{'p95':>7}{'run p50':>8}{'p95':>7}{'never':>6}{'evict':>6}{'lost':>6}{'ups':>5}{'s':>5}")
    for r in rows:
        print(f"{r['curve']:<7}{r['policy']:<12}{r['seed']:>4}{r['cost_usd']:>9.0f}{r['gpu_hours_provisioned']:>8.0f}"
              f"{r['gpu_hours_idle']:>7.0f}{_f(r['efficiency'], '.3f', 6)}{_f(r['hindsight_efficiency'], '.3f', 6)}"
              f"{_f(r['p50_bound_s'], '.0f', 8)}{_f(r['p95_bound_s'], '.0f', 7)}{_f(r['p50_running_s'], '.0f', 8)}"
              f"{_f(r['p95_running_s'], '.0f', 7)}{r['never_ran']:>6}{r['evictions']:>6}{r['lost_gpu_hours']:>6.1f}"
              f"{r['scale_ups']:>5}{r['wall_s']:>5.0f}")
    print("GPU-h provisioned, idle = provisioned − allocated; eff = allocated / provisioned; bound = allocated / the "
          "hindsight bound (the best eff); bnd = pending→bound (capacity wait), run = pending→running, s, GPU pods; "
          "never = pods never running; lost = GPU-h of work lost to evictions; s = wall seconds")
    print("\ngpuscale / ca-defaults per curve (means over seeds):")
    print(f"{'curve':<7}{'cost':>7}{'GPU-h':>7}{'idle':>7}{'bnd p95':>8}{'run p95':>8}{'bnd p50':>8}{'run p50':>8}")
    for curve, ratios in summary["per_curve"].items():
        print(f"{curve:<7}" + "".join(_f(ratios[k], ".3f", 8 if "_s" in k else 7) for k in RATIO_KEYS))
    print(f"\nover {summary['runs']} runs ({summary['curves']} curves × seeds), gpuscale / ca-defaults:")
    for label in ("geomean", "median"):
        print(f"  {label:<8}" + "  ".join(f"{k.removeprefix('gpu_hours_')} {_f(v, '.3f', 0)}"
                                           for k, v in summary[label].items()))
    print(f"  curves: idle {summary['idle_wins']} wins / {summary['idle_losses']} losses; cost {summary['cost_wins']} "
          f"wins / {summary['cost_losses']} losses")
    share, of = summary["lost_share"], summary["lost_share_of"].removeprefix("gpu_hours_")
    print(f"  gpuscale lost work: {_f(None if share is None else 100 * share, '.2f', 0)} % of its {of} GPU-hours")
    print("issue #28 targets: " + "; ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in summary["targets"].items()))


def parse_seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high) + 1)) if high else [int(s) for s in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", type=int, default=0, help="the first N curves by name (default: all)")
    parser.add_argument("--days", type=float, default=2.0, help="window length in days (default 2)")
    parser.add_argument("--seeds", default="1-3", help="e.g. 1-3 or 1,5 (default 1-3)")
    parser.add_argument("--gpus", type=float, default=64.0, help="the curve's monthly p95 scaled to this many GPUs")
    parser.add_argument("--shapes", choices=("multigpu50", "default"), default="multigpu50",
                        help="openb pod list for the shapes (default multigpu50)")
    parser.add_argument("--pools", choices=POOL_SETS, default="all",
                        help="all: A100 pools of 1, 2, 4 and 8 GPUs (default); 8g: only the 8-GPU pool")
    parser.add_argument("--workers", type=int, default=1, help="parallel processes (default 1; 2 cores shared)")
    parser.add_argument("--traces", type=Path, default=CURVES_DIR, help="folder of *_cluster_sequence_vc.csv.gz")
    parser.add_argument("--json", type=Path, help="write every run's figures and the summary here")
    args = parser.parse_args(argv)
    if not args.days > 0 or not args.gpus > 0 or args.curves < 0 or args.workers < 1:
        print("quality.py: --days and --gpus must be > 0, --curves ≥ 0, --workers ≥ 1", file=sys.stderr)
        return 2
    paths = sorted(args.traces.glob("*_cluster_sequence_vc.csv*"))
    if not paths:
        print(f"quality.py: --traces {args.traces}: no *_cluster_sequence_vc.csv[.gz] file", file=sys.stderr)
        return 2
    paths = paths[:args.curves] if args.curves else paths
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        print(f"quality.py: --seeds {args.seeds!r}: expected e.g. 1-3 or 1,5", file=sys.stderr)
        return 2
    duration_s = args.days * 86_400.0
    pods, dropped = shapes(args.shapes)
    cases: list[Case] = []
    windows: dict[str, dict[str, Any]] = {}
    for path in paths:
        curve = read_demand_curve(path)
        start = pick_window(curve, args.days)
        stamp = datetime.datetime.fromisoformat(curve.start) + datetime.timedelta(minutes=start)
        target = scaled_demand(curve, start_minute=start, duration_s=duration_s, scale_to_gpus=args.gpus)
        windows[curve.name] = {"start_minute": start, "start": stamp.isoformat(sep=" "),
                               "demand_gpus": [round(float(target.min()), 1), round(float(target.mean()), 1),
                                               round(float(target.max()), 1)]}
        cases += [Case(str(path), start, duration_s, args.gpus, seed, args.shapes, args.pools) for seed in seeds]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"quality: {len(paths)} curves × seeds {args.seeds} × {len(POLICIES)} policies, {args.days:g}-day windows, "
          f"p95 → {args.gpus:g} GPUs, openb {args.shapes} ({len(pods)} shapes, {dropped} left out), "
          f"pools {args.pools}; "
          f"{platform.machine()} ({os.cpu_count()} CPUs, load {load}) python {platform.python_version()}; "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    print("windows (start; target GPUs min/mean/max): " + ", ".join(
        f"{name} {w['start'][:16]} ({'/'.join(f'{g:.0f}' for g in w['demand_gpus'])})" for name, w in windows.items()))
    started = time.perf_counter()
    if args.workers == 1:
        results = [run_case(c) for c in cases]
    else:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(run_case, cases))
    rows = [r for rs in results for r in rs]
    summary = summarise(rows)
    print(f"{len(rows)} runs in {time.perf_counter() - started:.0f}s wall\n")
    print_tables(rows, summary)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "windows": windows,
                                         "runs": rows, "summary": summary}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
