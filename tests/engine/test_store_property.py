"""The what-if's two stores agree: for any sequence of snapshots, the incremental store (what the control loop and
the twin keep from tick to tick) gives the same node facts, the same what-if and the same plan as the reference store
(everything from the snapshot). Churn: nodes come, go, turn Ready, get or lose their GPUs, are marked, cordoned,
tainted or deleted, change pool or provider answer; pods arrive, bind, finish, are deleted, some with inter-pod
(anti-)affinity or topology spread; nodes are requested, register or are swapped; pool objects are reloaded equal or
resized; the input comes in any order. A twin run checks the same on realistic traffic."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.arrange import Arranged
from gpuscale.engine.decide import decide
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Plan, Snapshot, UpcomingNode
from gpuscale.engine.policy import Buffer, Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.facts import NodeFacts
from gpuscale.engine.whatif.model import GroupKey, WhatIf
from gpuscale.engine.whatif.store import IncrementalStore, ReferenceStore, Store
from gpuscale.model.cluster import Cluster
from gpuscale.model.dra import (
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceRequest,
    Dra,
    ExactDeviceRequest,
    PodResourceClaim,
    PoolRef,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpuscale.model.node import Node
from gpuscale.model.pod import HostPort, Pod, PodPhase, TopologySpreadConstraint
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.selectors import LabelSelector, NodeSelectorTerm, PodAffinityTerm, Requirement, SelectorOperator
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.model.volumes import CSINode, PersistentVolume, PersistentVolumeClaim, PodClaim, Storage, StorageClass
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import load_scenario, policy_named
from tests.builders import make_pod

CPU = Resources.of(cpu=8000, memory=32 * 2**30, pods=20)
GPU = Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: 2, GPU_MILLI: 2000})
BIG_GPU = Resources.of({"cpu": 32_000, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: 4, GPU_MILLI: 4000})
NAMES = [f"n{i}" for i in range(6)]


def pools_of(version: int) -> tuple[NodePool, ...]:
    """0 and 1: equal pools, other objects (a reloaded config); 2: the gpu pool holds four GPUs a node; 3: the pools
    with scale-down options of their own (CA's per-node-group options)."""
    cpu = NodePool(name="cpu", allocatable=CPU, max_size=8)
    gpu = NodePool(name="gpu", allocatable=BIG_GPU if version == 2 else GPU, max_size=8)
    if version == 3:
        cpu = replace(cpu, scale_down_utilization_threshold=0.9, scale_down_unneeded_time_s=0.0,
                      ignore_daemonsets_utilization=True)
        gpu = replace(gpu, scale_down_gpu_utilization_threshold=0.2, scale_down_unready_time_s=30.0)
    return cpu, gpu


POOLS = pools_of(0)


def node(name: str, pool: NodePool | int, state: int, now: float) -> Node:
    """`pool`: the pool, or its index in `POOLS`. `state`: 0 Ready, 1 not Ready (starting), 2 Ready without its GPUs,
    3 marked unneeded, 4 deleting, 5 cordoned, 6 tainted NoSchedule."""
    if isinstance(pool, int):
        pool = POOLS[pool]
    allocatable = pool.allocatable
    if state == 2 and allocatable.get(NVIDIA_GPU):
        allocatable = Resources.of(cpu=allocatable.get("cpu"), memory=allocatable.get("memory"), pods=20)
    taints = (Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(now) - 60), effect=TaintEffect.PREFER_NO_SCHEDULE),
              ) if state == 3 else (Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE),) if state == 6 \
        else ()
    return Node(name=name, allocatable=allocatable, capacity=allocatable, ready=state != 1,
                labels={"gpuscale.io/pool": pool.name, "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": f"z{int(name[1:]) % 2}"}, taints=taints,
                created_s=now - 120, ready_since_s=now - 100 if state != 1 else None, deleting=state == 4,
                unschedulable=state == 5)


APART = PodAffinityTerm(selector=LabelSelector(match_labels=(("app", "apart"),)),
                        topology_key="kubernetes.io/hostname")
