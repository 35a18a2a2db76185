"""The simulated cluster: nodes, pods and budgets, behind the same ports the real cluster offers.

`SimCluster` is the `ClusterReader` (a snapshot of model values, cached per version) and the `ClusterWriter`
(taints, cordon, evictions through budgets) of the twin. It owns the objects; the scheduler binds pods, the cloud
adds and removes nodes, workloads create and delete pods, each through the methods here, and every change bumps
`version` so the loop knows when the world changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from enum import StrEnum
from functools import cache
from typing import Any, Protocol, TypeVar

from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT
from gpuscale.loop.ports import EvictionOutcome
from gpuscale.model.cluster import Changes, Cluster
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.resources import GPU_MILLI, Resources, is_gpu_resource
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.sim.core import replaced
from gpuscale.sim.devices import SimDra
from gpuscale.sim.storage import SimStorage

T = TypeVar("T")


class Termination(StrEnum):
    """Why a pod left before finishing its work."""

    EVICTED = "evicted"
    PREEMPTED = "preempted"
    NODE_DELETED = "node-deleted"
    SCALED_DOWN = "scaled-down"


class CapacityListener(Protocol):
    """Told of every change to what runs where, so the scheduler keeps its free-capacity arrays current."""

    def pod_placed(self, pod: Pod) -> None: ...

    def pod_removed(self, pod: Pod) -> None: ...

    def node_changed(self, name: str) -> None: ...
    """The node was added, removed, or changed readiness, deletion or allocatable (it is in `nodes` unless removed)."""

    def node_relabelled(self, node: Node) -> None: ...
    """Only the node's taints, labels or cordon changed: its capacity and readiness are as before."""

    def pod_pending(self, pod: Pod) -> None: ...
    """A new pod waits to be scheduled."""

    def pending_changed(self, before: Pod | None, after: Pod | None) -> None: ...
    """A pod left (`before`), joined (`after`) or changed in (both) the pending pods."""

    def storage_changed(self) -> None: ...
    """A claim, volume or class came, went or was bound (`SimStorage`)."""

    def dra_changed(self) -> None: ...
    """A DRA object came, went or changed: a ResourceClaim allocated or released, a node's slices (`SimDra`)."""


