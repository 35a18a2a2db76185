"""Allocating a pod's ResourceClaims on one node, as kube-scheduler v1.37's DynamicResources Filter asks its
structured allocator (k8s.io/dynamic-resource-allocation/structured v0.37.2, the "incubating" implementation the
default features select: prioritized lists, admin access, device taints, partitionable devices, consumable capacity
with fractional ranges, binding conditions).

The search is kube's: claims in order, their requests in order, each request's devices one after another over the
node's candidates (pools by driver and name, slices by name, devices in slice order); for a `firstAvailable` request
its subrequests are tried in order and the first that leads to a full solution is kept. Every candidate that is not
in use, matches the class's and the request's CEL selectors, fits its consumable capacity, has the shared counters it
consumes, tolerates its taints and keeps the claim's constraints is taken, and the search goes on; when it dead-ends
it backtracks (combinations, not permutations, within one request), so an allocation is found whenever one exists.
A device is given once (exclusively) unless the request asks admin access (then it may be in use, not twice in one
claim) or the device allows multiple allocations (then it is shared while its capacity lasts). The first solution
wins (kube does not score).

Outcomes, as the Filter turns them into a node's status:
- `Allocated`: one `Allocation` per claim (devices as `request` or `request/subrequest`, and the node selector the
  allocation pins its consumers to: the node's name when some device is node-local, else the slices' selectors, else
  none).
- `AllocationFailure(UNSCHEDULABLE, "cannot allocate all claims")`, or "invalid resource pools were encountered" when
  an invalid pool was seen: this node cannot take the pod.
- `AllocationFailure(ERROR, …)`: what kube-scheduler reports as an error and stops scheduling the pod on (a selector
  that does not compile or fails at run time on a device it reached, a class that does not exist, a request for "All"
  devices of a pool being updated, a claim asking more than 32 devices, a search past `STEP_BUDGET`: "timed out
  trying to allocate devices").

Speed (docs/decisions.md, D42; docs/benchmarks.md, bench/dra.py): one `Allocator` per `Dra` snapshot keeps each
node's pools and candidates, every (selectors, device) answer, and each outcome per (node, claim specs, devices in use
there); before searching, a request whose candidates (free, selectable) are fewer than its count fails the node at
once, when nothing on the node could raise an error instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpuscale.engine.dra import cel
from gpuscale.engine.dra.inuse import InUse, in_use
from gpuscale.engine.dra.pools import Candidate, DeviceId, GatheredPool, candidates, gather_pools
from gpuscale.engine.dra.search import (
    MAX_DEVICES_PER_CLAIM,
    STEP_BUDGET,
    TIMED_OUT,
    Fatal,
    NodeDevices,
    Request,
    Search,
    TooMany,
)
from gpuscale.model.dra import Allocation, ClaimSpec, Device, Dra, ResourceClaim

CANNOT_ALLOCATE = "cannot allocate all claims"
INVALID_POOLS = "invalid resource pools were encountered"
_SELECTABLE_KEPT = 1_000_000
_SELECTABLE: dict[tuple[tuple[str, ...], tuple[str, ...], str, int], tuple[Device, bool]] = {}
"""Whether a device passes (class selectors, request selectors), by device identity (the device kept, so its id is
not reused while cached): across snapshots too, which hand back the objects that did not change."""
_OUTCOMES_KEPT = 10_000
"""Per node: outcomes by claim specs, and states of its devices."""


class FailureKind(StrEnum):
    UNSCHEDULABLE = "Unschedulable"
    """This node cannot take the pod's claims; other nodes may."""
    ERROR = "Error"
    """kube-scheduler stops this scheduling attempt for the pod and reports the message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationFailure:
    kind: FailureKind
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocated:
    allocations: tuple[Allocation, ...]
    """One per claim, in the order given."""


_Outcomes = dict[tuple[int, ...], tuple[tuple[ClaimSpec, ...], "Allocated | AllocationFailure"]]


@dataclass(slots=True, kw_only=True)
class _Node(NodeDevices):
    ids: tuple[DeviceId, ...] = ()
    counted: tuple[DeviceId, ...] = ()
    """The devices of pools with shared counters: their allocation changes what the candidates may take."""

    outcomes: dict[tuple[object, ...], _Outcomes] = field(default_factory=dict)
    """Per what of `used` the node's devices are: the outcomes by claim specs."""
    used_for: InUse | None = None
    current: _Outcomes = field(default_factory=dict)
    """The outcomes for `used_for`, the last `used` asked about (a filter asks row after row, pod after pod, with
    one)."""

    def outcomes_for(self, used: InUse) -> _Outcomes:
        if self.used_for is used:
            return self.current
        taken = tuple(i for i, d in enumerate(self.ids) if d in used.devices) if used.devices else ()
        shared = tuple((i, tuple(sorted(used.shared[d].items()))) for i, d in enumerate(self.ids)
                       if d in used.shared) if used.shared else ()
        counted = tuple(d for d in self.counted if used.allocated(d)) if self.counted else ()
        key = (taken, shared, counted)
        if key not in self.outcomes and len(self.outcomes) >= _OUTCOMES_KEPT:
            self.outcomes.clear()
        self.used_for, self.current = used, self.outcomes.setdefault(key, {})
        return self.current