TOGETHER = PodAffinityTerm(selector=LabelSelector(match_labels=(("app", "apart"),)),
                           topology_key="topology.kubernetes.io/zone")


SPREAD_ZONE = TopologySpreadConstraint(max_skew=1, topology_key="topology.kubernetes.io/zone",
                                      selector=LabelSelector(match_labels=(("app", "spread"),)))
SPREAD_HOST = TopologySpreadConstraint(max_skew=1, topology_key="kubernetes.io/hostname", min_domains=3,
                                      selector=LabelSelector(match_labels=(("app", "spread"),)),
                                      node_taints_policy="Honor")


CLAIM_NAMES = ("zone-0", "zone-1", "rwop", "wait")


def storage_of(version: int) -> Storage:
    """The storage objects: claims bound to a PV in zone z0 and z1, a ReadWriteOncePod one, an unbound
    WaitForFirstConsumer one; `version` odd: the zone-1 claim not bound yet (an Immediate class: the PreFilter)."""
    def zone_pv(name: str, zone: str) -> PersistentVolume:
        return PersistentVolume(name=name, capacity=2**30, access_modes=frozenset({"ReadWriteOnce"}),
                                node_affinity=(NodeSelectorTerm(match_expressions=(Requirement(
                                    key="topology.kubernetes.io/zone", operator=SelectorOperator.IN,
                                    values=(zone,)),)),), storage_class="fast", claim=f"default/{name}",
                                phase="Bound", csi_driver="d", csi_handle=name)
    bound = {name: PersistentVolumeClaim(namespace="default", name=name, storage_class="fast", volume_name=name,
                                         bind_completed=True, access_modes=frozenset({"ReadWriteOnce"}))
             for name in ("zone-0", "zone-1")}
    if version % 2:
        bound["zone-1"] = replace(bound["zone-1"], volume_name="", bind_completed=False, storage_class="slow")
    rwop = PersistentVolumeClaim(namespace="default", name="rwop", storage_class="fast", volume_name="rwop",
                                 bind_completed=True, access_modes=frozenset({"ReadWriteOncePod"}))
    wait = PersistentVolumeClaim(namespace="default", name="wait", storage_class="fast")
    rwop_pv = replace(zone_pv("rwop", "z0"), node_affinity=None, access_modes=frozenset({"ReadWriteOncePod"}))
    return Storage(volumes=(zone_pv("zone-0", "z0"), zone_pv("zone-1", "z1"), rwop_pv),
                   claims=(*bound.values(), rwop, wait),
                   classes=(StorageClass(name="fast", provisioner="d", wait_for_first_consumer=True),
                            StorageClass(name="slow", provisioner="d")),
                   csi_nodes=(CSINode(name=NAMES[0], limits={"d": 1}),))


DRA_DRIVER = "gpu.example.com"
ONE_DEVICE = ClaimSpec(requests=(DeviceRequest(name="gpu", exactly=ExactDeviceRequest(device_class_name="gpu")),))


def dra_of(version: int) -> Dra:
    """The DRA objects: a class, a template of one device, and one or two devices on some nodes (by `version`; new
    objects each time, equal for one version)."""
    count = 1 + version % 2
    slices = tuple(ResourceSlice(name=f"{n}-gpus", driver=DRA_DRIVER, pool=PoolRef(name=n), node_name=n,
                                 devices=tuple(Device(name=f"gpu-{d}") for d in range(count)))
                   for n in NAMES[: 2 + version % 3])
    return Dra(slices=slices, classes=(DeviceClass(name="gpu"),),
               templates=(ResourceClaimTemplate(namespace="default", name="one", spec=ONE_DEVICE),))


