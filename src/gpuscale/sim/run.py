"""Run the twin: wire the world to the same `loop.Autoscaler` the controller runs, advance virtual time, measure.

The autoscaler ticks every `scan_interval_s` of simulated time, as Cluster Autoscaler does; with a batch window
(`Policy.batch_idle_s`, D39) it also decides when the scheduler marks a pod Unschedulable and at the time the last
decision said it next matters, as the controller's watch wakes it, and the next scan comes `scan_interval_s` after
that decision, as the controller's loop sleeps after each tick. A tick that cannot act
differently from the last one is skipped: nothing in the cluster changed since the last tick, no drain is in flight,
and the time the last tick said it next matters (`TickReport.next_at_s`: a backoff, deadline, delay, recheck or
protection ends; at once after a tick that acted) has not come — then `decide` would plan as it did, so skipping it
changes no result (a heartbeat tick still runs every five simulated minutes). The engine owns every timer; the twin
reads none of them.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from gpuscale.engine.decide import decide as engine_decide
from gpuscale.engine.policy import Policy
from gpuscale.loop.ports import EventType
from gpuscale.loop.report import TickReport
from gpuscale.loop.tick import Autoscaler, DecideFn, LoopSettings
from gpuscale.loop.trace import decided_pods
from gpuscale.model.dra import DeviceClass
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod
from gpuscale.model.resources import PODS
from gpuscale.model.volumes import PersistentVolume, PersistentVolumeClaim, StorageClass
from gpuscale.sim.cloud import CloudPool, SimCloud, Spell
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Handle, Priority, Simulation, VirtualClock
from gpuscale.sim.queue_config import QueueSpec
from gpuscale.sim.queueing import QueueManager
from gpuscale.sim.result import Notable, PodRecord, Series, SimResult, never_ran
from gpuscale.sim.scheduler import Scoring, SimScheduler
from gpuscale.sim.storage import SimStorage
from gpuscale.sim.workloads import Job, JobSpec, Pause, PauseSpec, Service, ServiceSpec
from gpuscale.sim.world import World

HEARTBEAT_S = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TwinSetup:
    """Everything one run needs; the policy under test is passed separately so `compare` can swap it."""

    name: str
    pools: tuple[CloudPool, ...]
    jobs: tuple[JobSpec, ...] = ()
    services: tuple[ServiceSpec, ...] = ()
    pauses: tuple[PauseSpec, ...] = ()
    pdbs: tuple[tuple[PodDisruptionBudget, int], ...] = ()
    spells: tuple[Spell, ...] = ()
    initial_nodes: Mapping[str, int] = field(default_factory=dict)
    duration_s: float = 86_400.0
    seed: int = 0
    sample_s: float = 300.0
    queues: QueueSpec | None = None
    """The Kueue-like queueing layer (docs/queues.md); None = jobs get their pods at submission."""
    storage_classes: tuple[StorageClass, ...] = ()
    bound_volumes: tuple[tuple[PersistentVolume, PersistentVolumeClaim], ...] = ()
    """Pre-provisioned volumes bound to their claims (datasets), created before the run (`sim.storage`)."""
    device_classes: tuple[DeviceClass, ...] = ()
    """The DeviceClasses of a scenario that uses DRA, created before the run (`sim.devices`); none: no DRA objects."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TwinPolicy:
    """A named policy: the engine's knobs, the loop's, and the scheduler scoring the cluster runs with."""

    name: str
    policy: Policy
    settings: LoopSettings = field(default_factory=LoopSettings)
    scoring: Scoring = Scoring.LEAST_ALLOCATED
    gpu_placement: str | None = None
    """Fragmentation-aware placement of GPU pods in the scheduler (`gpuscale`, `fgd`; None: `scoring` only)."""
    changes: tuple[str, ...] = ()
    """What a preset changed against the scenario's own config, one `field: before → after` each (the report's)."""


class EventLog:
    """The `EventSink` of the twin: counts events by reason (the report shows the notable ones)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1


def simulate(setup: TwinSetup, policy: TwinPolicy,
             progress: Callable[[float, float], None] | None = None, decide: DecideFn | None = None) -> SimResult:
    """One deterministic run: same setup, policy and seed → the same result (except `wall_s`). `decide` replaces the
    engine's (with its memo) for a caller that times or checks decisions."""
    with _rare_full_collections():
        return _simulate(setup, policy, progress, decide)


