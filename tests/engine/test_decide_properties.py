"""Hypothesis properties of `decide` over random clusters: limits, gangs, accounting, determinism."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Plan, Snapshot
from gpuscale.engine.policy import Limits, Policy
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import Pod, PodGroupRef, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.model.taints import Taint, TaintEffect
from tests.builders import make_pod, resources, taint, toleration

NOW = 50_000.0
GPU_TAINT = taint("nvidia.com/gpu", "present")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Cluster, tuple[NodePool, ...], Policy]:
    pools = []
    for k in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([0, 0, 1, 4, 8]))
        pools.append(NodePool(
            name=f"pool-{k}", allocatable=resources(draw(st.sampled_from([4, 16, 64])), "64Gi", gpus, {"pods": 30}),
            taints=(GPU_TAINT,) if gpus and draw(st.booleans()) else (), gpu_model=f"m{gpus}" if gpus else None,
            gpus_per_node=gpus, usd_per_hour=draw(st.sampled_from([0.5, 1.0, 3.0, 20.0])),
            max_size=draw(st.integers(0, 6)), labels={"tier": draw(st.sampled_from(["a", "b"]))},
            zero_or_max=draw(st.booleans())))
    nodes = []
    pods: list[Pod] = []
    for k in range(draw(st.integers(0, 6))):
        p = pools[draw(st.integers(0, len(pools) - 1))]
        node = replace(p.template(f"node-{k}"), created_s=0.0)
        if draw(st.booleans()):  # unneeded for long: scale-down may take it
            node = replace(node, taints=(*node.taints, Taint(key=DELETION_CANDIDATE_TAINT, value="0",
                                                             effect=TaintEffect.PREFER_NO_SCHEDULE)))
        nodes.append(node)
        for j in range(draw(st.integers(0, 3))):
            pods.append(make_pod(f"run-{k}-{j}", cpu="1", memory="1Gi", node=node.name, phase=PodPhase.RUNNING,
                                 tolerations=(toleration("", "Exists"),)))
    groups = draw(st.integers(0, 2))
    for k in range(draw(st.integers(0, 12))):
        gpus = draw(st.sampled_from([0, 0, 1, 2, 8]))
        pod = make_pod(f"pend-{k}", cpu=str(draw(st.sampled_from([1, 2, 8, 40]))), memory="2Gi", gpus=gpus,
                       tolerations=(toleration("nvidia.com/gpu", "Exists"),) if draw(st.booleans()) else (),
                       node_selector={"tier": draw(st.sampled_from(["a", "b"]))} if draw(st.booleans()) else None,
                       priority=draw(st.sampled_from([0, 0, 100, -20])))
        group = draw(st.integers(0, groups)) if groups else 0
        pod = replace(pod, unschedulable=True, created_s=0.0,
                      group=PodGroupRef(key=f"default/g{group}", source="kueue") if group else None)
        pods.append(pod)
    limits = Limits(max_nodes_total=draw(st.one_of(st.none(), st.integers(0, 12))),
                    max_gpus_by_model={"m8": draw(st.integers(0, 40))} if draw(st.booleans()) else {},
                    max_usd_per_hour=draw(st.one_of(st.none(), st.sampled_from([5.0, 50.0]))))
    policy = Policy(limits=limits, scale_down_enabled=draw(st.booleans()))
    return Cluster(nodes=tuple(nodes), pods=tuple(pods)), tuple(pools), policy


def run(cluster: Cluster, pools: tuple[NodePool, ...], policy: Policy) -> Plan:
    return decide(Snapshot(cluster=cluster), pools, EngineState(), policy, NOW)


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(scenarios())
def test_never_exceeds_any_limit(case: tuple[Cluster, tuple[NodePool, ...], Policy]) -> None:
    cluster, pools, policy = case
    plan = run(cluster, pools, policy)
    added = {s.pool: s.nodes for s in plan.scale_up}
    by_name = {p.name: p for p in pools}
    existing = {p.name: sum(1 for n in cluster.nodes if n.pool == p.name) for p in pools}
    for name, count in added.items():
        assert count > 0
        assert existing[name] + count <= by_name[name].max_size
    limits = policy.limits
    if limits.max_nodes_total is not None and added:
        assert len(cluster.nodes) + sum(added.values()) <= max(limits.max_nodes_total, len(cluster.nodes))
    if limits.max_usd_per_hour is not None and added:
        before = sum(by_name[n.pool].usd_per_hour for n in cluster.nodes if n.pool)
        after = before + sum(by_name[p].usd_per_hour * c for p, c in added.items())
        assert after <= max(limits.max_usd_per_hour, before) + 1e-9
    for model, cap in limits.max_gpus_by_model.items():
        before = sum(by_name[n.pool].gpus_per_node for n in cluster.nodes if n.pool and by_name[n.pool].gpu_model
                     == model)
        after = before + sum(by_name[p].gpus_per_node * c for p, c in added.items() if by_name[p].gpu_model == model)
        if after != before:
            assert after <= cap


@PROPERTY
@given(scenarios())
def test_zero_or_max_pools_grow_to_their_max_and_go_whole(case: tuple[Cluster, tuple[NodePool, ...], Policy]) -> None:
    cluster, pools, policy = case
    plan = run(cluster, pools, policy)
    existing = {p.name: sum(1 for n in cluster.nodes if n.pool == p.name) for p in pools}
    whole = {p.name: p for p in pools if p.zero_or_max}
    for item in plan.scale_up:
        if item.pool in whole:
            assert existing[item.pool] + item.nodes == whole[item.pool].max_size, item
    gone: dict[str, int] = {}
    for removal in plan.scale_down:
        gone[removal.pool] = gone.get(removal.pool, 0) + 1
    for name, count in gone.items():
        if name in whole:
            assert count == existing[name], (name, plan.scale_down)


@PROPERTY
@given(scenarios())
def test_gangs_are_all_or_nothing_and_every_pending_pod_is_accounted_for(
        case: tuple[Cluster, tuple[NodePool, ...], Policy]) -> None:
    cluster, pools, policy = case
    plan = run(cluster, pools, policy)
    served = {k for s in plan.scale_up for k in s.pods} | {v.pod for v in plan.covered}
    accounted = served | {v.pod for v in plan.waiting} | {v.pod for v in plan.unplaceable}
    for pod in cluster.pending_pods():
        assert pod.key in accounted, pod.key
    gangs: dict[str, list[str]] = {}
    for pod in cluster.pending_pods():
        if pod.group is not None and pod.priority >= policy.expendable_priority_cutoff:
            gangs.setdefault(pod.group.key, []).append(pod.key)
    for members in gangs.values():
        inside = [m in served for m in members]
        assert all(inside) or not any(inside), members


@PROPERTY
@given(scenarios())
def test_scaled_pods_fit_the_ordered_capacity(case: tuple[Cluster, tuple[NodePool, ...], Policy]) -> None:
    """The pods the scale-ups are for fit, in total, into the nodes ordered plus what the cluster already has (a gang
    may combine one pool's new nodes with the room left on another's, so the check is over all scale-ups)."""
    cluster, pools, policy = case
    plan = run(cluster, pools, policy)
    by_key = {p.key: p for p in cluster.pods}
    by_name = {p.name: p for p in pools}
    ordered = sum((by_name[item.pool].allocatable.scale(item.nodes) for item in plan.scale_up), Resources())
    wanted = sum((by_key[k].requests for k in {k for item in plan.scale_up for k in item.pods}), Resources())
    free_elsewhere = sum((n.allocatable for n in cluster.nodes), Resources())
    assert not wanted.shortfalls(ordered + free_elsewhere)
    for item in plan.scale_up:
        singles = [by_key[k] for k in item.pods if by_key[k].group is None]
        assert not sum((p.requests for p in singles), Resources()).shortfalls(
            by_name[item.pool].allocatable.scale(item.nodes) + free_elsewhere)


@PROPERTY
@given(scenarios(), st.randoms(use_true_random=False))
def test_decide_is_deterministic_and_independent_of_input_order(
        case: tuple[Cluster, tuple[NodePool, ...], Policy], rng: random.Random) -> None:
    cluster, pools, policy = case
    first = run(cluster, pools, policy)
    nodes, pods, shuffled_pools = list(cluster.nodes), list(cluster.pods), list(pools)
    rng.shuffle(nodes)
    rng.shuffle(pods)
    rng.shuffle(shuffled_pools)
    second = run(replace(cluster, nodes=tuple(nodes), pods=tuple(pods)), tuple(shuffled_pools), policy)
    assert first == second
