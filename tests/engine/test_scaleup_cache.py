"""Scale-up's memo: the pools, pod shapes and limits its churn test draws from (tests/engine/test_scaleup_carry.py
drives every decision with the memo against one without), and the kept share normalizer against one written out."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.policy import Limits
from gpuscale.engine.scaleup import ScaleUpCache
from gpuscale.engine.whatif.rows import whatif_of
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
                                           "again", "far"]), st.integers(0, 100), st.integers(0, 2)),
                min_size=1, max_size=30))
@example([("bulk", 9, 0), ("far", 0, 1), ("far", 8, 2)])  # one node gone, two come, the run between unchanged
@example([("bulk", 80, 1), ("far", 0, 2)])  # the same, the run longer than what the memo counts one by one
def test_kept_normalizer_equals_a_fresh_one_as_nodes_change(ops: list[tuple[str, int, int]]) -> None:
    """The share normalizer the memo keeps (the allocatables counted out and in only where node objects changed)
    against a fresh memo's and the max written out, as nodes change allocatable in place, are replaced by other
    objects with the same or an equal allocatable, come and go one by one or many at once (past what the memo counts
    one by one), are all replaced by equal copies, stay the very same, and the pools change."""
    memo = ScaleUpCache()
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
        elif op == "far" and nodes:  # one node gone and 1 to 3 come in one step, far apart in the order
            del nodes[at]
            there = (at + len(nodes) // 2 + 1) % (len(nodes) + 1)
            nodes[there:there] = [Node(name=f"f{len(nodes)}-{i}-{j}", allocatable=ALLOCATABLES[j])
                                  for j in range(k + 1)]
        elif op == "clone":  # every node another object of equal value
            nodes = [replace(n) for n in nodes]
        elif op == "pools":
            pools = [POOL_VARIANTS[k][i % len(POOL_VARIANTS[k])]]
        table = whatif_of(nodes, [n.allocatable for n in nodes], [])
        kept = memo.normalizer(pools, table)[0]
        assert kept == ScaleUpCache().normalizer(pools, table)[0] == reference_normalizer(pools, nodes)
        assert memo._counts == Counter(n.allocatable for n in nodes)