def pod(i: int, kind: int, where: str | None, phase: int) -> Pod:
    """`kind`: 0 CPU, 1 a GPU fraction, 2 a whole GPU, 3 a resource no node offers, 4 anti-affinity to its own kind
    per node, 5 affinity to those per zone, 6 host port 8080 (on any IP, or on one, by `i`), 7 spread with its kind
    over zones (DoNotSchedule), 8 also over nodes (three domains at least, taints honoured), 9 a PVC (`CLAIMS`: bound to
    a zone's PV, ReadWriteOncePod, or an unbound WaitForFirstConsumer claim, by `i`), 10 a ResourceClaim from a
    template (`dra_of`)."""
    gpu = {1: {GPU_MILLI: 500}, 2: {NVIDIA_GPU: 1}, 3: {"example.com/fpga": 1}}.get(kind, {})
    p = make_pod(f"p{i % 30}", cpu="500m", memory="1Gi", extra=gpu, node=where)
    if kind == 4:
        p = replace(p, labels={"app": "apart"}, constraints=replace(p.constraints, pod_anti_affinity=(APART,)))
    elif kind == 5:
        p = replace(p, constraints=replace(p.constraints, pod_affinity=(TOGETHER,)))
    elif kind == 6:
        port = HostPort(8080, host_ip=("0.0.0.0", "10.0.0.1", "10.0.0.2")[i % 3])
        p = replace(p, constraints=replace(p.constraints, host_ports=(port,)))
    elif kind == 9:
        p = replace(p, constraints=replace(p.constraints, claims=(PodClaim("default", CLAIM_NAMES[i % 4]),)))
    elif kind == 10:
        ref = PodResourceClaim(name="gpu", template_name="one")
        p = replace(p, constraints=replace(p.constraints, resource_claims=(ref,)))
    elif kind in (7, 8):
        p = replace(p, labels={"app": "spread"}, constraints=replace(
            p.constraints, topology_spread=(SPREAD_ZONE, SPREAD_HOST)[: kind - 6]))
    return replace(p, created_s=0.0, unschedulable=where is None,
                   phase=(PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.PENDING)[phase] if where else PodPhase.PENDING)


def view(table: WhatIf) -> tuple[object, ...]:
    """A what-if as plain values: rows, columns, free capacity, pod slots, devices, node groups, workload, topology."""
    devices = table.devices
    topology = table.topology
    return (tuple(n.name for n in table.nodes), tuple(table.nodes), table.columns, table.free.tolist(),
            table.free_pods.tolist(), table.enabled.tolist(),
            None if devices is None else (devices.count.tolist(), devices.free.tolist()),
            table._s.group_of, table._s.group_members, dict(table._s.workload), dict(table._s.index),
            None if topology is None else (dict(topology._labels), list(topology._placed)),
            None if table.ports is None else table.ports.used())


@dataclass
class Seen:
    """What a store handed to the last decision: its facts and its what-if, as built (before scale-up placed)."""

    facts: dict[str, NodeFacts] = field(default_factory=dict)
    table: tuple[object, ...] = ()


class _Recorder(Store):
    """Records what the store it is mixed into hands to each decision (`Seen`)."""

    __slots__ = ()
    seen: Seen

    def facts(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
              arranged: Arranged, awaiting: frozenset[str] = frozenset()) -> dict[str, NodeFacts]:
        self.seen.facts = super().facts(nodes, node_pools, pools, arranged, awaiting)  # type: ignore[safe-super]
        return self.seen.facts

    def table(self, *args: object, **kwargs: object) -> WhatIf:
        made = super().table(*args, **kwargs)  # type: ignore[arg-type, safe-super]
        self.seen.table = view(made)
        return made


class RecordingReference(_Recorder, ReferenceStore):
    def __init__(self) -> None:
        self.seen = Seen()


class RecordingIncremental(_Recorder, IncrementalStore):
    __slots__ = ("seen",)

    def __init__(self) -> None:
        super().__init__()
        self.seen = Seen()


def fact_view(facts: Mapping[str, NodeFacts]) -> list[tuple[object, ...]]:
    """Facts as values; the group key by value (the incremental store shares one object per value)."""
    return [(name, f.node, f.provider_pool, f.pool_name, f.pool, f.phase, f.row_node, f.capacity, f.gpu_units,
             f.group_key.value if isinstance(f.group_key, GroupKey) else None, f.amounts, f.degraded)
            for name, f in facts.items()]


