"""The device side of a what-if (DynamicResources): each pod's ResourceClaims resolved as kube-scheduler v1.37's
PreFilter reads them (`PodDevices`), and the state placements change (`DraState`: the devices in use, the claims
allocated in this what-if, the pods using each claim).

- A pod's claim is its `resourceClaimName`, or the claim generated from its `resourceClaimTemplateName` (named in
  `status.resourceClaimStatuses`). A template claim the ResourceClaim controller has not created yet is taken as the
  template's spec (`model.dra.claim_from_template`), as Cluster Autoscaler does: kube-scheduler itself waits ("pod
  "ns/name": ResourceClaim not created yet") for the moment the controller takes, and a scale-up need not. Without the
  template, that wait is the pod's verdict.
- A claim already allocated (in the snapshot, or by a pod placed in this what-if: claims allocated in one decision
  count for each other) pins every pod using it to its allocation's node selector; one not allocated is allocated on
  the row by `engine.dra.allocate` beside the devices in use (every allocated claim of the snapshot, plus those
  allocated here).
- Rows of nodes that have not published their slices (upcoming rows, scale-up's template rows) take their pool's
  declared slices (`NodePool.template_slices`, by the row's node name and its `gpuscale.io/pool` label), allocated by
  a second allocator over those slices and the snapshot's DeviceClasses.
- Scale-down: a pod taken off its node (`remove`) releases its claims when no other pod there still uses them: the
  devices are free and a moved pod needs a fresh allocation.

Costs: building O(rows + placed pods with claims); a pod's claims resolved once per pod (O(claims)); a row's check is
one allocator call (kept per node, claim specs and devices in use: `engine.dra.allocate`); place/unplace O(claims).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuscale.engine.dra.allocate import TIMED_OUT, Allocated, AllocationFailure, Allocator, FailureKind, allocator_for
from gpuscale.engine.dra.inuse import InUse, in_use
from gpuscale.model.dra import Allocation, Dra, ResourceClaim, ResourceSlice, claim_from_template
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool

NOT_AVAILABLE = "resourceclaim not available on the node"


@dataclass(frozen=True, slots=True, eq=False)
class PodDevices:
    """A pod's claims as DynamicResources' PreFilter leaves them, before any node is looked at."""

    prefilter: str | None = None
    """The PreFilter's rejection (every node fails with it), or None."""
    claims: tuple[ResourceClaim, ...] = ()
    """The pod's claims in `spec.resourceClaims` order (a template claim not created yet: the claim to come)."""
    specs: tuple[str, ...] = ()
    """What the allocator reads of the claims, as text (`repr` of each spec: specs hold dicts, so are not hashable):
    pods whose unallocated claims have equal specs get the same verdict on every node (`engine.dra.allocate`)."""


NO_DEVICES = PodDevices()


def _claim_of(pod: Pod, entry_name: str, claim_name: str | None, template: str | None,
              dra: Dra) -> ResourceClaim | str | None:
    """`resourceclaim.Name` then the lister: the claim, kube-scheduler's message, or None (none needed)."""
    ns = pod.namespace
    check_owner = False
    if claim_name is None:
        if entry_name not in pod.claim_statuses:
            found = dra.template(f"{ns}/{template}")
            if found is None:
                return f'pod "{pod.key}": ResourceClaim not created yet'
            return claim_from_template(found, pod.name, pod.uid, entry_name)
        claim_name = pod.claim_statuses[entry_name]
        if claim_name is None:
            return None
        check_owner = True
    claim = dra.claim(f"{ns}/{claim_name}")
    if claim is None:
        return f'could not find ResourceClaim "{ns}/{claim_name}"'
    if claim.deleting:
        return f'resourceclaim "{claim.name}" is being deleted'
    if check_owner and claim.owner_pod_uid != pod.uid:
        return f"ResourceClaim {claim.key} was not created for Pod {pod.key} (Pod is not owner)"
    return claim


