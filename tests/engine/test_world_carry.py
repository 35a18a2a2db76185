"""What `build_world` carries from one decision to the next through the decision memo (the node rows' arrays, the
upcoming nodes' templates, the totals, the pending pods' request names) equals what a decision without a memo makes,
under churn of nodes, pods, upcoming nodes and pool objects (an equal pool reloaded, or a pool resized)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import build_world, find_timeouts
from gpuscale.engine.memo import DecideMemo, facts_of
from gpuscale.engine.plan import Snapshot, UpcomingNode
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from tests.builders import make_pod

GPU = Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: 2, GPU_MILLI: 2000})
CPU = Resources.of(cpu=8000, memory=32 * 2**30, pods=20)


def pools_of(version: int) -> dict[str, NodePool]:
    """Version 0 and 1: equal pools, other objects; version 2: the gpu pool holds four GPUs a node."""
    big = Resources.of({"cpu": 32_000, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: 4, GPU_MILLI: 4000})
    return {"cpu": NodePool(name="cpu", allocatable=CPU, max_size=40, usd_per_hour=0.3),
            "gpu": NodePool(name="gpu", allocatable=big if version == 2 else GPU, max_size=40, gpu_model="t4",
                            gpus_per_node=4 if version == 2 else 2, usd_per_hour=1.1)}


def node(name: str, pool: str, ready: bool) -> Node:
    allocatable = GPU if pool == "gpu" else CPU
    return Node(name=name, allocatable=allocatable, capacity=allocatable, ready=ready,
                labels={"gpuscale.io/pool": pool, "kubernetes.io/hostname": name}, created_s=0.0,
                ready_since_s=0.0 if ready else None)


def world_view(cluster: Cluster, snapshot: Snapshot, pools: dict[str, NodePool], memo: DecideMemo | None,
               now: float) -> tuple[object, ...]:
    """The world `decide` builds (with `memo` as `decide` hands it on), as plain values."""
    arranged = memo.arrange.arrange(cluster) if memo is not None else None
    ordered = arranged.cluster if arranged is not None else Cluster(
        nodes=tuple(sorted(cluster.nodes, key=lambda n: n.name)), pods=tuple(sorted(cluster.pods, key=lambda p: p.key)))
    pods = arranged.pods if arranged is not None else ordered.index()
    facts = facts_of(ordered.nodes, {}, pools, memo, (arranged.generation, arranged.replaced) if arranged else None)
    timeouts = find_timeouts(replace(snapshot, cluster=ordered), pools, EngineState(), Policy(), now, facts)
    world = build_world(ordered, snapshot, pools, timeouts, facts, "gpuscale", memo, pods,
                        (arranged.generation, arranged.moved) if arranged is not None else None)
    table = world.table
    return (world.rows, world.row_pool, world.upcoming_rows.tolist(), world.gpu_capacity.tolist(), world.totals,
            world.free_pods_before.tolist(), table.columns, table.free.tolist(), table._s.group_of,
            table._s.group_members, table._s.index, dict(table._s.workload))


steps = st.lists(st.tuples(st.sampled_from(["node", "drop", "pend", "bind", "finish", "order", "arrive", "pools",
                                            "decide", "decide"]),
                           st.integers(0, 99), st.integers(0, 2), st.booleans()),
                 min_size=1, max_size=50)


@settings(max_examples=150, deadline=None)
@given(steps)
@example([("order", 0, 1, True), ("decide", 0, 0, False), ("pools", 0, 2, False), ("decide", 0, 0, False)])
@example([("node", 0, 1, True), ("order", 0, 1, True), ("decide", 0, 0, False), ("order", 0, 0, True),
          ("decide", 0, 0, False), ("node", 0, 1, False), ("decide", 0, 0, False)])
def test_a_carried_world_equals_a_fresh_one_under_churn(ops: list[tuple[str, int, int, bool]]) -> None:
    memo = DecideMemo()
    pools = pools_of(0)
    nodes: dict[str, Node] = {}
    pods: dict[str, Pod] = {}
    upcoming: dict[str, UpcomingNode] = {}
    now = 1000.0
    for serial, (op, i, kind, flag) in enumerate(ops):
        name = f"n{i % 12:02}"
        if op == "node":
            nodes[name] = node(name, ("cpu", "gpu")[kind % 2], flag)
        elif op == "drop":
            nodes.pop(name, None)
        elif op == "pend":
            extra = {0: {}, 1: {GPU_MILLI: 500}, 2: {"example.com/fpga": 1}}[kind]
            pending = make_pod(f"p{serial}", cpu="500m", memory="1Gi", extra=extra)
            pods[pending.key] = pending
        elif op == "bind" and nodes:
            placed = make_pod(f"p{serial}", cpu="250m", memory="1Gi", gpus=kind % 2, node=sorted(nodes)[i % len(nodes)])
            pods[placed.key] = placed
        elif op == "finish" and pods:
            del pods[sorted(pods)[i % len(pods)]]
        elif op == "order":  # a node ordered (or ordered again: the same request id, maybe another pool)
            request = f"r{i % 5}"
            upcoming[request] = UpcomingNode(pool=("cpu", "gpu", "gone")[kind], request_id=request,
                                             requested_s=now - (0 if flag else 10_000))
        elif op == "arrive" and upcoming:
            del upcoming[sorted(upcoming)[i % len(upcoming)]]
        elif op == "pools":  # the configuration reloaded: equal pools (other objects) or a resized pool
            pools = pools_of(kind)
        else:
            now += 10.0
            cluster = Cluster(nodes=tuple(nodes.values()), pods=tuple(pods.values()))
            snapshot = Snapshot(cluster=cluster, upcoming=tuple(upcoming.values()))
            assert world_view(cluster, snapshot, pools, memo, now) == world_view(cluster, snapshot, pools, None, now)