def assert_decides_as_reference(store: RecordingIncremental, nodes: Mapping[str, Node], pods: Mapping[str, Pod],
                                shuffle: random.Random, policy: Policy, now: float, state: EngineState | None = None,
                                pools: Sequence[NodePool] = POOLS) -> EngineState:
    """The decision on these nodes and pods (in a shuffled order) with the store equals the reference's; its state."""
    node_list, pod_list = list(nodes.values()), list(pods.values())
    shuffle.shuffle(node_list)
    shuffle.shuffle(pod_list)
    snapshot = Snapshot(cluster=Cluster(nodes=tuple(node_list), pods=tuple(pod_list)))
    return assert_stores_agree(store, snapshot, pools, state or EngineState(), policy, now).state


def assert_stores_agree(store: RecordingIncremental, snapshot: Snapshot, pools: Sequence[NodePool],
                        state: EngineState, policy: Policy, now: float) -> Plan:
    reference = RecordingReference()
    plan = decide(snapshot, pools, state, policy, now, store=store)
    fresh = decide(snapshot, pools, state, policy, now, store=reference)
    assert fact_view(store.seen.facts) == fact_view(reference.seen.facts)
    assert store.seen.table == reference.seen.table
    assert plan == fresh
    return plan


steps = st.lists(st.tuples(st.sampled_from(["flip", "flip", "node", "drop", "pod", "pod", "delete", "answer", "ask",
                                            "swap", "registered", "pools", "claims", "devices", "decide", "decide",
                                            "decide"]),
                           st.integers(0, 100), st.integers(0, 6), st.integers(0, 10), st.integers(0, 2)),
                 min_size=1, max_size=50)

LIMITS = [{}, {"max_node_provision_time_s": 125.0, "max_gpu_init_time_s": 105.0},
          {"unremovable_node_recheck_timeout_s": 30.0}]


@pytest.mark.parametrize("limits", LIMITS, ids=["default-limits", "short-limits", "recheck"])
@settings(max_examples=150, deadline=None)
@given(steps, st.integers(0, 2**16))
@example([("ask", 0, 1, 0, 0), ("decide", 0, 0, 0, 0), ("pools", 2, 0, 0, 0), ("decide", 0, 0, 0, 0)], 0)
@example([("decide", 0, 0, 0, 0), ("flip", 1, 2, 0, 0), ("decide", 0, 0, 0, 0)], 0)
@example([("pod", 1, 1, 4, 0), ("pod", 2, 0, 4, 0), ("decide", 0, 0, 0, 0), ("delete", 0, 0, 0, 0),
          ("decide", 0, 0, 0, 0)], 0)
@example([("pod", 1, 1, 6, 0), ("pod", 2, 0, 6, 0), ("pod", 3, 0, 6, 0), ("decide", 0, 0, 0, 0),
          ("delete", 0, 0, 0, 0), ("pod", 7, 1, 6, 0), ("decide", 0, 0, 0, 0)], 0)
@example([("pod", 1, 1, 7, 0), ("pod", 3, 1, 8, 0), ("pod", 2, 0, 7, 0), ("pod", 4, 0, 8, 0), ("decide", 0, 0, 0, 0),
          ("flip", 3, 6, 0, 0), ("pod", 5, 0, 8, 0), ("decide", 0, 0, 0, 0)], 0)
