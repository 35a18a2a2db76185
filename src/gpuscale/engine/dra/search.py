"""One allocation's search, as kube's structured allocator runs it (`allocator.allocateOne` and `allocateDevice`):
what is being allocated, the claims' constraints, the counters taken, and the results with their node selector. The
entry point and the caches around it are `engine/dra/allocate.py`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuscale.engine.dra.capacity import add_counters, available_counters, consumption, fits, take_counters
from gpuscale.engine.dra.constraints import Constraint, ConstraintError, constraint_for
from gpuscale.engine.dra.inuse import InUse
from gpuscale.engine.dra.pools import Candidate, DeviceId, GatheredPool
from gpuscale.model.dra import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    DeviceClass,
    Dra,
    ExactDeviceRequest,
    ResourceClaim,
    TaintEffect,
)
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator

MAX_DEVICES_PER_CLAIM = 32
"""`AllocationResultsMaxSize`."""
TIMED_OUT = "timed out trying to allocate devices"
STEP_BUDGET = 1_000_000
"""Search steps (kube's `allocateOne` calls) one allocation may take before it gives up as kube-scheduler's filter
timeout does (10 s, `DRASchedulerFilterTimeout`, on by default): the engine has no clock, and a million steps take
a few seconds here. Go takes more steps in 10 s, so a search between this budget and kube's may succeed there."""


class Fatal(Exception):
    """An error kube's allocator returns: the pod's scheduling attempt stops."""


class TooMany(Exception):
    """`errAllocationResultMaxSizeExceeded`: this path would give a claim more than 32 devices."""


@dataclass(slots=True, kw_only=True)
class Request:
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




@dataclass(slots=True, kw_only=True)
class _Taken:
    """What taking one device changed, to give it back (kube's `deviceRollbackState`)."""

    c: int
    request: Request
    candidate: Candidate
    counted: bool
    constraints: int = 0
    marked: bool = False
    capacity: dict[str, int] | None = None
    capacity_existed: bool = False
    result: bool = False


class Selecting(Protocol):
    """What the search asks of its allocator: the snapshot, and whether a device passes a request's selectors."""

    @property
    def dra(self) -> Dra: ...

    def selectable(self, claim: ResourceClaim, request: Request, candidate: Candidate) -> bool: ...


@dataclass(slots=True, kw_only=True)
class NodeDevices:
    """A node's pools and its candidates in search order."""

    pools: tuple[GatheredPool, ...]
    candidates: tuple[Candidate, ...]


@dataclass(slots=True)
class Entry:
    alternatives: list[Request]
    subrequests: bool


class Search:
    """One `Allocate` call: kube's `allocator` state (what is being allocated, constraints, counters)."""

    def __init__(self, allocator: Selecting, node: NodeDevices, node_name: str, claims: Sequence[ResourceClaim],
                 used: InUse) -> None:
        self.allocator, self.node, self.node_name, self.claims, self.used = allocator, node, node_name, claims, used
        self.entries: list[list[Entry]] = []
        self.constraints: list[list[Constraint]] = []
        self.allocating: dict[DeviceId, set[int]] = {}
        self.allocating_capacity: dict[DeviceId, dict[str, int]] = {}
        self.available: dict[str, dict[str, dict[str, int]]] = {}
        self.counters_used: dict[str, dict[str, dict[str, int]]] = {}
        self.results: list[list[tuple[Request, Candidate, dict[str, int] | None]]] = [[] for _ in claims]
        self.shares = 0
        self.steps = 0

    # -- before the search ----------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """`Allocate`'s checks of each claim and request, and the devices of "All" requests."""
        for claim in self.claims:
            entries: list[Entry] = []
            least = 0
            for request in claim.spec.requests:
                if request.first_available:
                    alternatives = [self._request(claim, request.name, sub.name, sub, admin=False)
                                    for sub in request.first_available]
                    entries.append(Entry(alternatives, True))
                elif request.exactly is not None:
                    alternatives = [self._request(claim, request.name, "", request.exactly,
                                                  admin=request.exactly.admin_access)]
                    entries.append(Entry(alternatives, False))
                else:
                    raise Fatal(f"claim {claim.key}, request {request.name}: missing device class name "
                                 "(unsupported request type?)")
                fewest = min(r.count for r in alternatives)
                if fewest > MAX_DEVICES_PER_CLAIM - least:
                    raise Fatal(f"claim {claim.key}, request {request.name}: adding {fewest} devices exceeds the claim "
                                f"limit of {MAX_DEVICES_PER_CLAIM}, with {least} already accounted for")
                least += fewest
            self.entries.append(entries)
            try:
                self.constraints.append([constraint_for(claim.key, i, c)
                                         for i, c in enumerate(claim.spec.constraints)])
            except ConstraintError as e:
                raise Fatal(str(e)) from None

    def _request(self, claim: ResourceClaim, base: str, sub: str, body: ExactDeviceRequest, *,
                 admin: bool) -> Request:
        short = sub or base
        device_class = self.allocator.dra.device_class(body.device_class_name)
        if device_class is None:
            name = body.device_class_name
            raise Fatal(f"claim {claim.key}, request {short}: could not retrieve device class {name}: "
                         f"deviceclass.resource.k8s.io \"{name}\" not found")
        request = Request(name=f"{base}/{sub}" if sub else base, base=base, sub=sub, short=short,
                           device_class=device_class, body=body, admin=admin, count=body.count)
        if body.allocation_mode is AllocationMode.ALL:
            request.all_devices = self._all_devices(claim, request)
            request.count = len(request.all_devices)
        return request

    def _all_devices(self, claim: ResourceClaim, request: Request) -> list[Candidate]:
        for pool in self.node.pools:
            state = "being updated" if pool.incomplete else "invalid" if pool.invalid is not None else None
            if state is not None:
                raise Fatal(f"claim {claim.key}, request {request.short}: asks for all devices, but resource pool "
                             f"{pool.pool_id} is currently {state}")
        return [c for c in self.node.candidates if self.allocator.selectable(claim, request, c)
                and fits(c.device, request.body.capacity_requests, None, None)]

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
        except Fatal:
            return False
        return short and self._no_errors_anywhere(free)

    def _candidates(self, claim: ResourceClaim, request: Request, free: list[Candidate]) -> int:
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
        except Fatal:
            return False
        return True

    # -- the search (kube's allocateOne) --------------------------------------------------------------------------

    def one(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int) -> bool:
        """Allocate device `d` of request `r` (subrequest `s`) of claim `c` and everything after it; True when all
        claims are allocated. Raises `TooMany` when this path gives a claim too many devices, `Fatal` on errors."""
        self.steps += 1
        if self.steps > STEP_BUDGET:
            raise Fatal(TIMED_OUT)
        if c >= len(self.claims):
            return True
        if r >= len(self.entries[c]):
            try:
                return self.one(c + 1, 0, 0, 0, False, 0)
            except TooMany:  # another subrequest of this claim may need fewer devices
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
            raise TooMany
        if request.all_devices is not None:
            return self._next_of_all(c, r, s, d, in_sub, request)
        return self._next_device(c, r, s, d, in_sub, start, request)

    def _first_available(self, c: int, r: int, d: int, entry: Entry) -> bool:
        every_too_many = True
        for s in range(len(entry.alternatives)):
            try:
                done = self.one(c, r, s, d, True, 0)
            except TooMany:
                continue
            every_too_many = False
            if done:
                return True
        if every_too_many:
            raise TooMany
        return False

    def _next_of_all(self, c: int, r: int, s: int, d: int, in_sub: bool, request: Request) -> bool:
        assert request.all_devices is not None
        undo = self.take(c, request, request.all_devices[d], must=True)
        if undo is None:
            return False
        try:
            done = self.one(c, r, s, d + 1, in_sub, 0)
        except TooMany:
            undo()
            raise
        if not done:
            undo()
        return done

    def _next_device(self, c: int, r: int, s: int, d: int, in_sub: bool, start: int, request: Request) -> bool:
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
            except TooMany:
                undo()
                raise
            undo()
        return False

    def in_use(self, device: DeviceId) -> bool:
        """`deviceInUse`: allocated exclusively, or being allocated exclusively for some claim."""
        return device in self.used.devices or bool(self.allocating.get(device))

    def capacity_fits(self, request: Request, candidate: Candidate) -> bool:
        return fits(candidate.device, request.body.capacity_requests, self.used.shared.get(candidate.id),
                    self.allocating_capacity.get(candidate.id))

    # -- taking one device (kube's allocateDevice) ----------------------------------------------------------------

    def take(self, c: int, request: Request, candidate: Candidate, *, must: bool) -> Callable[[], None] | None:
        """Take the device for the request if it is free, has its counters, tolerates its taints, keeps the claim's
        constraints and fits its capacity; the function that gives it back, or None (everything taken on the way
        given back, as kube's `rollbackDevice` does)."""
        device, device_id = candidate.device, candidate.id
        shared = device.allow_multiple_allocations
        if not shared and request.admin and c in self.allocating.get(device_id, ()):
            return None
        if not request.admin and self.in_use(device_id):
            return None
        capacity_in_use = device_id in self.used.shared or device_id in self.allocating_capacity
        counted = bool(device.consumes_counters) and not (shared and capacity_in_use)
        if counted and not self._take_counters(candidate):
            return None
        taken = _Taken(c=c, request=request, candidate=candidate, counted=counted)
        if any(t.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
               and not any(tol.tolerates(t) for tol in request.body.tolerations) for t in device.taints):
            self._give_back(taken)
            return None
        for constraint in self.constraints[c]:
            if not constraint.add(request.base, request.sub, device, device_id):
                self._give_back(taken)
                if must:
                    raise Fatal(f"claim {self.claims[c].key}, request {request.short}: cannot add device "
                                 f"{'/'.join(device_id)} because a claim constraint would not be satisfied")
                return None
            taken.constraints += 1
        if not shared:
            self.allocating.setdefault(device_id, set()).add(c)
            taken.marked = True
        if not self.capacity_fits(request, candidate):
            self._give_back(taken)
            return None
        if shared:
            taken.capacity = consumption(device, request.body.capacity_requests)
            taken.capacity_existed = device_id in self.allocating_capacity
            held = self.allocating_capacity.setdefault(device_id, {})
            for name, amount in taken.capacity.items():
                held[name] = held.get(name, 0) + amount
        self.results[c].append((request, candidate, taken.capacity))
        taken.result = True
        return lambda: self._give_back(taken)

    def _give_back(self, taken: _Taken) -> None:
        device, device_id = taken.candidate.device, taken.candidate.id
        if taken.result:
            self.results[taken.c].pop()
        if taken.capacity is not None:
            held = self.allocating_capacity[device_id]
            for name, amount in taken.capacity.items():
                held[name] -= amount
            if not taken.capacity_existed:
                del self.allocating_capacity[device_id]
        if taken.marked:
            self.allocating[device_id].discard(taken.c)
        for constraint in reversed(self.constraints[taken.c][:taken.constraints]):
            constraint.remove(taken.request.base, taken.request.sub, device, device_id)
        if taken.counted:
            add_counters(self.counters_used[taken.candidate.pool.pool_id], device, -1)

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
                raise Fatal(f"create NodeSelector for claim {self.claims[c].name}: unsupported "
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
