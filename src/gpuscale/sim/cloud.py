"""The simulated cloud: a `NodeProvider` whose nodes go through the real start-up chain, with sampled durations.

requested → capacity acquired → instance running → node registered (Node object, not Ready, GPUs withheld) → node Ready
→ GPU registered (device plugin puts GPUs in allocatable) → ResourceSlices published (the DRA drivers' kubelet plugins,
for pools that declare `resource_slices`: the pool's template slices for that node). Each step's duration is drawn from
the pool's `StartupProfile` (lognormals given as median and p90, the form docs/twin.md cites them in). Stockouts: a pool
may be out of capacity during given spells, and any request may hit a stockout with the pool's probability; the provider
then refuses the whole request with `ProviderError(STOCKOUT)`, as clouds answer `ZONE_RESOURCE_POOL_EXHAUSTED`. Billing
runs from capacity acquired until deletion.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpuscale.engine.plan import UpcomingNode
from gpuscale.engine.state import FailureKind
from gpuscale.lifecycle.phases import Milestone
from gpuscale.loop.ports import ProviderError
from gpuscale.model.node import HOSTNAME_LABEL, POOL_LABEL, ZONE_LABEL, Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources, is_gpu_resource
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Handle, Priority, Simulation
from gpuscale.sim.distributions import Duration, Keyed, LogNormal

NOT_READY_TAINT = Taint(key="node.kubernetes.io/not-ready", effect=TaintEffect.NO_SCHEDULE)
"""What the node lifecycle controller puts on a registered node until it is Ready, as on a real cluster."""
PULL_MB_PER_S = LogNormal.from_p90(45.0, 85.0)
"""Cold image pull throughput, extraction included (TWIN-DEFAULTS §2)."""
CONTAINER_START_S = LogNormal.from_p90(5.0, 20.0, cap=60.0)
"""A plain container's start → Ready (TWIN-DEFAULTS §5, cpu row), capped at 60 s (an assumption: a minute)."""
DRA_SLICES_S = LogNormal.from_p90(45.0, 120.0)
"""A DRA driver's kubelet plugin publishing the node's ResourceSlices, for a profile without a GPU step (a `cpu`
profile): TWIN-DEFAULTS §5's "Ready → GPU allocatable, driver preinstalled" row for gpu-small (aws#1459: a GPU plugin
DaemonSet needs > 60 s after node start). An assumption: no published measurement of slice publication exists."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupProfile:
    acquire_s: Duration
    boot_s: Duration
    register_s: Duration
    ready_s: Duration
    gpu_s: Duration | None
    """Ready → GPUs in allocatable (driver + device plugin); `None` for pools without GPUs."""
    pull_mb_per_s: LogNormal = PULL_MB_PER_S
    pull_s: Duration | None = None
    """A cold pull's duration, when measured as such (`gpuscale calibrate`); replaces size / `pull_mb_per_s`."""
    start_s: Duration = CONTAINER_START_S
    """Container start → Ready (model load for inference, NCCL/restore for training) after a cold pull."""
    warm_start_s: Duration | None = None
    """Container start → Ready when the pod's image was already on the node at bind (the pull skipped: the files
    are local); `None`: as `start_s`."""
    slices_s: Duration | None = None
    """GPUs registered (Ready, for a pool without extended GPUs) → the node's ResourceSlices published, for pools that
    declare `resource_slices`; `None`: as `gpu_s` (the DRA plugin waits for the driver as the device plugin does),
    else `DRA_SLICES_S` (docs/twin.md, "Devices by claim")."""

    def start(self, warm: bool) -> Duration:
        """The container start a pod meets: `warm_start_s` when its image was on the node already."""
        return self.warm_start_s if warm and self.warm_start_s is not None else self.start_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Spell:
    """A period with no capacity in a pool: every request between `start_s` and `end_s` is refused."""

    pool: str
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CloudPool:
    pool: NodePool
    profile: StartupProfile
    stockout_probability: float = 0.0


def _charge(pool: NodePool, acquired_s: float, until: float) -> tuple[float, float]:
    """USD and GPU-seconds of one node of `pool` from the moment its capacity was acquired until `until`."""
    held = max(until - acquired_s, 0.0)
    return held / 3600.0 * pool.usd_per_hour, held * pool.node_gpus()


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """What the open timelines hold at one moment (`SimCloud.tally`)."""

    cost: dict[str, float]
    """USD per pool so far, closed nodes included (`cost_so_far`)."""
    gpu_seconds: dict[str, float]
    acquired: dict[str, int]
    """Open nodes whose capacity was acquired, per pool (pools with none absent)."""
    gpus: float
    """GPUs of those nodes (the pools' `node_gpus()`, summed in request order)."""


