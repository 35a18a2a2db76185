"""Scale-up: which pools to grow, by how many nodes, for which pending pods — or why not.

Steps, each a function below:
1. `select_candidates`: pods the scheduler marked Unschedulable, minus scheduling-gated and expendable ones; gangs are
   gathered into one unit (all pending members, all-or-nothing) and held back until all members exist; nothing
   happens until the oldest candidate is `new_pod_delay_s` old (`new_gpu_pod_delay_s` if a GPU pod waits), to batch.
2. `place_on_existing`: units that fit free capacity on usable nodes, or on upcoming ones (requested, registered but
   not Ready, Ready with GPUs not yet registered — counted as their pool's template), are covered: no new node.
3. `estimate`: for each pool not backed off and under its limits, pack the remaining units first-fit-decreasing (by
   dominant share, GPUs included) onto new template nodes appended to the what-if table, so gangs may combine free
   capacity with new nodes. Fractional GPUs are packed per GPU, and with `Policy.gpu_placement` single GPU pods go to
   the template node where fragmentation grows least instead of the first that fits (docs/gpu-sharing.md).
4. the expander chain picks one option; its pods are removed and the loop repeats with the other pools, so mixed
   demand (CPU pods and GPU pods) is served in one decision.
5. whatever is left is unplaceable, with each pool's reason.
Identical pods form equivalence classes: once one pod of a class fails to fit somewhere, the rest of the class is not
tried again there (capacity only shrinks during a decision).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from gpuscale.engine.expanders import Option, choose, waste
from gpuscale.engine.fit import POOL_FITS, pool_verdict
from gpuscale.engine.limits import Headroom, Totals, headroom
from gpuscale.engine.plan import PodVerdict, ScaleUp
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.table import NodeTable
from gpuscale.model.cluster import Cluster, PodIndex
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, PODS, Resources, is_gpu_resource

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Unit:
    """A single pod, or all pending pods of one gang, to be placed all-or-nothing."""

    pods: tuple[Pod, ...]
    group: str | None = None

    @property
    def key(self) -> str:
        return self.group or self.pods[0].key


@dataclass(slots=True)
class Candidates:
    units: list[Unit] = field(default_factory=list)
    waiting: list[PodVerdict] = field(default_factory=list)


def _requests_gpu(pod: Pod) -> bool:
    return any(is_gpu_resource(n) or n == GPU_MILLI for n in pod.requests.names())


def _verdict(pod: Pod, code: ReasonCode, message: str, **numbers: float) -> PodVerdict:
    return PodVerdict(pod=pod.key, reasons=(Reason(code, message, numbers),))


def select_candidates(cluster: Cluster, policy: Policy, now: float, index: PodIndex | None = None) -> Candidates:
    """Step 1: the pods scale-up works for, grouped into units, and the ones it waits on (with why). `index` is
    `cluster.index()` if the caller has it already."""
    index = index or cluster.index()
    result = Candidates()
    wanted: list[Pod] = []
    for pod in sorted(index.pending, key=lambda p: p.key):
        if pod.scheduling_gated:
            result.waiting.append(_verdict(pod, ReasonCode.SCHEDULING_GATED, "pod has scheduling gates"))
        elif pod.priority < policy.expendable_priority_cutoff:
            result.waiting.append(_verdict(
                pod, ReasonCode.EXPENDABLE,
                f"priority {pod.priority} is below the expendable cutoff {policy.expendable_priority_cutoff}"))
        elif pod.unschedulable or pod.group is not None:
            wanted.append(pod)
    gang_pods: dict[str, list[Pod]] = {}
    singles: list[Pod] = []
    for pod in wanted:
        if pod.group is not None:
            gang_pods.setdefault(pod.group.key, []).append(pod)
        elif pod.unschedulable:
            singles.append(pod)
    units = [Unit((p,)) for p in singles]
    declared = {g.key: g.min_member for g in cluster.pod_groups}
    members = index.group_members
    for key, pods in sorted(gang_pods.items()):
        if not any(p.unschedulable for p in pods):
            continue  # the scheduler has not tried this gang yet
        expected = declared.get(key) or max((p.group.min_member or 0) for p in pods if p.group)
        if expected and members.get(key, 0) < expected:
            for pod in pods:
                result.waiting.append(_verdict(
                    pod, ReasonCode.GANG_INCOMPLETE,
                    f"gang {key}: {members.get(key, 0)} of {expected} pods exist; waiting for the rest",
                    existing=members.get(key, 0), expected=expected))
            continue
        units.append(Unit(tuple(pods), key))
    oldest = min((p.created_s for u in units for p in u.pods if p.created_s is not None), default=None)
    if units and oldest is not None:
        gpu = any(_requests_gpu(p) for u in units for p in u.pods)
        delay = policy.new_gpu_pod_delay_s if gpu else policy.new_pod_delay_s
        if now - oldest < delay:
            for unit in units:
                for pod in unit.pods:
                    result.waiting.append(_verdict(
                        pod, ReasonCode.WAITING_BATCH,
                        f"batching: oldest pending pod is {now - oldest:.1f}s old, waiting until {delay:g}s",
                        age_s=now - oldest, delay_s=delay))
            return result
    result.units = units
    return result


def order_units(units: Sequence[Unit], normalizer: Resources) -> list[Unit]:
    """First-fit-decreasing order: priority, then dominant share (GPUs included; a gang's shares add up), then key."""
    norm = dict(normalizer.items)

    def share(pod: Pod) -> float:
        return max((a / norm[n] for n, a in pod.requests.items if norm.get(n)), default=0.0)

    return sorted(units, key=lambda u: (-max(p.priority for p in u.pods), -sum(share(p) for p in u.pods), u.key))


def _class_key(pod: Pod, with_labels: bool) -> tuple[object, ...]:
    key: tuple[object, ...] = (pod.requests, pod.constraints)
    return (*key, pod.namespace, tuple(sorted(pod.labels.items()))) if with_labels else key


@dataclass(slots=True)
class Placement:
    """Units placed on a table: which rows each unit's pods went to."""

    table: NodeTable
    placed: list[Unit] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    leftover: list[Unit] = field(default_factory=list)


def place_units(table: NodeTable, units: Sequence[Unit], single_rows: BoolArray | None = None,
                aware: bool = False) -> Placement:
    """Place units first-fit on `table` (mutated for singles; gangs go through a fork committed only when whole).

    `single_rows` restricts single pods to those rows (new template rows during estimation); gangs may use any row.
    `aware`: single GPU pods go where fragmentation grows least (the table's placement policy) instead of first fit.
    Estimation on new template rows uses it — how a pool's nodes pack the pods decides how many are needed — while
    covering pods with existing capacity does not: the scheduler decides where they go, and scoring every existing
    node for every pending pod would double a decision's cost for no change in what is ordered.
    """
    result = Placement(table)
    with_labels = table.topology is not None
    exhausted: set[tuple[object, ...]] = set()
    for unit in units:
        if unit.group is None:
            pod = unit.pods[0]
            key = _class_key(pod, with_labels)
            if key in exhausted:
                result.leftover.append(unit)
                continue
            mask = result.table.feasible(pod)
            if single_rows is not None:
                mask &= single_rows
            if not mask.any():
                exhausted.add(key)
                result.leftover.append(unit)
                continue
            row, gpus = result.table.choose(pod, mask, aware=aware)
            result.table.place(row, pod, gpus)
            result.rows[pod.key] = row
            result.placed.append(unit)
            continue
        trial = result.table.fork()
        rows: dict[str, int] = {}
        for pod in unit.pods:
            found = trial.first_fit(pod)
            if found is None:
                break
            trial.place(found, pod)
            rows[pod.key] = found
        if len(rows) == len(unit.pods):
            result.table = trial
            result.rows.update(rows)
            result.placed.append(unit)
        else:
            result.leftover.append(unit)
    return result


Verdicts = dict[tuple[str, Resources, SchedulingConstraints], str]
"""`pool_verdict` per (pool name, pod requests, pod constraints): one decision's, or the decision memo's, kept for
as long as the pools are the same."""


def verdict_of(pod: Pod, pool: NodePool, verdicts: Verdicts) -> str:
    """`pool_verdict(pod, pool)`, once per pool and pod shape in a decision: pods that wait loop after loop, and the
    members of a gang, share few shapes."""
    key = (pool.name, pod.requests, pod.constraints)
    verdict = verdicts.get(key)
    if verdict is None:
        verdict = verdicts[key] = pool_verdict(pod, pool)
    return verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    option: Option
    table: NodeTable
    placed: tuple[Unit, ...]


def estimate(pool: NodePool, units: Sequence[Unit], table: NodeTable, room: Headroom,
             name_prefix: str, verdicts: Verdicts | None = None) -> Estimate | None:
    """Step 3: how many new nodes of `pool` host which of `units` (bounded by the limits' headroom)."""
    if room.nodes <= 0:
        return None
    seen: Verdicts = {} if verdicts is None else verdicts
    hostable = [u for u in units if all(verdict_of(p, pool, seen) == POOL_FITS for p in u.pods)]
    if not hostable:
        return None
    upper = min(room.nodes, sum(len(u.pods) for u in hostable))
    templates = [pool.template(f"{name_prefix}{pool.name}-{k}") for k in range(upper)]
    start = len(table)
    extended = table.extend(templates, [pool.allocatable] * upper)
    new_rows = np.zeros(len(extended), dtype=bool)
    new_rows[start:] = True
    placement = place_units(extended, hostable, single_rows=new_rows, aware=True)
    if not placement.placed:
        return None
    used = {row for row in placement.rows.values() if row >= start}
    if not used:
        return None
    pods = tuple(p for u in placement.placed for p in u.pods)
    capped = room.binding if placement.leftover and len(used) >= room.nodes else None
    return Estimate(option=Option(pool=pool, nodes=len(used), pods=pods, capped_by=capped),
                    table=placement.table, placed=tuple(placement.placed))


@dataclass(frozen=True, slots=True, kw_only=True)
class Spill:
    scale_ups: list[ScaleUp]
    leftover: list[Unit]
    table: NodeTable
    totals: Totals


def spill_gangs(units: Sequence[Unit], table: NodeTable, pools: Sequence[NodePool], totals: Totals,
                policy: Policy, verdicts: Verdicts | None = None) -> Spill:
    """Step 4b: a gang no single pool can host (each pool's limit leaves too few nodes, or some of its nodes are
    partly taken) may span pools — every pool that can host all of its pods, up to each pool's headroom, in pool
    order. Cluster Autoscaler, which does not know gangs, spreads such pods over node groups anyway; waiting instead
    for one pool to drain kept 64-GPU gangs pending for 40 minutes in the twin (docs/twin.md). The gang stays
    all-or-nothing: either every pod has a row (existing, upcoming or new) or no node is ordered for it. Limits hold:
    each pool's room is computed after reserving the whole room of the pools before it."""
    gangs = [u for u in units if u.group]
    singles = [u for u in units if not u.group]
    extended, reserved = table, totals
    new_pool: list[tuple[int, NodePool]] = []
    seen: Verdicts = {} if verdicts is None else verdicts
    for pool in pools:
        if not any(all(verdict_of(p, pool, seen) == POOL_FITS for p in u.pods) for u in gangs):
            continue
        room = headroom(pool, reserved, policy.limits, policy.max_nodes_per_scale_up)
        count = min(room.nodes, max(len(u.pods) for u in gangs))
        if count <= 0:
            continue
        start = len(extended)
        extended = extended.extend([pool.template(f"span-{pool.name}-{k}") for k in range(count)],
                                   [pool.allocatable] * count)
        new_pool += [(start + k, pool) for k in range(count)]
        reserved = reserved.add(pool, count)
    if len({pool.name for _, pool in new_pool}) < 2:
        return Spill(scale_ups=[], leftover=list(units), table=table, totals=totals)
    placement = place_units(extended, gangs, single_rows=np.zeros(len(extended), dtype=bool))
    used_rows = set(placement.rows.values())
    scale_ups: list[ScaleUp] = []
    for pool in pools:
        rows = {row for row, p in new_pool if p is pool and row in used_rows}
        if not rows:
            continue
        pods = tuple(sorted(key for key, row in placement.rows.items() if row in rows))
        scale_ups.append(ScaleUp(pool=pool.name, nodes=len(rows), pods=pods, reasons=(Reason(
            ReasonCode.SCALE_UP, f"{len(rows)} node(s) of {pool.name} for {len(pods)} pod(s) of a gang no single "
                                 f"pool can host: the gang spans pools", {"nodes": len(rows), "pods": len(pods)}),)))
        totals = totals.add(pool, len(rows))
    if not scale_ups:
        return Spill(scale_ups=[], leftover=list(units), table=table, totals=totals)
    for row, _ in new_pool:
        if row not in used_rows:
            placement.table.disable(row)  # reserved for the what-if, not ordered
    return Spill(scale_ups=scale_ups, leftover=singles + placement.leftover, table=placement.table, totals=totals)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUpResult:
    scale_ups: tuple[ScaleUp, ...]
    covered: tuple[PodVerdict, ...]
    waiting: tuple[PodVerdict, ...]
    unplaceable: tuple[PodVerdict, ...]
    table: NodeTable
    """The what-if table with covered pods placed and chosen new nodes appended (their pods placed)."""
    totals: Totals


def plan_scale_up(*, cluster: Cluster, table: NodeTable, upcoming_rows: BoolArray, pools: Sequence[NodePool],
                  totals: Totals, state: EngineState, policy: Policy, now: float,
                  pods: PodIndex | None = None, verdicts: Verdicts | None = None) -> ScaleUpResult:
    """`pods`: `cluster.index()`, if the caller has it; `verdicts`: pool verdicts kept by the caller for these very
    pools (a memo); by default, one decision's."""
    candidates = select_candidates(cluster, policy, now, pods)
    verdicts = {} if verdicts is None else verdicts
    normalizer = Resources()
    for pool in pools:
        normalizer = normalizer.max(pool.allocatable)
    # Few shapes, many nodes (and many equal copies of a shape): the elementwise max over distinct values.
    allocatables = list(map(attrgetter("allocatable"), table.nodes))
    for allocatable in set(dict(zip(map(id, allocatables), allocatables, strict=True)).values()):
        normalizer = normalizer.max(allocatable)
    units = order_units(candidates.units, normalizer - Resources.of({PODS: normalizer.get(PODS)}))
    existing = place_units(table, units)
    covered = [
        _verdict(p, ReasonCode.FITS_UPCOMING if upcoming_rows[existing.rows[p.key]] else ReasonCode.FITS_EXISTING,
                 "fits on upcoming capacity (a node still starting)" if upcoming_rows[existing.rows[p.key]]
                 else "fits on existing free capacity; the scheduler will bind it")
        for u in existing.placed for p in u.pods
    ]
    table = existing.table
    remaining = list(existing.leftover)
    scale_ups: list[ScaleUp] = []
    blocked_pools: dict[str, Reason] = {}
    for pool in pools:
        backoff = state.in_backoff(pool.name, now)
        if backoff is not None:
            blocked_pools[pool.name] = Reason(
                ReasonCode.POOL_BACKOFF,
                f"{pool.name}: backed off for {backoff.until_s - now:.0f}s after {backoff.kind}"
                + (f" ({backoff.message})" if backoff.message else ""),
                {"until_s": backoff.until_s, "failures": backoff.failures})
    used_pools: set[str] = set()
    round_no = 0
    while remaining:
        estimates = []
        for pool in pools:
            if pool.name in blocked_pools or pool.name in used_pools:
                continue
            room = headroom(pool, totals, policy.limits, policy.max_nodes_per_scale_up)
            found = estimate(pool, remaining, table, room, f"new{round_no}-", verdicts)
            if found is not None:
                estimates.append(found)
        if not estimates:
            break
        best_option = choose([e.option for e in estimates], policy, now)
        best = next(e for e in estimates if e.option is best_option)
        reasons = [Reason(ReasonCode.SCALE_UP,
                          f"{best_option.nodes} node(s) of {best_option.pool.name} for {len(best_option.pods)} pod(s)",
                          {"nodes": best_option.nodes, "pods": len(best_option.pods),
                           "waste": waste(best_option, policy.least_waste_counts_gpus),
                           "usd_per_hour": best_option.nodes * best_option.pool.usd_per_hour})]
        if len(estimates) > 1:
            others = ", ".join(sorted(e.option.pool.name for e in estimates if e is not best))
            reasons.append(Reason(ReasonCode.EXPANDER, f"expanders {'/'.join(policy.expander_chain())} chose "
                                                       f"{best_option.pool.name} over {others}"))
        if best_option.capped_by:
            reasons.append(Reason(ReasonCode.LIMIT_REACHED, f"capped by {best_option.capped_by}"))
        scale_ups.append(ScaleUp(pool=best_option.pool.name, nodes=best_option.nodes,
                                 pods=tuple(sorted(p.key for p in best_option.pods)), reasons=tuple(reasons)))
        totals = totals.add(best_option.pool, best_option.nodes)
        placed_keys = {u.key for u in best.placed}
        remaining = [u for u in remaining if u.key not in placed_keys]
        table = best.table
        used_pools.add(best_option.pool.name)
        round_no += 1
    if any(u.group for u in remaining):
        spill = spill_gangs(remaining, table, [p for p in pools if p.name not in blocked_pools], totals, policy,
                            verdicts)
        scale_ups += spill.scale_ups
        remaining, table, totals = spill.leftover, spill.table, spill.totals
    why: dict[tuple[object, ...], tuple[ReasonCode, str]] = {}
    unplaceable = [v for u in remaining
                   for v in _unplaceable(u, pools, blocked_pools, totals, policy, verdicts, why)]
    return ScaleUpResult(scale_ups=tuple(scale_ups), covered=tuple(covered), waiting=tuple(candidates.waiting),
                         unplaceable=tuple(unplaceable), table=table, totals=totals)


def _unplaceable(unit: Unit, pools: Sequence[NodePool], blocked: Mapping[str, Reason], totals: Totals,
                 policy: Policy, verdicts: Verdicts, why: dict[tuple[object, ...], tuple[ReasonCode, str]],
                 ) -> list[PodVerdict]:
    """Why no pool takes this unit: backoff, a limit, the gang as a whole, or no pool's node can host it. `why`
    keeps the answer per unit shape (gang, pod requests and constraints) for one decision: units of one shape get
    the same one, and many pods that wait loop after loop share a few shapes."""
    shape = (unit.group, len(unit.pods), *((p.requests, p.constraints) for p in unit.pods))
    known = why.get(shape)
    if known is None:
        known = why[shape] = _why_unplaceable(unit, pools, blocked, totals, policy, verdicts)
    code, message = known
    return [PodVerdict(pod=p.key, reasons=(Reason(code, message),)) for p in unit.pods]


def _why_unplaceable(unit: Unit, pools: Sequence[NodePool], blocked: Mapping[str, Reason], totals: Totals,
                     policy: Policy, verdicts: Verdicts) -> tuple[ReasonCode, str]:
    parts: list[str] = []
    code = ReasonCode.NO_POOL_FITS
    for pool in pools:
        failed = {verdict_of(p, pool, verdicts) for p in unit.pods} - {POOL_FITS}
        if failed:
            parts.append(f"{pool.name}: {'; '.join(sorted(failed))}")
            continue
        if pool.name in blocked:
            parts.append(blocked[pool.name].message)
            code = ReasonCode.POOL_BACKOFF
            continue
        room = headroom(pool, totals, policy.limits, policy.max_nodes_per_scale_up)
        if room.nodes <= 0:
            parts.append(f"{pool.name}: limit {room.binding} reached")
            if code is not ReasonCode.POOL_BACKOFF:
                code = ReasonCode.LIMIT_REACHED
        else:
            parts.append(f"{pool.name}: the whole gang does not fit within limit {room.binding}"
                         if unit.group else f"{pool.name}: not enough room within limit {room.binding}")
            if code is ReasonCode.NO_POOL_FITS:
                code = ReasonCode.GANG_DOES_NOT_FIT if unit.group else ReasonCode.LIMIT_REACHED
    if not pools:
        parts.append("no pools configured")
    prefix = f"gang {unit.group} ({len(unit.pods)} pending pods) not scaled up: " if unit.group else \
        "no scale-up: "
    return code, prefix + " | ".join(parts)
