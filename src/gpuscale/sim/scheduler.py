"""A model of kube-scheduler for the twin: one pod at a time, in priority order, with preemption and gangs.

- Queue order: kube-scheduler's queue. The active queue in PrioritySort order — priority (high first), then the
  time the pod was queued (its creation, refreshed by each failed attempt), then name — and after it the pods still
  in backoff (1 s doubling to 10 s per failed attempt), by the end of their backoff: the scheduler pops those when
  the active queue is empty (SchedulerPopFromBackoffQ), so backoff orders retries but does not delay them. An event
  on a Ready node whose taints a waiting pod tolerates (it turned Ready, its GPUs registered, a pod left it) counts a
  failed attempt for that pod if it still fits nowhere, as kube-scheduler's queueing hints retry it: the oldest pods
  of a burst back off longest. A pod left unschedulable without an event is retried every 5 minutes
  (podMaxInUnschedulablePodsDuration).
- Feasibility: the engine's filters (`engine.whatif.filters`, reading the scheduler's rows through `filters.Rows`),
  on Ready nodes only (a node that is not Ready carries the `not-ready` taint in a real cluster); GPUs exist for a
  pod only once the device plugin put them in allocatable. InterPodAffinity (required affinity and anti-affinity,
  existing pods' anti-affinity) and PodTopologySpread (`DoNotSchedule` constraints) read an
  `engine.scheduling.Topology` of every node and bound pod, kept only once some pod with inter-pod terms or spread
  constraints was seen. The volume filters read a `VolumeState` of the cluster's storage (`sim.storage`) and the
  bound pods' claims, kept once some pod with claims was seen and rebuilt after the storage or the rows change;
  binding a pod provisions its unbound WaitForFirstConsumer claims in the node's zone (VolumeBinding's PreBind).
  DynamicResources reads a `DraState` of the cluster's DRA objects (`sim.devices`: the slices nodes published, the
  claims and their allocations) and the bound pods' ResourceClaims, built when the scenario has DRA objects and
  rebuilt after they or the rows change; binding a pod writes the allocation the filter found on its claims and
  reserves them for it (Reserve, PreBind). Nodes that have not published their slices offer no devices, as on a real
  cluster.
- Scoring: `least-allocated` (kube's default NodeResourcesFit strategy), `most-allocated`, or `gpu-binpack` (most
  allocated GPUs first), each 0–100, plus TaintToleration's score at its default weight 3: nodes with fewer
  `PreferNoSchedule` taints the pod does not tolerate score higher (0–100, normalised over the feasible nodes), so
  pods avoid nodes the autoscaler marked `DeletionCandidateOfClusterAutoscaler` as kube-scheduler makes them do.
  Ties go to the node first in name order, so runs are reproducible.
- GPU sharing by fraction (`gpuscale.io/gpu-milli` nodes): per-GPU accounting (`engine.placement.devices`) — a
  fraction needs one device with room, whole GPUs need free devices — and the device picked is written on the bound
  pod as `gpuscale.io/gpu-index` (what a sharing extender records; the autoscaler reads it back). With
  `gpu_placement` (`gpuscale` or `fgd`), GPU pods go where fragmentation grows least (measured against the GPU pods
  bound and pending), the configured scoring breaking ties; CPU pods always use the configured scoring.
- Gangs (pods of one pod group) are placed all-or-nothing once all members exist, on a trial copy of the arrays.
- Preemption: a pod that fits nowhere may evict lower-priority pods on one node — the node where the victims' highest
  priority is lowest, then the fewest victims — as DefaultPreemption does. Gang members do not preempt.
- Nominations (`status.nominatedNodeName`, which the autoscaler writes: D50): a nominated pod is tried in full, its
  nominated node first (taken when feasible), and while the nomination stands the pods of its priority or lower see
  that node without the nominated pod's requests (kube-scheduler's `RunFilterPluginsWithNominatedPods`). A failed
  attempt clears the nomination, as kube-scheduler does when preemption finds no victims.
- A pod that cannot be placed gets `PodScheduled=False/Unschedulable` (`Pod.unschedulable`), exactly when the real
  scheduler would set it: after an attempt.

Free capacity lives in NumPy arrays (nodes × resources, one row per schedulable node in name order) updated as pods
come and go; a node that comes, goes, turns Ready or registers its GPUs has only its own row redone, so the arrays
always equal a rebuild from scratch (the twin's T4 pools churn nodes all day). A pass costs
O(pending classes × nodes × resources) thanks to the equivalence-class skip (once one pod of a shape fails in a pass,
the rest of that shape is not tried again in the same pass), and a shape that failed is not tried again in later
passes until something it depends on changes (nodes, taints, bound pods): kube-scheduler's queueing hints. Its pods
are still marked and counted in `attempts`, as a failed attempt would. A pod whose feasibility depends on the pods
placed (it has inter-pod terms, or a bound pod has anti-affinity) takes neither shortcut: pods of its shape may differ
in labels and namespace, and a bind may satisfy its affinity.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from gpuscale.engine.dra.allocate import Allocated
from gpuscale.engine.placement.devices import (
    DEVICE_ANNOTATION,
    FragChooser,
    GpuDevices,
    GpuNeed,
    RequestKinds,
    annotated_devices,
)
from gpuscale.engine.placement.frag import ClassKey, TypicalTables, class_key
from gpuscale.engine.placement.shapes import MILLI, PodShape
from gpuscale.engine.scheduling import FitFailure, HostPorts, Topology, static_failures
from gpuscale.engine.whatif import filters
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.volumes import VolumeState
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, SchedulingConstraints, depends_on_placed
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, PODS, Resources, is_gpu_resource
from gpuscale.model.taints import Toleration, blocking_taints, soft_taint_count, untolerated_taint
from gpuscale.sim.cluster import SimCluster, Termination
from gpuscale.sim.core import Priority, Simulation, replaced

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_T = TypeVar("_T", bound=np.generic)
_Entry = tuple[tuple[int, float, str], Pod, int]
"""A pending pod in the queue: its position (priority negated, creation time, key), the pod, its kind's number."""


POD_INITIAL_BACKOFF_S = 1.0
POD_MAX_BACKOFF_S = 10.0
"""kube-scheduler's `podInitialBackoffSeconds` and `podMaxBackoffSeconds` (defaults)."""
UNSCHEDULABLE_FLUSH_S = 300.0
"""How long a pod stays among the unschedulable pods before kube-scheduler retries it without an event
(`podMaxInUnschedulablePodsDuration`, 5 minutes)."""


def backoff_s(failures: int) -> float:
    """kube-scheduler's backoff after `failures` failed attempts: 1 s, doubling, at most 10 s."""
    if failures <= 0:
        return 0.0
    return min(POD_INITIAL_BACKOFF_S * float(2 ** min(failures - 1, 32)), POD_MAX_BACKOFF_S)


TAINT_TOLERATION_WEIGHT = 3
"""TaintToleration's weight in kube-scheduler's default profile (NodeResourcesFit's is 1)."""

_GROWN_LIMIT = 256
"""Past this many room changes, kinds that fitted nowhere are simply tried again (a full check is as cheap)."""


class Scoring(StrEnum):
    LEAST_ALLOCATED = "least-allocated"
    MOST_ALLOCATED = "most-allocated"
    GPU_BINPACK = "gpu-binpack"


