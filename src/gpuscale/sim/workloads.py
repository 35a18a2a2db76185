"""Workloads of the twin: training jobs (gangs with checkpoints), batch jobs, inference services, pause pods.

Each kind is a small controller that creates and deletes pods through the `World`, the way the Job, Deployment and
HPA controllers do in a cluster:
- `Job` (training or batch): all pods are created at submission (a gang if more than one — the scheduler and the
  autoscaler place them all-or-nothing); work progresses only while *every* pod runs; an eviction, preemption or node
  loss loses the work since the last checkpoint (all of it without checkpoints) and the job is requeued with fresh pods.
- `Service` (inference): replicas follow request traffic through an HPA-like controller (sync every 15 s, scale down
  only after a 5-minute stabilisation window); lost replicas are recreated.
- `Pause`: overprovisioning pause pods at low priority that real pods preempt (CA's overprovisioning recipe).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpuscale.engine.checkpoint import CHECKPOINT_INTERVAL
from gpuscale.model.dra import ClaimSpec, PodResourceClaim, ResourceClaim, ResourceClaimTemplate
from gpuscale.model.pod import OwnerRef, Pod, PodGroupRef, SchedulingConstraints
from gpuscale.model.resources import Resources
from gpuscale.model.volumes import PersistentVolumeClaim, PodClaim
from gpuscale.sim.cluster import Termination, pod_gpus
from gpuscale.sim.core import Handle, Priority

if TYPE_CHECKING:
    from gpuscale.sim.world import World


PER_JOB = "per-job"
PER_POD = "per-pod"
"""`ClaimTemplate.per` values."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimTemplate:
    """A volume of a job's pods backed by a claim of its own: one claim per job (`<job>-<volume>`, shared by its pods)
    or one per pod index (`<job>-<volume>-<i>`, as a StatefulSet's or an indexed JobSet's templates give). A claim is
    created with the job's first pods, kept while the job is requeued or restarted (its restarted pods find it bound
    where it was provisioned) and deleted when the job finishes."""

    volume: str
    per: str = PER_JOB
    storage_class: str
    request_bytes: int = 0
    access_modes: frozenset[str] = frozenset({"ReadWriteOnce"})

    def claim_name(self, job: str, index: int) -> str:
        return f"{job}-{self.volume}" if self.per == PER_JOB else f"{job}-{self.volume}-{index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClaim:
    """Devices a workload's pods ask for by ResourceClaim (`spec.resourceClaims` entry `name`): a
    ResourceClaimTemplate `<workload>-<name>` from which each pod gets its own claim (`shared` False), or one claim
    `<workload>-<name>` all its pods share (a job's pods, a service's replicas). Created with the workload's first
    pods, kept while a job is requeued, deleted when it finishes (a service's are never deleted)."""

    name: str
    shared: bool = False
    spec: ClaimSpec

    def object_name(self, workload: str) -> str:
        return f"{workload}-{self.name}"

    def pod_claim(self, workload: str) -> PodResourceClaim:
        """The pods' `spec.resourceClaims` entry."""
        name = self.object_name(workload)
        return (PodResourceClaim(name=self.name, claim_name=name) if self.shared
                else PodResourceClaim(name=self.name, template_name=name))


def create_device_claims(world: World, namespace: str, workload: str, claims: Sequence[DeviceClaim]) -> None:
    """The workload's claim templates and shared claims (nothing for those that exist)."""
    for claim in claims:
        name = claim.object_name(workload)
        if claim.shared:
            world.cluster.dra.add_claim(ResourceClaim(namespace=namespace, name=name, uid=f"{namespace}-{name}",
                                                      spec=claim.spec))
        else:
            world.cluster.dra.add_template(ResourceClaimTemplate(namespace=namespace, name=name, spec=claim.spec))


def job_labels(name: str, kind: str) -> dict[str, str]:
    """The labels of a job's pods (what spread constraints' selectors and `matchLabelKeys` read)."""
    return {"job-name": name, "gpuscale.io/workload": kind}


