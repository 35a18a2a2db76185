"""`balance_similar_node_groups` (CA's `--balance-similar-node-groups`): which pools are similar (`engine.balance`),
how a scale-up's nodes are split over them (never past a pool's limits), and a decision over three per-zone pools."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.balance import balance, similar
from gpuscale.engine.decide import decide
from gpuscale.engine.limits import Totals, headroom
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Limits, Policy
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import ZONE_LABEL
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from tests.builders import make_pod, resources, taint

NOW = 10_000.0


def zone_pool(zone: str, *, cpu: str = "16", memory: str = "64Gi", gpus: int = 0, max_size: int = 10,
              labels: dict[str, str] | None = None) -> NodePool:
    return NodePool(name=f"cpu-{zone}", allocatable=resources(cpu, memory, gpus, {"pods": 110}),
                    labels={"node.example/team": "ml", **(labels or {})}, max_size=max_size, zones=(zone,),
                    usd_per_hour=1.0, gpu_model="t4" if gpus else None, gpus_per_node=gpus)


A, B, C = zone_pool("zone-a"), zone_pool("zone-b"), zone_pool("zone-c")


def test_similar_pools_differ_only_in_zone_name_and_a_little_memory() -> None:
    assert similar(A, B) and similar(B, A)
    assert similar(A, replace(B, allocatable=resources("16", "62Gi", 0, {"pods": 110})))  # within 5 %
    assert not similar(A, replace(B, allocatable=resources("16", "48Gi", 0, {"pods": 110})))
    assert not similar(A, replace(B, allocatable=resources("8", "64Gi", 0, {"pods": 110})))
    assert not similar(zone_pool("a", gpus=1), zone_pool("b", gpus=2))  # GPU count: exact
    assert not similar(A, replace(B, labels={"node.example/team": "web"}))
    assert not similar(A, replace(B, taints=(taint("dedicated", "ml"),)))
    assert similar(A, replace(B, labels={**B.labels, ZONE_LABEL: "zone-b", "kubernetes.io/hostname": "x"}))


sizes = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8)), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(sizes, st.integers(0, 30), st.sampled_from([None, 5, 12]))
def test_the_split_never_passes_a_limit_and_keeps_sizes_even(groups: list[tuple[int, int]], nodes: int,
                                                             total: int | None) -> None:
    """Every pool gets at most its headroom (max size, cluster limits), the split sums to `nodes` or to every
    pool's headroom, and a pool left below its ceiling is never two nodes smaller than one that got nodes."""
    pools = [replace(A, name=f"p{i}", max_size=size + extra) for i, (size, extra) in enumerate(groups)]
    totals = Totals().add_all((p, size) for p, (size, _) in zip(pools, groups, strict=True))
    limits = Limits(max_nodes_total=total) if total is not None else Limits()
    split = dict((p.name, n) for p, n in balance(pools, nodes, totals, limits, 1000))
    rooms = {p.name: headroom(p, totals, limits, 1000).nodes for p in pools}
    for name, n in split.items():
        assert 0 < n <= rooms[name]
    cluster_room = total - totals.nodes if total is not None else 10**9
    assert sum(split.values()) == max(0, min(nodes, sum(max(r, 0) for r in rooms.values()), cluster_room))
    final = {p.name: size + split.get(p.name, 0) for p, (size, _) in zip(pools, groups, strict=True)}
    grown = [final[name] for name in split]
    for p in pools:
        if split.get(p.name, 0) < rooms[p.name] and grown:
            assert final[p.name] >= max(grown) - 1


def pending(name: str, cpu: str = "15") -> Pod:
    return replace(make_pod(name, cpu=cpu, memory="1Gi"), unschedulable=True, created_s=0.0)


def run(pods: tuple[Pod, ...], pools: tuple[NodePool, ...], balanced: bool) -> dict[str, int]:
    plan = decide(Snapshot(cluster=Cluster(pods=pods)), pools, EngineState(),
                  Policy(balance_similar_node_groups=balanced), NOW)
    return {s.pool: s.nodes for s in plan.scale_up}


def test_a_scale_up_is_split_over_three_similar_per_zone_pools() -> None:
    pods = tuple(pending(f"p{i}") for i in range(6))
    assert run(pods, (A, B, C), balanced=False) == {"cpu-zone-a": 6}
    assert run(pods, (A, B, C), balanced=True) == {"cpu-zone-a": 2, "cpu-zone-b": 2, "cpu-zone-c": 2}
    small_b = replace(B, max_size=1)
    assert run(pods, (A, small_b, C), balanced=True) == {"cpu-zone-a": 3, "cpu-zone-b": 1, "cpu-zone-c": 2}
    other = replace(C, labels={"node.example/team": "web"})
    assert run(pods, (A, B, other), balanced=True) == {"cpu-zone-a": 3, "cpu-zone-b": 3}


def test_balanced_scale_ups_name_the_split_and_keep_the_pods_once() -> None:
    pods = tuple(pending(f"p{i}") for i in range(3))
    plan = decide(Snapshot(cluster=Cluster(pods=pods)), (A, B, C), EngineState(),
                  Policy(balance_similar_node_groups=True), NOW)
    assert sorted(len(s.pods) for s in plan.scale_up) == [0, 0, 3]
    assert all("balance_similar_node_groups: 3 node(s) split over 3 similar pools" in s.reasons[-1].message
               for s in plan.scale_up)
    assert sum(s.nodes for s in plan.scale_up) == 3