def _simulate(setup: TwinSetup, policy: TwinPolicy, progress: Callable[[float, float], None] | None,
              decide: DecideFn | None) -> SimResult:
    started = time.perf_counter()
    sim = Simulation()
    rng = np.random.default_rng(setup.seed)
    cluster = SimCluster()
    cluster.pdbs = list(setup.pdbs)
    if setup.storage_classes or setup.bound_volumes:
        cluster.storage = SimStorage(zone for p in setup.pools for zone in p.pool.zones)
        cluster.storage.on_change = cluster.storage_changed
        for storage_class in setup.storage_classes:
            cluster.storage.add_class(storage_class)
        for pv, claim in setup.bound_volumes:
            cluster.storage.add_bound(pv, claim)
    for device_class in setup.device_classes:
        cluster.dra.add_class(device_class)
    columns = sorted({n for p in setup.pools for n in p.pool.allocatable.names()} - {PODS}
                     | {n for j in setup.jobs for n in j.requests.names()}
                     | {n for s in setup.services for n in s.requests.names()}
                     | {n for s in setup.pauses for n in s.requests.names()})
    world_ref: list[World] = []
    loops: list[_Loop] = []

    def unschedulable(pod: Pod) -> None:
        world_ref[0].metrics.unschedulable(pod, sim.now)
        if loops:
            loops[0].unschedulable()

    scheduler = SimScheduler(sim, cluster, columns, policy.scoring,
                             on_bound=lambda pod, node: world_ref[0].bound(pod, node),
                             on_unschedulable=lambda pod: unschedulable(pod),
                             gpu_placement=policy.gpu_placement)
    stockouts: list[tuple[str, float]] = []
    cloud = SimCloud(sim, cluster, {p.pool.name: p for p in setup.pools}, rng, setup.spells,
                     on_stockout=lambda pool, t: stockouts.append((pool, t)))
    world = World(sim=sim, cluster=cluster, scheduler=scheduler, cloud=cloud, rng=rng)
    world_ref.append(world)
    if setup.queues is not None:
        world.queues = QueueManager(world, setup.queues)
    events = EventLog()
    autoscaler = Autoscaler(reader=cluster, writer=cluster, provider=cloud, events=events,
                            clock=VirtualClock(sim), pools=[p.pool for p in setup.pools], policy=policy.policy,
                            settings=policy.settings, decide=decide or engine_decide)
    for pool_name, count in sorted(setup.initial_nodes.items()):
        cloud.preload(pool_name, count)
    for spec in sorted(setup.jobs, key=lambda j: (j.submit_s, j.name)):
        Job(world, spec)
    for service in setup.services:
        Service(world, service)
    for pause in setup.pauses:
        Pause(world, pause)
    loop = _Loop(sim, cluster, cloud, autoscaler, world, policy.settings.scan_interval_s)
    loops.append(loop)
    sampler = _Sampler(sim, cluster, cloud, world, setup, progress)
    sim.at(0.0, Priority.AUTOSCALER, loop.tick)
    sim.at(0.0, Priority.SAMPLE, sampler.sample)
    sim.run(setup.duration_s)
    return _result(setup, policy, world, cloud, loop, sampler, stockouts, sim.events_run,
                   time.perf_counter() - started)


