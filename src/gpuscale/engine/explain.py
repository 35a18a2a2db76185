"""`gpuscale explain`: the one reason a pending pod or a ProvisioningRequest is held back now, and what releases it.

No second copy of any logic: the answer is read off the engine's own results — `decide` (covered / scale-up /
unplaceable / waiting verdicts, with limits and backoff), `fit.explain_fit` (why existing nodes and each pool's template
refuse the pod), `provreq.prepare` (bookings, check-capacity answers, synthetic gangs) — plus Kueue's own verdict on
quota, which the adapter reads from the Workload (`QueueHold`). The first hold that applies wins, in the order a pod
meets them: quota (Kueue has not admitted its Workload) → scheduling gates → gang / batching / priority → constraint
(no pool's node could ever host it) → limits → stockout / backoff → capacity (waiting for nodes) → none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpuscale.engine.decide import decide
from gpuscale.engine.fit import POOL_FITS, explain_fit
from gpuscale.engine.plan import Plan, PodVerdict, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.provreq import (
    BOOKING_EXPIRED,
    CHECK_CAPACITY,
    DEFAULT_BOOKING_S,
    FAILED,
    PROVISIONED,
    Prepared,
    ProvisioningRequest,
    consumed_request,
    prepare,
)
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import InputError
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool


class Hold(StrEnum):
    QUOTA = "quota"
    GATED = "gated"
    GANG = "gang"
    BATCHING = "batching"
    PRIORITY = "priority"
    CONSTRAINT = "constraint"
    LIMITS = "limits"
    STOCKOUT = "stockout"
    CAPACITY = "capacity"
    FAILED = "failed"
    DEGRADED = "degraded"
    NONE = "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueHold:
    """Kueue has not reserved quota for the Workload of a pod: what it says and where."""

    workload: str
    cluster_queue: str | None
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    target: str
    hold: Hold
    reason: str
    release: str
    code: str = ""
    details: tuple[str, ...] = field(default_factory=tuple)


_WAITING = {
    ReasonCode.SCHEDULING_GATED: (Hold.GATED, "the gate's owner removes it (Kueue: when it admits the Workload)"),
    ReasonCode.GANG_INCOMPLETE: (Hold.GANG, "the rest of the gang's pods are created"),
    ReasonCode.WAITING_BATCH: (Hold.BATCHING, "the batching delay passes (next loop)"),
    ReasonCode.EXPENDABLE: (Hold.PRIORITY, "a priority at or above the expendable cutoff"),
}
_UNPLACEABLE = {
    ReasonCode.LIMIT_REACHED: (Hold.LIMITS, "raise the binding limit, or free capacity under it"),
    ReasonCode.GANG_DOES_NOT_FIT: (Hold.LIMITS, "raise the pool's max_size / the cluster limit, or shrink the gang"),
    ReasonCode.POOL_BACKOFF: (Hold.STOCKOUT, "the backoff ends and the provider has capacity again, or another "
                                             "pool that fits"),
    ReasonCode.NO_POOL_FITS: (Hold.CONSTRAINT, "a pool whose nodes satisfy the pod (taints, selector, affinity, "
                                               "resources), or a pod that asks for what a pool offers"),
}


def _verdict(plan: Plan, key: str) -> tuple[str, PodVerdict] | None:
    for kind, verdicts in (("unplaceable", plan.unplaceable), ("waiting", plan.waiting), ("covered", plan.covered)):
        for v in verdicts:
            if v.pod == key:
                return kind, v
    return None


def _from_plan(target: str, key: str, plan: Plan, cluster: Cluster, pools: Sequence[NodePool]) -> Explanation:
    for item in plan.scale_up:
        if key in item.pods:
            return Explanation(target=target, hold=Hold.CAPACITY, code=str(ReasonCode.SCALE_UP),
                               reason=f"no free capacity: a scale-up of {item.nodes} node(s) of {item.pool} is due",
                               release=f"the new {item.pool} node(s) become Ready with GPUs registered",
                               details=tuple(r.message for r in item.reasons))
    found = _verdict(plan, key)
    if found is None:
        return Explanation(target=target, hold=Hold.NONE, reason="not marked Unschedulable by the scheduler yet",
                           release="the scheduler's next attempt")
    kind, verdict = found
    reason = verdict.reasons[0]
    if kind == "covered":
        upcoming = reason.code is ReasonCode.FITS_UPCOMING
        return Explanation(target=target, hold=Hold.CAPACITY if upcoming else Hold.NONE, code=str(reason.code),
                           reason=reason.message, release="the starting node becomes Ready with GPUs registered"
                           if upcoming else "nothing: the scheduler binds it")
    table = _WAITING if kind == "waiting" else _UNPLACEABLE
    hold, release = table.get(reason.code, (Hold.CONSTRAINT, "see the reason"))
    details: tuple[str, ...] = ()
    if hold is Hold.CONSTRAINT:
        fits = {f.pod.key: f for f in explain_fit(cluster, pools)}
        fit = fits.get(key)
        if fit is not None:
            details = (f"existing nodes: {fit.message}",
                       *(f"pool {p}: {why}" for p, why in sorted(fit.pools.items()) if why != POOL_FITS))
    return Explanation(target=target, hold=hold, code=str(reason.code), reason=reason.message, release=release,
                       details=details)


def _request(request: ProvisioningRequest, plan: Plan, prepared: Prepared, pools: Sequence[NodePool]) -> Explanation:
    target = f"ProvisioningRequest {request.key}"
    if not request.ours:
        return Explanation(target=target, hold=Hold.NONE, release="its own provisioner",
                           reason=f"class {request.class_name!r} is not handled by gpuscale")
    if request.problem is not None:
        return Explanation(target=target, hold=Hold.FAILED, code=request.problem.reason,
                           reason=request.problem.message, release="fix the request or its PodTemplate")
    failed = request.conditions.get(FAILED)
    if failed is not None and failed.status == "True":
        hold = {"LimitReached": Hold.LIMITS, "GangDoesNotFit": Hold.LIMITS, "PoolInBackoff": Hold.STOCKOUT,
                "ScaleUpFailed": Hold.STOCKOUT}.get(failed.reason, Hold.FAILED)
        return Explanation(target=target, hold=hold, code=failed.reason, reason=f"Failed: {failed.message}",
                           release="a new request once the cause is gone (Kueue retries with the next attempt)")
    if request.is_true(BOOKING_EXPIRED):
        return Explanation(target=target, hold=Hold.NONE, code=BOOKING_EXPIRED, reason="booking expired",
                           release="nothing: the request is over")
    if request.is_true(PROVISIONED):
        return Explanation(target=target, hold=Hold.NONE, code=PROVISIONED, reason="Provisioned: capacity is booked "
                           "for its pods", release="nothing: create the pods that consume it")
    if request.class_name == CHECK_CAPACITY:
        problem = prepared.capacity.get(request.key, "")
        return Explanation(target=target, hold=Hold.CAPACITY if problem else Hold.NONE, reason=problem or
                           "all pods fit existing capacity", release="free capacity, or nodes added by other "
                           "means (check-capacity never scales)" if problem else "nothing")
    synthetic = sorted(k for k, r in prepared.synthetic.items() if r == request.key)
    if not synthetic:
        return Explanation(target=target, hold=Hold.NONE, reason="no pods to provision", release="nothing")
    return _from_plan(target, synthetic[0], plan, prepared.cluster, pools)


def explain(cluster: Cluster, target: str, *, pools: Sequence[NodePool], policy: Policy, now: float,
            state: EngineState | None = None, requests: Sequence[ProvisioningRequest] = (),
            holds: Mapping[str, QueueHold] | None = None, node_pools: Mapping[str, str] | None = None,
            booking_s: float = DEFAULT_BOOKING_S) -> Explanation:
    """Explain `target`: a pod `namespace/name`, a ProvisioningRequest `namespace/name` (pods are looked up
    first), or a node by name (whether it is degraded). Raises `InputError` when none exists."""
    by_name = {p.name: p for p in pools}
    prepared = prepare(cluster, requests, by_name, node_pools or {}, now, booking_s)
    plan = decide(Snapshot(cluster=prepared.cluster, node_pools=node_pools or {}), pools, state or EngineState(),
                  policy, now)
    pod = next((p for p in cluster.pods if p.key == target), None)
    request = next((r for r in requests if r.key == target), None)
    if pod is None and request is None:
        node = next((n for n in cluster.nodes if n.name == target), None)
        if node is not None:
            return _node(target, plan)
        raise InputError(f"explain {target}", "target", "no such pod, ProvisioningRequest or node in the input")
    if pod is None:
        assert request is not None
        return _request(request, plan, prepared, pools)
    return _pod(pod, plan, prepared, requests, holds or {}, pools)


def _node(name: str, plan: Plan) -> Explanation:
    verdict = next((v for v in plan.degraded if v.node == name), None)
    if verdict is None:
        return Explanation(target=f"Node {name}", hold=Hold.NONE, reason="not degraded", release="nothing")
    return Explanation(target=f"Node {name}", hold=Hold.DEGRADED, code=str(ReasonCode.DEGRADED),
                       reason=verdict.reasons[0].message,
                       release="the GPUs come back (driver or device plugin restart, a reboot), or the node is "
                               "replaced: by hand, or by the repair policy (node_repair) through a normal drain",
                       details=tuple(r.message for r in verdict.reasons[1:]))


def _pod(pod: Pod, plan: Plan, prepared: Prepared, requests: Sequence[ProvisioningRequest],
         holds: Mapping[str, QueueHold], pools: Sequence[NodePool]) -> Explanation:
    target = f"Pod {pod.key}"
    if pod.node_name is not None or pod.is_terminal():
        return Explanation(target=target, hold=Hold.NONE, reason=f"not pending (phase {pod.phase}, node "
                           f"{pod.node_name or '-'})", release="nothing")
    hold = holds.get(pod.key)
    if hold is not None:
        where = f" in ClusterQueue {hold.cluster_queue}" if hold.cluster_queue else ""
        return Explanation(target=target, hold=Hold.QUOTA, code="QuotaReserved",
                           reason=f"Workload {hold.workload} not admitted{where}: {hold.message}",
                           release="quota frees up (admitted workloads finish or are preempted), the ClusterQueue's "
                                   "nominal quota grows, or its cohort lends")
    if pod.key in prepared.hidden:
        consumed = consumed_request(pod) or ""
        request = next(r for r in requests if r.key == consumed)
        return Explanation(target=target, hold=Hold.CAPACITY, code="ConsumesProvisioningRequest",
                           reason=f"consumes ProvisioningRequest {consumed}; its capacity, not this pod, drives "
                                  f"scale-up (request: {_request(request, plan, prepared, pools).reason})",
                           release="the request's capacity is Provisioned and the scheduler binds the pod")
    return _from_plan(target, pod.key, plan, prepared.cluster, pools)
