"""Rendering a twin run (`SimResult`): the JSON documented in docs/report.md, and terminal views with rich.

Pure functions of result values: nothing here simulates, and nothing reads a clock. Every dict whose order could vary
(pools, teams, workload kinds) is sorted, floats are rounded to `DECIMALS`, and percentiles are nearest-rank, so the
same scenario and seed give byte-identical JSON — except `wall_s`, which is wall-clock and left out with
`include_wall=False`. The row builders (`workload_rows`, `pool_rows`, `comparison_rows`) are shared with the HTML report
so both show the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuscale.lifecycle.phases import OPTIONAL_PHASES, Phase, percentile
from gpuscale.sim.result import REQUEUED, Notable, PodRecord, SimResult, never_ran

DECIMALS = 3
TOP_PHASES = 5
MAX_NOTABLE_SHOWN = 12


def rounded(value: float | None) -> float | None:
    """A float fit for stable JSON: rounded to `DECIMALS`, `-0.0` made `0.0`, NaN and infinity made null."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, DECIMALS) + 0.0


# ------------------------------------------------------------------------------------------------------ statistics


def latency_stats(values: Sequence[float]) -> dict[str, Any]:
    """`{count, p50, p95, p99, max}` in seconds; the statistics are null when there are no values."""
    if not values:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None}
    return {"count": len(values), "p50": rounded(percentile(values, 50)), "p95": rounded(percentile(values, 95)),
            "p99": rounded(percentile(values, 99)), "max": rounded(max(values))}


def waits(pods: Iterable[PodRecord]) -> list[float]:
    """Pending→running seconds of the pods that ran, in the records' order."""
    return [w for w in (p.pending_to_running_s for p in pods) if w is not None]


def capacity_waits(pods: Iterable[PodRecord]) -> list[float]:
    """Pending→bound seconds (the capacity wait, the autoscaler's share) of the pods that were bound, in order."""
    return [w for w in (p.pending_to_bound_s for p in pods) if w is not None]


def phase_names(pods: Sequence[PodRecord]) -> list[str]:
    """`requeued` when a record has it (it comes first), every `Phase` in lifecycle order (an optional one only when a
    record has it: `OPTIONAL_PHASES`), then any other name the records carry, sorted."""
    names = {name for pod in pods for name in pod.phases}
    known = [str(p) for p in Phase if p not in OPTIONAL_PHASES or str(p) in names]
    extra = sorted(names - set(known) - {REQUEUED})
    return ([REQUEUED] if REQUEUED in names else []) + known + extra


def phase_stats(pods: Sequence[PodRecord]) -> dict[str, dict[str, float | None]]:
    """Phase → `{mean, p95}` seconds over the new-node pods that ran; a phase a record lacks counts as zero."""
    ran = [p for p in pods if p.new_node and p.running_s is not None]
    stats: dict[str, dict[str, float | None]] = {}
    for name in phase_names(ran):
        values = [p.phases.get(name, 0.0) for p in ran]
        stats[name] = ({"mean": rounded(math.fsum(values) / len(values)), "p95": rounded(percentile(values, 95))}
                       if values else {"mean": None, "p95": None})
    return stats