class SimScheduler:
    def __init__(self, sim: Simulation, cluster: SimCluster, columns: Sequence[str],
                 scoring: Scoring = Scoring.LEAST_ALLOCATED,
                 on_bound: Callable[[Pod, Node], None] = lambda pod, node: None,
                 on_unschedulable: Callable[[Pod], None] = lambda pod: None,
                 gpu_placement: str | None = None) -> None:
        self._sim = sim
        self._cluster = cluster
        self.columns = [c for c in dict.fromkeys(columns) if c != PODS]
        self._col = {c: i for i, c in enumerate(self.columns)}
        self._scoring = scoring
        self._on_bound = on_bound
        self._on_unschedulable = on_unschedulable
        self._pass_scheduled = False
        self._stale = True
        self._names: list[str] = []
        self._nodes: list[Node] = []
        """The node of each row (`_filtered`'s, in row order): what the engine's filters read."""
        self._every_row: BoolArray = np.ones(0, dtype=bool)
        """All True, one per row: the rows the filters may choose from."""
        self._row: dict[str, int] = {}
        self._alloc = np.zeros((0, len(self.columns)), dtype=np.int64)
        self._free = self._alloc.copy()
        self._free_pods = np.zeros(0, dtype=np.int64)
        self._static: dict[SchedulingConstraints, BoolArray] = {}
        self._filtered: dict[str, Node] = {}
        """Per row (by node name): the node its row of the filter masks and soft-taint counts was computed from. A
        relabel that leaves everything the filters read as it was there redoes the soft-taint counts only."""
        self._soft: dict[tuple[Toleration, ...], IntArray] = {}
        """Per toleration set: each row's `PreferNoSchedule` taints it does not tolerate (TaintToleration's score)."""
        self._requests: dict[Resources, _Request] = {}
        """What the scheduler reads off each distinct request value."""
        self._request_of: dict[int, tuple[Resources, _Request]] = {}
        """The same by request object (`id`, the object held so the id stays its own): pods of a job share one
        request object, and a lookup by value compares equal objects field by field."""
        self._constraints: dict[SchedulingConstraints, SchedulingConstraints] = {}
        """One object per distinct constraints value, the key of the masks (`_static`, and its tolerations `_soft`'s),
        which are then found by identity."""
        self._constraints_of: dict[int, tuple[SchedulingConstraints, SchedulingConstraints]] = {}
        """That object by constraints object (`id`, the object held)."""
        self._gpu_cols = [i for i, c in enumerate(self.columns) if is_gpu_resource(c) or c == GPU_MILLI]
        self._fit_cols = (self._gpu_cols if scoring is Scoring.GPU_BINPACK and self._gpu_cols
                          else [self._col[c] for c in (CPU, MEMORY) if c in self._col])
        """The columns NodeResourcesFit's score averages: GPUs for gpu-binpack, else CPU and memory."""
        self._fit_alloc: list[IntArray] = [np.zeros(0, dtype=np.int64) for _ in self._fit_cols]
        """The allocatable of the columns NodeResourcesFit reads (`_fit_cols`), one contiguous array per column, kept
        with `_alloc`'s rows."""
        self._fit_zero_rows = 0
        """Rows with no allocatable in one of those columns (while none has, the fit scores divide without a mask)."""
        self._devices: GpuDevices | None = None
        self._all_devices = GpuDevices.of([])
        self._kinds = RequestKinds()
        self._gpu_placement = gpu_placement
        self._workload: Counter[ClassKey] = Counter()
        """GPU pods bound or pending now per resource class: the workload fragmentation is measured against. Kept as
        pods come, bind and go; binding moves a pod from pending to bound and leaves it unchanged."""
        self._workload_moved: Counter[ClassKey] = Counter()
        """Net change of `_workload` per class since the chooser was built: all zero = the same workload; the
        classes not zero are those whose counts `_frag_tables` must move in its ranking."""
        self._frag: FragChooser | None = None
        """The chooser for the workload it was built for (reused while the workload is the same)."""
        self._frag_tables = TypicalTables()
        """The typical-class tables of workloads met so far: a new chooser mostly only reweighs one."""
        self.attempts = 0
        self._kind_ids: dict[tuple[_Request, SchedulingConstraints, int], int] = {}
        """Pod kinds (requests, constraints, priority) by a small number, so a pass hashes each pod's kind once."""
        self._kind_keys: list[tuple[_Request, SchedulingConstraints, int]] = []
        """The kinds by their number (`_kind_ids` the other way)."""
        self._queued: dict[str, _Entry] = {}
        """Per pending pod: its queue position (priority, creation, key), the pod object, and its kind's number; kept
        as pods join, change in and leave the pending pods (`pending_changed`)."""
        self._queue_order: list[_Entry] | None = None
        """The entries of `_queued` in queue order (by position), kept sorted as they come and go; None until the
        first pass builds it from the cluster's pending pods."""
        self._stamps: dict[str, tuple[float, int]] = {}
        """Per pending pod that failed an attempt: when it last failed and how many attempts it failed (the queue
        timestamp kube-scheduler refreshes on each failure, and the count its backoff doubles with)."""
        self._restamp: dict[str, tuple[float, int]] = {}
        """The stamps a pass changes, applied when it ends (the kept order stays valid while the pass binds pods)."""
        self._no_fit: dict[int, int] = {}
        """Pod kinds with no feasible node when last tried → the length of `_grown` then. Binding a pod only takes
        capacity, so such a kind can have become feasible only on the nodes named in `_grown` since: `_place` is
        tried again only if one of those is feasible now (preemption is still tried, as pods bound since may be
        victims). Cleared when the arrays are rebuilt."""
        self._grown: list[str] = []
        """Nodes where room may have grown (a pod left; the node came, went or changed) or the filters changed
        (taints, labels, cordon), oldest first."""
        self._still_failing: dict[int, int] = {}
        """Pod kinds (their numbers in `_kind_ids`) that fit nowhere, even by preemption, and nothing they depend on
        (nodes, their labels and taints, the pods bound) changed since, each with its priority: another attempt
        would fail the same way, so a pass marks such pods at once — kube-scheduler's queueing hints, which retry a
        pod only after an event that may make it schedulable. A pod bound at a priority only keeps the kinds of that
        priority or lower: binding takes room (so `_place` still fails), and the pod is no preemption victim for them
        (victims run below the preemptor's priority). A change on one node (a pod left it; it came, went, or its
        allocatable, readiness, taints, labels or cordon changed) keeps the kinds that node's row cannot take even
        empty (`_failing_despite`); any other change clears them all."""
        self._woken: set[int] = set()
        """Kinds kept in `_still_failing` whose pods an event since the last pass queued again: a schedulable node
        whose taints they tolerate changed (it turned Ready before its device plugin registered the GPUs, its GPUs
        registered, a pod left it). kube-scheduler's queueing hints queue such pods (TaintToleration's for a taint
        gone, NodeResourcesFit's for room that may have grown) and they are tried, popped from the backoff queue when
        the active queue is empty, and fail. The next pass counts that failed attempt for each of their pods without
        trying them, so their backoff grows as in kube-scheduler: the oldest pods of a burst back off longest."""
        self._bound_priorities: dict[int, int] = {}
        """How many bound pods run at each priority: preemption is tried only when some run below the pod's."""
        self._inter_pod = False
        """Some pod with inter-pod (anti-)affinity terms was seen (pending or bound): from the next pass on, the
        scheduler keeps `_topology`."""
        self._topology: Topology | None = None
        """Every node's labels and every bound pod, for InterPodAffinity (`engine.scheduling.Topology`), as
        kube-scheduler's snapshot holds them (nodes not Ready or being deleted included: their pods still count).
        None while no pod with inter-pod terms was seen, so scenarios without them pay nothing; built from the cluster
        at the first pass after one is, then kept in step with binds, removals and node changes."""
        self._ports = HostPorts()
        """The host ports of the bound pods, per node (NodePorts), kept in step with binds and removals."""
        self._nominated: dict[str, Pod] = {}
        """The pending pods nominated to a node (`status.nominatedNodeName`, written by the autoscaler), by key. Each
        holds room on its node against the pods of its priority or lower (`_room_for`), as kube-scheduler's filters
        count nominated pods; kept as pods join, change in and leave the pending pods."""
        self._released = False
        """A nomination went in the pass running: a kind that failed earlier in it is tried again (its pods may fit
        in the room the nominated pod held)."""
        self._claims_seen = False
        """Some pod using PersistentVolumeClaims was seen (pending or bound): the volume filters then get `_volumes`."""
        self._volumes: VolumeState | None = None
        """The volume filters' state over the rows (`engine.whatif.volumes.VolumeState`: the storage objects, each
        claim's placed users); None until needed after a change of the storage or of the rows, then built from the
        cluster (O(nodes + bound pods)) and kept in step with binds and removals."""
        self._dra: DraState | None = None
        """DynamicResources' state over the rows (`engine.whatif.dra.DraState`: the DRA objects, each claim's placed
        users); None until needed after a change of the DRA objects, the rows or a bound pod with claims, then built
        from the cluster (O(nodes + bound pods with claims)). Never built for a scenario without DRA objects."""
        self._inexact: set[str] = set()
        """Device-accounted nodes whose devices were reconstructed (a GPU pod without a valid device annotation, or
        more milli on a device than it has: GPUs that re-registered fewer). A rebuild reconstructs them again from
        the pods then bound, so a pod coming or going there marks the arrays stale instead of updating them."""
        cluster.capacity_listener = self

    # -------------------------------------------------------------------------------------- CapacityListener
    def pod_placed(self, pod: Pod) -> None:
        if pod.constraints.host_ports and pod.node_name is not None:
            self._ports.add(pod, pod.node_name)
        if self._topology is not None:
            if (node := self._cluster.nodes.get(pod.node_name or "")) is not None:
                self._topology.add(pod, node)
        elif depends_on_placed(pod):
            self._inter_pod = True
        if pod.constraints.claims:
            self._claims_seen = True
            if self._volumes is not None:
                self._volumes.add(pod, self._row.get(pod.node_name or "", -1))
        if pod.constraints.resource_claims:
            self._dra = None
        if self._still_failing:
            self._still_failing = {k: p for k, p in self._still_failing.items() if p <= pod.priority}
        self._bound_priorities[pod.priority] = self._bound_priorities.get(pod.priority, 0) + 1
        request = self._request(pod.requests)
        self._count_class(request, 1)
        if not self._stale:
            row = self._row.get(pod.node_name or "")
            if row is not None:
                if request.vec is not None:
                    self._free[row] -= request.vec
                self._free_pods[row] -= 1
                self._hold(row, pod, request.need, take=True)
        if self._stale:  # the arrays no longer hold this pod: a kind is tried again, as after a rebuild
            self._still_failing.clear()

    def pod_removed(self, pod: Pod) -> None:
        if pod.constraints.host_ports and pod.node_name is not None:
            self._ports.remove(pod, pod.node_name)
        if self._topology is not None:
            self._topology.remove(pod)
        if self._volumes is not None and pod.constraints.claims:
            self._volumes.remove(pod, self._row.get(pod.node_name or "", -1))
        if pod.constraints.resource_claims:
            self._dra = None
        self._room_changed(pod.node_name or "")
        left = self._bound_priorities.get(pod.priority, 0) - 1
        if left > 0:
            self._bound_priorities[pod.priority] = left
        else:
            self._bound_priorities.pop(pod.priority, None)
        request = self._request(pod.requests)
        self._count_class(request, -1)
        if not self._stale:
            row = self._row.get(pod.node_name or "")
            if row is not None:
                if request.vec is not None:
                    self._free[row] += request.vec
                self._free_pods[row] += 1
                self._hold(row, pod, request.need, take=False)
        self._failing_despite(pod.node_name or "")
        self.request_pass()

    def pod_pending(self, pod: Pod) -> None:
        """A new pod waits: the scheduler looks at it in its next pass (this very instant)."""
        self.request_pass()

    def pending_changed(self, before: Pod | None, after: Pod | None) -> None:
        if before is not None and self._nominated.pop(before.key, None) is not None:
            held = before.nominated_node or ""
            if after is None or after.nominated_node != held:
                self._room_changed(held)
                self._released = True
        if after is not None and after.nominated_node is not None:
            self._nominated[after.key] = after
        if before is not None:
            self._count_class(self._request(before.requests), -1)
            if (entry := self._queued.pop(before.key, None)) is not None and self._queue_order is not None:
                at = bisect.bisect_left(self._queue_order, (entry[0],))
                del self._queue_order[at]
            if after is None:
                self._stamps.pop(before.key, None)
                self._restamp.pop(before.key, None)
        if after is not None:
            if depends_on_placed(after):
                self._inter_pod = True
            if after.constraints.claims:
                self._claims_seen = True
            self._count_class(self._request(after.requests), 1)
            if self._queue_order is not None:
                bisect.insort(self._queue_order, self._enqueue(after))

    def storage_changed(self) -> None:
        """A claim, volume or class changed: the volume state is built again when next read, and every kind is tried
        again (a claim bound or deleted changes the verdicts of the pods using it)."""
        self._volumes = None
        self._still_failing.clear()
        self._forget_no_fit()
        self.request_pass()

    def dra_changed(self) -> None:
        """A DRA object changed (a claim allocated, reserved, released or deleted; a node's slices published): the
        DRA state is built again when next read, and every kind is tried again (devices came or went)."""
        self._dra = None
        self._still_failing.clear()
        self._forget_no_fit()
        self.request_pass()

    def _enqueue(self, pod: Pod) -> _Entry:
        key = (self._request(pod.requests), self._constraint(pod.constraints), pod.priority)  # one object per value
        kind = self._kind_ids.get(key)
        if kind is None:
            kind = self._kind_ids[key] = len(self._kind_keys)
            self._kind_keys.append(key)
        stamp = self._stamps.get(pod.key)
        queued_at = stamp[0] if stamp is not None else pod.created_s or 0.0
        entry = self._queued[pod.key] = ((-pod.priority, queued_at, pod.key), pod, kind)
        return entry

    def node_changed(self, name: str) -> None:
        """A node came, went, or changed readiness or allocatable: redo that node's row only. Rows stay in name
        order, so every array is what a rebuild from scratch would give and ties still go to the first name. Only
        that row can have become feasible for a pod (`_no_fit`): the others keep their values."""
        self._room_changed(name)
        if self._topology is not None:
            if (known := self._cluster.nodes.get(name)) is not None:
                self._topology.relabel(known)
            else:
                self._topology.remove_node(name)
        if name not in self._cluster.nodes:
            self._ports.remove_node(name)
        self._volumes = None  # its rows may have moved
        self._dra = None
        if not self._stale:
            row = self._row.get(name)
            node = self._cluster.nodes.get(name)
            schedulable = node is not None and node.ready and not node.deleting
            if row is not None and schedulable:
                assert node is not None
                self._replace_row(row, node)  # stays at its place (GPUs registered, allocatable changed)
            else:
                if row is not None:
                    self._delete_row(row)
                if node is not None and schedulable:
                    self._insert_row(bisect.bisect_left(self._names, name), node)
        self._failing_despite(name)
        self.request_pass()

    def node_relabelled(self, node: Node) -> None:
        """Taints, labels or cordon changed (deletion-candidate marks, mostly): recompute that node's row of the
        cached filter masks instead of rebuilding every array."""
        self._room_changed(node.name)
        if self._topology is not None:
            self._topology.relabel(node)
        row = self._row.get(node.name)
        if not self._stale and row is not None:
            if _filters_alike(self._filtered[node.name], node):  # mostly a `PreferNoSchedule` mark set or cleared
                self._redo_soft(row, node)
            else:
                self._redo_filters(row, node)
        self._failing_despite(node.name)
        self.request_pass()

    def _failing_despite(self, name: str) -> None:
        """Keep in `_still_failing` only the kinds that still fail after a change on node `name` alone (its row
        already updated): those its row cannot take even empty — the kind asks for a resource no node has, the
        node's filters reject it, or its allocatable is short of a request. Both ways to place a pod need the row to
        take it: `_place` needs the free capacity, `_preempt` the capacity freed by evicting victims, and either is
        at most the allocatable. Every other row is as it was when the kind failed there, so the kind fails there
        still. A node without a row (gone, not Ready, being deleted) takes no pod: every kind is kept. Arrays marked
        stale are rebuilt at the next pass, which tries every kind again."""
        if not self._still_failing:
            return
        if self._stale:
            self._still_failing.clear()
            return
        row = self._row.get(name)
        if row is None:
            return
        alloc = self._alloc[row].tolist()
        static = self._static
        node = self._cluster.nodes[name]
        dropped = []
        for kind in self._still_failing:
            request, constraints, _ = self._kind_keys[kind]
            if untolerated_taint(node.taints, constraints.tolerations) is None:
                # the event queues the kind's pods again (kube-scheduler's hints for the filters that rejected
                # them: TaintToleration, NodeResourcesFit); the pass tries them, and if they fail, one failure more
                self._woken.add(kind)
            wanted = request.wanted
            if wanted is None:
                continue
            for col, amount in wanted:  # a plain loop: no generator per kind
                if alloc[col] < amount:
                    break
            else:  # the allocatable suffices (most kinds kept fail here first): do the filters reject it?
                mask = static.get(constraints)  # the kind's constraints are the one object of their value
                if (self._static_mask(constraints) if mask is None else mask)[row]:
                    dropped.append(kind)
        for kind in dropped:
            del self._still_failing[kind]

    def _room_changed(self, name: str) -> None:
        if self._no_fit:
            self._grown.append(name)
            if len(self._grown) > _GROWN_LIMIT:
                self._forget_no_fit()

    def _forget_no_fit(self) -> None:
        self._no_fit.clear()
        self._grown.clear()

    # ------------------------------------------------------------------------------------------------ devices
    def _request(self, requests: Resources) -> _Request:
        """What the scheduler reads off `requests` (found by identity first, then by value, else computed)."""
        known = self._request_of.get(id(requests))
        if known is not None and known[0] is requests:
            return known[1]
        request = self._requests.get(requests)
        if request is None:
            request = self._requests[requests] = self._read(requests)
        if len(self._request_of) >= _OBJECTS_KEPT:
            self._request_of.clear()
        self._request_of[id(requests)] = (requests, request)
        return request

    def _read(self, requests: Resources) -> _Request:
        """`_Request` of `requests`, computed."""
        vec: IntArray | None = np.zeros(len(self.columns), dtype=np.int64)
        for name, amount in requests.items:
            col = self._col.get(name)
            if col is None:
                vec = None
                break
            assert vec is not None
            vec[col] = amount
        shape = self._kinds.shape(requests)
        return _Request(vec, None if vec is None else [(col, int(vec[col])) for col in vec.nonzero()[0].tolist()],
                        self._kinds.need(requests), shape,
                        class_key(shape) if shape is not None and self._gpu_placement is not None else None)

    def _constraint(self, constraints: SchedulingConstraints) -> SchedulingConstraints:
        """The one object of `constraints`' value (`_constraints`)."""
        known = self._constraints_of.get(id(constraints))
        if known is not None and known[0] is constraints:
            return known[1]
        one = self._constraints.setdefault(constraints, constraints)
        if len(self._constraints_of) >= _OBJECTS_KEPT:
            self._constraints_of.clear()
        self._constraints_of[id(constraints)] = (constraints, one)
        return one

    def _count_class(self, request: _Request, delta: int) -> None:
        if (key := request.klass) is not None:
            left = self._workload[key] + delta
            if left:
                self._workload[key] = left
            else:  # a class without pods is left out of every table: dropped, it is not walked per placement
                del self._workload[key]
            self._workload_moved[key] += delta

    def _hold(self, row: int, pod: Pod, need: GpuNeed | None, *, take: bool) -> None:
        """A bound pod (`need` per device) takes (or gives back) the devices its `gpuscale.io/gpu-index` annotation
        names."""
        devices = self._devices
        if devices is None or need is None or not devices.count[row]:
            return
        if pod.node_name in self._inexact:
            self._stale = True
            return
        held = annotated_devices(pod)
        if held is None or not devices.may_hold(row, need, held, free=take):
            # bound by something other than this scheduler, or to devices the node no longer has as they were (its
            # GPUs re-registered): rebuild from all pods of the node, as a rebuild would
            self._stale = True
        elif take:
            devices.take(row, need, held)
        else:
            devices.give(row, need, held)

    # ------------------------------------------------------------------------------------------------ arrays
    def _rebuild(self) -> None:
        """All rows from scratch: at the first pass, and when a bound pod's devices must be reconstructed."""
        self._still_failing.clear()
        self._forget_no_fit()
        self._inexact.clear()
        pods = self._cluster.pods
        self._ports = HostPorts(pods[key] for keys in self._cluster.pods_on.values() for key in keys)
        self._names, self._nodes, self._row = [], [], {}
        self._alloc = np.zeros((0, len(self.columns)), dtype=np.int64)
        self._free = self._alloc.copy()
        self._free_pods = np.zeros(0, dtype=np.int64)
        self._set_devices(np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.int64))
        self._fit_alloc, self._fit_zero_rows = [np.zeros(0, dtype=np.int64) for _ in self._fit_cols], 0
        self._static, self._soft, self._filtered = {}, {}, {}
        self._volumes = None
        self._dra = None
        for node in sorted((n for n in self._cluster.nodes.values() if n.ready and not n.deleting),
                           key=lambda n: n.name):
            self._insert_row(len(self._names), node)
        self._stale = False

    def _node_row(self, node: Node) -> tuple[IntArray, IntArray, int, GpuDevices]:
        """A schedulable node's allocatable, its free capacity and pod slots after the pods bound there, and its
        devices (one row, reconstructed from those pods)."""
        alloc = np.zeros(len(self.columns), dtype=np.int64)
        free_pods = 0
        for name, amount in node.allocatable.items:
            if name == PODS:
                free_pods = amount
            elif name in self._col:
                alloc[self._col[name]] = amount
        free = alloc.copy()
        devices = GpuDevices.of([node.allocatable])
        needs: list[GpuNeed] = []
        held: list[Pod] = []
        for key in self._cluster.pods_on.get(node.name, ()):
            pod = self._cluster.pods[key]
            request = self._request(pod.requests)
            if request.vec is not None:
                free -= request.vec
            free_pods -= 1
            if devices.count[0] and (need := request.need):
                needs.append(need)
                held.append(pod)
        devices.load([0] * len(needs), needs, held)
        if needs and not _as_annotated(devices, needs, held):
            self._inexact.add(node.name)
        else:
            self._inexact.discard(node.name)
        return alloc, free, free_pods, devices

    def _insert_row(self, row: int, node: Node) -> None:
        alloc, free, free_pods, devices = self._node_row(node)
        self._names.insert(row, node.name)
        self._nodes.insert(row, node)
        self._every_row = np.ones(len(self._names), dtype=bool)
        self._row.update(zip(self._names[row:], range(row, len(self._names)), strict=True))
        self._alloc = _inserted(self._alloc, row, alloc)
        self._fit_alloc = [_inserted(column, row, alloc[col]) for column, col in zip(self._fit_alloc, self._fit_cols,
                                                                                     strict=True)]
        self._fit_zero_rows += self._fit_zero(alloc)
        self._free = _inserted(self._free, row, free)
        self._free_pods = _inserted(self._free_pods, row, free_pods)
        old = self._all_devices
        width = max(old.free.shape[1], devices.free.shape[1])
        old_free = old.free if width == old.free.shape[1] else np.pad(old.free,
                                                                      ((0, 0), (0, width - old.free.shape[1])))
        new_free = np.zeros(width, dtype=np.int64)
        new_free[:devices.free.shape[1]] = devices.free[0]
        self._set_devices(_inserted(old.count, row, devices.count[0]), _inserted(old_free, row, new_free))
        self._filtered[node.name] = node
        for constraints, mask in self._static.items():
            self._static[constraints] = _inserted(mask, row, not static_failures(constraints, node))
        for tolerations, soft in self._soft.items():
            self._soft[tolerations] = _inserted(soft, row, soft_taint_count(node.taints, tolerations))

    def _replace_row(self, row: int, node: Node) -> None:
        """Redo one row in place: what deleting and inserting it again would give, without moving every row."""
        alloc, free, free_pods, devices = self._node_row(node)
        self._fit_zero_rows += self._fit_zero(alloc) - self._fit_zero(self._alloc[row])
        for column, col in zip(self._fit_alloc, self._fit_cols, strict=True):
            column[row] = alloc[col]
        self._alloc[row], self._free[row], self._free_pods[row] = alloc, free, free_pods
        count = self._all_devices.count.copy()
        count[row] = devices.count[0]
        width = int(count.max(initial=0))  # as wide as the node with most devices, as `_set_devices` keeps it
        old = self._all_devices.free
        all_free = (np.pad(old, ((0, 0), (0, width - old.shape[1]))) if width > old.shape[1]
                    else old[:, :width].copy())
        all_free[row] = 0  # the node's devices, then zeros to the width (no `np.pad`: its set-up costs more)
        all_free[row, :devices.free.shape[1]] = devices.free[0]
        self._set_devices(count, all_free)
        self._redo_filters(row, node)

    def _delete_row(self, row: int) -> None:
        self._inexact.discard(self._names[row])
        del self._filtered[self._names[row]]
        del self._row[self._names.pop(row)]
        del self._nodes[row]
        self._every_row = np.ones(len(self._names), dtype=bool)
        self._row.update(zip(self._names[row:], range(row, len(self._names)), strict=True))
        self._fit_zero_rows -= self._fit_zero(self._alloc[row])
        self._alloc = _deleted(self._alloc, row)
        self._fit_alloc = [_deleted(column, row) for column in self._fit_alloc]
        self._free = _deleted(self._free, row)
        self._free_pods = _deleted(self._free_pods, row)
        count = _deleted(self._all_devices.count, row)
        self._set_devices(count, _deleted(self._all_devices.free, row)[:, :int(count.max(initial=0))])
        for constraints, mask in self._static.items():
            self._static[constraints] = _deleted(mask, row)
        for tolerations, soft in self._soft.items():
            self._soft[tolerations] = _deleted(soft, row)

    def _redo_filters(self, row: int, node: Node) -> None:
        """One row of the cached filter masks and soft-taint counts, after the node's taints or labels changed."""
        for constraints, mask in self._static.items():
            mask[row] = not static_failures(constraints, node)
        self._redo_soft(row, node)

    def _redo_soft(self, row: int, node: Node) -> None:
        """One row of the soft-taint counts (the filter masks already hold `node`'s verdicts)."""
        self._filtered[node.name] = node
        self._nodes[row] = node
        for tolerations, soft in self._soft.items():
            soft[row] = soft_taint_count(node.taints, tolerations)

    def _set_devices(self, count: IntArray, free: IntArray) -> None:
        """Per-device state of every row, as wide as the node with most devices (`GpuDevices.of`); kept as None
        while no node has devices, so device checks are skipped."""
        self._all_devices = GpuDevices(count, free)
        self._devices = self._all_devices if self._all_devices else None

    def _static_mask(self, constraints: SchedulingConstraints) -> BoolArray:
        constraints = self._constraint(constraints)
        mask = self._static.get(constraints)
        if mask is None:
            nodes = self._cluster.nodes
            mask = np.array([not static_failures(constraints, nodes[n]) for n in self._names], dtype=bool)
            self._static[constraints] = mask
        return mask

    def _soft_counts(self, tolerations: tuple[Toleration, ...]) -> IntArray:
        soft = self._soft.get(tolerations)
        if soft is None:
            nodes = self._cluster.nodes
            soft = np.array([soft_taint_count(nodes[n].taints, tolerations) for n in self._names], dtype=np.int64)
            self._soft[tolerations] = soft
        return soft

    # ------------------------------------------------------------------------------------------------ passes
    def request_pass(self) -> None:
        """Schedule a pass at the next whole simulated second (now, if now is one): changes that land within the same
        second are seen by one pass, as kube-scheduler's 1 s initial backoff batches retries."""
        if not self._pass_scheduled:
            self._pass_scheduled = True
            self._sim.at(float(math.ceil(self._sim.now)), Priority.SCHEDULER, self._run_pass)

    def _run_pass(self) -> None:
        self._pass_scheduled = False
        if not self._cluster.pending:
            return
        if self._stale:
            self._rebuild()
        if self._inter_pod and self._topology is None:
            self._topology = self._topology_now()
        failed: set[int] = set()
        woken, self._woken = self._woken, set()
        gangs: dict[str, list[Pod]] = {}
        self._released = False
        for _, pod, kind in self._queue():
            if self._released:  # a nomination went: the room it held may take the kinds that failed before
                self._released = False
                for other in failed:
                    self._still_failing.pop(other, None)
                failed.clear()
            if pod.scheduling_gated or pod.deleting:
                continue
            if pod.group is not None:
                gangs.setdefault(pod.group.key, []).append(pod)
                continue
            held_back = (kind in self._still_failing and kind not in failed and kind not in woken
                         and pod.key in self._stamps)  # by kube-scheduler's queueing hints: not tried
            if ((self._topology is not None and self._depends_on_placed(pod, self._topology))
                    or (pod.nominated_node is not None and not held_back)):
                # its kind's other pods may differ in labels and namespace, and a bind may satisfy its affinity; or
                # the room its nominated node holds for it is no other pod's: no shortcut holds, so it is tried in
                # full and leaves no mark for its kind
                if not self._place(pod) and not self._preempt(pod):
                    self._failed(pod)
                    self._mark_unschedulable(pod)
                continue
            if kind in failed or kind in self._still_failing:
                if not held_back:
                    self._failed(pod)  # tried: a pod of its kind just failed, an event woke it, or never tried
                else:
                    self._skipped(pod)  # kube-scheduler's queueing hint keeps it unschedulable: not tried
                if pod.unschedulable:  # `_mark_unschedulable` of a pod marked before: only the attempt counts
                    self.attempts += 1
                else:
                    self._mark_unschedulable(pod)
                continue
            placed = self._may_fit(pod, kind) and self._place(pod)
            if not placed:
                self._no_fit[kind] = len(self._grown)
                if not self._preempt(pod):
                    failed.add(kind)
                    self._still_failing[kind] = pod.priority
                    self._failed(pod)
                    self._mark_unschedulable(pod)
        for members in gangs.values():
            self._place_gang(members)
        self._apply_stamps()

    def _topology_now(self) -> Topology:
        """The topology of the cluster as it is: every node, every bound pod. Cost O(nodes + pods)."""
        pods, pods_on = self._cluster.pods, self._cluster.pods_on
        return Topology(self._cluster.nodes.values(), (pods[key] for keys in pods_on.values() for key in keys))

    @staticmethod
    def _depends_on_placed(pod: Pod, topology: Topology) -> bool:
        """Whether the pod's feasibility depends on the pods placed (InterPodAffinity checks it): it has inter-pod
        terms, or a placed pod has anti-affinity terms. Such a pod's verdicts are not shared with its kind's (labels
        and namespace decide too) and may turn from no to yes as pods bind (affinity)."""
        return topology.relevant or depends_on_placed(pod)

    def _may_fit(self, pod: Pod, kind: int) -> bool:
        """False when `_place` would surely fail: the kind fitted nowhere, and none of the nodes whose room or
        filters changed since is feasible for it now (every other node's row is as it was then)."""
        since = self._no_fit.get(kind)
        if since is None or self._stale:
            return True
        rows = {row for name in self._grown[since:] if (row := self._row.get(name)) is not None}
        return bool(rows) and self._any_feasible(pod, rows)

    def _any_feasible(self, pod: Pod, rows: set[int]) -> bool:
        """Whether one of a few `rows` can take `pod`: the engine's filters on those rows only."""
        if not rows:
            return False
        among = np.zeros(len(self._names), dtype=bool)
        among[list(rows)] = True
        return bool(filters.feasible(pod, self._view(), among).any())

    def _queue(self) -> list[_Entry]:
        """The pending pods in the order kube-scheduler's queue hands them out: first the active queue in
        PrioritySort order (priority, high first; then the time the pod was queued — its creation, or its last
        failed attempt; then key), then the pods still in backoff, by the second their backoff ends in, then in
        PrioritySort order (the scheduler pops the backoff queue when the active queue is empty:
        SchedulerPopFromBackoffQ, on by default since v1.33). A copy: the pass binds and marks pods, which changes the
        kept order."""
        if self._queue_order is None:
            pods = self._cluster.pods
            self._queued.clear()
            # the positions are unique (they end with the key): pods are never compared
            self._queue_order = sorted(self._enqueue(pods[key]) for key in self._cluster.pending)
        if not self._stamps:
            return list(self._queue_order)
        window, stamps = math.floor(self._sim.now), self._stamps
        active: list[_Entry] = []
        backing_off: list[tuple[int, _Entry]] = []
        for entry in self._queue_order:
            stamp = stamps.get(entry[0][2])
            # the backoff queue orders by the whole second its backoff ends in (backoffQOrderingWindowDuration), a
            # pod whose backoff ends in the current second still backing off; ties in PrioritySort order
            if stamp is not None and (ends := math.floor(stamp[0] + backoff_s(stamp[1]))) >= window:
                backing_off.append((ends, entry))
            else:
                active.append(entry)
        backing_off.sort(key=lambda e: (e[0], e[1][0]))
        return active + [entry for _, entry in backing_off]

    def _failed(self, pod: Pod) -> None:
        """The pod's attempt failed now: it is queued again from now, with one more failure to back off for."""
        stamp = self._restamp.get(pod.key) or self._stamps.get(pod.key)
        self._restamp[pod.key] = (self._sim.now, (stamp[1] if stamp is not None else 0) + 1)

    def _skipped(self, pod: Pod) -> None:
        """The pod waits among the unschedulable pods: kube-scheduler retries such a pod anyway once it has waited
        `UNSCHEDULABLE_FLUSH_S` since it was queued (and it fails the same way: nothing it depends on changed)."""
        queued_at, failures = self._stamps[pod.key]
        if (flushes := int((self._sim.now - queued_at) // UNSCHEDULABLE_FLUSH_S)) > 0:
            self._restamp[pod.key] = (queued_at + flushes * UNSCHEDULABLE_FLUSH_S, failures + flushes)

    def _apply_stamps(self) -> None:
        """The pass's failures take effect: those pods' positions move to the time they failed."""
        if not self._restamp:
            return
        self._stamps.update(self._restamp)
        self._restamp.clear()
        if self._queue_order is not None:
            queued, stamps = self._queued, self._stamps
            for at, (position, pod, kind) in enumerate(self._queue_order):
                if (stamp := stamps.get(position[2])) is not None and stamp[0] != position[1]:
                    self._queue_order[at] = queued[position[2]] = ((position[0], stamp[0], position[2]), pod, kind)
            self._queue_order.sort()  # nearly sorted: the moved pods form runs

    def _mark_unschedulable(self, pod: Pod) -> None:
        """The pod failed an attempt: it is marked Unschedulable, and a nomination it had is cleared (kube-scheduler
        clears it when preemption finds no victims, and the autoscaler's watch wakes on that as on the mark)."""
        self.attempts += 1
        if not pod.unschedulable or pod.nominated_node is not None:
            self._cluster.put_pod(replaced(pod, unschedulable=True, nominated_node=None))
            self._on_unschedulable(pod)

    def _feasible(self, pod: Pod, free: IntArray, free_pods: IntArray,
                  devices: GpuDevices | None = None, topology: Topology | None = None,
                  ports: HostPorts | None = None, volumes: VolumeState | None = None,
                  dra: DraState | None = None) -> BoolArray:
        """Which rows can take `pod`: the engine's filters (`engine.whatif.filters`) over the scheduler's rows, with
        `free`, `free_pods`, `devices`, `topology`, `ports`, `volumes` and `dra` those of a trial (a gang's), default
        the scheduler's own."""
        view = _Rows(self, free, free_pods, devices or self._devices,
                     self._topology if topology is None else topology, self._ports if ports is None else ports,
                     self._volume_state() if volumes is None else volumes, self._dra_state() if dra is None else dra)
        return filters.feasible(pod, view, self._every_row)

    def _view(self) -> _Rows:
        return _Rows(self, self._free, self._free_pods, self._devices, self._topology, self._ports,
                     self._volume_state(), self._dra_state())

    def _dra_state(self) -> DraState | None:
        """DynamicResources' state over the rows, when the cluster has DRA objects (None otherwise: no cost). The
        rows take the slices their nodes published, none of their pool's declared ones: the scheduler sees a node's
        devices only once its drivers published them."""
        if not self._cluster.dra:
            return None
        if self._dra is None:
            pods = self._cluster.pods
            by_node = {name: [pods[key] for key in sorted(keys) if pods[key].constraints.resource_claims]
                       for name, keys in self._cluster.pods_on.items()}
            self._dra = DraState.of(self._cluster.dra.snapshot(), self._nodes, by_node, {},
                                    [False] * len(self._nodes))
        return self._dra

    def _volume_state(self) -> VolumeState | None:
        """The volume filters' state over the rows, once some pod with claims was seen (None before: no cost)."""
        if not self._claims_seen:
            return None
        if self._volumes is None:
            pods = self._cluster.pods
            by_node = {name: [pods[key] for key in sorted(keys) if pods[key].constraints.claims]
                       for name, keys in self._cluster.pods_on.items()}
            self._volumes = VolumeState.of(self._cluster.storage.snapshot(), self._nodes, by_node)
        return self._volumes

    def _choose(self, pod: Pod, mask: BoolArray, free: IntArray,
                devices: GpuDevices | None = None) -> tuple[int, tuple[int, ...]]:
        """The row for `pod` and, on a device-accounted row, its devices (fragmentation-aware or best fit).

        Fragmentation is measured on devices: a node without per-device accounting has none before or after (F = 0,
        every such node scores alike), so when no candidate has devices the configured scoring alone decides, as the
        chooser's rank tie-break would."""
        devices = devices or self._devices
        request = self._request(pod.requests)
        need = request.need if devices is not None else None
        if need is None or devices is None:
            return self._score(pod, mask, free), ()
        shape = request.shape
        candidates = mask.nonzero()[0]
        row: int | None = None  # the configured scoring's choice is needed only when the chooser makes none
        if self._gpu_placement is not None and shape is not None and np.count_nonzero(devices.count[candidates]):
            cpu = self._col.get(CPU)
            cpu_free = free[:, cpu] if cpu is not None else np.zeros(len(self._names), dtype=np.int64)

            def rank(tied: IntArray) -> npt.NDArray[np.float64]:
                return self._kube_rank(pod, tied, free, candidates)

            # a choice scores do not decide needs no chooser: its table (rebuilt at almost every choice) waits,
            # `_workload_moved` still counting the classes it must move
            chosen = (FragChooser.unscored(shape, cpu_free, devices, candidates, rank)
                      if max(self._workload.values(), default=0) > 0 else None)
            if chosen is None:
                chosen = self._chooser().choose_by_scores(shape, cpu_free, devices, candidates, rank)
            if chosen is not None:
                row = chosen[0]
                if chosen[1]:
                    return row, chosen[1]
        if row is None:
            row = self._score(pod, mask, free)
        return row, devices.best_fit(row, need) if devices.count[row] else ()

    def _chooser(self) -> FragChooser:
        assert self._gpu_placement is not None
        if self._frag is None or any(self._workload_moved.values()):
            moved = [key for key, delta in self._workload_moved.items() if delta]
            self._frag = FragChooser.of_classes(self._gpu_placement, self._workload, self._frag_tables, moved)
        self._workload_moved.clear()
        return self._frag

    def _kube_rank(self, pod: Pod, candidates: IntArray, free: IntArray,
                   feasible: IntArray) -> npt.NDArray[np.float64]:
        """A key of each candidate (in row order) under the configured scoring, lowest for its choice: the negated
        score, whose first minimum is the highest score first in name order, as a rank would order them. A row's
        score depends on its own state and on the soft-taint counts of all `feasible` rows (TaintToleration
        normalises over them), so keys among a subset of candidates order it as among all of them."""
        return -self._kube_scores(pod, candidates, free, feasible)

    def _score(self, pod: Pod, mask: BoolArray, free: IntArray) -> int:
        candidates = mask.nonzero()[0]
        if len(candidates) == 1:
            return int(candidates[0])
        return int(candidates[int(self._kube_scores(pod, candidates, free, candidates).argmax())])

    def _kube_scores(self, pod: Pod, candidates: IntArray, free: IntArray,
                     feasible: IntArray) -> npt.NDArray[np.float64]:
        """kube-scheduler's weighted score of each candidate: the configured resource scoring (0–100) plus
        TaintToleration's (0–100, weight 3) when some feasible row has a `PreferNoSchedule` taint the pod does not
        tolerate. TaintToleration reverses and normalises the counts over the feasible rows as kube's
        DefaultNormalizeScore does: 100 − count × 100 // max."""
        score = self._fit_scores(pod, candidates, free)
        soft = self._soft_counts(self._constraint(pod.constraints).tolerations)
        counts = soft[feasible]
        most = int(counts[counts.argmax()]) if len(counts) else 0  # (counts are never negative)
        if most:
            score = score + TAINT_TOLERATION_WEIGHT * (100 - soft[candidates] * 100 // most)
        return score

    def _fit_scores(self, pod: Pod, candidates: IntArray, free: IntArray) -> npt.NDArray[np.float64]:
        """NodeResourcesFit's score, 0–100: the mean share of CPU and memory left free (least-allocated) or used
        (most-allocated), or of GPUs used (gpu-binpack).

        With two columns (the usual), each column is gathered on its own from the kept allocatable columns
        (`_fit_alloc`), without a mask while no row has a zero there: no (candidates × every column) copies, the
        same floats (int64 true division in float64)."""
        vec = self._request(pod.requests).vec
        assert vec is not None
        cols = self._fit_cols
        if len(cols) == 2:
            (first, second), positive = self._fit_alloc, not self._fit_zero_rows
            (one, other), rows = cols, free[candidates]
            after, alloc = rows[:, one] - vec[one], first[candidates]
            share = after / alloc if positive else np.divide(after, alloc, out=np.zeros(len(alloc)), where=alloc > 0)
            after, alloc = rows[:, other] - vec[other], second[candidates]
            share = share + (after / alloc if positive
                             else np.divide(after, alloc, out=np.zeros(len(alloc)), where=alloc > 0))
            mean: npt.NDArray[np.float64] = share / 2.0
        else:
            alloc_all = self._alloc[candidates][:, cols]
            after_all = free[candidates][:, cols] - vec[cols]
            # after / alloc where alloc > 0, else 0.0 (true division of int64 in float64, as after casting both)
            share_free = np.divide(after_all, alloc_all, out=np.zeros(alloc_all.shape), where=alloc_all > 0)
            mean = share_free.mean(axis=1)
        return 100.0 * (mean if self._scoring is Scoring.LEAST_ALLOCATED else 1.0 - mean)

    def _fit_zero(self, alloc: IntArray) -> int:
        """1 if a row of allocatable `alloc` has none of a column NodeResourcesFit reads, else 0."""
        return int(any(alloc[col] <= 0 for col in self._fit_cols))

    def _place(self, pod: Pod) -> bool:
        """Bind `pod` where it fits, counting the room nominated pods hold: its nominated node when that is feasible
        (kube-scheduler evaluates it first and takes it as found), else the node the scoring chooses."""
        free, free_pods = self._room_for(pod)
        mask = self._feasible(pod, free, free_pods)
        if not np.count_nonzero(mask):
            return False
        row = self._row.get(pod.nominated_node or "")
        if row is not None and mask[row]:
            need = self._request(pod.requests).need
            devices = self._devices
            self._bind(pod, row, devices.best_fit(row, need) if devices is not None and need and devices.count[row]
                       else ())
        else:
            self._bind(pod, *self._choose(pod, mask, free))
        return True

    def _room_for(self, pod: Pod) -> tuple[IntArray, IntArray]:
        """The free room `pod` sees: the rows' free capacity less what the other pods nominated there at its
        priority or higher request (kube-scheduler's `RunFilterPluginsWithNominatedPods`). No copy while no pod is
        nominated."""
        held = [other for key, other in self._nominated.items()
                if key != pod.key and other.priority >= pod.priority and other.nominated_node in self._row]
        if not held:
            return self._free, self._free_pods
        free, free_pods = self._free.copy(), self._free_pods.copy()
        for other in held:
            row = self._row[other.nominated_node or ""]
            for name, amount in other.requests.items:  # a resource no node has yet (its GPUs unregistered) holds none
                if (col := self._col.get(name)) is not None:
                    free[row, col] -= amount
            free_pods[row] -= 1
        return free, free_pods

    def _bind(self, pod: Pod, row: int, gpus: tuple[int, ...] = ()) -> None:
        node = self._cluster.nodes[self._names[row]]
        self.attempts += 1
        annotations = pod.annotations
        if gpus:
            annotations = {**annotations, DEVICE_ANNOTATION: ",".join(str(g) for g in gpus)}
        bound = replaced(pod, node_name=node.name, unschedulable=False, nominated_node=None, annotations=annotations)
        if pod.constraints.claims:  # VolumeBinding's PreBind: unbound WaitForFirstConsumer claims provisioned there
            self._cluster.storage.bind_for(pod, node)
        if pod.constraints.resource_claims:
            self._reserve(pod, node)
        self._cluster.put_pod(bound)  # the listener updates the arrays
        self._on_bound(bound, node)

    def _reserve(self, pod: Pod, node: Node) -> None:
        """DynamicResources' Reserve and PreBind for `pod` bound to `node`: the allocation the filter finds there for
        its unallocated claims written on them, and every claim of the pod reserved for it."""
        state = self._dra_state()
        if state is None:
            return
        devices = state.devices_of(pod)
        outcome = state.verdict(devices, node) if devices.prefilter is None else None
        allocations = {}
        if isinstance(outcome, Allocated) and outcome.allocations:
            pending = [c for c in devices.claims if state.allocation_of(c) is None]
            allocations = {c.key: a for c, a in zip(pending, outcome.allocations, strict=True)}
        self._cluster.dra.reserve(pod, allocations)

    def _place_gang(self, members: list[Pod]) -> None:
        group = members[0].group
        assert group is not None
        expected = group.min_member or 0
        existing = sum(1 for p in self._cluster.pods.values() if p.group is not None and p.group.key == group.key)
        if existing < expected:
            return
        free, free_pods = self._free.copy(), self._free_pods.copy()
        devices = self._devices.copy() if self._devices is not None else None
        topology = self._topology.copy() if self._topology is not None else None
        ports = self._ports.copy()
        volumes = state.copy() if (state := self._volume_state()) is not None else None
        dra = known.copy() if (known := self._dra_state()) is not None else None
        rows: list[tuple[int, tuple[int, ...]]] = []
        for pod in members:
            mask = self._feasible(pod, free, free_pods, devices, topology, ports, volumes, dra)
            if not mask.any():
                for member in members:
                    self._mark_unschedulable(member)
                return
            row, gpus = self._choose(pod, mask, free, devices)
            request = self._request(pod.requests)
            assert request.vec is not None
            free[row] -= request.vec
            free_pods[row] -= 1
            if devices is not None and gpus and (need := request.need) is not None:
                devices.take(row, need, gpus)
            if topology is not None:
                topology.add(pod, self._cluster.nodes[self._names[row]])
            if pod.constraints.host_ports:
                ports.add(pod, self._names[row])
            if volumes is not None and pod.constraints.claims:  # assumed, as the scheduler's assume cache does
                volumes.add(pod, row, self._cluster.nodes[self._names[row]])
            if dra is not None and pod.constraints.resource_claims:  # its claims' allocation assumed likewise
                dra.add(pod, self._cluster.nodes[self._names[row]])
            rows.append((row, gpus))
        for pod, (row, gpus) in zip(members, rows, strict=True):
            self._bind(pod, row, gpus)

    def _preempt(self, pod: Pod) -> bool:
        """Evict lower-priority pods from one node so `pod` fits there; returns whether it was placed.

        Victims are taken lowest priority first until the pod's requests fit. When the pod depends on the pods placed
        (`_depends_on_placed`), a node qualifies only if InterPodAffinity passes with every lower-priority pod gone
        (DefaultPreemption's first check) and more victims are taken, in the same order, until it passes with the
        victims gone."""
        if min(self._bound_priorities, default=pod.priority) >= pod.priority or not len(self._names):
            return False
        request = self._request(pod.requests)
        vec = request.vec
        if vec is None:
            return False
        static = self._static_mask(pod.constraints)
        if pod.constraints.claims or pod.constraints.resource_claims:
            static = static & self._volumes_allow(pod)
        topology = self._topology
        if topology is not None and not self._depends_on_placed(pod, topology):
            topology = None
        best: tuple[int, int, str, list[Pod]] | None = None
        for row in np.flatnonzero(static).tolist():
            name = self._names[row]
            lower = [self._cluster.pods[k] for k in self._cluster.pods_on.get(name, ())
                     if self._cluster.pods[k].priority < pod.priority]
            if not lower:
                continue
            victims_all = sorted(lower, key=lambda p: (p.priority, p.key))
            free = self._free[row].copy()
            free_pods = int(self._free_pods[row])
            chosen: list[Pod] = []
            for victim in victims_all:
                if (free >= vec).all() and free_pods >= 1:
                    break
                v = self._request(victim.requests).vec
                if v is not None:
                    free += v
                free_pods += 1
                chosen.append(victim)
            if not ((free >= vec).all() and free_pods >= 1):
                continue
            if pod.constraints.host_ports and not self._ports_after(pod, name, lower, chosen):
                continue
            if topology is not None and not self._affinity_after(pod, row, victims_all, chosen, topology):
                continue
            if not chosen or not self._devices_after(row, pod, chosen):
                continue
            rank = (max(v.priority for v in chosen), len(chosen), name, chosen)
            if best is None or rank[:3] < best[:3]:
                best = rank
        if best is None:
            return False
        for victim in best[3]:
            self._cluster.delete_pod(victim.key)
            self._cluster.on_terminated(victim, Termination.PREEMPTED)
        row = self._row[best[2]]
        need = request.need
        if self._stale:
            self._rebuild()
        devices = self._devices
        gpus = devices.best_fit(row, need) if devices is not None and need and devices.count[row] else ()
        self._bind(pod, row, gpus)
        return True

    def _volumes_allow(self, pod: Pod) -> BoolArray:
        """The rows the pod's volumes and ResourceClaims allow (the volume and DRA PreFilters, VolumeBinding,
        VolumeZone, DynamicResources) with the pods bound now: evicting victims moves no volume's zone (a
        ReadWriteOncePod claim a victim holds still counts: a preemption it would free is not tried), and frees no
        device (kube-scheduler's DynamicResources has no PreFilter extensions: preemption does not count the devices
        its victims would give back)."""
        view = self._view()
        mask = np.ones(len(self._names), dtype=bool)
        if filters.prefilter(pod, view) is not None:
            mask[:] = False
            return mask
        for check in _VOLUME_FILTERS:
            check.mask(pod, view, mask)
        return mask

    def _ports_after(self, pod: Pod, name: str, lower: Sequence[Pod], chosen: list[Pod]) -> bool:
        """Whether the pod's host ports are free on node `name` once victims leave it: no pod staying (priority not
        lower) holds one, and every lower-priority pod holding one joins `chosen` (it cannot be reprieved)."""
        lower_keys = {p.key for p in lower}
        pods = self._cluster.pods
        if any(_ports_clash(pod, pods[k]) for k in self._cluster.pods_on.get(name, ()) if k not in lower_keys):
            return False
        taken = {v.key for v in chosen}
        chosen.extend(v for v in lower if v.key not in taken and _ports_clash(pod, v))
        return True

    def _affinity_after(self, pod: Pod, row: int, lower: Sequence[Pod], chosen: list[Pod],
                        topology: Topology) -> bool:
        """Whether PodTopologySpread and InterPodAffinity let `pod` onto row `row` once victims leave it, `chosen`
        (victims whose leaving makes room, taken along `lower`, the node's lower-priority pods in victim order) made
        what preemption evicts: they must pass with all of `lower` gone (DefaultPreemption's first check); then victims
        are taken along `lower` until it passes, and, as DefaultPreemption reprieves victims, each taken (the last
        first) is kept on the node if the pod still fits without its leaving. Cost O(placed pods) per victim."""
        node = self._cluster.nodes[self._names[row]]
        every = topology.copy()
        for victim in lower:
            every.remove(victim)
        if _placed_failures(every, pod, node):
            return False
        trial = topology.copy()
        for victim in chosen:
            trial.remove(victim)
        for victim in lower[len(chosen):]:
            if not _placed_failures(trial, pod, node):
                break
            trial.remove(victim)
            chosen.append(victim)
        vec = self._request(pod.requests).vec
        assert vec is not None
        free = self._free[row] + sum((v for victim in chosen if (v := self._request(victim.requests).vec) is not None),
                                     np.zeros(len(self.columns), dtype=np.int64))
        free_pods = int(self._free_pods[row]) + len(chosen)
        for victim in reversed(list(chosen)):
            if _ports_clash(pod, victim):
                continue
            back = self._request(victim.requests).vec
            left = free - back if back is not None else free
            if free_pods < 2 or not (left >= vec).all():
                continue
            trial.add(victim, node)
            if _placed_failures(trial, pod, node):
                trial.remove(victim)
                continue
            chosen.remove(victim)
            free, free_pods = left, free_pods - 1
        return not _placed_failures(trial, pod, node)

    def _devices_after(self, row: int, pod: Pod, victims: Sequence[Pod]) -> bool:
        """Whether `pod` fits the row's devices once `victims` gave theirs back (rows without devices: yes)."""
        need = self._request(pod.requests).need
        if self._devices is None or need is None or not self._devices.count[row]:
            return True
        trial = GpuDevices(self._devices.count[row: row + 1], self._devices.free[row: row + 1].copy())
        for victim in victims:
            held, victim_need = annotated_devices(victim), self._request(victim.requests).need
            if held is not None and victim_need is not None and trial.may_hold(0, victim_need, held, free=False):
                trial.give(0, victim_need, held)
        return trial.can_take(0, need)


_VOLUME_FILTERS = (filters.VolumeRestrictions(), filters.VolumeBinding(), filters.VolumeZone(),
                   filters.DynamicResources())
"""The volume and device filters preemption asks (`SimScheduler._volumes_allow`)."""


def _placed_failures(topology: Topology, pod: Pod, node: Node) -> tuple[FitFailure, ...]:
    """The filters that read placed pods, in the profile's order: PodTopologySpread, then InterPodAffinity."""
    return topology.spread_failures(pod, node) or topology.failures(pod, node)


class _Rows:
    """The scheduler's rows as the engine's filters read them (`engine.whatif.filters.Rows`): its nodes, masks and
    request readings, with free capacity, devices and topology its own or a trial's. Each row is its own node group.
    Cost O(1) to make; every operation is the scheduler's cached one."""

    __slots__ = ("_s", "devices", "dra", "free", "free_pods", "ports", "topology", "volumes")

    def __init__(self, scheduler: SimScheduler, free: IntArray, free_pods: IntArray, devices: GpuDevices | None,
                 topology: Topology | None, ports: HostPorts, volumes: VolumeState | None,
                 dra: DraState | None) -> None:
        self._s = scheduler
        self.free, self.free_pods, self.devices, self.topology = free, free_pods, devices, topology
        self.volumes = volumes
        self.dra = dra
        self.ports: HostPorts | None = ports

    def row_index(self) -> dict[str, int]:
        return self._s._row

    @property
    def nodes(self) -> list[Node]:
        return self._s._nodes

    @property
    def columns(self) -> list[str]:
        return self._s.columns

    @property
    def group_of(self) -> list[int]:
        return list(range(len(self._s._names)))

    def static_mask(self, constraints: SchedulingConstraints) -> BoolArray:
        return self._s._static_mask(constraints)

    def asked(self, requests: Resources) -> list[tuple[int, int]] | None:
        return self._s._request(requests).wanted

    def need(self, requests: Resources) -> GpuNeed | None:
        return self._s._request(requests).need


class _Request:
    """What the scheduler reads off one pod request: its amounts per column (`vec`; None when it asks for a resource
    no node has) and as (column, amount) pairs where non-zero (`wanted`), its per-device GPU need, its shape for the
    fragmentation scorers, and its resource class in the GPU workload (None: not counted there)."""

    __slots__ = ("klass", "need", "shape", "vec", "wanted")

    def __init__(self, vec: IntArray | None, wanted: list[tuple[int, int]] | None, need: GpuNeed | None,
                 shape: PodShape | None, klass: ClassKey | None) -> None:
        self.vec, self.wanted, self.need, self.shape, self.klass = vec, wanted, need, shape, klass


_OBJECTS_KEPT = 1 << 16
"""Request and constraints objects the scheduler keeps by identity before it starts over (each pins its object)."""


def _inserted(a: npt.NDArray[_T], row: int, value: object) -> npt.NDArray[_T]:
    """`np.insert(a, row, value, axis=0)` (a new array, `value` cast to its type) without its generic set-up, which
    costs several times the copy on the scheduler's small arrays (a node that comes redoes a dozen)."""
    out = np.empty((len(a) + 1, *a.shape[1:]), dtype=a.dtype)
    out[:row] = a[:row]
    out[row] = value
    out[row + 1:] = a[row:]
    return out


def _deleted(a: npt.NDArray[_T], row: int) -> npt.NDArray[_T]:
    """`np.delete(a, row, axis=0)` (a new array) as one concatenation."""
    return np.concatenate((a[:row], a[row + 1:]))


def _ports_clash(pod: Pod, other: Pod) -> bool:
    """Whether two pods ask a host port in conflict (NodePorts would keep them apart). O(ports × ports)."""
    theirs = other.constraints.host_ports
    return bool(theirs) and any(a.conflicts(b) for a in pod.constraints.host_ports for b in theirs)


def _filters_alike(before: Node, after: Node) -> bool:
    """Whether every filter of `engine.scheduling.static_failures` judges `after` as `before`: the same name, cordon,
    labels and taints that block scheduling (in order; `PreferNoSchedule` taints only score)."""
    return (before.name == after.name and before.unschedulable == after.unschedulable
            and (before.labels is after.labels or before.labels == after.labels)
            and blocking_taints(before.taints) == blocking_taints(after.taints))


def _as_annotated(devices: GpuDevices, needs: Sequence[GpuNeed], pods: Sequence[Pod]) -> bool:
    """Whether a node's devices (`devices`' one row) are exactly what its GPU pods' device annotations say: each
    names devices the node has (as many as the pod needs) and no device holds more milli than it has."""
    used = np.zeros(int(devices.count[0]), dtype=np.int64)
    for need, pod in zip(needs, pods, strict=True):
        held = annotated_devices(pod)
        if held is None or not devices.may_hold(0, need, held, free=False):
            return False
        used[list(held)] += need.milli
    return bool((used <= MILLI).all())

