"""The twin's world: simulation, cluster, scheduler, cloud, workloads and the measurements, wired together.

Pods go created → (scheduler attempt, maybe Unschedulable) → bound → image pulled → running, with the pull time from
the image size and the node's sampled pull throughput (an image already on the node, or being pulled there, is not
pulled twice) and the container start time from the node's pool profile (its warm start when the image was on the
node already at bind). The `Metrics` object records each pod's
milestones so its pending→running time splits into the phases of `gpuscale.lifecycle.phases`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import is_
from typing import TYPE_CHECKING

import numpy as np

from gpuscale.engine.plan import Plan, PodVerdict
from gpuscale.lifecycle.phases import Milestone, with_node
from gpuscale.lifecycle.trace import build_trace
from gpuscale.loop.trace import blocked_pods
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.sim.cloud import NodeTimeline, SimCloud
from gpuscale.sim.cluster import SimCluster, Termination, pod_gpus
from gpuscale.sim.core import Priority, Simulation, replaced
from gpuscale.sim.hindsight import HindsightBound
from gpuscale.sim.result import REQUEUED, PodRecord
from gpuscale.sim.scheduler import SimScheduler
from gpuscale.sim.workloads import Workload

if TYPE_CHECKING:
    from gpuscale.sim.queueing import QueueManager


@dataclass(slots=True)
class _PodTrack:
    pod: Pod
    workload: str
    team: str
    times: dict[Milestone, float] = field(default_factory=dict)
    blocked_since: float | None = None
    blocked_s: float = 0.0
    blocked_reason: str | None = None
    node: str | None = None
    withdrawn: bool = False
    held: tuple[str, float] | None = None
    """Pool and GPUs the pod counts in `allocated` (and the hindsight bound) since it was bound."""
    gpus: float | None = None
    """GPUs the pod holds since it was bound (`SimCluster.gpus_of`: its requests and its claims' GPUs); `None`: not
    bound yet."""
    job: str = ""
    """`team/name` of the Job the pod belongs to; empty for pods of other workloads."""
    waiting_since: float | None = None
    """When the pod's Job began waiting: its first submission, or its last interruption after it had run; `None`:
    the pod's creation."""
    useful_since: float | None = None
    """Since when the pod counts in `useful`: every pod of its Job (or the pod itself, for a service) Running."""


class Metrics:
    def __init__(self, gpus_per_node: Mapping[str, int] | None = None) -> None:
        self.tracks: dict[str, _PodTrack] = {}
        self.records: list[PodRecord] = []
        self.evictions = 0
        self.lost_gpu_seconds = 0.0
        self.allocated_gpu_seconds: dict[str, float] = {}
        self.useful_gpu_seconds: dict[str, float] = {}
        self.hindsight = HindsightBound(gpus_per_node or {})
        self.stockouts = 0
        self.created_count = 0
        """Tracks made so far (`created`): a new track under a key `block_waiting` already walked is a new count."""
        self._walked: tuple[PodVerdict, ...] | None = None
        self._walked_at_count = -1
        """The unplaceable verdicts `block_waiting` last walked (held, so their ids stay theirs) and `created_count`
        then."""

    def created(self, pod: Pod, now: float, job: str = "", waiting_since: float | None = None) -> None:
        workload = pod.labels.get("gpuscale.io/workload", "other")
        self.tracks[pod.key] = _PodTrack(pod, workload, pod.namespace, {Milestone.CREATED: now}, job=job,
                                         waiting_since=waiting_since)
        self.created_count += 1

    def block_waiting(self, plan: Plan, now: float) -> None:
        """`blocked` for every pod `loop.trace.blocked_pods(plan)` names, with its reason; at once when that would
        change nothing: the plan's unplaceable verdicts are the very objects the last call walked (late in the week
        ≈ 26 pods wait at every tick with the verdicts the engine keeps per pod) and no track was made since.

        Why nothing changes then: the same verdicts name the same pods with the same reasons, and the last walk left
        each named pod's track absent, decided, or blocked. None of that is undone without a new track: a block ends
        only when the pod is decided (`decided`, which also makes `blocked` a no-op for good), a track that left is
        gone, and only `created` makes one (a pod re-created under the same key, which `created_count` shows)."""
        verdicts = plan.unplaceable
        walked = self._walked
        if (walked is not None and self._walked_at_count == self.created_count and len(verdicts) == len(walked)
                and all(map(is_, verdicts, walked))):
            return
        for key, reason in blocked_pods(plan):
            self.blocked(key, now, reason)
        self._walked, self._walked_at_count = verdicts, self.created_count

    def decided(self, key: str, now: float) -> None:
        track = self.tracks.get(key)
        if track is not None and Milestone.DECIDED not in track.times:
            track.times[Milestone.DECIDED] = now
            self.unblocked(key, now)

    def unschedulable(self, pod: Pod, now: float) -> None:
        track = self.tracks.get(pod.key)
        if track is not None:
            track.times.setdefault(Milestone.UNSCHEDULABLE, now)

    def blocked(self, key: str, now: float, reason: str | None = None) -> None:
        track = self.tracks.get(key)
        if track is not None and track.blocked_since is None and Milestone.DECIDED not in track.times:
            track.blocked_since = now
            track.blocked_reason = reason or track.blocked_reason

    def unblocked(self, key: str, now: float) -> None:
        track = self.tracks.get(key)
        if track is not None and track.blocked_since is not None:
            track.blocked_s += now - track.blocked_since
            track.blocked_since = None


class World:
    def __init__(self, *, sim: Simulation, cluster: SimCluster, scheduler: SimScheduler, cloud: SimCloud,
                 rng: np.random.Generator, gpu_names: Mapping[str, int] | None = None) -> None:
        self.sim, self.cluster, self.scheduler, self.cloud, self.rng = sim, cluster, scheduler, cloud, rng
        self.metrics = Metrics({name: spec.pool.node_gpus() for name, spec in cloud.pools.items()})
        self.owners: dict[str, Workload] = {}
        self._images: dict[str, dict[int, float]] = {}
        """node → image size → time the image is (or will be) on the node."""
        self.queues: QueueManager | None = None
        """The Kueue-like queueing layer, when the scenario has one (`sim.queueing`)."""
        cluster.on_terminated = self._terminated
        cluster.on_node_removed = self._node_removed

    @property
    def now(self) -> float:
        return self.sim.now

    # ------------------------------------------------------------------------------------------------ pods
    def create_pod(self, pod: Pod, owner: Workload, *, job: str = "", waiting_since: float | None = None) -> None:
        """`job` and `waiting_since` for a Job's pods: the Job's `team/name` and when it began waiting."""
        if pod.constraints.resource_claims:  # the ResourceClaim controller creates its template claims
            pod = self.cluster.dra.pod_created(pod)
        self.owners[pod.key] = owner
        self.metrics.created(pod, self.now, job, waiting_since)
        self.cluster.put_pod(pod)

    def useful(self, keys: Iterable[str]) -> None:
        """These pods count in `useful` GPU-hours from now until they leave: every pod of their job is Running."""
        tracks = self.metrics.tracks
        for key in keys:
            track = tracks.get(key)
            if track is not None and track.useful_since is None:
                track.useful_since = self.now

    def withdraw_pod(self, key: str) -> None:
        """The owner deletes its pod (scale-in, job requeue): not an eviction."""
        pod = self.cluster.delete_pod(key)
        if pod is not None:
            self._account(pod)
        track = self.metrics.tracks.get(key)
        if track is not None:
            track.withdrawn = True
            self._finish_record(key)
        self.owners.pop(key, None)

    def complete_pod(self, key: str) -> None:
        pod = self.cluster.delete_pod(key)
        if pod is not None:
            self._account(pod)
        self._finish_record(key)
        self.owners.pop(key, None)

    def bound(self, pod: Pod, node: Node) -> None:
        """Scheduler callback: pull the image (if not on the node yet), then start the container."""
        track = self.metrics.tracks.get(pod.key)
        timeline = self.cloud.timeline_of(node.name)
        if track is not None:
            track.times[Milestone.BOUND] = self.now
            track.node = node.name
            track.gpus = self.cluster.gpus_of(pod)
            self._hold(track, timeline.pool if timeline is not None else "unknown", track.gpus)
        profile = self.cloud.pools[timeline.pool].profile if timeline is not None else None
        image_ready = self.now
        warm = False
        measured = profile.pull_s if profile is not None else None
        if pod.image_bytes or measured is not None:
            images = self._images.setdefault(node.name, {})
            if pod.image_bytes in images:
                warm = images[pod.image_bytes] <= self.now
                image_ready = max(images[pod.image_bytes], self.now)
            else:
                if measured is not None and timeline is not None:
                    image_ready = self.now + self.cloud.draw(measured, "pull_s", timeline.pool, timeline.ordinal,
                                                             pod.image_bytes)
                else:
                    rate = (self.cloud.draw(profile.pull_mb_per_s, "pull", timeline.pool, timeline.ordinal,
                                            pod.image_bytes) if profile and timeline else 45.0)
                    image_ready = self.now + pod.image_bytes / 1e6 / max(rate, 1.0)
                images[pod.image_bytes] = image_ready
        # One key for the cold and the warm start: a pod meets the same luck (quantile) whichever it is.
        start = self.cloud.draw(profile.start(warm), "start", pod.key) if profile else 5.0
        self.sim.at(image_ready, Priority.WORKLOAD, lambda: self._pulled(pod.key, node.name, start))

    def _pulled(self, key: str, node: str, start_s: float) -> None:
        pod = self.cluster.pods.get(key)
        if pod is None or pod.node_name != node:
            return
        track = self.metrics.tracks.get(key)
        if track is not None:
            track.times[Milestone.PULLED] = self.now
        self.sim.after(start_s, Priority.WORKLOAD, lambda: self._started(key, node))

    def _started(self, key: str, node: str) -> None:
        pod = self.cluster.pods.get(key)
        if pod is None or pod.node_name != node:
            return
        running = replaced(pod, phase=PodPhase.RUNNING, started_s=self.now)
        self.cluster.put_pod(running)
        track = self.metrics.tracks.get(key)
        if track is not None:
            track.times[Milestone.STARTED] = self.now
            track.pod = running
        owner = self.owners.get(key)
        if owner is not None:
            owner.on_running(running)

    def _terminated(self, pod: Pod, why: Termination) -> None:
        self._account(pod)
        self._finish_record(pod.key)
        owner = self.owners.pop(pod.key, None)
        if owner is not None:
            owner.on_terminated(pod, why)

    def _node_removed(self, name: str) -> None:
        self._images.pop(name, None)

    def _account(self, pod: Pod) -> None:
        """Allocated GPU-seconds: from binding until the pod leaves, on the pool of its node; useful ones from when
        every pod of its job ran (`useful`)."""
        track = self.metrics.tracks.get(pod.key)
        if track is None or Milestone.BOUND not in track.times or track.node is None:
            return
        timeline = self.cloud.timeline_of(track.node)
        pool = timeline.pool if timeline is not None else "unknown"
        gpus = track.gpus if track.gpus is not None else pod_gpus(pod.requests)
        seconds = (self.now - track.times[Milestone.BOUND]) * gpus
        self.metrics.allocated_gpu_seconds[pool] = self.metrics.allocated_gpu_seconds.get(pool, 0.0) + seconds
        if track.useful_since is not None:
            useful = self.metrics.useful_gpu_seconds
            useful[pool] = useful.get(pool, 0.0) + (self.now - track.useful_since) * gpus
            track.useful_since = None
        track.times.setdefault(Milestone.CREATED, self.now)
        track.node = None
        self._hold(track, None, 0.0)

    def _hold(self, track: _PodTrack, pool: str | None, gpus: float) -> None:
        """The pod now holds `gpus` GPUs of `pool` (`None`: none) for the hindsight bound, in step with `_account`."""
        if track.held is not None:
            self.metrics.hindsight.change(track.held[0], -track.held[1], self.now)
        track.held = None
        if pool is not None and gpus > 0:
            track.held = (pool, gpus)
            self.metrics.hindsight.change(pool, gpus, self.now)

    def _finish_record(self, key: str) -> None:
        track = self.metrics.tracks.pop(key, None)
        if track is None:
            return
        self.metrics.records.append(self.record(track))

    def record(self, track: _PodTrack) -> PodRecord:
        times = track.times
        started = times.get(Milestone.STARTED)
        node_name = track.pod.node_name
        timeline = self.cloud.timeline_of(node_name) if node_name else None
        if started is not None:
            # The node's milestones matter only on the long path (`with_node`: the node was requested at or after the
            # pod's creation); on the short path `with_node` drops them unread, so they are not gathered then.
            node_times = (None if timeline is None or timeline.requested_s < times[Milestone.CREATED]
                          else timeline.milestones())
            times, new_node = with_node(times, node_times)
        else:
            new_node = False  # `build_trace` only reads `times`
        return self.record_with(track, times, new_node, timeline)

    def record_with(self, track: _PodTrack, times: Mapping[Milestone, float], new_node: bool,
                    timeline: NodeTimeline | None) -> PodRecord:
        """The record of a pod with its milestones `times` (the node's start-up merged in, when it waited for one) and
        its node's start-up `timeline`."""
        started = times.get(Milestone.STARTED)
        node_name = track.pod.node_name
        blocked = track.blocked_s + ((self.now - track.blocked_since) if track.blocked_since is not None else 0.0)
        pool = timeline.pool if timeline is not None and started is not None else None
        # The trace is complete iff the pod started: its phases are the record's (computed once, shared, read-only).
        trace = build_trace(pod=track.pod.key, source="twin", times=times, new_node=new_node, pool=pool,
                            node=node_name if started is not None else None, blocked_s=blocked,
                            reason=track.blocked_reason if blocked > 0 else None)
        created = times[Milestone.CREATED]
        since = track.waiting_since if track.waiting_since is not None else created
        # A requeued job's pod waits from when the job began waiting: its earlier attempts are one phase before the
        # pod's own, so the phases still sum to pending→running.
        phases = {REQUEUED: created - since, **trace.phases} if since < created and trace.phases else trace.phases
        return PodRecord(key=track.pod.key, workload=track.workload, team=track.team, pool=pool,
                         gpus=track.gpus if track.gpus is not None else pod_gpus(track.pod.requests),
                         created_s=created, running_s=started,
                         waiting_since_s=since if since < created else None,
                         bound_s=times.get(Milestone.BOUND), new_node=new_node, phases=phases, trace=trace,
                         job=track.job, withdrawn=track.withdrawn and started is None)

    def open_records(self) -> list[tuple[PodRecord, bool]]:
        """Records of pods still alive at the end of the run, with whether they are pending."""
        return [(self.record(t), t.pod.node_name is None and Milestone.STARTED not in t.times)
                for t in self.metrics.tracks.values()]