def _node(pools: tuple[GatheredPool, ...], node_name: str, labels: Mapping[str, str]) -> _Node:
    found = candidates(pools, node_name, labels)
    counted = tuple((p.driver, p.name, d.name) for p in pools if p.counters for s in p.slices + p.others
                    for d in s.devices)
    return _Node(pools=pools, candidates=found, ids=tuple(c.id for c in found), counted=counted)


class Allocator:
    """kube's `Allocator` for one `Dra` snapshot: `allocate` is asked once per (pod, node); what does not depend on
    the pod (a node's pools and candidates) or on what is in use (whether selectors match a device, kept for every
    snapshot) is kept."""

    def __init__(self, dra: Dra) -> None:
        self.dra = dra
        self._nodes: dict[tuple[str, int], tuple[Mapping[str, str], _Node]] = {}

    def node(self, node_name: str, labels: Mapping[str, str]) -> _Node:
        key = (node_name, id(labels))
        hit = self._nodes.get(key)
        if hit is not None and hit[0] is labels:
            return hit[1]
        node = _node(gather_pools(self.dra, node_name, labels), node_name, labels)
        self._nodes[key] = (labels, node)
        return node

    def allocate(self, node_name: str, labels: Mapping[str, str], claims: Sequence[ResourceClaim],
                 used: InUse) -> Allocated | AllocationFailure:
        """The allocation of `claims` (not yet allocated, in the pod's order) on the node, beside `used`.

        Kept per (node, claim specs, what of `used` the node's devices are): an outcome names no claim unless it is
        an error, so pods whose claims come from one template share it; errors are computed each time."""
        node = self.node(node_name, labels)
        outcomes = node.outcomes_for(used)
        specs = tuple(c.spec for c in claims)
        key = tuple(map(id, specs))
        hit = outcomes.get(key)
        if hit is not None and hit[0] == specs:  # the very spec objects: `==` on tuples tries `is` first
            return hit[1]
        outcome = self._allocate(node, node_name, claims, used)
        if not isinstance(outcome, AllocationFailure) or outcome.kind is not FailureKind.ERROR:
            if len(outcomes) >= _OUTCOMES_KEPT:
                outcomes.clear()
            outcomes[key] = (specs, outcome)
        return outcome

    def _allocate(self, node: _Node, node_name: str, claims: Sequence[ResourceClaim],
                  used: InUse) -> Allocated | AllocationFailure:
        search = Search(self, node, node_name, claims, used)
        try:
            search.prepare()
            done = not search.hopeless() and search.one(0, 0, 0, 0, False, 0)
        except Fatal as e:
            return AllocationFailure(kind=FailureKind.ERROR, message=str(e))
        except TooMany:
            done = False
        if not done:
            invalid = any(p.invalid is not None for p in node.pools)
            return AllocationFailure(kind=FailureKind.UNSCHEDULABLE, message=INVALID_POOLS if invalid
                                     else CANNOT_ALLOCATE)
        try:
            return Allocated(allocations=tuple(search.result(i) for i in range(len(claims))))
        except Fatal as e:
            return AllocationFailure(kind=FailureKind.ERROR, message=str(e))

    def selectable(self, claim: ResourceClaim, request: Request, candidate: Candidate) -> bool:
        """`isSelectable`: the class's selectors, then the request's, all true. Raises `Fatal` on a CEL error."""
        driver, device = candidate.id[0], candidate.device
        key = (request.device_class.selectors, request.body.selectors, driver, id(device))
        hit = _SELECTABLE.get(key)
        if hit is not None and hit[0] is device:
            return hit[1]
        answer = _matches(f"class {request.device_class.name}", request.device_class.selectors, candidate, driver) \
            and _matches(f"claim {claim.key}", request.body.selectors, candidate, driver)
        if len(_SELECTABLE) >= _SELECTABLE_KEPT:
            _SELECTABLE.clear()
        _SELECTABLE[key] = (device, answer)
        return answer


def _matches(owner: str, selectors: tuple[str, ...], candidate: Candidate, driver: str) -> bool:
    for i, expression in enumerate(selectors):
        compiled = cel.compile(expression)
        if isinstance(compiled, cel.CompileError):
            raise Fatal(f"{owner}: selector #{i}: CEL compile error: {compiled.message}")
        try:
            if not compiled.matches(candidate.device, driver):
                return False
        except cel.SelectorError as e:
            device = "/".join(candidate.id)
            raise Fatal(f"{owner}: selector #{i} on device {device}: CEL runtime error: {e.message}") from None
    return True


_ONE: list[Allocator] = []


def allocator_for(dra: Dra) -> Allocator:
    """The allocator of this snapshot's `Dra` (one kept: decisions ask about one snapshot after another)."""
    if not _ONE or _ONE[0].dra is not dra:
        _ONE[:] = [Allocator(dra)]
    return _ONE[0]


def allocate(node_name: str, labels: Mapping[str, str], dra: Dra, claims: Sequence[ResourceClaim],
             used: InUse) -> Allocated | AllocationFailure:
    """`Allocator.allocate` on the snapshot's allocator."""
    return allocator_for(dra).allocate(node_name, labels, claims, used)


__all__ = ["CANNOT_ALLOCATE", "INVALID_POOLS", "MAX_DEVICES_PER_CLAIM", "STEP_BUDGET", "TIMED_OUT", "Allocated",
           "AllocationFailure", "Allocator", "FailureKind", "InUse", "allocate", "allocator_for", "in_use"]