def _class_problem(claim: ResourceClaim, dra: Dra) -> str | None:
    """`validateDeviceClass` over an unallocated claim's requests and subrequests."""
    for request in claim.spec.requests:
        named = ([(request.name, request.exactly.device_class_name)] if request.exactly is not None
                 else [(f"{request.name}/{s.name}", s.device_class_name) for s in request.first_available])
        for name, cls in named:
            if dra.device_class(cls) is None:
                return f"request {name}: device class {cls} does not exist"
    return None


def resolve(pod: Pod, dra: Dra) -> PodDevices:
    """The pod's claims as the PreFilter resolves them (see `PodDevices`). O(claims × requests)."""
    refs = pod.constraints.resource_claims
    if not refs:
        return NO_DEVICES
    claims: list[ResourceClaim] = []
    for ref in refs:
        found = _claim_of(pod, ref.name, ref.claim_name, ref.template_name, dra)
        if isinstance(found, str):
            return PodDevices(prefilter=found)
        if found is not None:
            claims.append(found)
    for claim in claims:
        if claim.allocation is None and (problem := _class_problem(claim, dra)) is not None:
            return PodDevices(prefilter=problem)
    return PodDevices(claims=tuple(claims), specs=tuple(repr(c.spec) for c in claims))


def _template_dra(dra: Dra, extra: Mapping[str, tuple[ResourceSlice, ...]]) -> Dra:
    return Dra(slices=tuple(s for slices in extra.values() for s in slices), classes=dra.classes)


