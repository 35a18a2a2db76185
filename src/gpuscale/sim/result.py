"""What a twin run produces: per-pod records, totals and time series. Plain values, ready for JSON and plots.

Money is USD, time is seconds of simulated time (hours for GPU-hours), GPU counts are physical GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuscale.lifecycle.trace import PodTrace
from gpuscale.model.frozen import quick_init

REQUEUED = "requeued"
"""The phase before a requeued job's pod existed: from when the job began waiting (its first submission, or its last
interruption after it had run) to the pod's creation. Only in the twin's records, first of their phases."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PodRecord:
    key: str
    workload: str
    """The workload kind: `training`, `batch`, `inference`, `pause`."""
    team: str = ""
    pool: str | None
    """Pool of the node the pod first ran on; `None` if it never ran."""
    gpus: float
    created_s: float
    running_s: float | None
    waiting_since_s: float | None = None
    """For a requeued Job's pod, when the job began waiting (`REQUEUED`); `None`: at the pod's creation."""
    bound_s: float | None = None
    """When the pod was bound to a node (`None`: never)."""
    new_node: bool
    """It waited for a node the autoscaler added (the long path) rather than fitting existing capacity."""
    phases: Mapping[str, float] = field(default_factory=dict)
    trace: PodTrace | None = None
    """The pod's record in the trace schema shared with the controller (`gpuscale simulate --trace`)."""

    job: str = ""
    """`team/name` of the Job the pod belongs to (one job, many pod attempts); empty for other workloads."""
    withdrawn: bool = False
    """Its owner deleted it on purpose before it ran (scale-in, a job's requeue)."""

    @property
    def pending_to_running_s(self) -> float | None:
        return None if self.running_s is None else self.running_s - self.wait_start_s

    @property
    def pending_to_bound_s(self) -> float | None:
        """The capacity wait: pending → bound, the part of the wait an autoscaler answers for."""
        return None if self.bound_s is None else self.bound_s - self.wait_start_s

    @property
    def wait_start_s(self) -> float:
        """When the wait this pod ends began: its creation, or its requeued Job's `waiting_since_s`."""
        return self.created_s if self.waiting_since_s is None else self.waiting_since_s


def never_ran(pods: Iterable[PodRecord]) -> int:
    """Jobs none of whose pods (over every attempt) reached Running, plus other pods that did not and were not
    withdrawn by their owner. O(pods)."""
    jobs: dict[str, bool] = {}
    others = 0
    for pod in pods:
        if pod.job:
            jobs[pod.job] = jobs.get(pod.job, False) or pod.running_s is not None
        elif pod.running_s is None and not pod.withdrawn:
            others += 1
    return others + sum(1 for ran in jobs.values() if not ran)


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """Samples at `t_s` (simulated seconds from the start)."""

    t_s: tuple[float, ...]
    nodes_by_pool: Mapping[str, tuple[int, ...]]
    pending_pods: tuple[int, ...]
    cost_usd: tuple[float, ...]
    """Cumulative."""
    gpus_provisioned: tuple[float, ...]
    gpus_allocated: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Notable:
    """An event worth showing in the report (a stockout and the fallback it caused, a gang refused, …)."""

    t_s: float
    kind: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamStats:
    """One team's view of the queueing layer (only when the scenario has `queues:`; docs/queues.md)."""

    cluster_queues: tuple[str, ...]
    workloads: int
    """Jobs of the team that a LocalQueue took."""
    admissions: int
    queue_wait_s: tuple[float, ...]
    """Per admission: entering the queue (submission, or requeue after an eviction) → admitted."""
    scale_up_wait_s: tuple[float, ...]
    """Per admission that got every pod running: admitted → the last pod running."""
    admitted_gpu_hours: float
    """GPU-hours of quota held (admission → release), whether or not the pods were running yet."""
    borrowed_admissions: int
    preemptions: int
    requeues: int
    """waitForPodsReady timeouts."""
    deactivated: int
    still_queued: int
    never_admitted: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SimResult:
    scenario: str
    policy: str
    seed: int
    duration_s: float
    cost_usd: float
    cost_by_pool: Mapping[str, float]
    gpu_hours_provisioned: float
    gpu_hours_allocated: float
    """GPUs held by bound pods, from bind until they leave (container start and waiting for gang peers included)."""
    gpu_hours_by_pool: Mapping[str, Mapping[str, float]]
    """pool → {"provisioned", "allocated", "useful", "idle", "hindsight_bound"}."""
    pods: tuple[PodRecord, ...]
    evictions: int
    lost_gpu_hours: float
    scale_ups: int
    scale_downs: int
    stockouts: int
    backoffs: int
    never_ran: int
    """Per job (`never_ran`), not per pod attempt."""
    sim_events: int
    wall_s: float
    series: Series
    notable: tuple[Notable, ...] = ()
    scale_ups_by_pool: Mapping[str, int] = field(default_factory=dict)
    queue_wait_by_team: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    teams: Mapping[str, TeamStats] = field(default_factory=dict)
    """Per team, when the scenario has a queueing layer; empty otherwise."""
    policy_changes: tuple[str, ...] = ()
    """What the preset changed against the scenario's own config (`TwinPolicy.changes`); empty for `scenario`."""
    gpu_hours_useful: float = 0.0
    """GPU-hours of pods while every pod of their job ran (a service's pod: while it ran); pause pods none."""
    gpu_hours_hindsight_bound: float = 0.0
    """GPU-hours provisioned had each pool had, at every moment, the fewest nodes of its shape that hold the GPUs its
    bound pods use, started instantly (`gpuscale.sim.hindsight`): allocated ≤ this ≤ provisioned."""

    @property
    def gpu_hours_idle(self) -> float:
        return self.gpu_hours_provisioned - self.gpu_hours_allocated

    @property
    def efficiency(self) -> float | None:
        """allocated / provisioned GPU-hours; `None` without provisioned GPUs."""
        return self.gpu_hours_allocated / self.gpu_hours_provisioned if self.gpu_hours_provisioned > 0 else None

    @property
    def useful_efficiency(self) -> float | None:
        """useful / provisioned GPU-hours; `None` without provisioned GPUs."""
        return self.gpu_hours_useful / self.gpu_hours_provisioned if self.gpu_hours_provisioned > 0 else None

    @property
    def hindsight_efficiency(self) -> float | None:
        """allocated / the hindsight bound: the best efficiency nodes exactly when needed would reach."""
        bound = self.gpu_hours_hindsight_bound
        return self.gpu_hours_allocated / bound if bound > 0 else None