class SimCluster:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.pdbs: list[tuple[PodDisruptionBudget, int]] = []
        """Budgets with their `minAvailable` as a count (disruptions allowed = healthy − min_available)."""
        self.version = 0
        self._snapshot: tuple[int, Cluster] | None = None
        self._nodes: tuple[Node, ...] | None = None
        """`nodes` as the last snapshot holds them, until a node is put or removed (then None): a snapshot between
        node changes shares the tuple, and the engine sees the very same node objects in the same order."""
        self.on_terminated: Callable[[Pod, Termination], None] = lambda pod, why: None
        self.on_node_removed: Callable[[str], None] = lambda name: None
        self.pods_on: dict[str, set[str]] = {}
        self.pending: set[str] = set()
        """Pods not bound to a node, kept current so the scheduler can skip quiet moments cheaply."""
        self.capacity_listener: CapacityListener | None = None
        self._held: dict[str, float] = {}
        """Pod key → GPUs it holds (0.0 while not bound), in `pods`' order: what `allocated_gpus` sums."""
        self._bound = 0
        """How many pods are bound (hold a node name)."""
        self._before: tuple[tuple[Node, ...], tuple[Pod, ...]] | None = None
        """The last snapshot's node and pod tuples (None: no snapshot yet)."""
        self._node_log: dict[str, Node | None] = {}
        """Each node put or removed since the last snapshot, with its object then (None: absent). What
        `Cluster.changes` tells the engine (from the second snapshot on)."""
        self._pod_log: dict[str, Pod | None] = {}
        """`_node_log` for pods."""
        self.storage = SimStorage()
        """StorageClasses, PVs and claims (empty unless the scenario declares storage: snapshots then carry none)."""
        self.storage.on_change = self.storage_changed
        self.dra = SimDra()
        """DeviceClasses, claim templates, claims and slices (empty unless the scenario uses DRA: snapshots then
        carry none)."""
        self.dra.on_change = self.dra_changed

    # ---------------------------------------------------------------------------------------------- ClusterReader
    def snapshot(self) -> Cluster:
        if self._snapshot is None or self._snapshot[0] != self.version:
            if self._nodes is None:
                self._nodes = tuple(self.nodes.values())
            pods = tuple(self.pods.values())
            changes = None
            if self._before is not None:
                nodes_left, nodes_came = _told(self._node_log, self.nodes)
                pods_left, pods_came = _told(self._pod_log, self.pods)
                changes = Changes(nodes_before=self._before[0], nodes_left=nodes_left, nodes_came=nodes_came,
                                  pods_before=self._before[1], pods_left=pods_left, pods_came=pods_came)
            self._before, self._node_log, self._pod_log = (self._nodes, pods), {}, {}
            extra: dict[str, Any] = {}
            if self.storage:  # a scenario with storage: its objects, the same one while they are unchanged
                extra["storage"] = self.storage.snapshot()
            if self.dra:  # a scenario with DRA: likewise
                extra["dra"] = self.dra.snapshot()
            cluster = Cluster(nodes=self._nodes, pods=pods, pdbs=tuple(self._live_pdbs()), changes=changes, **extra)
            self._snapshot = (self.version, cluster)
        return self._snapshot[1]

    def _live_pdbs(self) -> Iterable[PodDisruptionBudget]:
        for pdb, min_available in self.pdbs:
            yield replace(pdb, disruptions_allowed=max(self._healthy(pdb) - min_available, 0))

    def _healthy(self, pdb: PodDisruptionBudget) -> int:
        return sum(1 for p in self.pods.values()
                   if p.phase is PodPhase.RUNNING and pdb.covers(p.namespace, p.labels))

    def gpus_of(self, pod: Pod) -> float:
        """GPUs a bound pod holds: its GPU requests (`pod_gpus`) and the whole GPUs allocated to its claims
        (`SimDra.gpus_held`)."""
        gpus = pod_gpus(pod.requests)
        return gpus + self.dra.gpus_held(pod) if pod.constraints.resource_claims else gpus

    def allocated_gpus(self) -> float:
        """GPUs the bound pods hold: `sum(gpus_of(p) for p in pods.values() if p.node_name)`, the same float
        additions in the same order (a pod not bound adds 0.0, which changes no sum) without a pass over the pods."""
        return sum(self._held.values()) if self._bound else 0

    # ------------------------------------------------------------------------------------------------- mutation
    def storage_changed(self) -> None:
        """`SimStorage.on_change`: the storage objects changed (the scheduler is told, the version bumps)."""
        if self.capacity_listener is not None:
            self.capacity_listener.storage_changed()
        self.version += 1

    def dra_changed(self) -> None:
        """`SimDra.on_change`: the DRA objects changed (the scheduler is told, the version bumps)."""
        if self.capacity_listener is not None:
            self.capacity_listener.dra_changed()
        self.version += 1

    def put_node(self, node: Node) -> None:
        old = self.nodes.get(node.name)
        self._node_log.setdefault(node.name, old)
        self.nodes[node.name] = node
        self._nodes = None
        self.pods_on.setdefault(node.name, set())
        if self.capacity_listener is not None:
            if old is not None and _same_capacity(old, node):
                self.capacity_listener.node_relabelled(node)
            else:
                self.capacity_listener.node_changed(node.name)
        self.version += 1

    def remove_node(self, name: str) -> None:
        """The node is gone: every pod on it terminates (its owner decides what happens next)."""
        if name not in self.nodes:
            return
        for key in sorted(self.pods_on.get(name, ())):
            pod = self.pods.get(key)
            if pod is not None:
                self.delete_pod(key)
                self.on_terminated(pod, Termination.NODE_DELETED)
        self._node_log.setdefault(name, self.nodes[name])
        del self.nodes[name]
        self._nodes = None
        self.pods_on.pop(name, None)
        self.dra.unpublish(name)
        if self.capacity_listener is not None:
            self.capacity_listener.node_changed(name)
        self.on_node_removed(name)
        self.version += 1

    def put_pod(self, pod: Pod) -> None:
        key = pod.key
        old = self.pods.get(key)
        listener = self.capacity_listener
        node = pod.node_name
        was = old.node_name if old is not None else None
        moved = old is None or was != node
        if moved and was and old is not None:
            self.pods_on.get(was, set()).discard(key)
            if listener is not None:
                listener.pod_removed(old)
        if node and moved:
            self.pods_on.setdefault(node, set()).add(key)
            if listener is not None:
                listener.pod_placed(pod)
        was_pending = old is not None and was is None
        if node is None:
            self.pending.add(key)
            if listener is not None and old is None:
                listener.pod_pending(pod)
        else:
            self.pending.discard(key)
        if listener is not None and (was_pending or node is None):
            listener.pending_changed(old if was_pending else None, pod if node is None else None)
        if moved or (old is not None and old.requests is not pod.requests):
            self._held[key] = self.gpus_of(pod) if node else 0.0
            self._bound += (1 if node else 0) - (1 if was else 0)
        self._pod_log.setdefault(key, old)
        self.pods[key] = pod
        self.version += 1

    def delete_pod(self, key: str) -> Pod | None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        self._pod_log.setdefault(key, pod)
        self.pending.discard(key)
        del self._held[key]
        if pod.node_name:
            self._bound -= 1
            self.pods_on.get(pod.node_name, set()).discard(key)
            if self.capacity_listener is not None:
                self.capacity_listener.pod_removed(pod)
        elif self.capacity_listener is not None:
            self.capacity_listener.pending_changed(pod, None)
        if pod.constraints.resource_claims:  # its reservations released, its own claims deleted
            self.dra.pod_gone(pod)
        self.version += 1
        return pod

    def _set_taint(self, name: str, key: str, value: str | None, effect: TaintEffect,
                   cordon: bool | None = None) -> None:
        node = self.nodes.get(name)
        if node is None:
            return
        taints = tuple(t for t in node.taints if t.key != key)
        if value is not None:
            taints += (Taint(key=key, value=value, effect=effect),)
        unschedulable = node.unschedulable if cordon is None else cordon
        if taints != node.taints or unschedulable != node.unschedulable:
            self.put_node(replaced(node, taints=taints, unschedulable=unschedulable))

    # ---------------------------------------------------------------------------------------------- ClusterWriter
    def set_deletion_candidate(self, node: str, since_s: float) -> None:
        self._set_taint(node, DELETION_CANDIDATE_TAINT, str(int(since_s)), TaintEffect.PREFER_NO_SCHEDULE)

    def clear_deletion_candidate(self, node: str) -> None:
        self._set_taint(node, DELETION_CANDIDATE_TAINT, None, TaintEffect.PREFER_NO_SCHEDULE)

    def mark_to_be_deleted(self, node: str, now_s: float) -> None:
        self._set_taint(node, TO_BE_DELETED_TAINT, str(int(now_s)), TaintEffect.NO_SCHEDULE, cordon=True)

    def unmark_to_be_deleted(self, node: str) -> None:
        self._set_taint(node, TO_BE_DELETED_TAINT, None, TaintEffect.NO_SCHEDULE, cordon=False)

    def nominate(self, pod_key: str, node: str) -> bool:
        """`status.nominatedNodeName` written on a pending pod not nominated yet (as `KubeWriter.nominate`): the
        scheduler then holds room there for it (`SimScheduler._room_for`)."""
        return self._nominated(pod_key, None, node)

    def clear_nomination(self, pod_key: str, node: str) -> bool:
        return self._nominated(pod_key, node, None)

    def _nominated(self, pod_key: str, expect: str | None, to: str | None) -> bool:
        pod = self.pods.get(pod_key)
        if pod is None or pod.node_name is not None or pod.nominated_node != expect:
            return False
        self.put_pod(replaced(pod, nominated_node=to))
        return True

    def evict(self, pod_key: str) -> EvictionOutcome:
        """The Eviction API: refused (429) while a budget covering the pod allows no disruption."""
        pod = self.pods.get(pod_key)
        if pod is None:
            return EvictionOutcome.GONE
        for pdb in self._live_pdbs():
            if pdb.covers(pod.namespace, pod.labels) and pdb.disruptions_allowed <= 0:
                return EvictionOutcome.BLOCKED_BY_PDB
        self.delete_pod(pod_key)
        self.on_terminated(pod, Termination.EVICTED)
        return EvictionOutcome.EVICTED


def _told(log: Mapping[str, T | None], now: Mapping[str, T]) -> tuple[tuple[T, ...], tuple[T, ...]]:
    """The objects that left and came since the last snapshot, from a change log (key → object then)."""
    left: list[T] = []
    came: list[T] = []
    for key, old in log.items():
        new = now.get(key)
        if old is not new:
            if old is not None:
                left.append(old)
            if new is not None:
                came.append(new)
    return tuple(left), tuple(came)


@cache
def pod_gpus(requests: Resources) -> float:
    """GPUs a pod holds (whole and fractions); cached, as requests are shared by a workload's pods."""
    return float(sum(a for n, a in requests.items if is_gpu_resource(n))) + requests.get(GPU_MILLI) / 1000.0


def _same_capacity(old: Node, new: Node) -> bool:
    """Whether a node update leaves what the scheduler's arrays hold (which nodes, their allocatable) unchanged."""
    return (old.ready == new.ready and old.deleting == new.deleting and old.allocatable == new.allocatable)
