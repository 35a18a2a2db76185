"""One decision: `decide(snapshot, pools, state, policy, now) -> Plan`. Pure: no I/O, clock or randomness.

Order, as in Cluster Autoscaler's RunOnce:
1. upcoming nodes that missed their provisioning or GPU-initialisation deadline time out (their pool backs off);
   a node that runs workloads never does: it is degraded (engine.health), counted with its real capacity;
2. the what-if table is built: usable nodes with their real free capacity, upcoming nodes as their pool's template;
3. scale-up for pending pods, after dropping pods that existing or upcoming capacity takes; then warm buffers;
4. scale-down, on the cluster as it will be once those pods land (so a node they need is not removed).
Each stage also says when its result next matters with nothing changed but the clock (a deadline, a delay, a backoff,
a recheck, a protection's end); the plan carries the first of those (`Plan.next_at_s`).
The result does not depend on the order of nodes, pods or pools in the input: everything is sorted by name first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuscale.engine.health import degraded_verdicts, workload_count
from gpuscale.engine.limits import Totals, headroom
from gpuscale.engine.nodes import NodePhase, awaiting_slices, still_lacks
from gpuscale.engine.options import provision_time_s, startup_time_s
from gpuscale.engine.plan import NodeVerdict, Plan, PodVerdict, Removal, ScaleUp, Snapshot, TimedOut, earliest
from gpuscale.engine.policy import Buffer, Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.repair import plan_repairs
from gpuscale.engine.scaledown import plan_removals
from gpuscale.engine.scaleup import plan_scale_up
from gpuscale.engine.state import EngineState, FailureKind, charge_lost_work, record_failure
from gpuscale.engine.whatif.facts import NodeFacts
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.store import ReferenceStore, Store
from gpuscale.engine.whatif.world import Excluded, World, build_world
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import PODS, Resources, is_gpu_resource


@dataclass(frozen=True, slots=True, kw_only=True)
class _Timeouts:
    timed_out: tuple[TimedOut, ...]
    state: EngineState
    expired_nodes: frozenset[str]
    expired_requests: frozenset[str]
    degraded: tuple[NodeVerdict, ...] = ()
    """Nodes still in a starting phase that run workloads: degraded, never timed out."""
    held: frozenset[str] = frozenset()
    """Of those, the Ready ones: their row counts their real allocatable, not the template's."""
    setting_up: frozenset[str] = frozenset()
    """Usable nodes cordoned while young and without workloads (an operator's set-up cordon, CA #7956): their row
    ignores the cordon and counts as upcoming (`_setting_up`)."""
    next_at_s: float | None = None
    """The first deadline still ahead: a request or node that would time out, or a set-up cordon that would start to
    count (None: none)."""


def find_timeouts(snapshot: Snapshot, pools: Mapping[str, NodePool], state: EngineState, policy: Policy,
                  now: float, facts: Mapping[str, NodeFacts],
                  starting: Sequence[NodeFacts], unusual: Sequence[NodeFacts],
                  pods_by_node: Mapping[str, Sequence[Pod]] | None = None) -> _Timeouts:
    """Upcoming nodes past their deadline: requested/registered but not Ready within `max_node_provision_time_s`
    (per-pool override), or Ready without their GPUs within `max_gpu_init_time_s`. `starting`: the facts in `STARTING`
    phases, in node order (`Store.starting`). A node in a
    starting phase that runs workloads (`pods_by_node`, else the snapshot's) is never timed out: it has been usable,
    and a time-out deletes with no drain (engine.health)."""
    timed_out: list[TimedOut] = []
    failed: dict[str, FailureKind] = {}
    deadlines: list[float] = []
    _request_timeouts(snapshot, pools, policy, now, timed_out, failed, deadlines)
    by_node, busy, starting = _split_busy(snapshot, starting, pods_by_node)
    for fact in starting:
        _node_timeout(fact, policy, now, timed_out, failed, deadlines)
    whole = sorted(name for name in failed if (pool := pools.get(name)) is not None and pool.zero_or_max)
    if whole:
        timed_out += _roll_back(whole, snapshot, starting, timed_out)
    for pool_name, kind in sorted(failed.items()):
        state = record_failure(state, pool_name, kind, now, policy)
    setting_up = _setting_up(unusual, by_node if starting else None, snapshot, policy, now)
    deadlines += [f.node.created_s + provision_time_s(f.pool, policy) + policy.max_gpu_init_time_s
                  for name in setting_up if (f := facts[name]).node.created_s is not None]
    return _Timeouts(
        timed_out=tuple(timed_out), state=state,
        expired_nodes=frozenset(t.node for t in timed_out if t.node),
        expired_requests=frozenset(t.request_id for t in timed_out if t.request_id),
        degraded=_busy_degraded(busy, by_node),
        held=frozenset(f.node.name for f in busy if f.phase is NodePhase.READY and f.pool is not None),
        setting_up=setting_up, next_at_s=min((t for t in deadlines if now <= t), default=None),
    )


