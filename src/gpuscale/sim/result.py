"""What a twin run produces: per-pod records, totals and time series. Plain values, ready for JSON and plots.

Money is USD, time is seconds of simulated time (hours for GPU-hours), GPU counts are physical GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.lifecycle.trace import PodTrace
from gpuscale.model.frozen import quick_init


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
    new_node: bool
    """It waited for a node the autoscaler added (the long path) rather than fitting existing capacity."""
    phases: Mapping[str, float] = field(default_factory=dict)
    trace: PodTrace | None = None
    """The pod's record in the trace schema shared with the controller (`gpuscale simulate --trace`)."""

    @property
    def pending_to_running_s(self) -> float | None:
        return None if self.running_s is None else self.running_s - self.created_s


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
    gpu_hours_by_pool: Mapping[str, Mapping[str, float]]
    """pool → {"provisioned", "allocated", "idle", "hindsight_bound"}."""
    pods: tuple[PodRecord, ...]
    evictions: int
    lost_gpu_hours: float
    scale_ups: int
    scale_downs: int
    stockouts: int
    backoffs: int
    never_ran: int
    sim_events: int
    wall_s: float
    series: Series
    notable: tuple[Notable, ...] = ()
    scale_ups_by_pool: Mapping[str, int] = field(default_factory=dict)
    queue_wait_by_team: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    teams: Mapping[str, TeamStats] = field(default_factory=dict)
    """Per team, when the scenario has a queueing layer; empty otherwise."""
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
    def hindsight_efficiency(self) -> float | None:
        """allocated / the hindsight bound: the best efficiency nodes exactly when needed would reach."""
        bound = self.gpu_hours_hindsight_bound
        return self.gpu_hours_allocated / bound if bound > 0 else None