def test_the_incremental_store_decides_as_the_reference(limits: dict[str, float],
                                                        ops: list[tuple[str, int, int, int, int]], seed: int) -> None:
    """With short limits, starting nodes (made 120 s before, Ready 100 s before) time out from the next decision on;
    with a recheck timeout, the nodes a plan's state remembers as unremovable are skipped at the next decisions (the
    state is threaded through), which the incremental store's carried verdicts must follow."""
    shuffle = random.Random(seed)
    store = RecordingIncremental()
    now = 1000.0
    version = 0
    pools = pools_of(version)
    nodes = {name: node(name, pools[i % 2], 0, now) for i, name in enumerate(NAMES)}
    pods: dict[str, Pod] = {}
    upcoming: dict[str, UpcomingNode] = {}
    answers: dict[str, str] = {}
    serial = 0
    policy = Policy(buffers=(Buffer(pool="gpu", free_gpus=1, free_gpus_ratio=0.5),), **limits)
    threaded = EngineState()
    storage = storage_of(0)
    dra = dra_of(0)

    def check() -> None:
        nonlocal threaded
        node_list, pod_list = list(nodes.values()), list(pods.values())
        shuffle.shuffle(node_list)
        shuffle.shuffle(pod_list)
        snapshot = Snapshot(cluster=Cluster(nodes=tuple(node_list), pods=tuple(pod_list), storage=storage, dra=dra),
                            upcoming=tuple(upcoming.values()), node_pools=dict(answers))
        threaded = assert_stores_agree(store, snapshot, pools, threaded, policy, now).state

    def pool_of(name: str) -> NodePool:
        return next(p for p in pools if p.name == nodes[name].pool)

    for op, i, state, kind, phase in ops:
        name = NAMES[i % len(NAMES)]
        if op == "flip" and name in nodes:  # the same node, another state: replaced under its name
            nodes[name] = node(name, pool_of(name), state, now)
        elif op == "node":  # mostly the node's own pool; now and then another
            nodes[name] = node(name, pool_of(name) if name in nodes and kind != 3 else pools[i % 2], state, now)
        elif op == "drop":
            nodes.pop(name, None)
            answers.pop(name, None)
        elif op == "pod":
            p = pod(i, kind, name if state % 2 and name in nodes else None, phase)
            pods[p.key] = p
        elif op == "claims":  # the storage objects listed again: equal, or a claim bound or unbound since
            storage = storage_of(kind)
        elif op == "devices":  # the DRA objects listed again: equal, or devices published or gone since
            dra = dra_of(kind)
        elif op == "delete" and pods:
            del pods[sorted(pods)[i % len(pods)]]
        elif op == "answer" and name in nodes:  # the provider names the node's pool (or another one)
            answers[name] = pools[kind % 2].name
        elif op == "ask":  # another node requested
            serial += 1
            upcoming[f"r{serial:03}"] = UpcomingNode(pool=pools[i % 2].name, request_id=f"r{serial:03}",
                                                     requested_s=now)
        elif op == "swap" and upcoming:  # one request gone, another in: as many templates as before
            del upcoming[sorted(upcoming)[i % len(upcoming)]]
            serial += 1
            upcoming[f"r{serial:03}"] = UpcomingNode(pool=pools[i % 2].name, request_id=f"r{serial:03}",
                                                     requested_s=now)
        elif op == "registered" and upcoming:
            del upcoming[sorted(upcoming)[i % len(upcoming)]]
        elif op == "pools":  # a reloaded config: equal pools or resized ones, new objects either way
            version = i % 4
            pools = pools_of(version)
        else:
            now += 10.0
            check()
    check()


def _checked(counts: dict[str, int]) -> Callable[[Snapshot, Sequence[NodePool], EngineState, Policy, float], Plan]:
    """The engine's decide with an incremental store (the plan the twin acts on), checked against the reference
    store every tick."""
    store = RecordingIncremental()

    def both(snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy, now: float) -> Plan:
        plan = assert_stores_agree(store, snapshot, pools, state, policy, now)
        counts["ticks"] += 1
        counts["acted"] += bool(plan.scale_up or plan.scale_down or plan.mark_unneeded or plan.clear_unneeded)
        return plan

    return both


@pytest.mark.parametrize(("scenario", "hours"), [("default", 8.0), ("sharing", 4.0)])
def test_the_stores_agree_on_a_twin_run(scenario: str, hours: float) -> None:
    counts = {"ticks": 0, "acted": 0}
    setup, config = load_scenario(scenario)
    simulate(replace(setup, duration_s=hours * 3600), policy_named("gpuscale", config), decide=_checked(counts))
    assert counts["ticks"] > 100
    assert counts["acted"] > 5  # the run scaled and marked nodes: the plans compared were not all empty