def _split_busy(snapshot: Snapshot, starting: Sequence[NodeFacts],
                pods_by_node: Mapping[str, Sequence[Pod]] | None
                ) -> tuple[Mapping[str, Sequence[Pod]] | None, list[NodeFacts], Sequence[NodeFacts]]:
    """The starting nodes that run workloads (never timed out: degraded) apart from the rest. Returns the pods by
    node looked at (`pods_by_node`, else the snapshot's index; None when nothing is starting, so the index is not
    built), the busy facts, and the remaining starting facts in their order (`starting` itself when none is busy)."""
    if not starting:
        return None, [], starting
    by_node = pods_by_node if pods_by_node is not None else snapshot.cluster.index().by_node
    busy = [f for f in starting if workload_count(by_node.get(f.node.name))]
    if busy:
        skip = {f.node.name for f in busy}
        starting = [f for f in starting if f.node.name not in skip]
    return by_node, busy, starting


def _busy_degraded(busy: Sequence[NodeFacts], by_node: Mapping[str, Sequence[Pod]] | None) -> tuple[NodeVerdict, ...]:
    """The degraded verdicts of the busy starting nodes (none when there are none)."""
    if not busy or by_node is None:
        return ()
    return degraded_verdicts(((f.node, f.pool, f.phase) for f in busy), by_node)


def _request_timeouts(snapshot: Snapshot, pools: Mapping[str, NodePool], policy: Policy, now: float,
                      timed_out: list[TimedOut], failed: dict[str, FailureKind], deadlines: list[float]) -> None:
    """Step 1 of `find_timeouts`: every scale-up request (by id) not registered within its pool's provisioning
    time times out and marks its pool failed; each request's deadline joins `deadlines`. Appends in place."""
    for request in sorted(snapshot.upcoming, key=lambda u: u.request_id):
        limit = provision_time_s(pools.get(request.pool), policy)
        deadlines.append(request.requested_s + limit)
        if now - request.requested_s > limit:
            timed_out.append(TimedOut(pool=request.pool, node=None, request_id=request.request_id, reasons=(
                Reason(ReasonCode.PROVISION_TIMEOUT, f"requested {now - request.requested_s:.0f}s ago, not "
                                                     f"registered within {limit:g}s"),)))
            failed.setdefault(request.pool, FailureKind.PROVISION_TIMEOUT)


def _node_timeout(fact: NodeFacts, policy: Policy, now: float, timed_out: list[TimedOut],
                  failed: dict[str, FailureKind], deadlines: list[float]) -> None:
    """Step 2 of `find_timeouts`, for one starting node without workloads: a registered node not Ready within its
    pool's start-up time, or a Ready one whose GPUs (or other start-up) are still missing after
    `max_gpu_init_time_s`, times out and marks its pool failed; its deadline joins `deadlines`. Appends in place."""
    node, pool, current = fact.node, fact.pool, fact.phase
    if pool is None:
        return
    if current is NodePhase.REGISTERED and node.created_s is not None:
        limit = startup_time_s(pool, policy)
        deadlines.append(node.created_s + limit)
        if now - node.created_s > limit:
            timed_out.append(TimedOut(pool=pool.name, node=node.name, request_id=None, reasons=(
                Reason(ReasonCode.PROVISION_TIMEOUT, f"not Ready {now - node.created_s:.0f}s after creation "
                                                     f"(limit {limit:g}s); {_lacks(node, pool)}"),)))
            failed.setdefault(pool.name, FailureKind.PROVISION_TIMEOUT)
    elif current is NodePhase.READY:
        since = node.ready_since_s if node.ready_since_s is not None else node.created_s
        if since is None:
            return
        deadlines.append(since + policy.max_gpu_init_time_s)
        if now - since > policy.max_gpu_init_time_s:
            # no GPU registered or no DRA slices published (the GPU driver's part), else a start-up taint is left
            gpus = fact.gpus is False or not fact.slices
            code = ReasonCode.GPU_INIT_TIMEOUT if gpus else ReasonCode.PROVISION_TIMEOUT
            what = ("GPUs not registered" if fact.gpus is False else "ResourceSlices not published" if gpus
                    else "not fully started")
            timed_out.append(TimedOut(pool=pool.name, node=node.name, request_id=None, reasons=(
                Reason(code, f"Ready for {now - since:.0f}s but {what} (limit "
                             f"{policy.max_gpu_init_time_s:g}s); {_lacks(node, pool, fact.slices)}"),)))
            failed.setdefault(pool.name, FailureKind.GPU_INIT_TIMEOUT if gpus else FailureKind.PROVISION_TIMEOUT)


