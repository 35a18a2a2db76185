"""In-memory fakes of every port in `gpuscale.loop.ports`, plus the few builders the loop needs beyond
`tests/builders.py` (pools, nodes of a pool, controller-owned pods with creation times). They record calls and inject
errors.

- `FakeClock(now)`: `advance(s)` moves virtual time; nothing sleeps.
- `FakeCluster`: a `ClusterReader` and `ClusterWriter` over mutable dicts, so the loop sees its own taints on the next
  tick. Evictions: pods in `pdb_blocked` (or covered by a PDB with no disruption allowed) answer BLOCKED_BY_PDB,
  pods in `evict_failures` FAILED; `raise_on={"method": exc}` makes a method raise; `not_synced=True` makes
  `snapshot()` raise `NotSynced`.
- `FakeProvider(pools, clock, cluster)`: `stockout_pools` / `quota_pools` / `failing_pools` refuse scale-ups with the
  matching `ProviderError`; `register(request_id)` turns a request into a Node of the fake cluster.
- `FakeEvents`: keeps every event; `fail=True` makes `emit` raise.
- `ScriptedDecide(plan, …)`: a `decide` that returns fixed plans, carrying the state it was given unless the plan
  sets one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT, Plan, Snapshot, UpcomingNode
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState, FailureKind
from gpuscale.loop.ports import EventType, EvictionOutcome, NotSynced, ProviderError
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import HOSTNAME_LABEL, POOL_LABEL, ZONE_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import OwnerRef, Pod, PodPhase, SchedulingConstraints
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU, Resources, is_gpu_resource
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator

T0 = 1_800_000_000.0
GIB = 2**30


# --- builders


def make_pool(name: str = "cpu-general", *, cpu: int = 16_000, memory: int = 64 * GIB, gpus: int = 0,
              gpu_model: str | None = None, max_size: int = 10, min_size: int = 0, usd_per_hour: float = 1.0,
              zones: tuple[str, ...] = ("us-central1-a",), labels: Mapping[str, str] | None = None) -> NodePool:
    amounts = {"cpu": cpu, "memory": memory, "pods": 110, **({NVIDIA_GPU: gpus} if gpus else {})}
    taints = (Taint(key=NVIDIA_GPU, value="present", effect=TaintEffect.NO_SCHEDULE),) if gpus else ()
    return NodePool(name=name, allocatable=Resources.of(amounts), labels=dict(labels or {}), taints=taints,
                    gpu_model=gpu_model or ("NVIDIA-A100-SXM4-40GB" if gpus else None), gpus_per_node=gpus,
                    usd_per_hour=usd_per_hour, min_size=min_size, max_size=max_size, zones=zones)


def node_of(pool: NodePool, name: str, *, created_s: float | None = None, ready: bool = True,
            gpus_registered: bool = True) -> Node:
    """A node of `pool` as it registers; `gpus_registered=False` is a node whose device plugin has not reported yet."""
    allocatable = pool.allocatable if gpus_registered else Resources(
        tuple((n, a) for n, a in pool.allocatable.items if not is_gpu_resource(n)))
    labels = {**pool.labels, POOL_LABEL: pool.name, HOSTNAME_LABEL: name}
    if pool.zones:
        labels.setdefault(ZONE_LABEL, pool.zones[0])
    return Node(name=name, allocatable=allocatable, capacity=allocatable, labels=labels, taints=pool.taints,
                ready=ready, created_s=created_s)


def owned_pod(name: str, *, namespace: str = "default", node: str | None = None, cpu: int = 1000,
             memory: int = GIB, gpus: int = 0, created_s: float | None = T0 - 600, priority: int = 0,
             owner: str | None = "ReplicaSet", labels: Mapping[str, str] | None = None) -> Pod:
    """A pod owned by a controller (drainable), created `created_s`; pending ones carry PodScheduled=False/Unschedulable
    as kube-scheduler leaves them. GPU pods tolerate the `nvidia.com/gpu` taint (ExtendedResourceToleration)."""
    requests = Resources.of({"cpu": cpu, "memory": memory, **({NVIDIA_GPU: gpus} if gpus else {})})
    tolerations = (Toleration(key=NVIDIA_GPU, operator=TolerationOperator.EXISTS),) if gpus else ()
    return Pod(namespace=namespace, name=name, uid=f"uid-{namespace}-{name}", requests=requests, node_name=node,
               constraints=SchedulingConstraints(tolerations=tolerations),
               phase=PodPhase.RUNNING if node else PodPhase.PENDING, unschedulable=node is None,
               created_s=created_s, priority=priority, labels=dict(labels or {}),
               owner=OwnerRef(kind=owner, name=f"{name}-owner") if owner else None)


# --- clock


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        self._now += seconds
        return self._now


# --- cluster reader + writer


class FakeCluster:
    def __init__(self, nodes: Iterable[Node] = (), pods: Iterable[Pod] = (),
                 pdbs: Iterable[PodDisruptionBudget] = (), *, pdb_blocked: Iterable[str] = (),
                 evict_failures: Iterable[str] = (), raise_on: Mapping[str, Exception] | None = None,
                 remove_evicted: bool = True) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.pods: dict[str, Pod] = {p.key: p for p in pods}
        self.pdbs = list(pdbs)
        self.pdb_blocked = set(pdb_blocked)
        self.evict_failures = set(evict_failures)
        self.raise_on = dict(raise_on or {})
        self.remove_evicted = remove_evicted
        """True: an evicted pod vanishes at once. False: it stays, `deleting`, until `remove_pod`."""
        self.not_synced = False
        self.calls: list[tuple[Any, ...]] = []

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name in self.raise_on:
            raise self.raise_on[name]

    # reader
    def snapshot(self) -> Cluster:
        self._call("snapshot")
        if self.not_synced:
            raise NotSynced("pods informer not synced")
        return Cluster(nodes=tuple(self.nodes.values()), pods=tuple(self.pods.values()), pdbs=tuple(self.pdbs))

    # writer
    def _retaint(self, node: str, key: str, taint: Taint | None, **changes: Any) -> None:
        current = self.nodes[node]
        taints = tuple(t for t in current.taints if t.key != key) + ((taint,) if taint else ())
        self.nodes[node] = replace(current, taints=taints, **changes)

    def set_deletion_candidate(self, node: str, since_s: float) -> None:
        self._call("set_deletion_candidate", node, since_s)
        self._retaint(node, DELETION_CANDIDATE_TAINT, Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(since_s)),
                                                            effect=TaintEffect.PREFER_NO_SCHEDULE))

    def clear_deletion_candidate(self, node: str) -> None:
        self._call("clear_deletion_candidate", node)
        self._retaint(node, DELETION_CANDIDATE_TAINT, None)

    def mark_to_be_deleted(self, node: str, now_s: float) -> None:
        self._call("mark_to_be_deleted", node, now_s)
        self._retaint(node, TO_BE_DELETED_TAINT, Taint(key=TO_BE_DELETED_TAINT, value=str(int(now_s)),
                                                       effect=TaintEffect.NO_SCHEDULE), unschedulable=True)

    def unmark_to_be_deleted(self, node: str) -> None:
        self._call("unmark_to_be_deleted", node)
        self._retaint(node, TO_BE_DELETED_TAINT, None, unschedulable=False)

    def _renominate(self, pod_key: str, expect: str | None, to: str | None) -> bool:
        pod = self.pods.get(pod_key)
        if pod is None or pod.node_name is not None or pod.nominated_node != expect:
            return False
        self.pods[pod_key] = replace(pod, nominated_node=to)
        return True

    def nominate(self, pod_key: str, node: str) -> bool:
        self._call("nominate", pod_key, node)
        return self._renominate(pod_key, None, node)

    def clear_nomination(self, pod_key: str, node: str) -> bool:
        self._call("clear_nomination", pod_key, node)
        return self._renominate(pod_key, node, None)

    def evict(self, pod_key: str) -> EvictionOutcome:
        self._call("evict", pod_key)
        pod = self.pods.get(pod_key)
        if pod is None:
            return EvictionOutcome.GONE
        if pod_key in self.pdb_blocked or any(b.disruptions_allowed <= 0 and b.covers(pod.namespace, pod.labels)
                                              for b in self.pdbs):
            return EvictionOutcome.BLOCKED_BY_PDB
        if pod_key in self.evict_failures:
            return EvictionOutcome.FAILED
        if self.remove_evicted:
            del self.pods[pod_key]
        else:
            self.pods[pod_key] = replace(pod, deleting=True)
        return EvictionOutcome.EVICTED

    # test helpers (not part of the ports)
    def add(self, *objects: Node | Pod) -> None:
        for obj in objects:
            if isinstance(obj, Node):
                self.nodes[obj.name] = obj
            else:
                self.pods[obj.key] = obj

    def remove_pod(self, key: str) -> None:
        self.pods.pop(key, None)

    def bind(self, key: str, node: str) -> None:
        self.pods[key] = replace(self.pods[key], node_name=node, phase=PodPhase.RUNNING, unschedulable=False)

    def writes(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] != "snapshot"]


# --- provider


class FakeProvider:
    def __init__(self, pools: Sequence[NodePool], clock: FakeClock, cluster: FakeCluster | None = None, *,
                 stockout_pools: Iterable[str] = (), quota_pools: Iterable[str] = (),
                 failing_pools: Iterable[str] = (), raise_on: Mapping[str, Exception] | None = None) -> None:
        self.pools = {p.name: p for p in pools}
        self.clock = clock
        self.cluster = cluster
        self.stockout_pools = set(stockout_pools)
        self.quota_pools = set(quota_pools)
        self.failing_pools = set(failing_pools)
        self.raise_on = dict(raise_on or {})
        self.requests: dict[str, UpcomingNode] = {}
        self.members: dict[str, str] = {}
        self.calls: list[tuple[Any, ...]] = []
        self._serial = 0
        if cluster is not None:
            self.members = {n.name: p for n in cluster.nodes.values() if (p := n.pool) is not None and p in self.pools}

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name in self.raise_on:
            raise self.raise_on[name]

    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        """`NodeProvider.increase`; `stockout_pools` may name a zone of a pool as `pool/zone`."""
        if zone is None:
            self._call("increase", pool, count)
        else:
            self._call("increase", pool, count, zone)
        if pool in self.stockout_pools or f"{pool}/{zone}" in self.stockout_pools:
            raise ProviderError(FailureKind.STOCKOUT, f"ZONE_RESOURCE_POOL_EXHAUSTED: no capacity for {pool}")
        if pool in self.quota_pools:
            raise ProviderError(FailureKind.QUOTA, f"QUOTA_EXCEEDED: GPUS_ALL_REGIONS for {pool}")
        if pool in self.failing_pools:
            raise ProviderError(FailureKind.OTHER, f"internal error creating instances in {pool}")
        ids = []
        for _ in range(count):
            self._serial += 1
            request_id = f"{pool}-req-{self._serial}"
            self.requests[request_id] = UpcomingNode(pool=pool, request_id=request_id, requested_s=self.clock.now(),
                                                     zone=zone)
            ids.append(request_id)
        return tuple(ids)

    def delete(self, nodes: Sequence[str]) -> None:
        self._call("delete", tuple(nodes))
        for name in nodes:
            self.members.pop(name, None)
            if self.cluster is not None:
                self.cluster.nodes.pop(name, None)
                for key in [k for k, p in self.cluster.pods.items() if p.node_name == name]:
                    del self.cluster.pods[key]

    def cancel(self, request_ids: Sequence[str]) -> None:
        self._call("cancel", tuple(request_ids))
        for request_id in request_ids:
            self.requests.pop(request_id, None)

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        self._call("upcoming")
        return tuple(self.requests.values())

    def node_pools(self) -> Mapping[str, str]:
        self._call("node_pools")
        return dict(self.members)

    # test helpers
    def register(self, request_id: str, *, ready: bool = True, gpus_registered: bool = True) -> Node:
        """The requested node joins the cluster, named after its request."""
        request = self.requests.pop(request_id)
        node = node_of(self.pools[request.pool], f"node-{request_id}", created_s=self.clock.now(), ready=ready,
                       gpus_registered=gpus_registered)
        self.members[node.name] = request.pool
        if self.cluster is not None:
            self.cluster.add(node)
        return node

    def register_all(self) -> list[Node]:
        return [self.register(r) for r in list(self.requests)]

    def actions(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] not in ("upcoming", "node_pools")]


# --- events


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    key: str
    type: str
    reason: str
    message: str


@dataclass
class FakeEvents:
    events: list[Event] = field(default_factory=list)
    fail: bool = False

    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        if self.fail:
            raise ConnectionError("events API unavailable")
        self.events.append(Event(obj_kind, obj_key, str(event_type), reason, message))

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]

    def about(self, key: str, reason: str | None = None) -> list[Event]:
        return [e for e in self.events if e.key == key and (reason is None or e.reason == reason)]

    def clear(self) -> None:
        self.events.clear()


# --- decide


class ScriptedDecide:
    """Returns `plans` in turn (the last one repeats), each carrying the state it was given, so the act phase is tested
    alone. Records every call's snapshot, state and time."""

    def __init__(self, *plans: Plan) -> None:
        self.plans = list(plans) or [Plan()]
        self.calls: list[tuple[Snapshot, EngineState, float]] = []

    def __call__(self, snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        self.calls.append((snapshot, state, now))
        plan = self.plans[min(len(self.calls) - 1, len(self.plans) - 1)]
        return plan if plan.state != EngineState() else replace(plan, state=state)