def service_labels(name: str) -> dict[str, str]:
    """The labels of a service's pods."""
    return {"app": name, "gpuscale.io/workload": "inference"}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    name: str
    kind: str = "training"
    """`training` or `batch` (any label is kept for the report)."""
    team: str = "default"
    submit_s: float
    pods: int = 1
    requests: Resources
    constraints: SchedulingConstraints = field(default_factory=SchedulingConstraints)
    duration_s: float
    """Work to do once all pods run, in seconds."""
    checkpoint_s: float = 0.0
    """Checkpoint interval; 0 means no checkpoints (an interruption loses everything)."""
    priority: int = 0
    image_bytes: int = 0
    queue: str = ""
    """Kueue LocalQueue (in the team's namespace) the job is submitted to; empty = the LocalQueue named after the
    team, if the scenario has one (docs/queues.md)."""
    claims: tuple[ClaimTemplate, ...] = ()
    """Volumes backed by claims of the job's own (shared claims, such as a dataset's, are in `constraints`)."""
    device_claims: tuple[DeviceClaim, ...] = ()
    """Devices by ResourceClaim (their `spec.resourceClaims` entries are in `constraints`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Traffic:
    """Requests per second over time: a daily cycle between `trough_rps` and `peak_rps` (peak at `peak_hour`), with
    spikes (`start_s`, `duration_s`, multiplier)."""

    trough_rps: float
    peak_rps: float
    peak_hour: float = 14.0
    spikes: tuple[tuple[float, float, float], ...] = ()

    def rps(self, t_s: float) -> float:
        phase = 2 * math.pi * ((t_s / 3600.0 - self.peak_hour) % 24.0) / 24.0
        base = self.trough_rps + (self.peak_rps - self.trough_rps) * (1 + math.cos(phase)) / 2
        for start, duration, factor in self.spikes:
            if start <= t_s < start + duration:
                base *= factor
        return base


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSpec:
    name: str
    team: str = "default"
    requests: Resources
    constraints: SchedulingConstraints = field(default_factory=SchedulingConstraints)
    traffic: Traffic
    rps_per_replica: float
    min_replicas: int = 1
    max_replicas: int = 100
    priority: int = 100
    image_bytes: int = 0
    sync_s: float = 15.0
    stabilization_s: float = 300.0
    device_claims: tuple[DeviceClaim, ...] = ()
    """Devices by ResourceClaim (their `spec.resourceClaims` entries are in `constraints`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseSpec:
    name: str = "overprovisioning"
    replicas: int
    requests: Resources
    constraints: SchedulingConstraints = field(default_factory=SchedulingConstraints)
    priority: int = -10


class Job:
    def __init__(self, world: World, spec: JobSpec) -> None:
        self.world, self.spec = world, spec
        self.attempt = 0
        self.pods: set[str] = set()
        self.running: set[str] = set()
        self.claim_gpus = 0.0
        """`gpus` of a job asking for devices by claim, set when it starts."""
        self.progress_s = 0.0
        self.started_at: float | None = None
        self.finish: Handle | None = None
        self.done = False
        self.waiting_since: float | None = None
        """When the job began waiting: its first submission, or its last interruption after it had run."""
        self.constraints = spec.constraints
        """The spec's, plus the node labels of the flavor Kueue admitted the job to (if queued)."""
        world.sim.at(spec.submit_s, Priority.WORKLOAD, self._submit)

    @property
    def gpus(self) -> float:
        """GPUs the job's pods hold: their GPU requests, or, for a job asking for devices by claim, the whole GPUs its
        running pods held when it started (`SimCluster.gpus_of`; 0 before)."""
        return self.claim_gpus if self.spec.device_claims else pod_gpus(self.spec.requests) * self.spec.pods

    def _submit(self) -> None:
        if self.world.queues is not None and self.world.queues.holds(self):
            return  # suspended until Kueue admits it (`admit`)
        self.attempt += 1
        spec = self.spec
        if self.waiting_since is None:
            self.waiting_since = self.world.now
        group = PodGroupRef(key=f"{spec.team}/{spec.name}-{self.attempt}", source="kueue", min_member=spec.pods) \
            if spec.pods > 1 else None
        owner = OwnerRef(kind="Job", name=spec.name)
        labels = job_labels(spec.name, spec.kind)
        # The checkpoint interval, as a job declares it to gpuscale (engine/checkpoint.py): progress is kept at
        # multiples of it from the start of the run (`_stop`), which is the pod's start for a single-pod job.
        annotations = {CHECKPOINT_INTERVAL: f"{spec.checkpoint_s:g}s"} if spec.checkpoint_s > 0 else {}
        if spec.device_claims:
            create_device_claims(self.world, spec.team, spec.name, spec.device_claims)
        for i in range(spec.pods):
            name = f"{spec.name}-{self.attempt}-{i}"
            pod = Pod(namespace=spec.team, name=name, uid=name,
                      requests=spec.requests, constraints=self._with_claims(i), priority=spec.priority,
                      labels=labels, owner=owner, group=group,
                      annotations=annotations,
                      created_s=self.world.now, image_bytes=spec.image_bytes)
            self.pods.add(pod.key)
            self.world.create_pod(pod, self, job=f"{spec.team}/{spec.name}", waiting_since=self.waiting_since)

    def _with_claims(self, index: int) -> SchedulingConstraints:
        """The constraints of the job's pod `index`: its own claims (created now if they do not exist: a requeued job
        keeps them) after the shared ones."""
        spec = self.spec
        if not spec.claims:
            return self.constraints
        own = []
        for template in spec.claims:
            name = template.claim_name(spec.name, index)
            self.world.cluster.storage.create_claim(PersistentVolumeClaim(
                namespace=spec.team, name=name, storage_class=template.storage_class,
                access_modes=template.access_modes, request=template.request_bytes))
            own.append(PodClaim(spec.team, name))
        return replace(self.constraints, claims=(*self.constraints.claims, *own))

    def on_running(self, pod: Pod) -> None:
        self.running.add(pod.key)
        if len(self.running) == self.spec.pods and self.started_at is None:
            self.started_at = self.world.now
            if self.spec.device_claims:
                cluster = self.world.cluster
                self.claim_gpus = sum(cluster.gpus_of(cluster.pods[k]) for k in sorted(self.running))
            self.world.useful(sorted(self.running))
            remaining = max(self.spec.duration_s - self.progress_s, 0.0)
            self.finish = self.world.sim.after(remaining, Priority.WORKLOAD, self._finished)
            if self.world.queues is not None:
                self.world.queues.ready(self)

    def admit(self, node_labels: Mapping[str, str]) -> None:
        """Kueue admitted the job: create its pods, with the flavor's node labels added to their nodeSelector."""
        affinity = self.spec.constraints.affinity
        selector = dict(affinity.node_selector) | dict(node_labels)
        self.constraints = replace(self.spec.constraints, affinity=replace(
            affinity, node_selector=tuple(sorted(selector.items()))))
        self._submit()

    def suspend(self) -> None:
        """Kueue evicted the job (preemption, waitForPodsReady timeout): lose the work since the last checkpoint,
        delete the pods, and wait for the next admission."""
        self._stop()
        self.constraints = self.spec.constraints

    def on_terminated(self, pod: Pod, why: Termination) -> None:
        self.pods.discard(pod.key)
        self.running.discard(pod.key)
        if self.done:
            return
        self._stop()
        self.world.sim.after(0.0, Priority.WORKLOAD, self._submit)

    def _stop(self) -> None:
        """The job is interrupted: keep the work up to the last checkpoint, count the rest as lost, delete the pods."""
        if self.started_at is not None:
            ran = self.world.now - self.started_at
            total = self.progress_s + ran
            ckpt = self.spec.checkpoint_s
            saved = math.floor(total / ckpt) * ckpt if ckpt > 0 else 0.0
            saved = max(saved, self.progress_s) if ckpt > 0 else 0.0
            self.world.metrics.lost_gpu_seconds += (total - saved) * self.gpus
            self.progress_s = saved
            self.started_at = None
            self.waiting_since = self.world.now  # it ran: its next wait begins at this interruption
            if self.finish is not None:
                self.finish.cancel()
        self.world.metrics.evictions += 1
        for key in sorted(self.pods):
            self.world.withdraw_pod(key)
        self.pods.clear()
        self.running.clear()

    def _finished(self) -> None:
        self.done = True
        for key in sorted(self.pods):
            self.world.complete_pod(key)
        self.pods.clear()
        for template in self.spec.claims:  # its own claims go with it (a dynamically provisioned PV with its claim)
            for i in range(self.spec.pods if template.per == PER_POD else 1):
                self.world.cluster.storage.delete_claim(f"{self.spec.team}/{template.claim_name(self.spec.name, i)}")
        for claim in self.spec.device_claims:  # its claim templates and shared claims go with it
            self.world.cluster.dra.delete(f"{self.spec.team}/{claim.object_name(self.spec.name)}")
        if self.world.queues is not None:
            self.world.queues.finished(self)


class WindowMax:
    """The highest value pushed within the last `span_s` (a push at `t` counts while `t > now - span_s`), and the one
    pushed now: what `max(n for t, n in history)` gives after each sync drops the entries out of the window and
    appends its own. Kept as the entries that can still be the highest (each above every later one, oldest first),
    so a push costs O(1) amortised instead of a pass over the window."""

    __slots__ = ("_entries", "_span")

    def __init__(self, span_s: float) -> None:
        self._span = span_s
        self._entries: deque[tuple[float, int]] = deque()

    def push(self, now: float, value: int) -> int:
        entries = self._entries
        cutoff = now - self._span
        while entries and not entries[0][0] > cutoff:  # times only grow: what left the window is a prefix
            entries.popleft()
        while entries and entries[-1][1] <= value:  # never the highest again while `value` is in the window
            entries.pop()
        entries.append((now, value))
        return entries[0][1]


class Service:
    def __init__(self, world: World, spec: ServiceSpec) -> None:
        self.world, self.spec = world, spec
        self.pods: list[str] = []
        self.seq = 0
        self.recommended = WindowMax(spec.stabilization_s)
        """The HPA's recommendations over the stabilisation window."""
        self.labels = service_labels(spec.name)
        if spec.device_claims:
            create_device_claims(world, spec.team, spec.name, spec.device_claims)
        world.sim.at(0.0, Priority.WORKLOAD, self._sync)

    def desired(self, t: float) -> int:
        spec = self.spec
        want = math.ceil(spec.traffic.rps(t) / spec.rps_per_replica)
        return min(max(want, spec.min_replicas), spec.max_replicas)

    def _sync(self) -> None:
        now = self.world.now
        target = self.recommended.push(now, self.desired(now))  # scale down only to the window's highest
        while len(self.pods) < target:
            self._add()
        while len(self.pods) > target:
            self.world.withdraw_pod(self._pick_victim())
        self.world.sim.after(self.spec.sync_s, Priority.WORKLOAD, self._sync)

    def _pick_victim(self) -> str:
        """ReplicaSet order: pending pods first, then the newest."""
        pending = [k for k in self.pods if self.world.cluster.pods.get(k) is not None
                   and self.world.cluster.pods[k].node_name is None]
        victim = pending[-1] if pending else self.pods[-1]
        self.pods.remove(victim)
        return victim

    def _add(self) -> None:
        self.seq += 1
        spec = self.spec
        pod = Pod(namespace=spec.team, name=f"{spec.name}-{self.seq:05d}", uid=f"{spec.name}-{self.seq}",
                  requests=spec.requests, constraints=spec.constraints, priority=spec.priority,
                  labels=self.labels,
                  owner=OwnerRef(kind="ReplicaSet", name=spec.name), created_s=self.world.now,
                  image_bytes=spec.image_bytes)
        self.pods.append(pod.key)
        self.world.create_pod(pod, self)

    def on_running(self, pod: Pod) -> None:
        self.world.useful((pod.key,))

    def on_terminated(self, pod: Pod, why: Termination) -> None:
        if pod.key in self.pods:
            self.pods.remove(pod.key)
            self.world.metrics.evictions += 1 if why is not Termination.PREEMPTED else 0
            self._add()


class Pause:
    def __init__(self, world: World, spec: PauseSpec) -> None:
        self.world, self.spec = world, spec
        self.seq = 0
        world.sim.at(0.0, Priority.WORKLOAD, self._start)

    def _start(self) -> None:
        for _ in range(self.spec.replicas):
            self._add()

    def _add(self) -> None:
        self.seq += 1
        spec = self.spec
        pod = Pod(namespace="overprovisioning", name=f"{spec.name}-{self.seq:05d}", uid=f"{spec.name}-{self.seq}",
                  requests=spec.requests, constraints=spec.constraints, priority=spec.priority,
                  labels={"app": spec.name, "gpuscale.io/workload": "pause"},
                  owner=OwnerRef(kind="ReplicaSet", name=spec.name), created_s=self.world.now)
        self.world.create_pod(pod, self)

    def on_running(self, pod: Pod) -> None:
        pass

    def on_terminated(self, pod: Pod, why: Termination) -> None:
        self._add()


Workload = Job | Service | Pause
Starter = Callable[["World"], Sequence[Workload]]