def _setting_up(unusual: Sequence[NodeFacts], by_node: Mapping[str, Sequence[Pod]] | None, snapshot: Snapshot,
                policy: Policy, now: float) -> frozenset[str]:
    """Usable nodes that are cordoned, run no workload and are younger than their pool's provisioning deadline plus
    the GPU-initialisation one: operators cordon a node while they set it up (the GPU and network operators), and
    counting that cordon would order another node. An older cordoned node, or one with workloads, is cordoned for
    real (maintenance, a drain). `unusual`: the usable nodes that are cordoned or degraded (`Store.unusual`)."""
    cordoned = [f for f in unusual if f.node.unschedulable and f.phase is NodePhase.USABLE
                and f.pool is not None and f.node.created_s is not None]
    if not cordoned:
        return frozenset()
    pods = by_node if by_node is not None else snapshot.cluster.index().by_node
    return frozenset(f.node.name for f in cordoned if f.pool is not None and f.node.created_s is not None
                     and now - f.node.created_s <= provision_time_s(f.pool, policy) + policy.max_gpu_init_time_s
                     and not workload_count(pods.get(f.node.name)))


def _lacks(node: Node, pool: NodePool, slices: bool = True) -> str:
    return "still lacks: " + ", ".join(still_lacks(node, pool, slices))


def _roll_back(pools: Sequence[str], snapshot: Snapshot, starting: Sequence[NodeFacts],
               timed_out: Sequence[TimedOut]) -> list[TimedOut]:
    """A zero-or-max pool whose node timed out is rolled back whole: its other requests and nodes still starting
    time out with it (Cluster Autoscaler deletes a failed atomic scale-up's every node). Nodes already usable stay:
    they may run pods, and scale-down removes the pool only as a whole."""
    done = {t.node or t.request_id for t in timed_out}
    out: list[TimedOut] = []
    for name in pools:
        reason = Reason(ReasonCode.PROVISION_TIMEOUT,
                        f"rolled back with the rest of zero-or-max pool {name}, one of whose nodes timed out")
        out += [TimedOut(pool=name, node=None, request_id=r.request_id, reasons=(reason,))
                for r in sorted(snapshot.upcoming, key=lambda u: u.request_id)
                if r.pool == name and r.request_id not in done]
        out += [TimedOut(pool=name, node=f.node.name, request_id=None, reasons=(reason,))
                for f in starting if f.pool is not None and f.pool.name == name and f.node.name not in done]
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class _Warm:
    """A buffered pool as this decision leaves it: its rows (existing, upcoming and just ordered), how many hold no
    workload, its free GPUs, and the free GPUs its buffer asks for given the GPUs in use."""

    rows: tuple[int, ...]
    idle: int
    free_gpus: int
    in_use: int
    target_gpus: int


def _warm(buffer: Buffer, pool: NodePool, table: WhatIf, world: World, busy: set[int]) -> _Warm:
    known = len(world.row_pool)
    rows = [i for i, name in enumerate(world.row_pool) if name == buffer.pool and table.enabled[i]]
    rows += [i for i in range(known, len(table)) if table.nodes[i].pool == buffer.pool and table.enabled[i]]
    gpu_columns = [n for n in table.columns if is_gpu_resource(n)]
    free = sum(max(table.free_of(i, n), 0) for i in rows for n in gpu_columns)
    ordered = sum(a for n, a in pool.allocatable.items if n in gpu_columns)
    capacity = sum(int(world.gpu_capacity[i]) if i < known else ordered for i in rows)
    in_use = max(capacity - free, 0)
    return _Warm(rows=tuple(rows), idle=sum(1 for i in rows if i not in busy), free_gpus=free, in_use=in_use,
                 target_gpus=buffer.free_gpus_target(in_use))