@contextmanager
def _rare_full_collections(every: int = 100) -> Iterator[None]:
    """Collect the oldest generation after `every` collections of the middle one instead of the default 10.

    A run keeps hundreds of thousands of objects alive to its end (jobs, pods, their records and traces, the engine's
    memos), and each full collection walks every one of them: ≈ 0.23 s each late in the week, 15 of them, ≈ 3.5 s
    of the twin's CPU (and a few more while the run sets up its jobs and gathers its records). What waits longer is
    only garbage in reference cycles that lived long enough to reach the oldest generation (collected 10x less
    often, all of it still freed); the thresholds are put back when the run ends. Results cannot change: nothing in
    the twin observes when the collector runs."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, max(old, every))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


class _Loop:
    def __init__(self, sim: Simulation, cluster: SimCluster, cloud: SimCloud, autoscaler: Autoscaler, world: World,
                 interval_s: float) -> None:
        self.sim, self.cluster, self.cloud, self.autoscaler, self.world = sim, cluster, cloud, autoscaler, world
        self.interval_s = interval_s
        self.last_version = -1
        self.last_tick = -HEARTBEAT_S
        self.ticks = 0
        self.scale_ups = 0
        self.scale_ups_by_pool: dict[str, int] = {}
        self.scale_downs = 0
        self.backoffs = 0
        self.notable: list[Notable] = []
        self.next_at_s: float | None = None
        """When the last tick said the next one next matters (`TickReport.next_at_s`; None: on a change only)."""
        self.wake_at_s: float | None = None
        """When the last tick's plan wants a decision if nothing happens before (`TickReport.wake_at_s`)."""
        self.react = autoscaler.policy.batch_idle_s > 0
        """Decide when a pod turns Unschedulable and when the last decision said it next matters, besides the scan
        (the controller's watch trigger, D39); CA (no batch window) decides on the scan only."""
        self._woken: tuple[float, Handle] | None = None
        self._scan: Handle | None = None
        """The next scan (`tick`), `interval_s` after the last decision; None before the first."""
        self._models = {p.name: p.gpu_model for p in autoscaler.pools}
        """A fallback is worth noting when the pool scaled offers the GPU model of a pool that is backed off."""

    def _needed(self) -> bool:
        if self.cluster.version != self.last_version:
            return True
        if self.sim.now - self.last_tick >= HEARTBEAT_S or len(self.autoscaler.drains):
            return True
        return self.next_at_s is not None and self.next_at_s <= self.sim.now

    def tick(self) -> None:
        """The scan: `interval_s` after the last decision, as the controller's loop sleeps that long after each tick
        (a woken one too)."""
        if self._scan is not None:
            self._scan.cancel()
        self._scan = self.sim.after(self.interval_s, Priority.AUTOSCALER, self.tick)
        self._run()
        if self.react and self.wake_at_s is not None and self.wake_at_s > self.sim.now:
            self._wake(self.wake_at_s)  # before the next scan: a batch closes, a backoff or delay ends

    def unschedulable(self) -> None:
        """The scheduler marked a pod Unschedulable: with a batch window the controller's watch wakes it at once
        (D39), so the twin decides now — and at the window's end, which that decision names — instead of at the
        next scan. Without one (CA) the scan alone decides."""
        if self.react:
            self._wake(self.sim.now)

    def _wake(self, at: float) -> None:
        """One extra decision at `at`, unless the scan or an earlier wake comes first."""
        if self._scan is None or at >= self._scan.time or (self._woken is not None and self._woken[0] <= at):
            return
        if self._woken is not None:
            self._woken[1].cancel()
        self._woken = (at, self.sim.at(at, Priority.AUTOSCALER, self._woke))

    def _woke(self) -> None:
        self._woken = None
        self.tick()

    def _run(self) -> None:
        if self._needed():
            before = {k: v.failures for k, v in self.autoscaler.state.backoff.items()}
            report = self.autoscaler.tick()
            self.ticks += 1
            self.last_tick = self.sim.now
            self._observe(report, before)
            self.last_version = self.cluster.version
            self.next_at_s = report.next_at_s
            self.wake_at_s = report.wake_at_s

    def _observe(self, report: TickReport, before: Mapping[str, int]) -> None:
        now = self.sim.now
        plan = report.plan
        if plan is None:
            return
        for key, _pool in decided_pods(report):
            self.world.metrics.decided(key, now)
        self.world.metrics.block_waiting(plan, now)
        for done_item in report.scaled_up:
            self.scale_ups += 1
            self.scale_ups_by_pool[done_item.pool] = self.scale_ups_by_pool.get(done_item.pool, 0) + done_item.nodes
            model = self._models.get(done_item.pool)
            backed = [p for p, b in self.autoscaler.state.backoff.items()
                      if now < b.until_s and p != done_item.pool and model and self._models.get(p) == model]
            if backed:
                self.notable.append(Notable(t_s=now, kind="fallback", message=(
                    f"scaled {done_item.pool} +{done_item.nodes} while {', '.join(sorted(backed))} backed off")))
        self.scale_downs += len(report.deleted)
        for pool, entry in self.autoscaler.state.backoff.items():
            if entry.failures != before.get(pool):
                self.backoffs += 1
                self.notable.append(Notable(t_s=now, kind="backoff", message=(
                    f"{pool} backed off {entry.until_s - now:.0f}s after {entry.kind}"
                    + (f": {entry.message}" if entry.message else ""))))


