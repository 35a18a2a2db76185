"""Kueue's admission rules as pure functions: quota per ClusterQueue and flavor, cohort borrowing and lending, flavor
assignment, preemption targets and queue order. The twin's queueing layer (`sim.queueing`) asks; this module answers.

No clock, no randomness, no I/O: every decision is a function of the `QuotaBook` (what is admitted now) and the
request, so the same state always gives the same answer. The model follows Kueue's `ClusterQueue` API (v1beta1):

- Quota is per (flavor, resource). A ClusterQueue without a cohort uses at most its `nominalQuota`.
- In a cohort, a queue's *guaranteed* part is `nominalQuota − lendingLimit` (all of it lendable when `lendingLimit` is
  unset); usage above the guaranteed part draws from the cohort's pool, the sum of the members' lendable parts.
  A queue may not go past `nominalQuota + borrowingLimit` (no limit when unset).
- Flavor assignment walks each resource group's flavors in order and takes the first one the workload fits, borrowing
  if it must (`flavorFungibility.whenCanBorrow: Borrow`); failing that, the first one where preemption could make room
  (`whenCanPreempt: TryNextFlavor`). A flavor whose `nodeLabels` contradict the pods' nodeSelector is skipped.
- Preemption (`borrowWithinCohort: Never`): the preemptor must fit within its *nominal* quota once the targets are
  gone. Candidates are admitted workloads of the same queue allowed by `withinClusterQueue`, and workloads of borrowing
  cohort members allowed by `reclaimWithinCohort`; they are taken in Kueue's order (other queues first, then lower
  priority, then the most recently admitted) until the preemptor fits, then any target not needed is given back.
- Queue order: priority (higher first), then the queue-order timestamp (creation, or the last eviction).
  `StrictFIFO` stops at the first workload that cannot be admitted; `BestEffortFIFO` looks past it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

Key = tuple[str, str]
"""(flavor, resource)."""


class PreemptionPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    ANY = "Any"


class QueueingStrategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def lendable(self) -> int:
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorQuotas:
    flavor: str
    quotas: Mapping[str, Quota]
    """resource → quota."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueue:
    name: str
    cohort: str | None = None
    groups: tuple[ResourceGroup, ...] = ()
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    within: PreemptionPolicy = PreemptionPolicy.NEVER
    reclaim: PreemptionPolicy = PreemptionPolicy.NEVER

    def quota(self, key: Key) -> Quota:
        flavor, resource = key
        for group in self.groups:
            for fq in group.flavors:
                if fq.flavor == flavor and resource in fq.quotas:
                    return fq.quotas[resource]
        return Quota(nominal=0, borrowing_limit=0, lending_limit=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A pending workload as the admission rules see it: all its pods' requests summed (all-or-nothing)."""

    key: str
    cq: str
    priority: int
    timestamp: float
    """Queue-order timestamp: creation, or the last eviction (`requeuingStrategy.timestamp: Eviction`)."""
    requests: Mapping[str, int]
    selector: Mapping[str, str] = field(default_factory=dict)
    """The pods' nodeSelector, checked against each flavor's nodeLabels."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    key: str
    cq: str
    priority: int
    timestamp: float
    admitted_s: float
    usage: Mapping[Key, int]
    flavors: tuple[str, ...]
    borrowing: bool


class Mode(StrEnum):
    FIT = "Fit"
    PREEMPT = "Preempt"


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    usage: Mapping[Key, int]
    flavors: tuple[str, ...]
    mode: Mode


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What to do with one request: admit it (after evicting `targets`, if any), or leave it queued for `reason`."""

    request: Request
    assignment: Assignment | None = None
    targets: tuple[Admission, ...] = ()
    reason: str = ""

    @property
    def admissible(self) -> bool:
        return self.assignment is not None


class QuotaBook:
    """The admitted workloads and their usage per ClusterQueue, with the quota arithmetic over them."""

    def __init__(self, queues: Iterable[ClusterQueue], flavor_labels: Mapping[str, Mapping[str, str]]) -> None:
        self.queues = {q.name: q for q in queues}
        self.flavor_labels = flavor_labels
        self.admitted: dict[str, Admission] = {}
        self.usage: dict[str, dict[Key, int]] = {name: {} for name in self.queues}
        self.cohorts: dict[str, tuple[str, ...]] = {}
        self.version = 0
        """Bumped by every `add` and `remove`: a decision made at one version holds until the next."""
        self._decided: dict[str, tuple[int, Request, Decision]] = {}
        for q in sorted(self.queues.values(), key=lambda q: q.name):
            if q.cohort is not None:
                self.cohorts[q.cohort] = (*self.cohorts.get(q.cohort, ()), q.name)

    # ---------------------------------------------------------------------------------------------- bookkeeping
    def add(self, admission: Admission) -> None:
        self.version += 1
        self.admitted[admission.key] = admission
        used = self.usage[admission.cq]
        for key, amount in admission.usage.items():
            used[key] = used.get(key, 0) + amount

    def remove(self, key: str) -> Admission | None:
        admission = self.admitted.pop(key, None)
        if admission is not None:
            self.version += 1
            used = self.usage[admission.cq]
            for k, amount in admission.usage.items():
                used[k] -= amount
                if not used[k]:
                    del used[k]
        return admission

    def members(self, cq: str) -> tuple[str, ...]:
        cohort = self.queues[cq].cohort
        return self.cohorts[cohort] if cohort is not None else (cq,)

    def _used(self, cq: str, key: Key, without: Collection[Admission]) -> int:
        return self.usage[cq].get(key, 0) - sum(a.usage.get(key, 0) for a in without if a.cq == cq)

    def borrowing(self, cq: str, keys: Iterable[Key] | None = None,
                  without: Collection[Admission] = ()) -> bool:
        """Whether `cq` uses more than its nominal quota of any of `keys` (all it uses when None)."""
        queue = self.queues[cq]
        return any(self._used(cq, k, without) > queue.quota(k).nominal
                   for k in (self.usage[cq] if keys is None else keys))

    def would_borrow(self, cq: str, usage: Mapping[Key, int], without: Collection[Admission] = ()) -> bool:
        """Whether taking `usage` more (with `without` gone) puts `cq` above its nominal quota of some resource."""
        queue = self.queues[cq]
        return any(self._used(cq, k, without) + n > queue.quota(k).nominal for k, n in usage.items())

    def fits(self, cq: str, usage: Mapping[Key, int], without: Collection[Admission] = (),
             borrow: bool = True) -> bool:
        """Whether `cq` can take `usage` more, with the admissions in `without` gone; `borrow=False` keeps it within
        its nominal quota."""
        queue = self.queues[cq]
        for key, amount in usage.items():
            quota = queue.quota(key)
            total = self._used(cq, key, without) + amount
            if total <= quota.nominal:
                if queue.cohort is None or self._cohort_fits(cq, key, amount, without):
                    continue
                return False
            if not borrow or queue.cohort is None:
                return False
            if quota.borrowing_limit is not None and total > quota.nominal + quota.borrowing_limit:
                return False
            if not self._cohort_fits(cq, key, amount, without):
                return False
        return True

    def _cohort_fits(self, cq: str, key: Key, amount: int, without: Collection[Admission]) -> bool:
        """Usage within the guaranteed part always fits; what `amount` adds above it must fit in the cohort's pool
        (the members' lendable parts) together with what the other members draw from it."""
        pool = drawn = 0
        for member in self.members(cq):
            quota = self.queues[member].quota(key)
            guaranteed = quota.nominal - quota.lendable
            used = self._used(member, key, without)
            pool += quota.lendable
            if member == cq:
                if used + amount <= guaranteed:
                    return True
                used += amount
            drawn += max(0, used - guaranteed)
        return drawn <= pool

    def available(self, cq: str, key: Key) -> int:
        """How much more of `key` `cq` could take now, borrowing included (the largest amount `fits` accepts)."""
        queue = self.queues[cq]
        quota = queue.quota(key)
        used = self._used(cq, key, ())
        if queue.cohort is None:
            return max(quota.nominal - used, 0)
        pool = drawn_by_others = 0
        for member in self.members(cq):
            q = self.queues[member].quota(key)
            pool += q.lendable
            if member != cq:
                drawn_by_others += max(0, self._used(member, key, ()) - (q.nominal - q.lendable))
        room = (quota.nominal - quota.lendable) - used + max(pool - drawn_by_others, 0)
        if quota.borrowing_limit is not None:
            room = min(room, quota.nominal + quota.borrowing_limit - used)
        return max(room, 0)

    # ----------------------------------------------------------------------------------------------- decisions
    def assign(self, request: Request) -> tuple[Assignment | None, str]:
        """Flavors for the request's resources, one per resource group it uses; (None, why) if none can work."""
        queue = self.queues[request.cq]
        usage: dict[Key, int] = {}
        flavors: list[str] = []
        mode = Mode.FIT
        preempting = queue.within is not PreemptionPolicy.NEVER or queue.reclaim is not PreemptionPolicy.NEVER
        for group in queue.groups:
            wanted = {r: request.requests[r] for r in group.covered if request.requests.get(r, 0) > 0}
            if not wanted:
                continue
            fit = preempt = None
            why = ""
            for fq in group.flavors:
                labels = self.flavor_labels.get(fq.flavor, {})
                clash = [k for k, v in request.selector.items() if k in labels and labels[k] != v]
                if clash:
                    why = why or f"flavor {fq.flavor} does not match the pods' nodeSelector {clash[0]}"
                    continue
                want = {(fq.flavor, r): n for r, n in wanted.items()}
                if self.fits(request.cq, want):
                    fit = want
                    break
                if preempting and preempt is None and all(n <= queue.quota(k).nominal for k, n in want.items()):
                    preempt = want
                if not why or why.startswith("flavor"):
                    short = next(k for k, n in want.items() if not self.fits(request.cq, {k: n}))
                    why = (f"insufficient quota for {short[1]} in flavor {short[0]}: needs {want[short]}, "
                           f"{self.available(request.cq, short)} available")
            chosen = fit if fit is not None else preempt
            if chosen is None:
                return None, why or "no flavor covers the request"
            if fit is None:
                mode = Mode.PREEMPT
            usage.update(chosen)
            flavors.append(next(iter(chosen))[0])
        return Assignment(usage=usage, flavors=tuple(flavors), mode=mode), ""

    def _candidates(self, request: Request, keys: Collection[Key]) -> list[Admission]:
        queue = self.queues[request.cq]
        found = []
        for a in self.admitted.values():
            if not any(k in a.usage for k in keys):
                continue
            if a.cq == request.cq:
                policy = queue.within
            elif self.queues[a.cq].cohort is not None and self.queues[a.cq].cohort == queue.cohort:
                policy = queue.reclaim
                if not self.borrowing(a.cq, keys):
                    continue
            else:
                continue
            if _allows(policy, a, request):
                found.append(a)
        # Kueue's order: other queues' (borrowing) workloads first, then lower priority, then the newest admission.
        return sorted(found, key=lambda a: (a.cq == request.cq, a.priority, -a.admitted_s, a.key))

    def targets(self, request: Request, assignment: Assignment) -> tuple[Admission, ...] | None:
        """The fewest admitted workloads to evict so the request fits within its nominal quota; None if no set does."""
        keys = set(assignment.usage)
        chosen: list[Admission] = []
        for candidate in self._candidates(request, keys):
            if candidate.cq != request.cq and not self.borrowing(candidate.cq, keys, chosen):
                continue  # that queue no longer borrows once the earlier targets are gone
            chosen.append(candidate)
            if self.fits(request.cq, assignment.usage, chosen, borrow=False):
                break
        else:
            return None
        for candidate in reversed(chosen[:-1]):  # give back every target the request does not need
            rest = [a for a in chosen if a is not candidate]
            if self.fits(request.cq, assignment.usage, rest, borrow=False):
                chosen = rest
        return tuple(chosen)

    def decide(self, request: Request) -> Decision:
        """Admit (maybe after preempting), or why not; remembered until the book changes."""
        cached = self._decided.get(request.key)
        if cached is not None and cached[0] == self.version and cached[1] == request:
            return cached[2]
        decision = self._decide(request)
        self._decided[request.key] = (self.version, request, decision)
        return decision

    def _decide(self, request: Request) -> Decision:
        assignment, why = self.assign(request)
        if assignment is None:
            return Decision(request=request, reason=why)
        if assignment.mode is Mode.FIT:
            return Decision(request=request, assignment=assignment)
        targets = self.targets(request, assignment)
        if targets is None:
            short = next(k for k, n in assignment.usage.items() if not self.fits(request.cq, {k: n}))
            return Decision(request=request, reason=(
                f"insufficient quota for {short[1]} in flavor {short[0]}: needs {assignment.usage[short]}, "
                f"{self.available(request.cq, short)} available, and nothing to preempt"))
        return Decision(request=request, assignment=assignment, targets=targets)

    def admission(self, decision: Decision, now: float) -> Admission:
        """The admission a positive decision makes, once its targets are gone."""
        assert decision.assignment is not None
        request = decision.request
        borrowing = self.would_borrow(request.cq, decision.assignment.usage)
        return Admission(key=request.key, cq=request.cq, priority=request.priority, timestamp=request.timestamp,
                         admitted_s=now, usage=decision.assignment.usage, flavors=decision.assignment.flavors,
                         borrowing=borrowing)


def _allows(policy: PreemptionPolicy, victim: Admission, request: Request) -> bool:
    if policy is PreemptionPolicy.NEVER:
        return False
    if policy is PreemptionPolicy.ANY or victim.priority < request.priority:
        return True
    return (policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY and victim.priority == request.priority
            and victim.timestamp > request.timestamp)


def queue_order(requests: Iterable[Request]) -> list[Request]:
    """Kueue's order within a ClusterQueue: higher priority first, then the older queue-order timestamp."""
    return sorted(requests, key=lambda r: (-r.priority, r.timestamp, r.key))


def next_decision(book: QuotaBook, pending: Mapping[str, Sequence[Request]]) -> tuple[Decision | None,
                                                                                          dict[str, str]]:
    """One scheduling step: each ClusterQueue's head (the first admissible workload in queue order; under StrictFIFO
    only the first workload), then among the heads the one Kueue's cycle takes first (not borrowing, higher priority,
    older). Also returns why each workload looked at could not be admitted (key → reason)."""
    heads: list[tuple[tuple[bool, int, float, str], Decision]] = []
    reasons: dict[str, str] = {}
    for cq in sorted(pending):
        strategy = book.queues[cq].strategy
        for request in pending[cq]:
            decision = book.decide(request)
            if decision.admissible:
                assert decision.assignment is not None
                borrows = book.would_borrow(cq, decision.assignment.usage, decision.targets)
                heads.append(((borrows, -request.priority, request.timestamp, request.key), decision))
                break
            reasons[request.key] = decision.reason
            if strategy is QueueingStrategy.STRICT_FIFO:
                break
    if not heads:
        return None, reasons
    return min(heads, key=lambda h: h[0])[1], reasons