def buffer_scale_ups(table: WhatIf, world: World, busy: set[int], pools: Mapping[str, NodePool],
                     totals: Totals, policy: Policy) -> tuple[list[ScaleUp], Totals]:
    """Warm capacity: grow a pool until it has `idle_nodes` nodes without workload pods and its free-GPU target
    (`free_gpus`, or `free_gpus_ratio` of the GPUs in use) free, counting nodes still starting and nodes ordered in
    this decision; never past the pool's max_size or a limit."""
    result: list[ScaleUp] = []
    for buffer in sorted(policy.buffers, key=lambda b: b.pool):
        pool = pools.get(buffer.pool)
        if pool is None:
            continue
        warm = _warm(buffer, pool, table, world, busy)
        want = max(buffer.idle_nodes - warm.idle, 0)
        per_node = pool.allocatable.gpu_count()
        if warm.target_gpus > warm.free_gpus and per_node:
            want = max(want, -(-(warm.target_gpus - warm.free_gpus) // per_node))
        if want <= 0:
            continue
        room = headroom(pool, totals, policy.limits, policy.max_nodes_per_scale_up)
        count = room.nodes if pool.zero_or_max else min(want, room.nodes)  # zero-or-max: the whole step, or none
        if count <= 0:
            continue
        reasons = [Reason(ReasonCode.BUFFER, f"warm capacity for {pool.name}: {warm.idle} idle node(s), "
                                             f"{warm.free_gpus} free GPU(s), {warm.in_use} in use; target "
                                             f"{buffer.idle_nodes} idle, {warm.target_gpus} free GPUs",
                          {"idle_nodes": warm.idle, "free_gpus": warm.free_gpus, "gpus_in_use": warm.in_use,
                           "target_free_gpus": warm.target_gpus})]
        if count < want:
            reasons.append(Reason(ReasonCode.LIMIT_REACHED, f"capped by {room.binding}"))
        elif count > want:
            reasons.append(Reason(ReasonCode.SCALE_UP, f"{pool.name} scales zero-or-max: {count} node(s) to its "
                                                       f"max size {pool.max_size}"))
        result.append(ScaleUp(pool=pool.name, nodes=count, pods=(), reasons=tuple(reasons)))
        totals = totals.add(pool, count)
    return result, totals


def _merge(scale_ups: Sequence[ScaleUp]) -> tuple[ScaleUp, ...]:
    merged: dict[tuple[str, str | None], ScaleUp] = {}
    for item in scale_ups:
        prior = merged.get((item.pool, item.zone))
        merged[item.pool, item.zone] = item if prior is None else ScaleUp(
            pool=item.pool, zone=item.zone, nodes=prior.nodes + item.nodes,
            pods=tuple(sorted({*prior.pods, *item.pods})), reasons=prior.reasons + item.reasons)
    return tuple(merged.values())


def _busy_rows(world: World, table: WhatIf, pods_by_node: Mapping[str, Sequence[Pod]]) -> set[int]:
    """Rows that hold workload after this decision: a non-DaemonSet pod runs there, or a pending pod or a new node's
    pod was placed there (its free pod slots dropped)."""
    known = len(world.rows)
    busy = set(np.flatnonzero(table.free_pods[:known] < world.free_pods_before).tolist())
    busy.update(i for i in range(known, len(table)) if table.free_pods[i] < table.nodes[i].allocatable.get(PODS))
    index = {n.name: i for i, n in enumerate(world.rows)}
    for name, pods in pods_by_node.items():
        i = index.get(name)
        if pods and i is not None and i not in busy and any(not p.of_daemonset() for p in pods):
            busy.add(i)
    return busy


def decide(snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy, now: float,
           store: Store | None = None) -> Plan:
    """The whole decision for one loop. Deterministic; independent of input order. `store` (kept by the caller from
    one decision to the next, `IncrementalStore`) only saves work: the plan is the same with the reference store,
    the default."""
    given = state
    store = store if store is not None else ReferenceStore()
    arranged = store.arrange(snapshot.cluster)
    cluster, pods = arranged.cluster, arranged.pods
    by_name = {p.name: p for p in sorted(pools, key=lambda p: p.name)}
    ordered_pools = list(by_name.values())
    awaiting = awaiting_slices(cluster.nodes, snapshot.node_pools, by_name, cluster.dra)
    facts = store.facts(cluster.nodes, snapshot.node_pools, by_name, arranged, awaiting)
    unusual = store.unusual(facts, cluster.nodes)
    timeouts = find_timeouts(replace(snapshot, cluster=cluster), by_name, state, policy, now, facts,
                             store.starting(facts, cluster.nodes), unusual, pods.by_node)
    state = timeouts.state
    world = build_world(store, arranged, snapshot.upcoming, by_name, Excluded(
        expired_nodes=timeouts.expired_nodes, expired_requests=timeouts.expired_requests, held=timeouts.held,
        setting_up=timeouts.setting_up), facts, policy.gpu_placement)
    up = plan_scale_up(cluster=cluster, table=world.table, upcoming_rows=world.upcoming_rows, pools=ordered_pools,
                       totals=world.totals, state=state, policy=policy, now=now, pods=pods)
    busy = _busy_rows(world, up.table, pods.by_node) if policy.buffers else set()  # only warm buffers read it
    buffers, _ = buffer_scale_ups(up.table, world, busy, by_name, up.totals, policy)
    scale_ups = _merge([*up.scale_ups, *buffers])
    down = plan_removals(up.table, facts, pods.by_node, cluster.pdbs, state, policy, now)
    removals = down.removals
    blocked = list(down.blocked)
    if down.unremovable is not state.unremovable:
        state = replace(state, unremovable=down.unremovable)
    state = charge_lost_work(state, down.lost_work, now)
    if policy.buffers:
        removals, kept = _respect_buffers(removals, up.table, world, busy, by_name, policy)
        blocked += kept
    malformed = _malformed(blocked)
    degraded = _degraded(unusual, timeouts, pods.by_node)
    repaired: float | None = None
    if degraded:
        repairs = plan_repairs(degraded, facts, pods.by_node, cluster.pdbs, removals, policy, now)
        repaired = repairs.next_at_s
        removals = (*removals, *repairs.removals)
        if repairs.waiting:
            waits = {v.node: v for v in repairs.waiting}
            degraded = tuple(waits.get(v.node, v) for v in degraded)
    return Plan(
        scale_up=scale_ups, scale_down=removals, blocked=tuple(blocked), unneeded=down.unneeded,
        mark_unneeded=down.mark_unneeded, clear_unneeded=down.clear_unneeded, unplaceable=up.unplaceable,
        covered=up.covered,
        nominate=_nominations(up.upcoming_homes, cluster.nodes, removals, policy, pods.depends_on_placed),
        waiting=up.waiting, timed_out=timeouts.timed_out, state=state,
        degraded=degraded, malformed=malformed,
        next_at_s=now if state is not given and state != given else earliest(
            timeouts.next_at_s, up.next_at_s, down.next_at_s, repaired),
    )


def _nominations(homes: Sequence[tuple[Pod, str]], nodes: Sequence[Node], removals: Sequence[Removal],
                 policy: Policy, labelled: bool) -> tuple[tuple[str, str], ...]:
    """The nominations to write (`Plan.nominate`), in pod order: pods the placement puts on upcoming capacity, matched
    oldest first to the registered nodes still starting (not a template of a request, not removed by this plan),
    earliest-created node first, as kube-scheduler's queue would hand them out if the nodes came up in that order.

    The placement packs pods in its own order (priority, size, name), so its homes alone would give a node ordered
    early to a newer pod and leave an older one waiting for a node ordered later; held for the newer pod, that node
    would then keep the older one off it. So the pods whose placement is interchangeable (the same constraints,
    namespace and priority, and the same labels when some pod's place depends on other pods') share the room their
    placement found on those nodes: each pod, oldest first, takes the earliest-created node where that room still has
    its requests. A pod matched to another node than its nomination names is listed (the loop moves its own); a pod
    nominated to any other node is left alone (kube-scheduler's preemption or another component named it).
    `labelled`: some pod's place depends on other pods' (`PodIndex.depends_on_placed`)."""
    if not policy.nominate_pods or not homes:
        return ()
    created = {n.name: n.created_s or 0.0 for n in nodes if not n.deleting}
    for removal in removals:
        created.pop(removal.node, None)
    groups: dict[tuple[object, ...], list[tuple[Pod, str]]] = {}
    for pod, node in homes:
        if pod.nominated_node is None or pod.nominated_node in created:
            key = (pod.constraints, pod.namespace, pod.priority,
                   tuple(sorted(pod.labels.items())) if labelled else ())
            groups.setdefault(key, []).append((pod, node))
    out: list[tuple[str, str]] = []
    for placed in groups.values():
        room: dict[str, Resources] = {}
        for pod, node in placed:
            if node in created:
                room[node] = room.get(node, Resources()) + pod.requests
        order = sorted(room, key=lambda n: (created[n], n))
        for pod in sorted((p for p, _ in placed), key=lambda p: (p.created_s or 0.0, p.key)):
            for node in order:
                if not pod.requests.shortfalls(room[node]):
                    room[node] -= pod.requests
                    if pod.nominated_node != node:
                        out.append((pod.key, node))
                    break
    return tuple(sorted(out))


def _malformed(blocked: Sequence[NodeVerdict]) -> tuple[PodVerdict, ...]:
    """From the nodes kept: the malformed protection annotations that kept them, by object. A node's first reason is
    the one keeping it."""
    malformed: dict[str, PodVerdict] = {}
    for verdict in blocked:
        first = verdict.reasons[0]
        if first.code is ReasonCode.BAD_ANNOTATION:
            malformed.setdefault(first.about, PodVerdict(pod=first.about, reasons=(first,)))
    return tuple(v for _, v in sorted(malformed.items()))


def _degraded(unusual: Sequence[NodeFacts], timeouts: _Timeouts,
              pods_by_node: Mapping[str, Sequence[Pod]]) -> tuple[NodeVerdict, ...]:
    """Every degraded node, in name order: usable ones short of GPUs (of `unusual`, `Store.unusual`), and
    starting-phase ones that run workloads."""
    usable = degraded_verdicts(((f.node, f.pool, f.phase) for f in unusual if f.degraded), pods_by_node)
    if not timeouts.degraded:
        return usable
    return tuple(sorted((*usable, *timeouts.degraded), key=lambda v: v.node))


def _respect_buffers(removals: Sequence[Removal], table: WhatIf, world: World, busy: set[int],
                     pools: Mapping[str, NodePool], policy: Policy) -> tuple[tuple[Removal, ...],
                                                                            list[NodeVerdict]]:
    """Keep the warm buffer: an empty node of a buffered pool is not removed while the pool would then have fewer
    idle nodes than `idle_nodes` or fewer free GPUs than its target (else the next loop would order it again)."""
    warm = {b.pool: (b, _warm(b, pools[b.pool], table, world, busy)) for b in policy.buffers if b.pool in pools}
    idle_left = {name: w.idle for name, (_, w) in warm.items()}
    free_left = {name: w.free_gpus for name, (_, w) in warm.items()}
    kept: list[Removal] = []
    blocked: list[NodeVerdict] = []
    held: set[str] = set()
    for removal in removals:
        entry = warm.get(removal.pool)
        if entry is None or removal.evict:
            kept.append(removal)
            continue
        buffer, state = entry
        row = table.index_of(removal.node)
        gpus = 0 if row is None else sum(max(table.free_of(row, n), 0) for n in table.columns if is_gpu_resource(n))
        short_idle = buffer.idle_nodes and idle_left[removal.pool] <= buffer.idle_nodes
        short_gpus = gpus and free_left[removal.pool] - gpus < state.target_gpus
        if short_idle or short_gpus:
            held.add(removal.pool)
            blocked.append(NodeVerdict(node=removal.node, reasons=(Reason(
                ReasonCode.BUFFER, f"kept as warm capacity for {removal.pool} ({buffer.idle_nodes} idle node(s), "
                                   f"{state.target_gpus} free GPU(s) for {state.in_use} in use)"),)))
            continue
        idle_left[removal.pool] -= 1
        free_left[removal.pool] -= gpus
        kept.append(removal)
    whole = {r.pool for r in removals if r.pool in held and pools[r.pool].zero_or_max}
    if whole:  # a zero-or-max pool goes whole or not at all
        blocked += [NodeVerdict(node=r.node, reasons=(Reason(
            ReasonCode.BUFFER, f"kept with the rest of zero-or-max pool {r.pool} as warm capacity"),))
            for r in kept if r.pool in whole]
        kept = [r for r in kept if r.pool not in whole]
    return tuple(kept), blocked