def _sorted_floats(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A (possibly nested) mapping of floats with sorted keys and rounded values."""
    return {k: _sorted_floats(v) if hasattr(v, "items") else rounded(v) for k, v in sorted(mapping.items())}


def _gpu_hours(hours: Mapping[str, float]) -> dict[str, float | None]:
    """`provisioned`, `allocated`, `useful`, `idle` in that order (as at the top level), then any other key, sorted."""
    main = [k for k in ("provisioned", "allocated", "useful", "idle") if k in hours]
    return {k: rounded(hours[k]) for k in main + sorted(set(hours) - set(main))}


# ------------------------------------------------------------------------------------------------------------ JSON


def result_json(result: SimResult, include_wall: bool = True) -> dict[str, Any]:
    """The run as JSON-ready values; keys are documented in docs/report.md. Deterministic for a given result, except
    `wall_s` (omitted when `include_wall` is false)."""
    by_path = {"new_node": [p for p in result.pods if p.new_node],
               "existing_node": [p for p in result.pods if not p.new_node]}
    doc: dict[str, Any] = {
        "scenario": result.scenario,
        "policy": result.policy,
        "seed": result.seed,
        "duration_s": rounded(result.duration_s),
        "cost_usd": rounded(result.cost_usd),
        "cost_by_pool": _sorted_floats(result.cost_by_pool),
        "gpu_hours": {"provisioned": rounded(result.gpu_hours_provisioned),
                      "allocated": rounded(result.gpu_hours_allocated),
                      "useful": rounded(result.gpu_hours_useful),
                      "idle": rounded(result.gpu_hours_idle),
                      "hindsight_bound": rounded(result.gpu_hours_hindsight_bound),
                      "efficiency": rounded(result.efficiency),
                      "useful_efficiency": rounded(result.useful_efficiency),
                      "hindsight_efficiency": rounded(result.hindsight_efficiency),
                      "by_pool": {pool: _gpu_hours(hours) for pool, hours in sorted(result.gpu_hours_by_pool.items())}},
        "pods": len(result.pods),
        "pending_to_running_s": {**latency_stats(waits(result.pods)),
                                 **{path: latency_stats(waits(pods)) for path, pods in by_path.items()}},
        "pending_to_bound_s": {**latency_stats(capacity_waits(result.pods)),
                               **{path: latency_stats(capacity_waits(pods)) for path, pods in by_path.items()}},
        "pending_to_running_by_workload": {
            row.workload: {**latency_stats(waits(p for p in result.pods if p.workload == row.workload)),
                           "pods": row.pods, "never_ran": row.never_ran,
                           "capacity_wait_p95": rounded(row.capacity_p95_s)}
            for row in workload_rows(result)},
        "phases_s": phase_stats(result.pods),
        "evictions": result.evictions,
        "lost_gpu_hours": rounded(result.lost_gpu_hours),
        "scale_ups": result.scale_ups,
        "scale_ups_by_pool": dict(sorted(result.scale_ups_by_pool.items())),
        "scale_downs": result.scale_downs,
        "stockouts": result.stockouts,
        "backoffs": result.backoffs,
        "never_ran": result.never_ran,
        "sim_events": result.sim_events,
        "notable": [{"t_s": rounded(n.t_s), "kind": n.kind, "message": n.message} for n in notable_events(result)],
        "policy_changes": list(result.policy_changes),
    }
    if result.queue_wait_by_team:
        doc["queue_wait_by_team"] = _sorted_floats(result.queue_wait_by_team)
    if result.teams:
        doc["teams"] = teams_json(result)
    if include_wall:
        doc["wall_s"] = rounded(result.wall_s)
    return doc


def teams_json(result: SimResult) -> dict[str, Any]:
    """Per team of the queueing layer (docs/cli.md, `teams`): waits as `{count, p50, p95, p99, max}` plus `mean`."""
    def waits_of(values: Sequence[float]) -> dict[str, Any]:
        return {**latency_stats(values), "mean": rounded(math.fsum(values) / len(values)) if values else None}

    return {team: {"cluster_queues": list(t.cluster_queues), "workloads": t.workloads, "admissions": t.admissions,
                   "queue_wait_s": waits_of(t.queue_wait_s), "scale_up_wait_s": waits_of(t.scale_up_wait_s),
                   "admitted_gpu_hours": rounded(t.admitted_gpu_hours), "borrowed_admissions": t.borrowed_admissions,
                   "preemptions": t.preemptions, "requeues": t.requeues, "deactivated": t.deactivated,
                   "still_queued": t.still_queued, "never_admitted": t.never_admitted}
            for team, t in sorted(result.teams.items())}


def notable_events(result: SimResult) -> list[Notable]:
    """Notable events by time; ties keep the simulation's order (a stable sort)."""
    return sorted(result.notable, key=lambda n: n.t_s)


# ---------------------------------------------------------------------------------------------------- table rows


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRow:
    workload: str
    pods: int
    p50_s: float | None
    p95_s: float | None
    never_ran: int
    capacity_p50_s: float | None = None
    """Pending→bound (the capacity wait) over the kind's pods that were bound."""
    capacity_p95_s: float | None = None
    """Jobs (over all their pod attempts) and other pods that never ran (`sim.result.never_ran`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamRow:
    team: str
    cluster_queues: str
    workloads: int
    queue_p50_s: float | None
    queue_p95_s: float | None
    queue_mean_s: float | None
    scale_up_p50_s: float | None
    scale_up_p95_s: float | None
    scale_up_mean_s: float | None
    admitted_gpu_h: float
    preemptions: int
    requeues: int
    still_queued: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRow:
    pool: str
    scale_ups: int
    cost_usd: float
    provisioned_gpu_h: float
    allocated_gpu_h: float
    idle_gpu_h: float
    useful_gpu_h: float | None = None
    """GPU-hours while every pod of a job ran (`SimResult.gpu_hours_useful`), when the result has them."""
    bound_gpu_h: float | None = None
    """The pool's hindsight bound (`SimResult.gpu_hours_hindsight_bound`), when the result has one."""


def workload_rows(result: SimResult) -> list[WorkloadRow]:
    """One row per workload kind, sorted by name; percentiles over the pods of that kind that ran."""
    rows = []
    for kind in sorted({p.workload for p in result.pods}):
        pods = [p for p in result.pods if p.workload == kind]
        ran, bound = waits(pods), capacity_waits(pods)
        rows.append(WorkloadRow(workload=kind, pods=len(pods), p50_s=percentile(ran, 50) if ran else None,
                                p95_s=percentile(ran, 95) if ran else None, never_ran=never_ran(pods),
                                capacity_p50_s=percentile(bound, 50) if bound else None,
                                capacity_p95_s=percentile(bound, 95) if bound else None))
    return rows


def team_rows(result: SimResult) -> list[TeamRow]:
    """One row per team of the queueing layer, sorted by name (empty without queues)."""
    def stat(values: Sequence[float], q: float) -> float | None:
        return percentile(values, q) if values else None

    def mean(values: Sequence[float]) -> float | None:
        return math.fsum(values) / len(values) if values else None

    return [TeamRow(team=team, cluster_queues=", ".join(t.cluster_queues), workloads=t.workloads,
                    queue_p50_s=stat(t.queue_wait_s, 50), queue_p95_s=stat(t.queue_wait_s, 95),
                    queue_mean_s=mean(t.queue_wait_s), scale_up_p50_s=stat(t.scale_up_wait_s, 50),
                    scale_up_p95_s=stat(t.scale_up_wait_s, 95), scale_up_mean_s=mean(t.scale_up_wait_s),
                    admitted_gpu_h=t.admitted_gpu_hours, preemptions=t.preemptions, requeues=t.requeues,
                    still_queued=t.still_queued)
            for team, t in sorted(result.teams.items())]


def pool_rows(result: SimResult) -> list[PoolRow]:
    """One row per pool that appears anywhere in the result, sorted by name."""
    names = sorted(set(result.cost_by_pool) | set(result.gpu_hours_by_pool) | set(result.scale_ups_by_pool)
                   | set(result.series.nodes_by_pool))
    rows = []
    for name in names:
        hours = result.gpu_hours_by_pool.get(name, {})
        provisioned, allocated = hours.get("provisioned", 0.0), hours.get("allocated", 0.0)
        rows.append(PoolRow(pool=name, scale_ups=result.scale_ups_by_pool.get(name, 0),
                            cost_usd=result.cost_by_pool.get(name, 0.0), provisioned_gpu_h=provisioned,
                            allocated_gpu_h=allocated, idle_gpu_h=hours.get("idle", provisioned - allocated),
                            useful_gpu_h=hours.get("useful"),
                            bound_gpu_h=hours.get("hindsight_bound")))
    return rows


class Better(StrEnum):
    LOWER = "lower"
    HIGHER = "higher"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonRow:
    label: str
    values: tuple[float | None, ...]
    """One per result, in the order given."""
    better: Better
    format: Callable[[float | None], str]

    def best(self) -> set[int]:
        """Indexes of the best value (every one of them on a tie); none when fewer than two values are known."""
        known = [v for v in self.values if v is not None]
        if len(known) < 2 or min(known) == max(known):
            return set()
        target = min(known) if self.better is Better.LOWER else max(known)
        return {i for i, v in enumerate(self.values) if v == target}


def comparison_rows(results: Sequence[SimResult]) -> list[ComparisonRow]:
    """The rows of a policy comparison. Allocated GPU-hours is better higher: on the same scenario it is the work
    served, and a policy that keeps pods waiting serves less of it."""
    def stat(r: SimResult, q: float) -> float | None:
        ran = waits(r.pods)
        return percentile(ran, q) if ran else None

    def capacity(r: SimResult, q: float) -> float | None:
        bound = capacity_waits(r.pods)
        return percentile(bound, q) if bound else None

    def row(label: str, values: Iterable[float | None], fmt: Callable[[float | None], str],
            better: Better = Better.LOWER) -> ComparisonRow:
        return ComparisonRow(label=label, values=tuple(values), better=better, format=fmt)

    return [
        row("Cost", (r.cost_usd for r in results), format_usd),
        row("Idle GPU-hours", (r.gpu_hours_idle for r in results), format_hours),
        row("Allocated GPU-hours", (r.gpu_hours_allocated for r in results), format_hours, Better.HIGHER),
        row("Useful GPU-hours", (r.gpu_hours_useful for r in results), format_hours,
            Better.HIGHER),
        row("Efficiency (allocated / provisioned)", (r.efficiency for r in results), format_share, Better.HIGHER),
        row("Hindsight bound's efficiency", (r.hindsight_efficiency for r in results), format_share, Better.HIGHER),
        row("p50 capacity wait (pending→bound)", (capacity(r, 50) for r in results), format_duration),
        row("p95 capacity wait (pending→bound)", (capacity(r, 95) for r in results), format_duration),
        row("p50 pending→running", (stat(r, 50) for r in results), format_duration),
        row("p95 pending→running", (stat(r, 95) for r in results), format_duration),
        row("p99 pending→running", (stat(r, 99) for r in results), format_duration),
        row("Evictions", (r.evictions for r in results), format_count),
        row("Lost GPU-hours", (r.lost_gpu_hours for r in results), format_hours),
        row("Scale-ups", (r.scale_ups for r in results), format_count),
        row("Stockouts", (r.stockouts for r in results), format_count),
        row("Never ran", (r.never_ran for r in results), format_count),
    ]


# ------------------------------------------------------------------------------------------------------ formatting


def format_duration(seconds: float | None) -> str:
    """`0.42 s`, `12.3 s`, `4m 05s`, `2h 03m`, `1d 04h`; `—` when unknown."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d {whole % 86400 // 3600:02d}h"


def format_clock(t_s: float) -> str:
    """Simulated time since the start as `hh:mm:ss`, prefixed `d+` from the second day on (`1+02:03:04`)."""
    day, rest = divmod(int(t_s), 86400)
    stamp = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{day}+{stamp}" if day else stamp


def format_usd(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"


def format_hours(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


def format_share(value: float | None) -> str:
    """A fraction as a percentage with one decimal (`0.908` → `90.8%`); `—` when unknown."""
    return "—" if value is None else f"{100 * value:.1f}%"


def format_count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


# -------------------------------------------------------------------------------------------------------- terminal


def print_summary(result: SimResult, console: Console) -> None:
    """One run as a person reads it: the headline, pods per workload kind, pools, the slowest phases of the long
    path (new-node pods) and the notable events. Fits a 100-column terminal."""
    ran, bound = waits(result.pods), capacity_waits(result.pods)
    idle_share = result.gpu_hours_idle / result.gpu_hours_provisioned if result.gpu_hours_provisioned else 0.0
    console.print(Text.assemble((f"{result.scenario}", "bold"), f" · policy {result.policy} · seed {result.seed} · ",
                                format_duration(result.duration_s), " simulated"))
    console.print(Text.assemble(
        "Cost ", (format_usd(result.cost_usd), "bold"),
        " · idle ", (f"{format_hours(result.gpu_hours_idle)} GPU-h", "bold"), f" ({idle_share:.0%} of provisioned)",
        " · p95 pending→running ", (format_duration(percentile(ran, 95) if ran else None), "bold")))
    console.print(Text.assemble(
        "Capacity wait (pending→bound, the autoscaler's share) p50 ",
        (format_duration(percentile(bound, 50) if bound else None), "bold"),
        " · p95 ", (format_duration(percentile(bound, 95) if bound else None), "bold")))
    console.print(Text.assemble(
        "Efficiency ", (format_share(result.efficiency), "bold"), " of provisioned · hindsight bound ",
        (f"{format_hours(result.gpu_hours_hindsight_bound)} GPU-h", "bold"), ": ",
        (format_share(result.hindsight_efficiency), "bold"), " (nodes exactly when needed)"))
    if result.policy_changes:
        console.print(Text(f"preset {result.policy} changed: " + "; ".join(result.policy_changes), style="dim"))
    console.print(Text(f"scale-ups {result.scale_ups} · scale-downs {result.scale_downs} · evictions "
                       f"{result.evictions} · stockouts {result.stockouts} · backoffs {result.backoffs} · "
                       f"never ran {result.never_ran} (jobs and other pods) of {len(result.pods)} pods",
                       style="dim"))
    console.print()

    pods = Table(title="Pods by workload", title_justify="left", expand=False)
    for name in ("workload", "pods", "p95 capacity wait", "p50 pending→running", "p95 pending→running", "never ran"):
        pods.add_column(name, justify="left" if name == "workload" else "right")
    for w in workload_rows(result):
        pods.add_row(w.workload, format_count(w.pods), format_duration(w.capacity_p95_s), format_duration(w.p50_s),
                     format_duration(w.p95_s), Text(format_count(w.never_ran), style="red" if w.never_ran else ""))
    console.print(pods)
    console.print()

    pools = Table(title="Pools (GPU-hours)", title_justify="left")
    for name in ("pool", "scale-ups", "cost", "provisioned", "allocated", "useful", "idle", "bound"):
        pools.add_column(name, justify="left" if name == "pool" else "right")
    for p in pool_rows(result):
        pools.add_row(p.pool, format_count(p.scale_ups), format_usd(p.cost_usd), format_hours(p.provisioned_gpu_h),
                      format_hours(p.allocated_gpu_h), format_hours(p.useful_gpu_h), format_hours(p.idle_gpu_h),
                      format_hours(p.bound_gpu_h))
    console.print(pools)
    console.print()
    _print_teams(result, console)
    _print_phases(result, console)
    _print_notable(result, console)


def _print_teams(result: SimResult, console: Console) -> None:
    rows = team_rows(result)
    if not rows:
        return
    table = Table(title="Teams: queue wait (quota) vs scale-up wait (capacity); admitted GPU-hours",
                  title_justify="left")
    for name in ("team", "queue", "jobs", "queue p50", "queue p95", "scale-up p50", "scale-up p95", "GPU-h",
                 "preempt", "requeue", "queued"):
        table.add_column(name, justify="left" if name in ("team", "queue") else "right")
    for t in rows:
        table.add_row(t.team, t.cluster_queues, format_count(t.workloads), format_duration(t.queue_p50_s),
                      format_duration(t.queue_p95_s), format_duration(t.scale_up_p50_s),
                      format_duration(t.scale_up_p95_s), format_hours(t.admitted_gpu_h), format_count(t.preemptions),
                      format_count(t.requeues), Text(format_count(t.still_queued),
                                                     style="yellow" if t.still_queued else ""))
    console.print(table)
    console.print()


def _print_phases(result: SimResult, console: Console) -> None:
    stats = phase_stats(result.pods)
    means = {name: s["mean"] for name, s in stats.items() if s["mean"]}
    if not means:
        return
    total = math.fsum(v for v in means.values() if v is not None)
    order = list(stats)
    top = sorted(means, key=lambda n: (-(means[n] or 0.0), order.index(n)))[:TOP_PHASES]
    table = Table(title="Slowest phases of new-node pods", title_justify="left")
    for name in ("phase", "mean", "p95", "share of mean wait"):
        table.add_column(name, justify="left" if name in ("phase", "share of mean wait") else "right")
    for name in top:
        share = (means[name] or 0.0) / total if total else 0.0
        table.add_row(name, format_duration(means[name]), format_duration(stats[name]["p95"]),
                      Text("█" * round(share * 20), style="cyan") + Text(f" {share:.0%}"))
    console.print(table)
    console.print()


def _print_notable(result: SimResult, console: Console) -> None:
    events = notable_events(result)
    if not events:
        return
    console.print(Text(f"Notable events ({len(events)})", style="bold"))
    for n in events[:MAX_NOTABLE_SHOWN]:
        console.print(Text.assemble(f"  {format_clock(n.t_s):>11}  ", (f"{n.kind:<12}", "yellow"), f" {n.message}"))
    if len(events) > MAX_NOTABLE_SHOWN:
        console.print(Text(f"  … {len(events) - MAX_NOTABLE_SHOWN} more in the JSON and HTML reports", style="dim"))


def print_comparison(results: Sequence[SimResult], console: Console) -> None:
    """Policies side by side on one scenario, one column per result in the order given; the best value of each row
    is bold green (nothing is marked when all values are equal)."""
    scenarios = sorted({r.scenario for r in results})
    table = Table(title=f"Policies compared on {', '.join(scenarios)}", title_justify="left")
    table.add_column("")
    for r in results:
        table.add_column(r.policy, justify="right")
    for row in comparison_rows(results):
        best = row.best()
        table.add_row(row.label, *(Text(row.format(v), style="bold green" if i in best else "")
                                   for i, v in enumerate(row.values)))
    console.print(table)
