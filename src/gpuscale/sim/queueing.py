"""The twin's queueing layer: Kueue in front of the simulated cluster.

A job whose team has a LocalQueue is created **suspended**, as Kueue's job integration makes it: it has no pods, so
neither the scheduler nor the autoscaler sees it. The `QueueManager` admits it all-or-nothing when its ClusterQueue
has quota for every pod (the rules are in `sim.admission`); only then does the job create its pods, with the admitted
flavor's node labels added to their nodeSelector, and they go through the simulated scheduler and, if they do not fit,
the autoscaler — the same path as any pod. Quota is released when the job finishes or is evicted:

- **preemption**: a higher-priority workload of the same ClusterQueue, or a cohort member reclaiming quota lent to a
  borrower, evicts the workload: its pods are deleted, the work since the last checkpoint is lost (the job's own
  interruption accounting) and it goes back to its queue (keeping its queue position: Kueue orders preempted
  workloads by creation time);
- **waitForPodsReady**: if an admitted workload's pods are not all running `timeout` after admission, it is evicted
  and requeued after a backoff of `backoffBaseSeconds · 2^(n−1)` (capped at `backoffMaxSeconds`), ordered by the
  eviction time; after `backoffLimitCount` requeues it is deactivated and never runs.

Admission runs as an event at the instant anything changes (a job arrives, finishes or is evicted, a backoff ends),
after the workload events of that instant. Per team it measures queue wait (entering the queue → admitted), scale-up
wait (admitted → every pod running), admitted GPU-hours, preemptions and requeues.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuscale.sim.admission import Admission, Decision, QuotaBook, Request, next_decision, queue_order
from gpuscale.sim.core import Handle, Priority
from gpuscale.sim.queue_config import QueueSpec
from gpuscale.sim.result import Notable, TeamStats

if TYPE_CHECKING:
    from gpuscale.sim.workloads import Job
    from gpuscale.sim.world import World


@dataclass(frozen=True, slots=True)
class QueueEvent:
    """One change of quota, for audits: `admit` (with the pods the admission created) or `release` (`finished`,
    `Preempted`, `PodsReadyTimeout`)."""

    t_s: float
    kind: str
    key: str
    cq: str
    usage: tuple[tuple[str, str, int], ...]
    pods: tuple[str, ...] = ()
    reason: str = ""


@dataclass(slots=True)
class _Workload:
    job: Job
    key: str
    team: str
    cq: str
    created_s: float
    timestamp: float
    queued_since: float | None = None
    requeue_at: float = 0.0
    admission: Admission | None = None
    ready: bool = False
    timer: Handle | None = None
    requeues: int = 0
    deactivated: bool = False
    done: bool = False
    ever_admitted: bool = False


@dataclass(slots=True)
class _Tally:
    cluster_queues: set[str] = field(default_factory=set)
    workloads: int = 0
    admissions: int = 0
    queue_waits: list[float] = field(default_factory=list)
    scale_up_waits: list[float] = field(default_factory=list)
    admitted_gpu_seconds: float = 0.0
    borrowed: int = 0
    preemptions: int = 0
    requeues: int = 0
    deactivated: int = 0


class QueueManager:
    def __init__(self, world: World, spec: QueueSpec) -> None:
        self.world, self.spec = world, spec
        self.book = QuotaBook(spec.cluster_queues, spec.flavor_labels)
        self.workloads: dict[str, _Workload] = {}
        self.pending: dict[str, set[str]] = {q.name: set() for q in spec.cluster_queues}
        self.reasons: dict[str, str] = {}
        """Why each queued workload was not admitted at the last attempt (key → reason)."""
        self.log: list[QueueEvent] = []
        self.notable: list[Notable] = []
        self.tallies: dict[str, _Tally] = {}
        self._cycle_at: float | None = None

    # -------------------------------------------------------------------------------------------- job callbacks
    def holds(self, job: Job) -> bool:
        """Called when the job would create pods: True keeps it suspended (queued or waiting for admission)."""
        w = self._workload(job)
        if w is None or w.admission is not None:
            return False
        if w.queued_since is None and not w.deactivated:
            self._enqueue(w, w.timestamp)
        return True

    def ready(self, job: Job) -> None:
        """Every pod of the job runs (Kueue's PodsReady condition)."""
        w = self.workloads.get(self._key(job))
        if w is None or w.admission is None or w.ready:
            return
        w.ready = True
        self._tally(w).scale_up_waits.append(self.world.now - w.admission.admitted_s)
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None

    def finished(self, job: Job) -> None:
        w = self.workloads.get(self._key(job))
        if w is None:
            return
        w.done = True
        self._release(w, "finished")
        self._poke()

    # ------------------------------------------------------------------------------------------------ internals
    @staticmethod
    def _key(job: Job) -> str:
        return f"{job.spec.team}/{job.spec.name}"

    def _tally(self, w: _Workload) -> _Tally:
        return self.tallies.setdefault(w.team, _Tally())

    def _workload(self, job: Job) -> _Workload | None:
        key = self._key(job)
        w = self.workloads.get(key)
        if w is None:
            cq = self.spec.cluster_queue_of(job.spec.team, job.spec.queue)
            if cq is None:
                return None
            now = self.world.now
            w = _Workload(job=job, key=key, team=job.spec.team, cq=cq, created_s=now, timestamp=now)
            self.workloads[key] = w
            tally = self._tally(w)
            tally.workloads += 1
            tally.cluster_queues.add(cq)
        return w

    def _request(self, w: _Workload) -> Request:
        spec = w.job.spec
        return Request(key=w.key, cq=w.cq, priority=spec.priority, timestamp=w.timestamp,
                       requests=spec.requests.scale(spec.pods).as_dict(),
                       selector=dict(spec.constraints.affinity.node_selector))

    def _enqueue(self, w: _Workload, timestamp: float, delay_s: float = 0.0) -> None:
        now = self.world.now
        w.timestamp, w.queued_since, w.requeue_at = timestamp, now, now + delay_s
        self.pending[w.cq].add(w.key)
        self._poke(w.requeue_at)

    def _poke(self, at: float | None = None) -> None:
        """Run an admission cycle at `at` (now by default), once per instant."""
        when = self.world.now if at is None else at
        if when == self._cycle_at:
            return
        if when == self.world.now:
            self._cycle_at = when
        self.world.sim.at(when, Priority.WORKLOAD, self._cycle)

    def _cycle(self) -> None:
        now = self.world.now
        self._cycle_at = now  # pokes while the cycle runs are covered by its loop
        while True:
            ready = {cq: queue_order(self._request(self.workloads[k]) for k in keys
                                     if self.workloads[k].requeue_at <= now)
                     for cq, keys in self.pending.items() if keys}
            decision, reasons = next_decision(self.book, ready)
            self.reasons.update(reasons)
            if decision is None:
                self._cycle_at = None
                return
            for target in decision.targets:
                self.notable.append(Notable(t_s=now, kind="preempted", message=(
                    f"{target.key} ({target.cq}) preempted by {decision.request.key} ({decision.request.cq})")))
                self._evict(self.workloads[target.key], "Preempted")
            self._admit(self.workloads[decision.request.key], decision)

    def _admit(self, w: _Workload, decision: Decision) -> None:
        now = self.world.now
        admission = self.book.admission(decision, now)
        self.book.add(admission)
        self.pending[w.cq].discard(w.key)
        self.reasons.pop(w.key, None)
        tally = self._tally(w)
        tally.admissions += 1
        tally.borrowed += admission.borrowing
        tally.queue_waits.append(now - (w.queued_since if w.queued_since is not None else now))
        w.admission, w.queued_since, w.ready, w.ever_admitted = admission, None, False, True
        settings = self.spec.pods_ready
        if settings is not None:
            w.timer = self.world.sim.after(settings.timeout_s, Priority.WORKLOAD,
                                           lambda: self._timed_out(w, admission))
        labels: dict[str, str] = {}
        for flavor in admission.flavors:
            labels.update(self.spec.flavor_labels.get(flavor, {}))
        w.job.admit(labels)
        self.log.append(QueueEvent(now, "admit", w.key, w.cq, _usage(admission), pods=tuple(sorted(w.job.pods))))

    def _release(self, w: _Workload, reason: str) -> None:
        admission = w.admission
        if admission is None:
            return
        self.book.remove(w.key)
        w.admission = None
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        self._tally(w).admitted_gpu_seconds += (self.world.now - admission.admitted_s) * w.job.gpus
        self.log.append(QueueEvent(self.world.now, "release", w.key, w.cq, _usage(admission), reason=reason))

    def _evict(self, w: _Workload, reason: str) -> None:
        w.job.suspend()
        self._release(w, reason)
        if reason == "Preempted":
            self._tally(w).preemptions += 1
            self._enqueue(w, w.timestamp)

    def _timed_out(self, w: _Workload, admission: Admission) -> None:
        if w.admission is not admission or w.ready:
            return
        w.timer = None
        self._evict(w, "PodsReadyTimeout")
        w.requeues += 1
        tally = self._tally(w)
        tally.requeues += 1
        settings = self.spec.pods_ready
        assert settings is not None
        message = f"{w.key} ({w.cq}): pods not ready {settings.timeout_s:.0f}s after admission"
        if settings.backoff_limit is not None and w.requeues > settings.backoff_limit:
            w.deactivated = True
            tally.deactivated += 1
            self.notable.append(Notable(t_s=self.world.now, kind="deactivated", message=(
                f"{message}; deactivated after {w.requeues} requeues")))
        else:
            delay = settings.backoff_s(w.requeues)
            self.notable.append(Notable(t_s=self.world.now, kind="requeued", message=(
                f"{message}; requeued, backoff {delay:.0f}s")))
            self._enqueue(w, self.world.now, delay)
        self._poke()

    # ---------------------------------------------------------------------------------------------------- result
    def still_queued(self) -> list[Notable]:
        """At the end of the run, each workload still queued and why it was not admitted at its last attempt."""
        now = self.world.now
        return [Notable(t_s=now, kind="queued", message=(
            f"{w.key} ({w.cq}) still queued: {self.reasons.get(w.key) or 'waiting for its backoff to end'}"))
            for w in sorted(self.workloads.values(), key=lambda w: w.key)
            if w.queued_since is not None and not w.deactivated]

    def result(self) -> dict[str, TeamStats]:
        """Per team, at the end of the run (admitted GPU-hours of workloads still admitted count up to now)."""
        now = self.world.now
        open_seconds: dict[str, float] = {}
        still: dict[str, int] = {}
        never: dict[str, int] = {}
        for w in self.workloads.values():
            if w.admission is not None:
                open_seconds[w.team] = open_seconds.get(w.team, 0.0) + (now - w.admission.admitted_s) * w.job.gpus
            if w.queued_since is not None and not w.deactivated:
                still[w.team] = still.get(w.team, 0) + 1
            if not w.ever_admitted:
                never[w.team] = never.get(w.team, 0) + 1
        return {team: TeamStats(
            cluster_queues=tuple(sorted(t.cluster_queues)), workloads=t.workloads, admissions=t.admissions,
            queue_wait_s=tuple(t.queue_waits), scale_up_wait_s=tuple(t.scale_up_waits),
            admitted_gpu_hours=(t.admitted_gpu_seconds + open_seconds.get(team, 0.0)) / 3600,
            borrowed_admissions=t.borrowed, preemptions=t.preemptions, requeues=t.requeues,
            deactivated=t.deactivated, still_queued=still.get(team, 0), never_admitted=never.get(team, 0))
            for team, t in sorted(self.tallies.items())}


def _usage(admission: Admission) -> tuple[tuple[str, str, int], ...]:
    return tuple(sorted((f, r, n) for (f, r), n in admission.usage.items()))