class _Sampler:
    def __init__(self, sim: Simulation, cluster: SimCluster, cloud: SimCloud, world: World, setup: TwinSetup,
                 progress: Callable[[float, float], None] | None) -> None:
        self.sim, self.cluster, self.cloud, self.world, self.setup = sim, cluster, cloud, world, setup
        self.progress = progress
        self.t: list[float] = []
        self.nodes: dict[str, list[int]] = {p.pool.name: [] for p in setup.pools}
        self.pending: list[int] = []
        self.cost: list[float] = []
        self.provisioned: list[float] = []
        self.allocated: list[float] = []

    def sample(self) -> None:
        now = self.sim.now
        self.t.append(now)
        tally = self.cloud.tally(now)
        for pool, series in self.nodes.items():
            series.append(tally.acquired.get(pool, 0))
        self.pending.append(len(self.cluster.pending))
        self.cost.append(sum(tally.cost.values()))
        self.provisioned.append(tally.gpus)
        self.allocated.append(self.cluster.allocated_gpus())
        if self.progress is not None:
            self.progress(now, self.setup.duration_s)
        if now + self.setup.sample_s <= self.setup.duration_s:
            self.sim.after(self.setup.sample_s, Priority.SAMPLE, self.sample)


def _result(setup: TwinSetup, policy: TwinPolicy, world: World, cloud: SimCloud, loop: _Loop, sampler: _Sampler,
            stockouts: Sequence[tuple[str, float]], events: int, wall_s: float) -> SimResult:
    end = setup.duration_s
    for key in sorted(world.cluster.pods):
        pod = world.cluster.pods[key]
        if pod.node_name is not None:
            world._account(pod)  # allocated time up to the end of the run
    records: list[PodRecord] = list(world.metrics.records)
    records += [record for record, _pending in world.open_records()]
    cost, gpu_seconds = cloud.cost_so_far(end)
    allocated = world.metrics.allocated_gpu_seconds
    useful = world.metrics.useful_gpu_seconds
    bound = world.metrics.hindsight.gpu_seconds(world.now)
    by_pool = {pool: {"provisioned": gpu_seconds.get(pool, 0.0) / 3600, "allocated": allocated.get(pool, 0.0) / 3600,
                      "useful": useful.get(pool, 0.0) / 3600,
                      "idle": (gpu_seconds.get(pool, 0.0) - allocated.get(pool, 0.0)) / 3600,
                      "hindsight_bound": bound.get(pool, 0.0) / 3600}
               for pool in sorted(set(gpu_seconds) | set(allocated))}
    notable = list(loop.notable) + [Notable(t_s=t, kind="stockout", message=f"{pool}: no capacity (stockout)")
                                    for pool, t in stockouts]
    if world.queues is not None:
        notable += world.queues.notable + world.queues.still_queued()
    return SimResult(
        scenario=setup.name, policy=policy.name, seed=setup.seed, duration_s=end, cost_usd=sum(cost.values()),
        cost_by_pool=dict(sorted(cost.items())), gpu_hours_provisioned=sum(gpu_seconds.values()) / 3600,
        gpu_hours_allocated=sum(allocated.values()) / 3600, gpu_hours_useful=sum(useful.values()) / 3600,
        gpu_hours_hindsight_bound=sum(bound.values()) / 3600,
        gpu_hours_by_pool=by_pool,
        pods=tuple(sorted(records, key=lambda r: (r.created_s, r.key))), evictions=world.metrics.evictions,
        lost_gpu_hours=world.metrics.lost_gpu_seconds / 3600, scale_ups=loop.scale_ups, scale_downs=loop.scale_downs,
        stockouts=len(stockouts), backoffs=loop.backoffs, never_ran=never_ran(records), sim_events=events,
        wall_s=wall_s,
        series=Series(t_s=tuple(sampler.t), nodes_by_pool={k: tuple(v) for k, v in sampler.nodes.items()},
                      pending_pods=tuple(sampler.pending), cost_usd=tuple(sampler.cost),
                      gpus_provisioned=tuple(sampler.provisioned), gpus_allocated=tuple(sampler.allocated)),
        notable=tuple(sorted(notable, key=lambda n: (n.t_s, n.kind, n.message))),
        scale_ups_by_pool=dict(sorted(loop.scale_ups_by_pool.items())),
        teams=world.queues.result() if world.queues is not None else {},
        policy_changes=policy.changes,
    )