@dataclass(slots=True)
class NodeTimeline:
    """When each step of one node's start-up happened (simulated seconds); `None` until it happens."""

    pool: str
    request_id: str
    requested_s: float
    acquired_s: float | None = None
    running_s: float | None = None
    registered_s: float | None = None
    ready_s: float | None = None
    gpu_s: float | None = None
    slices_s: float | None = None
    """When its ResourceSlices were published (only on nodes of pools that declare them)."""
    deleted_s: float | None = None
    node: str | None = None
    pending: list[Handle] = field(default_factory=list)
    ordinal: int = 0
    """This node is the pool's n-th request of the run: the key of its random draws (and its zone, unless named)."""
    zone: str | None = None
    """The zone the scale-up named for it (None: the pool's zones in turn)."""

    def milestones(self) -> dict[Milestone, float]:
        """The start-up steps that happened so far, as the pod tracer's milestones (what `with_node` reads)."""
        return {m: v for m, v in (
            (Milestone.REQUESTED, self.requested_s), (Milestone.ACQUIRED, self.acquired_s),
            (Milestone.RUNNING, self.running_s), (Milestone.REGISTERED, self.registered_s),
            (Milestone.READY, self.ready_s), (Milestone.GPU_REGISTERED, self.gpu_s),
            (Milestone.SLICES_PUBLISHED, self.slices_s)) if v is not None}


