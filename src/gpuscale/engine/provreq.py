"""ProvisioningRequests (`autoscaling.x-k8s.io/v1`) as decisions: pure functions of values, no I/O, no clock.

A ProvisioningRequest asks for capacity for `count` pods of each referenced PodTemplate. Two classes are ours:
- `check-capacity.autoscaling.x-k8s.io`: do all pod sets fit the capacity that exists *now* (Usable nodes, minus
  what bound pods and the bookings of other Provisioned requests hold)? Answer with `Provisioned`; never scale.
- `best-effort-atomic-scale-up.autoscaling.x-k8s.io`: the request's pods become one gang of synthetic pending pods,
  so the engine's gang scale-up (`scaleup.place_units`: all members or none) decides for the whole request; it is
  `Provisioned` once every synthetic pod fits Usable nodes (Ready, GPUs registered), and `Failed` when the engine
  finds no pool able to host the whole gang within limits/max size/backoff, or the provider refuses the scale-up.
A Provisioned request *books* its capacity for `booking_s`: `prepare` binds its synthetic pods to nodes in the
snapshot (one per pod still to arrive), so pending pods do not count on that capacity and scale-down keeps the nodes
(a bound pod without a controller is never evicted). Pods that consume a request (annotation
`autoscaling.x-k8s.io/consume-provisioning-request`, or the older `cluster-autoscaler.kubernetes.io/…`) are kept out
of scale-up while it is pending or booked: their synthetic stand-ins already asked for the capacity.

The flow per tick: `prepare` (before `decide`) → `decide` → `conditions_after` (after the tick's actions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuscale.engine.nodes import NodePhase, phase_in, pool_of
from gpuscale.engine.plan import Plan
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaleup import Unit, place_units
from gpuscale.engine.scheduling import static_failures
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.filters import names_nodes_individually
from gpuscale.engine.whatif.model import WhatIf, node_group_key
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodGroupRef, PodPhase, depends_on_placed, uses_claims, uses_devices
from gpuscale.model.pool import NodePool

CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CLASSES = (CHECK_CAPACITY, BEST_EFFORT_ATOMIC)
CONSUME_ANNOTATIONS = ("autoscaling.x-k8s.io/consume-provisioning-request",
                       "cluster-autoscaler.kubernetes.io/consume-provisioning-request")

ACCEPTED, PROVISIONED, FAILED = "Accepted", "Provisioned", "Failed"
BOOKING_EXPIRED, CAPACITY_REVOKED = "BookingExpired", "CapacityRevoked"
TRUE, FALSE = "True", "False"

SYNTHETIC_MARK = "~"
"""Synthetic pod names are `<request>~<pod set>~<i>`: `~` is not allowed in Kubernetes names, so no real pod clashes."""
GROUP_SOURCE = "provisioning-request"
DEFAULT_BOOKING_S = 600.0
"""How long a Provisioned request holds its capacity for its pods (Cluster Autoscaler: 10 minutes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    since_s: float | None = None
    """`lastTransitionTime`, Unix seconds; `None` for a condition about to be written (the adapter keeps the old time
    when the status does not change)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSet:
    template_name: str
    template: Pod
    """The PodTemplate's pod, as the scheduler would see one of the pods."""
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningRequest:
    namespace: str
    name: str
    class_name: str
    pod_sets: tuple[PodSet, ...] = ()
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    created_s: float | None = None
    problem: Condition | None = None
    """Set by the adapter when the request cannot be read as the API defines it (a PodTemplate missing or invalid):
    the condition to write instead of acting."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def is_true(self, type_: str) -> bool:
        c = self.conditions.get(type_)
        return c is not None and c.status == TRUE

    @property
    def ours(self) -> bool:
        return self.class_name in CLASSES

    @property
    def finished(self) -> bool:
        """Failed, expired or revoked: nothing more to do, no capacity held."""
        return self.is_true(FAILED) or self.is_true(BOOKING_EXPIRED) or self.is_true(CAPACITY_REVOKED)

    def pod_count(self) -> int:
        return sum(s.count for s in self.pod_sets)


def is_synthetic(pod_key: str) -> bool:
    return SYNTHETIC_MARK in pod_key


def request_of_synthetic(pod_key: str) -> str:
    """`ns/req~set~i` → `ns/req`."""
    return pod_key.split(SYNTHETIC_MARK, 1)[0]


def consumed_request(pod: Pod) -> str | None:
    """`namespace/name` of the ProvisioningRequest the pod consumes, if it says so."""
    for annotation in CONSUME_ANNOTATIONS:
        name = pod.annotations.get(annotation)
        if name:
            return f"{pod.namespace}/{name}"
    return None


def synthetic_pods(request: ProvisioningRequest, count: int | None = None) -> tuple[Pod, ...]:
    """The request's pods as one gang of pending, unschedulable pods (the first `count` of them)."""
    group = PodGroupRef(key=f"{request.namespace}/{request.name}{SYNTHETIC_MARK}", source=GROUP_SOURCE)
    pods: list[Pod] = []
    for index, pod_set in enumerate(request.pod_sets):
        for i in range(pod_set.count):
            pods.append(replace(pod_set.template, namespace=request.namespace,
                                name=f"{request.name}{SYNTHETIC_MARK}{index}{SYNTHETIC_MARK}{i}",
                                uid="", node_name=None, phase=PodPhase.PENDING, group=group, unschedulable=True,
                                scheduling_gated=False, nominated_node=None, created_s=request.created_s,
                                deleting=False, owner=None))
    return tuple(pods[:count] if count is not None else pods)


def booking_active(request: ProvisioningRequest, now: float, booking_s: float) -> bool:
    provisioned = request.conditions.get(PROVISIONED)
    if request.finished or provisioned is None or provisioned.status != TRUE:
        return False
    return provisioned.since_s is None or now - provisioned.since_s < booking_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """The cluster as `decide` should see it, and what `prepare` found out on the way."""

    cluster: Cluster
    synthetic: Mapping[str, str] = field(default_factory=dict)
    """Synthetic pending pod key → request key (atomic requests waiting for capacity)."""
    booked: Mapping[str, int] = field(default_factory=dict)
    """Request key → synthetic pods bound to nodes (Provisioned requests holding capacity)."""
    capacity: Mapping[str, str] = field(default_factory=dict)
    """check-capacity request key → "" if every pod fits now (then booked), else why not."""
    hidden: tuple[str, ...] = ()
    """Pending pods kept out of scale-up because they consume a pending or booked request."""


def usable_table(cluster: Cluster, pools: Mapping[str, NodePool], node_pools: Mapping[str, str],
                 templates: Sequence[Pod] = ()) -> WhatIf:
    """Usable nodes only (Ready, GPUs registered, not being deleted) with their real free capacity. With `templates`,
    only nodes whose taints, labels and cordon admit one of them (checked once per node group): the others can host
    none of the pods placed on this table, and leaving them out keeps the table small at 5,000 nodes."""
    verdicts: dict[object, bool] = {}
    per_node = any(names_nodes_individually(t.constraints) for t in templates)
    nodes: list[Node] = []
    for node in cluster.nodes:
        name = pool_of(node, node_pools)
        if phase_in(node, pools.get(name) if name else None, cluster.dra) is not NodePhase.USABLE:
            continue
        if templates:
            key = (node.name,) if per_node else node_group_key(node)
            if key not in verdicts:
                verdicts[key] = any(not static_failures(t.constraints, node) for t in templates)
            if not verdicts[key]:
                continue
        nodes.append(node)
    kept = {n.name for n in nodes}
    names = {r for n in nodes for r in n.allocatable.names()}
    placed = [p for p in cluster.pods if p.node_name in kept and p.consumes_capacity()]
    table = whatif_of(nodes, [n.allocatable for n in nodes], placed, names,
                      with_topology=any(map(depends_on_placed, cluster.pods)),
                      storage=cluster.storage if any(map(uses_claims, cluster.pods)) else None)
    if any(map(uses_devices, cluster.pods)):
        by_node: dict[str, list[Pod]] = {}
        for pod in placed:
            by_node.setdefault(pod.node_name or "", []).append(pod)
        table.dra = DraState.of(cluster.dra, nodes, by_node, pools, [False] * len(nodes))
    return table


def _book(table: WhatIf, pods: Sequence[Pod], group: str) -> tuple[Pod, ...] | None:
    """Place `pods` all-or-nothing on `table` (mutated on success); the pods bound to their rows, else None."""
    if not pods:
        return ()
    placement = place_units(table, [Unit(tuple(pods), group)])
    if not placement.placed:
        return None
    table.free[:] = placement.table.free
    table.free_pods[:] = placement.table.free_pods
    return tuple(replace(p, node_name=table.nodes[placement.rows[p.key]].name, phase=PodPhase.RUNNING,
                         unschedulable=False) for p in pods)


def _no_capacity(request: ProvisioningRequest, table: WhatIf) -> str:
    return (f"{request.pod_count()} pod(s) of {request.key} do not all fit the free capacity of {len(table)} usable "
            "node(s) (capacity booked by other Provisioned requests counts as taken)")


def prepare(cluster: Cluster, requests: Sequence[ProvisioningRequest], pools: Mapping[str, NodePool],
            node_pools: Mapping[str, str], now: float, booking_s: float = DEFAULT_BOOKING_S) -> Prepared:
    """Book the capacity of Provisioned requests, answer check-capacity requests, and turn atomic requests into
    synthetic gangs; hide pending pods that consume a live request. Deterministic: requests are taken in order of
    provisioning time, then creation, then key."""
    live = {r.key: r for r in requests if r.ours and r.problem is None and not r.finished}
    if not live:
        return Prepared(cluster=cluster)  # the common case: no table built, nothing changed
    kept, hidden, bound_consumers = _consumers(cluster, live)
    placing = [r for r in live.values() if booking_active(r, now, booking_s) or (
        r.class_name == CHECK_CAPACITY and not r.is_true(PROVISIONED))]
    # Only bookings and check-capacity answers place pods on existing nodes; atomic gangs go to `decide` as they are.
    templates = list({s.template.constraints: s.template for r in placing for s in r.pod_sets}.values())
    table = usable_table(cluster, pools, node_pools, templates) if placing else whatif_of([], [], [])
    added: list[Pod] = []
    booked: dict[str, int] = {}
    capacity: dict[str, str] = {}
    synthetic: dict[str, str] = {}

    def order(r: ProvisioningRequest) -> tuple[float, float, str]:
        since = r.conditions[PROVISIONED].since_s if PROVISIONED in r.conditions else None
        return (since if since is not None else now, r.created_s if r.created_s is not None else now, r.key)

    for request in sorted((r for r in live.values() if booking_active(r, now, booking_s)), key=order):
        still_to_come = max(request.pod_count() - bound_consumers.get(request.key, 0), 0)
        placed = _book(table, synthetic_pods(request, still_to_come), request.key)
        if placed:
            added += placed
            booked[request.key] = len(placed)
    for request in sorted(live.values(), key=order):
        if not request.is_true(PROVISIONED):
            _answer(request, table, added, booked, capacity, synthetic)
    return Prepared(cluster=replace(cluster, pods=(*kept, *added)), synthetic=synthetic, booked=booked,
                    capacity=capacity, hidden=tuple(sorted(hidden)))


def _consumers(cluster: Cluster,
               live: dict[str, ProvisioningRequest]) -> tuple[list[Pod], list[str], dict[str, int]]:
    """The pods that consume a live request: pending ones are hidden (their request's synthetic pods stand for
    them), bound ones are counted per request. Returns the pods kept (in order), the hidden keys, and the bound
    consumers per request."""
    bound_consumers: dict[str, int] = {}
    hidden: list[str] = []
    kept: list[Pod] = []
    for pod in cluster.pods:
        consumed = consumed_request(pod)
        if consumed in live and not pod.is_terminal():
            if pod.node_name is None:
                hidden.append(pod.key)
                continue
            bound_consumers[consumed] = bound_consumers.get(consumed, 0) + 1
        kept.append(pod)
    return kept, hidden, bound_consumers


def _answer(request: ProvisioningRequest, table: WhatIf, added: list[Pod], booked: dict[str, int],
            capacity: dict[str, str], synthetic: dict[str, str]) -> None:
    """A request not yet Provisioned: a check-capacity one is booked on the free capacity left and answered (an empty
    message: it fits); an atomic one becomes its synthetic gang's pods. Adds to the four collections in place."""
    if request.class_name == CHECK_CAPACITY:
        placed = _book(table, synthetic_pods(request), request.key)
        capacity[request.key] = "" if placed is not None else _no_capacity(request, table)
        if placed:
            added += placed
            booked[request.key] = len(placed)
    else:
        pods = synthetic_pods(request)
        synthetic.update({p.key: request.key for p in pods})
        added += pods


# --- after the decision: the conditions to write


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """Conditions to set on one request (others are left as they are)."""

    request: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What the tick's actions did, as far as requests care: scale-ups the provider refused, per pool."""

    failed_pools: Mapping[str, str] = field(default_factory=dict)
    """Pool → the provider's error, for scale-ups attempted this tick that did not happen."""


_FAIL_CODES = {ReasonCode.LIMIT_REACHED, ReasonCode.GANG_DOES_NOT_FIT, ReasonCode.NO_POOL_FITS,
               ReasonCode.POOL_BACKOFF}


def _cond(type_: str, status: str, reason: str, message: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message[:32768])


def _changed(request: ProvisioningRequest, wanted: Sequence[Condition]) -> tuple[Condition, ...]:
    """Only the conditions that differ from what the request already says (no write when nothing changes)."""
    out = []
    for c in wanted:
        have = request.conditions.get(c.type)
        if have is None or (have.status, have.reason, have.message) != (c.status, c.reason, c.message):
            out.append(c)
    return tuple(out)


def _atomic_conditions(request: ProvisioningRequest, prepared: Prepared, plan: Plan,
                       outcome: Outcome) -> list[Condition]:
    keys = {k for k, r in prepared.synthetic.items() if r == request.key}
    covered = {v.pod: v for v in plan.covered if v.pod in keys}
    unplaceable = [v for v in plan.unplaceable if v.pod in keys]
    waiting = [v for v in plan.waiting if v.pod in keys]
    ordered = [s for s in plan.scale_up if keys & set(s.pods)]
    refused = [(s.pool, outcome.failed_pools[s.pool]) for s in ordered if s.pool in outcome.failed_pools]
    if keys and len(covered) == len(keys) and all(v.reasons[0].code is ReasonCode.FITS_EXISTING
                                                  for v in covered.values()):
        return [_cond(PROVISIONED, TRUE, "Provisioned",
                      f"capacity for all {len(keys)} pod(s) is Ready with GPUs registered; booked for the pods")]
    if unplaceable:
        reason = unplaceable[0].reasons[0]
        code = reason.code if reason.code in _FAIL_CODES else ReasonCode.NO_POOL_FITS
        return [_cond(PROVISIONED, FALSE, "CapacityIsNotFound", "no scale-up can host the whole request"),
                _cond(FAILED, TRUE, str(code), reason.message)]
    if refused:
        pool, error = refused[0]
        return [_cond(PROVISIONED, FALSE, "CapacityIsNotFound", f"scale-up of {pool} refused"),
                _cond(FAILED, TRUE, "ScaleUpFailed", f"scale-up of {pool} for the whole request failed: {error}; "
                                                     "nothing was ordered")]
    if ordered:
        pools = ", ".join(f"{s.nodes} node(s) of {s.pool}" for s in ordered)
        return [_cond(PROVISIONED, FALSE, "ScaleUpInProgress", f"ordered {pools} for the whole request")]
    if covered:
        return [_cond(PROVISIONED, FALSE, "ScaleUpInProgress", "waiting for ordered nodes to become Ready with GPUs")]
    if waiting:
        return [_cond(PROVISIONED, FALSE, str(waiting[0].reasons[0].code), waiting[0].reasons[0].message)]
    return []


def conditions_after(requests: Sequence[ProvisioningRequest], prepared: Prepared, plan: Plan, outcome: Outcome,
                     now: float, booking_s: float = DEFAULT_BOOKING_S) -> tuple[Update, ...]:
    """The condition changes for every request of ours, after the tick acted on `plan`."""
    updates: list[Update] = []
    for request in sorted(requests, key=lambda r: r.key):
        if not request.ours:
            continue
        if request.problem is not None:
            wanted = [request.problem]
        elif request.finished:
            wanted = []
        else:
            wanted = [_cond(ACCEPTED, TRUE, "Accepted", f"gpuscale handles class {request.class_name}")]
            if request.is_true(PROVISIONED):
                if not booking_active(request, now, booking_s):
                    wanted.append(_cond(BOOKING_EXPIRED, TRUE, "BookingExpired",
                                        f"capacity was booked for {booking_s:g}s after Provisioned"))
            elif request.class_name == CHECK_CAPACITY:
                problem = prepared.capacity.get(request.key)
                if problem == "":
                    wanted.append(_cond(PROVISIONED, TRUE, "CapacityIsFound",
                                        f"all {request.pod_count()} pod(s) fit existing capacity; booked"))
                elif problem is not None:
                    wanted.append(_cond(PROVISIONED, FALSE, "CapacityIsNotFound", problem))
            else:
                wanted += _atomic_conditions(request, prepared, plan, outcome)
        changed = _changed(request, wanted)
        if changed:
            updates.append(Update(request=request.key, conditions=changed))
    return tuple(updates)
