"""Allocating a pod's ResourceClaims on one node, as kube-scheduler v1.37's DynamicResources Filter asks its
structured allocator (k8s.io/dynamic-resource-allocation/structured, the "incubating" implementation the default
features select: prioritized lists, admin access, device taints, partitionable devices, consumable capacity, binding
conditions).

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

Speed (docs/benchmarks.md, bench/dra.py): one `Allocator` per `Dra` snapshot keeps each node's pools and
candidates, every (selectors, device) answer, and each outcome per (node, claim specs, devices in use there); before
searching, a request whose candidates (free, selectable) are fewer than its count fails the node at once, when
nothing on the node could raise an error instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpuscale.engine.dra import cel
from gpuscale.engine.dra.capacity import add_counters, available_counters, consumption, fits, take_counters
from gpuscale.engine.dra.constraints import Constraint, ConstraintError, constraint_for
from gpuscale.engine.dra.pools import Candidate, DeviceId, GatheredPool, candidates, gather_pools
from gpuscale.model.dra import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    ClaimSpec,
    Device,
    DeviceClass,
    Dra,
    ExactDeviceRequest,
    ResourceClaim,
    TaintEffect,
)
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator

MAX_DEVICES_PER_CLAIM = 32
"""`AllocationResultsMaxSize`."""
CANNOT_ALLOCATE = "cannot allocate all claims"
TIMED_OUT = "timed out trying to allocate devices"
STEP_BUDGET = 1_000_000
"""Search steps (kube's `allocateOne` calls) one allocation may take before it gives up as kube-scheduler's filter
timeout does (10 s, `DRASchedulerFilterTimeout`, on by default): the engine has no clock, and a million steps take
a few seconds here. Go takes more steps in 10 s, so a search between this budget and kube's may succeed there."""
_SELECTABLE_KEPT = 1_000_000
_OUTCOMES_KEPT = 10_000
"""Per node: outcomes by claim specs, and states of its devices."""
INVALID_POOLS = "invalid resource pools were encountered"


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


@dataclass(frozen=True, slots=True, kw_only=True)
class InUse:
    """Devices already allocated (`AllocatedState`): exclusively, and the capacity (milli-units) consumed on devices
    that allow multiple allocations. Claims allocated by admin access take nothing."""

    devices: frozenset[DeviceId] = frozenset()
    shared: Mapping[DeviceId, Mapping[str, int]] = field(default_factory=dict)

    def allocated(self, device: DeviceId) -> bool:
        """`IsDeviceAllocated`: exclusively or as a share."""
        return device in self.devices or device in self.shared

    def plus(self, allocations: Iterable[Allocation]) -> InUse:
        """With what these allocations hold (a pod placed in a what-if)."""
        return _held(allocations, self, 1)

    def minus(self, allocations: Iterable[Allocation]) -> InUse:
        """Without what these allocations hold (their pod moved or removed)."""
        return _held(allocations, self, -1)


def _held(allocations: Iterable[Allocation], start: InUse, sign: int) -> InUse:
    devices = set(start.devices)
    shared = {d: dict(held) for d, held in start.shared.items()}
    for allocation in allocations:
        for result in allocation.devices:
            if result.admin_access:
                continue
            if result.share_id is None:
                (devices.add if sign > 0 else devices.discard)(result.device_id)
                continue
            held = shared.setdefault(result.device_id, {})
            for name, amount in result.consumed_capacity.items():
                held[name] = held.get(name, 0) + sign * amount
            if not any(held.values()):
                del shared[result.device_id]
    return InUse(devices=frozenset(devices), shared=shared)


def in_use(claims: Iterable[ResourceClaim]) -> InUse:
    """What the allocated claims among `claims` hold (admin-access results hold nothing)."""
    return _held((c.allocation for c in claims if c.allocation is not None), InUse(), 1)


class _Fatal(Exception):
    """An error kube's allocator returns: the pod's scheduling attempt stops."""


class _TooMany(Exception):
    """`errAllocationResultMaxSizeExceeded`: this path would give a claim more than 32 devices."""


@dataclass(slots=True, kw_only=True)
class _Request:
    """A request or one subrequest, resolved."""

    name: str
    """`request` or `request/subrequest`, as results name it."""
    base: str
    sub: str
    short: str
    """The name kube's messages use (the subrequest's own)."""
    device_class: DeviceClass
    body: ExactDeviceRequest
    admin: bool
    count: int = 0
    all_devices: list[Candidate] | None = None


_Outcomes = dict[tuple[int, ...], tuple[tuple[ClaimSpec, ...], "Allocated | AllocationFailure"]]


@dataclass(slots=True, kw_only=True)
class _Node:
    pools: tuple[GatheredPool, ...]
    candidates: tuple[Candidate, ...]
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
    the pod (a node's pools and candidates) or on what is in use (whether selectors match a device) is kept."""

    def __init__(self, dra: Dra) -> None:
        self.dra = dra
        self._nodes: dict[tuple[str, int], tuple[Mapping[str, str], _Node]] = {}
        self._selectable: dict[tuple[str, tuple[str, ...], str, int], tuple[Device, bool]] = {}

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
        search = _Search(self, node, node_name, claims, used)
        try:
            search.prepare()
            done = not search.hopeless() and search.one(0, 0, 0, 0, False, 0)
        except _Fatal as e:
            return AllocationFailure(kind=FailureKind.ERROR, message=str(e))
        except _TooMany:
            done = False
        if not done:
            invalid = any(p.invalid is not None for p in node.pools)
            return AllocationFailure(kind=FailureKind.UNSCHEDULABLE, message=INVALID_POOLS if invalid
                                     else CANNOT_ALLOCATE)
        try:
            return Allocated(allocations=tuple(search.result(i) for i in range(len(claims))))
        except _Fatal as e:
            return AllocationFailure(kind=FailureKind.ERROR, message=str(e))

    def selectable(self, claim: ResourceClaim, request: _Request, candidate: Candidate) -> bool:
        """`isSelectable`: the class's selectors, then the request's, all true. Raises `_Fatal` on a CEL error."""
        driver, device = candidate.id[0], candidate.device
        key = (request.device_class.name, request.body.selectors, driver, id(device))
        hit = self._selectable.get(key)
        if hit is not None and hit[0] is device:
            return hit[1]
        answer = _matches(f"class {request.device_class.name}", request.device_class.selectors, candidate, driver) \
            and _matches(f"claim {claim.key}", request.body.selectors, candidate, driver)
        if len(self._selectable) >= _SELECTABLE_KEPT:
            self._selectable.clear()
        self._selectable[key] = (device, answer)
        return answer


def _matches(owner: str, selectors: tuple[str, ...], candidate: Candidate, driver: str) -> bool:
    for i, expression in enumerate(selectors):
        compiled = cel.compile(expression)
        if isinstance(compiled, cel.CompileError):
            raise _Fatal(f"{owner}: selector #{i}: CEL compile error: {compiled.message}")
        try:
            if not compiled.matches(candidate.device, driver):
                return False
        except cel.SelectorError as e:
            device = "/".join(candidate.id)
            raise _Fatal(f"{owner}: selector #{i} on device {device}: CEL runtime error: {e.message}") from None
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


@dataclass(slots=True)
class _Entry:
    alternatives: list[_Request]
    subrequests: bool


class _Search:
    """One `Allocate` call: kube's `allocator` state (what is being allocated, constraints, counters)."""

    def __init__(self, allocator: Allocator, node: _Node, node_name: str, claims: Sequence[ResourceClaim],
                 used: InUse) -> None:
        self.allocator, self.node, self.node_name, self.claims, self.used = allocator, node, node_name, claims, used
        self.entries: list[list[_Entry]] = []
        self.constraints: list[list[Constraint]] = []
        self.allocating: dict[DeviceId, set[int]] = {}
        self.allocating_capacity: dict[DeviceId, dict[str, int]] = {}
        self.available: dict[str, dict[str, dict[str, int]]] = {}
        self.counters_used: dict[str, dict[str, dict[str, int]]] = {}
        self.results: list[list[tuple[_Request, Candidate, dict[str, int] | None]]] = [[] for _ in claims]
        self.shares = 0
        self.steps = 0

    # -- before the search ----------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """`Allocate`'s checks of each claim and request, and the devices of "All" requests."""
        for claim in self.claims:
            entries: list[_Entry] = []
            least = 0
            for request in claim.spec.requests:
                if request.first_available:
                    alternatives = [self._request(claim, request.name, sub.name, sub, admin=False)
                                    for sub in request.first_available]
                    least += min(r.count for r in alternatives)
                    entries.append(_Entry(alternatives, True))
                elif request.exactly is not None:
                    exact = self._request(claim, request.name, "", request.exactly, admin=request.exactly.admin_access)
                    least += exact.count
                    entries.append(_Entry([exact], False))
                else:
                    raise _Fatal(f"claim {claim.key}, request {request.name}: missing device class name "
                                 "(unsupported request type?)")
            if least > MAX_DEVICES_PER_CLAIM:
                raise _Fatal(f"claim {claim.key}: number of requested devices {least} exceeds the claim limit of "
                             f"{MAX_DEVICES_PER_CLAIM}")
            self.entries.append(entries)
            try:
                self.constraints.append([constraint_for(claim.key, i, c)
                                         for i, c in enumerate(claim.spec.constraints)])
            except ConstraintError as e:
                raise _Fatal(str(e)) from None

    def _request(self, claim: ResourceClaim, base: str, sub: str, body: ExactDeviceRequest, *,
                 admin: bool) -> _Request:
        short = sub or base
        device_class = self.allocator.dra.device_class(body.device_class_name)
        if device_class is None:
            name = body.device_class_name
            raise _Fatal(f"claim {claim.key}, request {short}: could not retrieve device class {name}: "
                         f"deviceclass.resource.k8s.io \"{name}\" not found")
        request = _Request(name=f"{base}/{sub}" if sub else base, base=base, sub=sub, short=short,
                           device_class=device_class, body=body, admin=admin, count=body.count)
        if body.allocation_mode is AllocationMode.ALL:
            request.all_devices = self._all_devices(claim, request)
            request.count = len(request.all_devices)
        return request

    def _all_devices(self, claim: ResourceClaim, request: _Request) -> list[Candidate]:
        for pool in self.node.pools:
            state = "being updated" if pool.incomplete else "invalid" if pool.invalid is not None else None
            if state is not None:
                raise _Fatal(f"claim {claim.key}, request {request.short}: asks for all devices, but resource pool "
                             f"{pool.pool_id} is currently {state}")
        return [c for c in self.node.candidates if self.allocator.selectable(claim, request, c)
                and self.capacity_fits(request, c)]

    def hopeless(self) -> bool:
        """Whether some request has fewer free candidates than it needs (every subrequest, for `firstAvailable`),
        judged only when no selector can fail on this node and no "All" request can raise a constraint error: then
        kube's search would end in "cannot allocate all claims" too."""
        if any(claim.spec.constraints and any(r.all_devices is not None for e in entries for r in e.alternatives)
               for claim, entries in zip(self.claims, self.entries, strict=True)):
            return False
        free = [c for c in self.node.candidates if c.id not in self.used.devices]
        try:
            short = any(all(self._candidates(claim, r, free) < r.count for r in entry.alternatives)
                        for claim, entries in zip(self.claims, self.entries, strict=True) for entry in entries)
        except _Fatal:
            return False
        return short and self._no_errors_anywhere(free)

    def _candidates(self, claim: ResourceClaim, request: _Request, free: list[Candidate]) -> int:
        if request.admin:
            return len(self.node.candidates)
        return sum(1 for c in free if self.allocator.selectable(claim, request, c))

    def _no_errors_anywhere(self, free: list[Candidate]) -> bool:
        """No selector of any request raises on the node's free candidates (in use ones are never evaluated)."""
        try:
            for claim, entries in zip(self.claims, self.entries, strict=True):
                for entry in entries:
                    for request in entry.alternatives:
                        for c in self.node.candidates if request.admin else free:
                            self.allocator.selectable(claim, request, c)
        except _Fatal:
            return False
        return True

    # -- the search (kube's allocateOne) --------------------------------------------------------------------------

    def one(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int) -> bool:
        """Allocate device `d` of request `r` (subrequest `s`) of claim `c` and everything after it; True when all
        claims are allocated. Raises `_TooMany` when this path gives a claim too many devices, `_Fatal` on errors."""
        self.steps += 1
        if self.steps > STEP_BUDGET:
            raise _Fatal(TIMED_OUT)
        if c >= len(self.claims):
            return True
        if r >= len(self.entries[c]):
            try:
                return self.one(c + 1, 0, 0, 0, False, 0)
            except _TooMany:  # another subrequest of this claim may need fewer devices
                return False
        entry = self.entries[c][r]
        if entry.subrequests and not in_sub:
            return self._first_available(c, r, d, entry)
        request = entry.alternatives[s]
        if request.all_devices is not None and not request.all_devices:
            return False
        if d >= request.count:
            return self.one(c, r + 1, 0, 0, False, 0)
        if len(self.results[c]) + request.count - d > MAX_DEVICES_PER_CLAIM:
            raise _TooMany
        if request.all_devices is not None:
            return self._next_of_all(c, r, s, d, in_sub, request)
        return self._next_device(c, r, s, d, in_sub, start, request)

    def _first_available(self, c: int, r: int, d: int, entry: _Entry) -> bool:
        every_too_many = True
        for s in range(len(entry.alternatives)):
            try:
                done = self.one(c, r, s, d, True, 0)
            except _TooMany:
                continue
            every_too_many = False
            if done:
                return True
        if every_too_many:
            raise _TooMany
        return False

    def _next_of_all(self, c: int, r: int, s: int, d: int, in_sub: bool, request: _Request) -> bool:
        assert request.all_devices is not None
        undo = self.take(c, request, request.all_devices[d], must=True)
        if undo is None:
            return False
        try:
            done = self.one(c, r, s, d + 1, in_sub, 0)
        except _TooMany:
            undo()
            raise
        if not done:
            undo()
        return done

    def _next_device(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int, request: _Request) -> bool:
        claim = self.claims[c]
        found = self.node.candidates
        for i in range(start, len(found)):
            candidate = found[i]
            if request.admin and c in self.allocating.get(candidate.id, ()):
                continue
            if not request.admin and self.in_use(candidate.id):
                continue
            if not self.allocator.selectable(claim, request, candidate) or not self.capacity_fits(request, candidate):
                continue
            undo = self.take(c, request, candidate, must=False)
            if undo is None:
                continue
            try:
                if self.one(c, r, s, d + 1, in_sub, i + 1):
                    return True
            except _TooMany:
                undo()
                raise
            undo()
        return False

    def in_use(self, device: DeviceId) -> bool:
        """`deviceInUse`: allocated exclusively, or being allocated exclusively for some claim."""
        return device in self.used.devices or bool(self.allocating.get(device))

    def capacity_fits(self, request: _Request, candidate: Candidate) -> bool:
        return fits(candidate.device, request.body.capacity_requests, self.used.shared.get(candidate.id),
                    self.allocating_capacity.get(candidate.id))

    # -- taking one device (kube's allocateDevice) ----------------------------------------------------------------

    def take(self, c: int, request: _Request, candidate: Candidate, *, must: bool) -> Callable[[], None] | None:
        """Take the device for the request if it is free, has its counters, tolerates its taints and keeps the
        claim's constraints; the function that gives it back, or None."""
        device, device_id = candidate.device, candidate.id
        shared = device.allow_multiple_allocations
        if not shared and request.admin and c in self.allocating.get(device_id, ()):
            return None
        if not request.admin and self.in_use(device_id):
            return None
        capacity_in_use = device_id in self.used.shared or device_id in self.allocating_capacity
        if device.consumes_counters and not (shared and capacity_in_use) and not self._take_counters(candidate):
            return None
        # As kube, counters taken just above are not given back when the taint or constraint checks fail.
        if any(t.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
               and not any(tol.tolerates(t) for tol in request.body.tolerations) for t in device.taints):
            return None
        constraints = self.constraints[c]
        for i, constraint in enumerate(constraints):
            if not constraint.add(request.base, request.sub, device, device_id):
                if must:
                    raise _Fatal(f"claim {self.claims[c].key}, request {request.short}: cannot add device "
                                 f"{'/'.join(device_id)} because a claim constraint would not be satisfied")
                for earlier in constraints[:i]:
                    earlier.remove(request.base, request.sub, device, device_id)
                return None
        if not shared:
            self.allocating.setdefault(device_id, set()).add(c)
        taken: dict[str, int] | None = None
        if shared:
            taken = consumption(device, request.body.capacity_requests)
            held = self.allocating_capacity.setdefault(device_id, {})
            for name, amount in taken.items():
                held[name] = held.get(name, 0) + amount
        self.results[c].append((request, candidate, taken))
        return lambda: self._give_back(c, request, candidate, taken)

    def _give_back(self, c: int, request: _Request, candidate: Candidate, taken: dict[str, int] | None) -> None:
        device, device_id = candidate.device, candidate.id
        for constraint in self.constraints[c]:
            constraint.remove(request.base, request.sub, device, device_id)
        self.allocating.get(device_id, set()).discard(c)
        if taken is not None:
            held = self.allocating_capacity[device_id]
            for name, amount in taken.items():
                held[name] -= amount
            if not any(held.values()):
                del self.allocating_capacity[device_id]
        elif device.consumes_counters:
            add_counters(self.counters_used[candidate.pool.pool_id], device, -1)
        self.results[c].pop()

    def _take_counters(self, candidate: Candidate) -> bool:
        pool = candidate.pool
        available = self.available.get(pool.pool_id)
        if available is None:
            available = self.available[pool.pool_id] = available_counters(pool, self.used.allocated)
        return take_counters(available, self.counters_used.setdefault(pool.pool_id, {}), candidate.device)

    # -- the result ----------------------------------------------------------------------------------------------

    def result(self, c: int) -> Allocation:
        devices: list[AllocatedDevice] = []
        for request, candidate, taken in self.results[c]:
            share = None
            if taken is not None:
                self.shares += 1
                share = f"gpuscale-share-{self.shares}"  # kube draws a random UID; a stand-in, unique per result
            driver, pool, name = candidate.id
            devices.append(AllocatedDevice(request=request.name, driver=driver, pool=pool, device=name,
                                           admin_access=request.admin, share_id=share,
                                           consumed_capacity=taken or {}))
        return Allocation(devices=tuple(devices), node_selector=self._node_selector(c))

    def _node_selector(self, c: int) -> tuple[NodeSelectorTerm, ...] | None:
        """`createNodeSelector`: the node by name when a device is node-local (or binds to its node), else the
        requirements of the slices' (or devices') one-term selectors, else None (available everywhere)."""
        fields: list[Requirement] = []
        expressions: list[Requirement] = []
        for _, candidate, _ in self.results[c]:
            s, d = candidate.slice, candidate.device
            node_name, selector = (d.node_name, d.node_selector) if s.per_device_node_selection \
                else (s.node_name, s.node_selector)
            if node_name or d.binds_to_node:
                return (NodeSelectorTerm(match_fields=(Requirement(key="metadata.name", operator=SelectorOperator.IN,
                                                                   values=(self.node_name,)),)),)
            if selector is None or not selector:
                continue
            if len(selector) > 1:
                raise _Fatal(f"create NodeSelector for claim {self.claims[c].name}: unsupported "
                             f"ResourceSlice.NodeSelector with {len(selector)} terms")
            _add_new(selector[0].match_fields, fields)
            _add_new(selector[0].match_expressions, expressions)
        if not fields and not expressions:
            return None
        return (NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields)),)


def _add_new(requirements: Iterable[Requirement], into: list[Requirement]) -> None:
    for requirement in requirements:
        if not any(r.key == requirement.key and r.operator == requirement.operator
                   and set(r.values) == set(requirement.values) for r in into):
            into.append(requirement)