class SimCloud:
    def __init__(self, sim: Simulation, cluster: SimCluster, pools: Mapping[str, CloudPool],
                 rng: np.random.Generator, spells: Sequence[Spell] = (),
                 on_stockout: Callable[[str, float], None] = lambda pool, t: None) -> None:
        self._sim = sim
        self._cluster = cluster
        self.pools = dict(pools)
        self._keyed = Keyed(rng)
        self._ordinal: dict[str, int] = {}
        self._asks: dict[str, int] = {}
        self._spells = tuple(spells)
        self._on_stockout = on_stockout
        self._seq = 0
        self.timelines: dict[str, NodeTimeline] = {}
        """request id → timeline, for every node ever requested."""
        self.open: dict[str, NodeTimeline] = {}
        """The timelines not closed yet (billed now), in request order: what the sampler and billing go over."""
        self._by_node: dict[str, NodeTimeline] = {}
        self._live: dict[str, str] = {}
        """Registered, not deleted node → pool, in registration order, kept as nodes come and go."""
        self._node_pools: dict[str, str] | None = None
        """What `node_pools` hands out: a copy of `_live`, made again only after `_live` changed."""
        self._starting: dict[str, UpcomingNode] = {}
        """Requests not registered and not given back, in request order, each as the `UpcomingNode` made when it was
        requested (its fields never change): `upcoming` gathers them instead of making one per starting node again
        whenever a node registers (hundreds at a time while a big cluster ramps up)."""
        self._upcoming: tuple[UpcomingNode, ...] | None = None
        self.cost_usd_closed = 0.0
        self.cost_by_pool: dict[str, float] = {}
        self.gpu_seconds_by_pool: dict[str, float] = {}

    def add_spell(self, spell: Spell) -> None:
        """A stockout starting now (what-if tests and interactive runs)."""
        self._spells = (*self._spells, spell)

    # ------------------------------------------------------------------------------------------- NodeProvider
    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        """`NodeProvider.increase`: in `zone` when named, else the pool's zones in turn (by request ordinal)."""
        spec = self.pools.get(pool)
        if spec is None:
            raise ProviderError(FailureKind.OTHER, f"unknown pool {pool}")
        if zone is not None and zone not in spec.pool.zones:
            raise ProviderError(FailureKind.OTHER, f"pool {pool} has no zone {zone}")
        now = self._sim.now
        ask = self._asks[pool] = self._asks.get(pool, 0) + 1
        if any(s.pool == pool and s.start_s <= now < s.end_s for s in self._spells) or (
                spec.stockout_probability and self._keyed.uniform("stockout", pool, ask) < spec.stockout_probability):
            self._on_stockout(pool, now)
            raise ProviderError(FailureKind.STOCKOUT, f"ZONE_RESOURCE_POOL_EXHAUSTED: no capacity for {pool} "
                                                      f"in {', '.join(spec.pool.zones) or 'its zones'}")
        ids = []
        for _ in range(count):
            self._seq += 1
            request_id = f"{pool}-{self._seq:05d}"
            timeline = NodeTimeline(pool=pool, request_id=request_id, requested_s=now, ordinal=self._next(pool),
                                    zone=zone)
            self.timelines[request_id] = self.open[request_id] = timeline
            self._starting[request_id] = UpcomingNode(pool=pool, request_id=request_id, requested_s=now, zone=zone)
            self._upcoming = None
            self._step(timeline, spec.profile.acquire_s, self._acquired)
            ids.append(request_id)
        return tuple(ids)

    def delete(self, nodes: Sequence[str]) -> None:
        for name in nodes:
            timeline = self._by_node.get(name)
            if timeline is not None:
                self._close(timeline)
            self._cluster.remove_node(name)

    def cancel(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            timeline = self.timelines.get(request_id)
            if timeline is not None and timeline.node is None:
                for handle in timeline.pending:
                    handle.cancel()
                self._close(timeline)

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        if self._upcoming is None:
            self._upcoming = tuple(self._starting.values())
        return self._upcoming

    def node_pools(self) -> Mapping[str, str]:
        """A copy never changed once handed out (the loop keeps it in its snapshot as is); the same one until a node
        registers or goes."""
        if self._node_pools is None:
            self._node_pools = dict(self._live)
        return self._node_pools

    def preload(self, pool: str, count: int) -> None:
        """Nodes that exist when the run starts: registered, Ready, GPUs in allocatable, billed from now."""
        for _ in range(count):
            self._seq += 1
            request_id = f"{pool}-{self._seq:05d}"
            now = self._sim.now
            t = NodeTimeline(pool=pool, request_id=request_id, requested_s=now, acquired_s=now, running_s=now,
                             ordinal=self._next(pool))
            self.timelines[request_id] = self.open[request_id] = t
            self._registered(t)
            for handle in t.pending:
                handle.cancel()
            self._ready(t)
            if t.gpu_s is None:
                for handle in t.pending:
                    handle.cancel()
                self._gpu_registered(t)
            if t.slices_s is None and self.pools[pool].pool.resource_slices:
                for handle in t.pending:
                    handle.cancel()
                self._slices_published(t)

    def _next(self, pool: str) -> int:
        self._ordinal[pool] = self._ordinal.get(pool, 0) + 1
        return self._ordinal[pool]

    def draw(self, distribution: Duration, *key: object) -> float:
        """A keyed draw (common random numbers, `distributions.Keyed`), for the world's per-node and per-pod steps."""
        return self._keyed.lognormal(distribution, *key)

    # ------------------------------------------------------------------------------------------- start-up chain
    def _step(self, timeline: NodeTimeline, duration: Duration, then: Callable[[NodeTimeline], None]) -> None:
        delay = self._keyed.lognormal(duration, "step", timeline.pool, timeline.ordinal, then.__name__)
        handle = self._sim.after(delay, Priority.CLOUD, lambda: then(timeline))
        timeline.pending = [handle]

    def _acquired(self, t: NodeTimeline) -> None:
        t.acquired_s = self._sim.now
        self._step(t, self.pools[t.pool].profile.boot_s, self._running)

    def _running(self, t: NodeTimeline) -> None:
        t.running_s = self._sim.now
        self._step(t, self.pools[t.pool].profile.register_s, self._registered)

    def _registered(self, t: NodeTimeline) -> None:
        t.registered_s = self._sim.now
        pool = self.pools[t.pool].pool
        name = t.request_id
        zone = t.zone or (pool.zones[(t.ordinal - 1) % len(pool.zones)] if pool.zones else None)
        labels = {**pool.labels, POOL_LABEL: pool.name, HOSTNAME_LABEL: name, **({ZONE_LABEL: zone} if zone else {})}
        withheld = Resources.of({n: a for n, a in pool.allocatable.items if not is_gpu_resource(n)})
        node = Node(name=name, allocatable=withheld, capacity=withheld, labels=labels,
                    taints=(*pool.taints, NOT_READY_TAINT), ready=False, created_s=self._sim.now,
                    provider_id=f"twin://{pool.name}/{name}")
        t.node = name
        self._by_node[name] = t
        self._live[name] = t.pool
        self._node_pools = None
        if self._starting.pop(t.request_id, None) is not None:
            self._upcoming = None
        self._cluster.put_node(node)
        self._step(t, self.pools[t.pool].profile.ready_s, self._ready)

    def _ready(self, t: NodeTimeline) -> None:
        t.ready_s = self._sim.now
        node = self._cluster.nodes.get(t.node or "")
        if node is None:
            return
        taints = tuple(t for t in node.taints if t.key != NOT_READY_TAINT.key)
        self._cluster.put_node(replace(node, ready=True, ready_since_s=self._sim.now, taints=taints))
        gpu = self.pools[t.pool].profile.gpu_s
        if gpu is None or not self.pools[t.pool].pool.is_gpu_pool():
            t.gpu_s = self._sim.now
            t.pending = []
            self._drivers(t)
        else:
            self._step(t, gpu, self._gpu_registered)

    def _gpu_registered(self, t: NodeTimeline) -> None:
        t.gpu_s = self._sim.now
        t.pending = []
        node = self._cluster.nodes.get(t.node or "")
        if node is not None:
            full = self.pools[t.pool].pool.allocatable
            self._cluster.put_node(replace(node, allocatable=full, capacity=full))
        self._drivers(t)

    def _drivers(self, t: NodeTimeline) -> None:
        """After GPU registration: a pool that declares ResourceSlices has its node's DRA drivers publish them."""
        spec = self.pools[t.pool]
        if spec.pool.resource_slices:
            self._step(t, spec.profile.slices_s or spec.profile.gpu_s or DRA_SLICES_S, self._slices_published)

    def _slices_published(self, t: NodeTimeline) -> None:
        t.slices_s = self._sim.now
        t.pending = []
        if t.node is not None and t.node in self._cluster.nodes:
            self._cluster.dra.publish(t.node, self.pools[t.pool].pool.template_slices(t.node))

    # ------------------------------------------------------------------------------------------------ billing
    def _close(self, t: NodeTimeline) -> None:
        if t.deleted_s is not None:
            return
        t.deleted_s = self._sim.now
        del self.open[t.request_id]
        if t.node is not None and self._live.pop(t.node, None) is not None:
            self._node_pools = None
        if self._starting.pop(t.request_id, None) is not None:
            self._upcoming = None
        self._bill(t, self._sim.now, closed=True)

    def _bill(self, t: NodeTimeline, until: float, closed: bool) -> tuple[float, float]:
        if t.acquired_s is None:
            return 0.0, 0.0
        cost, gpu_s = _charge(self.pools[t.pool].pool, t.acquired_s, until)
        if closed:
            self.cost_by_pool[t.pool] = self.cost_by_pool.get(t.pool, 0.0) + cost
            self.gpu_seconds_by_pool[t.pool] = self.gpu_seconds_by_pool.get(t.pool, 0.0) + gpu_s
        return cost, gpu_s

    def cost_so_far(self, now: float) -> tuple[dict[str, float], dict[str, float]]:
        """USD and GPU-seconds per pool up to `now`, open nodes included."""
        tally = self.tally(now)
        return tally.cost, tally.gpu_seconds

    def tally(self, now: float) -> Tally:
        """`cost_so_far` and the nodes holding capacity now, in one pass over the open timelines (the sampler's).

        Billing each open timeline as `_bill` does (`_charge`), in the same order: a timeline not acquired yet adds
        its pool with nothing (`x + 0.0 == x`), as `_bill`'s (0.0, 0.0) did. `_charge` is written out in the loop
        (the same operations: `max(held, 0.0)` keeps `held` unless it is below 0.0), with each pool's price and GPUs
        read once per call: the sampler tallies ≈ 900 open timelines every five simulated minutes on a big day."""
        cost = dict(self.cost_by_pool)
        seconds = dict(self.gpu_seconds_by_pool)
        acquired: dict[str, int] = {}
        gpus = 0.0
        rates = {name: (spec.pool.usd_per_hour, spec.pool.node_gpus()) for name, spec in self.pools.items()}
        for t in self.open.values():
            name = t.pool
            since = t.acquired_s
            if since is None:
                if name not in cost:
                    cost[name] = 0.0
                if name not in seconds:
                    seconds[name] = 0.0
                continue
            usd_per_hour, per_node = rates[name]
            held = now - since
            if held < 0.0:
                held = 0.0
            cost[name] = cost.get(name, 0.0) + held / 3600.0 * usd_per_hour
            seconds[name] = seconds.get(name, 0.0) + held * per_node
            acquired[name] = acquired.get(name, 0) + 1
            gpus += per_node
        return Tally(cost=cost, gpu_seconds=seconds, acquired=acquired, gpus=gpus)

    def timeline_of(self, node: str) -> NodeTimeline | None:
        return self._by_node.get(node)
