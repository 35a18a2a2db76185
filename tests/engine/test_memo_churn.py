"""The decision memo under adversarial churn: nodes come, go, turn Ready, get their GPUs, get marked and cordoned,
change pool; pods arrive, bind, move, finish and are deleted; the input comes in any order — and every decision made
with the memo equals the decision made without it. The twin-wide test (test_memo.py) checks realistic runs; this one
reaches the memo's patch paths (replaced nodes, moved pods, nodes gaining or losing their row) in every combination."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.memo import DecideMemo
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Snapshot
from gpuscale.engine.policy import Buffer, Policy
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect
from tests.builders import make_pod

POOLS = (
    NodePool(name="cpu", allocatable=Resources.of(cpu=8000, memory=32 * 2**30, pods=20), max_size=8),
    NodePool(name="gpu", allocatable=Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: 2,
                                                   GPU_MILLI: 2000}), max_size=8),
)
TUNED = (replace(POOLS[0], scale_down_utilization_threshold=0.9, scale_down_unneeded_time_s=0.0,
                 ignore_daemonsets_utilization=True),
         replace(POOLS[1], scale_down_gpu_utilization_threshold=0.2, scale_down_unready_time_s=30.0))
"""The same pools with scale-down options of their own (CA's per-node-group options)."""
NAMES = [f"n{i}" for i in range(6)]


def assert_memo_decides_as_fresh(memo: DecideMemo, nodes: dict[str, Node], pods: dict[str, Pod],
                                 shuffle: random.Random, policy: Policy, now: float,
                                 state: EngineState | None = None,
                                 pools: tuple[NodePool, ...] = POOLS) -> EngineState:
    """The decision on these nodes and pods (in a shuffled order) with the memo equals a fresh one; its state."""
    node_list, pod_list = list(nodes.values()), list(pods.values())
    shuffle.shuffle(node_list)
    shuffle.shuffle(pod_list)
    snapshot = Snapshot(cluster=Cluster(nodes=tuple(node_list), pods=tuple(pod_list)))
    plan = decide(snapshot, pools, state or EngineState(), policy, now, memo=memo)
    assert plan == decide(snapshot, pools, state or EngineState(), policy, now)
    return plan.state


def node(name: str, pool: int, state: int, now: float) -> Node:
    """`state`: 0 Ready, 1 not Ready (starting), 2 Ready without its GPUs, 3 marked unneeded, 4 deleting, 5 cordoned,
    6 tainted NoSchedule."""
    template = POOLS[pool]
    allocatable = template.allocatable
    if state == 2 and pool == 1:
        allocatable = Resources.of(cpu=16_000, memory=64 * 2**30, pods=20)
    taints = (Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(now) - 60), effect=TaintEffect.PREFER_NO_SCHEDULE),
              ) if state == 3 else (Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE),) if state == 6 \
        else ()
    return Node(name=name, allocatable=allocatable, capacity=allocatable, ready=state != 1,
                labels={"gpuscale.io/pool": template.name, "kubernetes.io/hostname": name}, taints=taints,
                created_s=now - 120, ready_since_s=now - 100 if state != 1 else None, deleting=state == 4,
                unschedulable=state == 5)


def pod(i: int, kind: int, where: str | None, phase: int) -> Pod:
    gpu = {0: {}, 1: {GPU_MILLI: 500}, 2: {NVIDIA_GPU: 1}, 3: {"example.com/fpga": 1}}[kind]
    p = make_pod(f"p{i % 30}", cpu="500m", memory="1Gi", extra=gpu, node=where)
    return replace(p, created_s=0.0, unschedulable=where is None,
                   phase=(PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.PENDING)[phase] if where else PodPhase.PENDING)


steps = st.lists(st.tuples(st.sampled_from(["flip", "flip", "node", "drop", "pod", "pod", "delete", "decide",
                                            "decide"]),
                           st.integers(0, 100), st.integers(0, 6), st.integers(0, 3), st.integers(0, 2)),
                 min_size=1, max_size=50)


@pytest.mark.parametrize(("limits", "pools"), [({}, POOLS),
                                               ({"max_node_provision_time_s": 125.0, "max_gpu_init_time_s": 105.0},
                                                POOLS),
                                               ({"unremovable_node_recheck_timeout_s": 30.0}, POOLS),
                                               ({}, TUNED)],
                         ids=["default-limits", "short-limits", "recheck", "pool-options"])
@settings(max_examples=150, deadline=None)
@given(steps, st.integers(0, 2**16))
def test_memoised_decisions_equal_fresh_ones_under_churn(limits: dict[str, float], pools: tuple[NodePool, ...],
                                                         ops: list[tuple[str, int, int, int, int]],
                                                         seed: int) -> None:
    """With short limits, starting nodes (made 120 s before, Ready 100 s before) time out from the next decision on:
    the memo's nodes still starting (`DecideMemo.starting`) must be the fresh ones, in order. With a recheck timeout,
    the nodes each plan's state remembers as unremovable are skipped at the next decisions (the state is threaded
    through), which the memo's carried verdicts must follow."""
    shuffle = random.Random(seed)
    memo = DecideMemo()
    now = 1000.0
    nodes = {name: node(name, i % 2, 0, now) for i, name in enumerate(NAMES)}
    pods: dict[str, Pod] = {}
    policy = Policy(buffers=(Buffer(pool="gpu", free_gpus=1, free_gpus_ratio=0.5),),  # warm capacity reads GPUs
                    **limits)

    threaded = EngineState()

    def check() -> None:
        nonlocal threaded
        threaded = assert_memo_decides_as_fresh(memo, nodes, pods, shuffle, policy, now, threaded, pools)

    for op, i, state, kind, phase in ops:
        name = NAMES[i % len(NAMES)]
        if op == "flip" and name in nodes:  # the same node, another state: replaced under its name
            nodes[name] = node(name, POOLS.index(next(p for p in POOLS if p.name == nodes[name].pool)), state, now)
        elif op == "node":
            same_pool = name in nodes and kind != 3  # mostly the node's own pool; now and then another
            nodes[name] = node(name, POOLS.index(next(p for p in POOLS if p.name == nodes[name].pool))
                               if same_pool else i % 2, state, now)
        elif op == "drop":
            nodes.pop(name, None)
        elif op == "pod":
            p = pod(i, kind, name if state % 2 else None, phase)
            pods[p.key] = p
        elif op == "delete" and pods:
            del pods[sorted(pods)[i % len(pods)]]
        else:
            now += 10.0
            check()
    check()