@dataclass(slots=True)
class DraState:
    """What placements change of DynamicResources' view (see the module docstring). `copy` is O(claims allocated or
    used here); the snapshot's objects, the resolved claims and the allocators are shared."""

    dra: Dra
    pools: Mapping[str, NodePool]
    extra: dict[str, tuple[ResourceSlice, ...]]
    """Node name → the slices its pool declares, for rows whose node has not published its own."""
    used: InUse
    """The devices in use: the snapshot's allocated claims, those released here out, those allocated here in."""
    allocated: dict[str, Allocation] = field(default_factory=dict)
    """Claims allocated by pods placed in this what-if (claim key → allocation)."""
    released: set[str] = field(default_factory=set)
    """Claims of the snapshot this what-if released (their pods all moved)."""
    users: dict[str, int] = field(default_factory=dict)
    """Pods placed (bound or placed here) using each claim."""
    resolved: dict[str, PodDevices] = field(default_factory=dict)
    """Per pod (`namespace/name/uid`), its resolved claims (shared by copies)."""
    _templates: list[Allocator | None] = field(default_factory=lambda: [None])

    @staticmethod
    def of(dra: Dra, nodes: Sequence[Node], by_node: Mapping[str, Sequence[Pod]], pools: Mapping[str, NodePool],
           unpublished: Sequence[bool]) -> DraState:
        """The state of the placed pods. `unpublished[i]`: row i's node counts as its pool's template (upcoming),
        so it takes its pool's declared slices. O(rows + placed pods with claims)."""
        extra: dict[str, tuple[ResourceSlice, ...]] = {}
        for node, upcoming in zip(nodes, unpublished, strict=True):
            if upcoming:
                _add_template(extra, node, pools)
        state = DraState(dra, pools, extra, in_use(dra.claims))
        for pods in by_node.values():
            for pod in pods:
                if pod.constraints.resource_claims:
                    for claim in state.devices_of(pod).claims:
                        state.users[claim.key] = state.users.get(claim.key, 0) + 1
        return state

    def copy(self) -> DraState:
        return DraState(self.dra, self.pools, self.extra, self.used, dict(self.allocated), set(self.released),
                        dict(self.users), self.resolved, self._templates)

    def extended(self, nodes: Sequence[Node]) -> DraState:
        """A copy with template rows for `nodes` (scale-up's templates: their pools' declared slices)."""
        state = self.copy()
        extra = dict(self.extra)
        if any([_add_template(extra, node, self.pools) for node in nodes]):
            state.extra, state._templates = extra, [None]
        return state

    def devices_of(self, pod: Pod) -> PodDevices:
        if not pod.constraints.resource_claims:
            return NO_DEVICES
        key = f"{pod.key}/{pod.uid}"
        found = self.resolved.get(key)
        if found is None:
            found = self.resolved[key] = resolve(pod, self.dra)
        return found

    def allocation_of(self, claim: ResourceClaim) -> Allocation | None:
        """The claim's allocation in this what-if: made here, else the snapshot's unless released."""
        made = self.allocated.get(claim.key)
        if made is not None:
            return made
        return None if claim.allocation is None or claim.key in self.released else claim.allocation

    def _allocator(self, node: Node) -> Allocator:
        if node.name not in self.extra:
            return allocator_for(self.dra)
        if self._templates[0] is None:
            self._templates[0] = Allocator(_template_dra(self.dra, self.extra))
        allocator = self._templates[0]
        assert allocator is not None
        return allocator

    def verdict(self, devices: PodDevices, node: Node) -> Allocated | AllocationFailure | None:
        """DynamicResources' Filter on one node: the allocation of the pod's unallocated claims (`Allocated`; empty
        when all are allocated), or why not: the allocator's failure, else `NOT_AVAILABLE` when an allocated claim's
        node selector excludes the node. None: the pod has no claims."""
        if not devices.claims:
            return None
        pending: list[ResourceClaim] = []
        unavailable = False
        for claim in devices.claims:
            allocation = self.allocation_of(claim)
            if allocation is None:
                pending.append(claim)
            elif not allocation.allows(node.name, node.labels):
                unavailable = True
        outcome: Allocated | AllocationFailure = Allocated(allocations=())
        if pending:
            outcome = self._allocator(node).allocate(node.name, node.labels, pending, self.used)
            if isinstance(outcome, AllocationFailure):
                if outcome.message == TIMED_OUT:  # the Filter names the node of a timed-out search
                    return AllocationFailure(kind=outcome.kind, message=f"node {node.name}: {TIMED_OUT}")
                return outcome
        if unavailable:
            return AllocationFailure(kind=FailureKind.UNSCHEDULABLE, message=NOT_AVAILABLE)
        return outcome

    def on_template(self, devices: PodDevices, pool: NodePool) -> Allocated | AllocationFailure | None:
        """`verdict` on one new, empty node of `pool` (its template, with the slices the pool declares: none when it
        declares none). Claims allocated in this what-if count as here. O(one allocator over the pool's slices)."""
        template = pool.template()
        state = self.copy()
        state.extra, state._templates = {template.name: pool.template_slices(template.name)}, [None]
        return state.verdict(devices, template)

    def add(self, pod: Pod, node: Node | None) -> None:
        """A pod placed on `node` (None: a node outside the rows): its unallocated claims allocated there, as
        Reserve assumes them, and counted as used."""
        devices = self.devices_of(pod)
        if node is not None and devices.prefilter is None:
            outcome = self.verdict(devices, node)
            if isinstance(outcome, Allocated) and outcome.allocations:
                pending = [c for c in devices.claims if self.allocation_of(c) is None]
                for claim, allocation in zip(pending, outcome.allocations, strict=True):
                    self.allocated[claim.key] = allocation
                self.used = self.used.plus(outcome.allocations)
        for claim in devices.claims:
            self.users[claim.key] = self.users.get(claim.key, 0) + 1

    def remove(self, pod: Pod) -> None:
        """The pod no longer uses its claims; a claim no placed pod uses any more is released (its devices free)."""
        for claim in self.devices_of(pod).claims:
            left = self.users.get(claim.key, 0) - 1
            if left > 0:
                self.users[claim.key] = left
                continue
            self.users.pop(claim.key, None)
            allocation = self.allocation_of(claim)
            if allocation is None:
                continue
            self.used = self.used.minus([allocation])
            if self.allocated.pop(claim.key, None) is None:
                self.released.add(claim.key)


def _add_template(extra: dict[str, tuple[ResourceSlice, ...]], node: Node, pools: Mapping[str, NodePool]) -> bool:
    pool = pools.get(node.labels.get(POOL_LABEL, ""))
    if pool is None or not pool.resource_slices or node.name in extra:
        return False
    extra[node.name] = pool.template_slices(node.name)
    return True
