"""Scale-up's memo under churn: what it carries from one decision to the next (pool verdicts per unit, the share
normalizer and shares, why units no pool takes are not scaled up, and those pods' verdicts) against every input it
depends on — pools redefined, backed off and recovering, limits tightened and loosened, nodes added and removed, pods
and gangs of shapes that fit some pools, every pool or none arriving, changing shape under their name, binding and
leaving — and every decision made with the memo equals the decision made without one."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.memo import DecideMemo
from gpuscale.engine.plan import Snapshot, UpcomingNode
from gpuscale.engine.policy import Limits, Policy
from gpuscale.engine.scaleup import ScaleUpMemo
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.engine.table import NodeTable
from gpuscale.model.cluster import Cluster, PodGroupSpec
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodGroupRef, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU, Resources
from tests.builders import make_pod, taint, toleration

GPU_TAINT = taint("nvidia.com/gpu", "present")
GPU_TOL = toleration("nvidia.com/gpu", "Exists")
T4 = {"accel": "t4"}


def gpu_pool(name: str, gpus: int, *, cpu: int = 16_000, max_size: int = 6, labels: dict[str, str] | None = None,
             price: float = 2.0) -> NodePool:
    return NodePool(name=name,
                    allocatable=Resources.of({"cpu": cpu, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: gpus}),
                    labels=labels or {}, taints=(GPU_TAINT,), gpu_model=f"model-{name}", gpus_per_node=gpus,
                    usd_per_hour=price, max_size=max_size)


POOL_VARIANTS = (
    (NodePool(name="cpu", allocatable=Resources.of(cpu=8000, memory=32 * 2**30, pods=20), max_size=6, usd_per_hour=0.5),
     NodePool(name="cpu", allocatable=Resources.of(cpu=32_000, memory=64 * 2**30, pods=20), max_size=3,
              usd_per_hour=1.0)),
    (gpu_pool("gpu", 2, max_size=3), gpu_pool("gpu", 4, max_size=1), gpu_pool("gpu", 2, labels=T4)),
    (gpu_pool("big", 8, cpu=96_000, price=20.0), gpu_pool("big", 8, cpu=96_000, max_size=1, price=20.0)),
)
LIMITS = (Limits(), Limits(max_nodes_total=1), Limits(max_nodes_total=3), Limits(max_gpus_by_model={"model-gpu": 4}),
          Limits(max_usd_per_hour=25.0), Limits(max_cores_total=40))
SHAPES = (
    {"cpu": "500m"}, {"cpu": "6"}, {"cpu": "20"},  # the last fits the big cpu variant only
    {"cpu": "200", "memory": "1Gi"},  # fits no pool
    {"cpu": "1", "gpus": 1, "tolerations": (GPU_TOL,)}, {"cpu": "1", "gpus": 1},  # the second tolerates no taint
    {"cpu": "1", "gpus": 1, "tolerations": (GPU_TOL,), "node_selector": T4},
    {"cpu": "8", "gpus": 8, "tolerations": (GPU_TOL,)}, {"cpu": "1", "gpus": 16, "tolerations": (GPU_TOL,)},
    {"cpu": "1", "extra": {"example.com/fpga": 1}},
)
NAMES = [f"n{i}" for i in range(5)]


def pod(i: int, shape: int, *, node: str | None = None, priority: int = 0,
        group: PodGroupRef | None = None) -> Pod:
    p = make_pod(f"p{i}", priority=priority, node=node, **SHAPES[shape % len(SHAPES)])  # type: ignore[arg-type]
    return replace(p, created_s=0.0, unschedulable=node is None, group=group,
                   phase=PodPhase.RUNNING if node else PodPhase.PENDING)


steps = st.lists(st.tuples(st.sampled_from(["pod", "pod", "pod", "gang", "bind", "delete", "pools", "backoff",
                                            "backoff", "limits", "limits", "node", "node", "drop", "upcoming",
                                            "wait"]),
                           st.integers(0, 40), st.integers(0, 20), st.integers(-1, 2)),
                 min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(0, 2**16))
# A limit reached, then another limit binding: the pods left over get another reason with the same pools and backoff.
@example([("node", 0, 0, 0), ("pod", 1, 1, 1), ("limits", 1, 5, 0), ("limits", 0, 0, 0)], 0)
# A waiting pod replaced under its name by one of another shape that no pool takes either: another reason.
@example([("pod", 1, 3, -1), ("pod", 1, 5, -1)], 0)
def test_scale_up_memo_equals_a_fresh_one_under_churn(ops: list[tuple[str, int, int, int]], seed: int) -> None:
    shuffle = random.Random(seed)
    memo = DecideMemo()
    now = 1000.0
    variant = [0, 0, 0]
    state = EngineState()
    policy = Policy(max_nodes_per_scale_up=5)
    nodes: dict[str, Node] = {}
    pods: dict[str, Pod] = {}
    groups: dict[str, PodGroupSpec] = {}
    upcoming: dict[str, UpcomingNode] = {}

    def pools() -> list[NodePool]:
        chosen = [POOL_VARIANTS[k][v] for k, v in enumerate(variant)]
        shuffle.shuffle(chosen)
        return chosen

    def check() -> None:
        node_list, pod_list = list(nodes.values()), list(pods.values())
        shuffle.shuffle(node_list)
        shuffle.shuffle(pod_list)
        snapshot = Snapshot(cluster=Cluster(nodes=tuple(node_list), pods=tuple(pod_list),
                                            pod_groups=tuple(groups.values())),
                            upcoming=tuple(upcoming.values()))
        assert decide(snapshot, pools(), state, policy, now, memo=memo) == \
            decide(snapshot, pools(), state, policy, now)

    for op, i, shape, extra in ops:
        if op == "pod":  # new pods of one shape, or pods under known names with another shape or priority
            for k in range(extra + 2):
                p = pod(i + k, shape, priority=extra)
                pods[p.key] = p
        elif op == "gang":  # members of one gang; its declared size is sometimes more than exist
            key = f"default/job{i % 3}"
            ref = PodGroupRef(key=key, source="kueue", min_member=None)
            for k in range(extra + 2):
                p = pod(100 + 10 * (i % 3) + k, shape, group=ref)
                pods[p.key] = p
            groups[key] = PodGroupSpec(key=key, min_member=extra + 2 + (shape % 3 == 0))
        elif op == "bind" and pods and nodes:
            key = sorted(pods)[i % len(pods)]
            target = sorted(nodes)[shape % len(nodes)]
            pods[key] = replace(pods[key], node_name=target, unschedulable=False, phase=PodPhase.RUNNING)
        elif op == "delete" and pods:
            del pods[sorted(pods)[i % len(pods)]]
        elif op == "pools":
            k = i % len(variant)
            variant[k] = shape % len(POOL_VARIANTS[k])
        elif op == "backoff":
            name = POOL_VARIANTS[i % len(variant)][0].name
            state = record_failure(state, name, FailureKind.STOCKOUT, now, policy, message="no capacity" * (extra > 0))
        elif op == "limits":
            policy = replace(policy, limits=LIMITS[i % len(LIMITS)], max_nodes_per_scale_up=1 + shape % 6)
        elif op == "node":
            p = POOL_VARIANTS[i % len(variant)][variant[i % len(variant)]]
            name = NAMES[shape % len(NAMES)]
            nodes[name] = replace(p.template(name), created_s=now - 500, ready_since_s=now - 400)
        elif op == "drop" and nodes:
            nodes.pop(sorted(nodes)[i % len(nodes)])
        elif op == "upcoming":
            name = POOL_VARIANTS[i % len(variant)][0].name
            request = UpcomingNode(pool=name, request_id=f"r{shape % 4}", requested_s=now - 5 * i)
            upcoming[request.request_id] = request
        elif op == "wait":  # long enough for a backoff to end now and then
            now += 30.0 * shape
        check()  # a decision after every change: what the memo carries meets every kind of change
        now += 1.0


ALLOCATABLES = (Resources.of(cpu=8000, memory=2**30, pods=10), Resources.of(cpu=4000, memory=2**33, pods=20),
                Resources.of({"cpu": 2000, "memory": 2**30, "pods": 5, NVIDIA_GPU: 4}))


def reference_normalizer(pools: list[NodePool], nodes: list[Node]) -> Resources:
    """The normalizer written out: the elementwise max of every pool's and every node's allocatable, pods left out."""
    top: dict[str, int] = {}
    for allocatable in [p.allocatable for p in pools] + [n.allocatable for n in nodes]:
        for name, amount in allocatable.items:
            top[name] = max(top.get(name, 0), amount)
    top.pop("pods", None)
    return Resources.of(top)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["swap", "same", "copy", "add", "drop", "pools", "bulk", "cut", "clone",
                                           "again"]), st.integers(0, 100), st.integers(0, 2)),
                min_size=1, max_size=30))
def test_kept_normalizer_equals_a_fresh_one_as_nodes_change(ops: list[tuple[str, int, int]]) -> None:
    """The share normalizer the memo keeps (the allocatables counted out and in only where node objects changed)
    against a fresh memo's and the max written out, as nodes change allocatable in place, are replaced by other
    objects with the same or an equal allocatable, come and go one by one or many at once (past what the memo counts
    one by one), are all replaced by equal copies, stay the very same, and the pools change."""
    memo = ScaleUpMemo()
    nodes = [Node(name="n0", allocatable=ALLOCATABLES[0])]
    pools = [POOL_VARIANTS[0][0]]
    for op, i, k in ops:
        at = i % len(nodes) if nodes else 0
        if op == "swap" and nodes:  # another allocatable, same position
            nodes[at] = replace(nodes[at], allocatable=ALLOCATABLES[k])
        elif op == "same" and nodes:  # another node object, the very same allocatable
            nodes[at] = replace(nodes[at], labels={"v": str(i)})
        elif op == "copy" and nodes:  # an equal allocatable, another object
            nodes[at] = replace(nodes[at], allocatable=Resources.of(dict(nodes[at].allocatable.items)))
        elif op == "add":
            nodes.insert(at, Node(name=f"n{len(nodes)}-{i}", allocatable=ALLOCATABLES[k]))
        elif op == "drop" and nodes:
            del nodes[at]
        elif op == "bulk":  # many nodes at once, of one allocatable and of all in turn
            nodes[at:at] = [Node(name=f"b{len(nodes)}-{j}", allocatable=ALLOCATABLES[(k + j * (i % 2)) % 3])
                            for j in range(i)]
        elif op == "cut":
            del nodes[at:at + i]
        elif op == "clone":  # every node another object of equal value
            nodes = [replace(n) for n in nodes]
        elif op == "pools":
            pools = [POOL_VARIANTS[k][i % len(POOL_VARIANTS[k])]]
        table = NodeTable.build(nodes, [n.allocatable for n in nodes], [])
        kept = memo.normalizer(pools, table)[0]
        assert kept == ScaleUpMemo().normalizer(pools, table)[0] == reference_normalizer(pools, nodes)
