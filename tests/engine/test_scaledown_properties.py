"""Invariants of scale-down over random clusters (Hypothesis).

1. Every removal's evicted pods (those that need a home) fit on the nodes that remain, all removals together —
   checked by an independent brute-force search on kube-scheduler's filters (`tests/engine/oracle.py`).
2. No PodDisruptionBudget is overspent by the evictions of one plan.
3. No pod that blocks scale-down is ever evicted, and no protected node is removed.
4. The result does not depend on the order of nodes, pods or budgets.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.engine.drain import CHECKPOINT_SAFE, DO_NOT_DISRUPT, SAFE_TO_EVICT, SCALE_DOWN_DISABLED
from gpuscale.engine.policy import Policy
from gpuscale.engine.scaledown import ScaleDownResult, plan_scale_down
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import HostPort, OwnerRef, Pod, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, Resources
from gpuscale.model.selectors import LabelSelector
from tests.builders import make_node, make_pod
from tests.engine.oracle import node_failures, port_failures

NOW = 100_000.0
POLICY = Policy()
NAMESPACES = ("default", "kube-system", "team")
APPS = ("a", "b", "c")


@dataclass(frozen=True)
class World:
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[PodDisruptionBudget, ...]
    pools: Mapping[str, NodePool]
    policy: Policy
    unneeded_since: Mapping[str, float]


@st.composite
def nodes_(draw: st.DrawFn, calm: bool) -> list[Node]:
    nodes: list[Node] = []
    for i in range(draw(st.integers(2, 8))):
        gpus = draw(st.sampled_from((0, 0, 1, 2, 4)))
        base = make_node(f"n{i}", cpu=draw(st.sampled_from(("2", "4", "8"))),
                         memory=draw(st.sampled_from(("4Gi", "8Gi", "16Gi"))), gpus=gpus,
                         pods=draw(st.sampled_from((3, 110))),
                         labels={POOL_LABEL: "gpu" if gpus else "cpu"},
                         extra={GPU_MILLI: 1000 * gpus} if gpus and draw(st.booleans()) else None)
        if calm:
            nodes.append(base)
            continue
        nodes.append(replace(
            base, ready=draw(st.sampled_from((True, True, True, True, False))),
            deleting=draw(st.sampled_from((False, False, False, False, True))),
            annotations={SCALE_DOWN_DISABLED: "true"} if draw(st.integers(0, 9)) == 0 else {}))
    return nodes


@st.composite
def pod_(draw: st.DrawFn, index: int, target: Node, hostile: int) -> Pod:
    """A pod bound to `target`; `hostile` (0–3) is how often it carries something that blocks scale-down."""
    amounts = {"cpu": draw(st.sampled_from((100, 250, 500, 1000, 2000))),
               "memory": draw(st.sampled_from((128, 512, 2048))) * 2**20}
    gpu_kind = draw(st.sampled_from(("none", "none", "whole", "milli")))
    if gpu_kind == "whole":
        amounts["nvidia.com/gpu"] = draw(st.integers(1, 2))
    elif gpu_kind == "milli":
        amounts[GPU_MILLI] = draw(st.sampled_from((250, 500)))
    annotations: dict[str, str] = {}
    if draw(st.integers(0, 3)) < hostile:
        annotations[SAFE_TO_EVICT] = draw(st.sampled_from(("true", "false", "on-completion")))
    if draw(st.integers(0, 9)) < hostile:
        annotations[DO_NOT_DISRUPT] = "true"
    if draw(st.booleans()):
        annotations[CHECKPOINT_SAFE] = "true"
    owner = draw(st.sampled_from(("ReplicaSet", "StatefulSet", "Job", "DaemonSet", None)[:5 if hostile else 4]))
    pod = make_pod(f"p{index}", draw(st.sampled_from(NAMESPACES)) if hostile else "default", node=target.name,
                   node_selector={POOL_LABEL: target.labels[POOL_LABEL]} if draw(st.integers(0, 4)) == 0 else None,
                   phase=draw(st.sampled_from((PodPhase.RUNNING, PodPhase.RUNNING, PodPhase.PENDING))),
                   priority=draw(st.sampled_from((0, 0, 0, -20, 100))),
                   labels={"app": draw(st.sampled_from(APPS if hostile else APPS[:2]))})
    ports = draw(st.sampled_from(((), (), (), (HostPort(8080),), (HostPort(8080, "UDP"),),
                                   (HostPort(8080, host_ip="10.0.0.1"),), (HostPort(9100),))))
    return replace(pod, requests=Resources.of(amounts), annotations=annotations,
                   owner=OwnerRef(kind=owner, name=f"o{index}") if owner else None,
                   local_storage=draw(st.integers(0, 9)) < hostile,
                   constraints=replace(pod.constraints, host_ports=ports))


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Half the worlds are *calm* — every node Ready and protected by nothing, pods spread thin and free of blockers,
    every clock expired, many drains allowed — so multi-node plans (shared budgets, chained moves) are common."""
    calm = draw(st.booleans())
    nodes = draw(nodes_(calm))
    free = {n.name: n.allocatable for n in nodes}
    hostile = 0 if calm else draw(st.integers(0, 3))
    pods: list[Pod] = []
    for j in range(draw(st.integers(0, 2 * len(nodes) if calm else 32))):
        target = nodes[j % len(nodes)] if calm else draw(st.sampled_from(nodes))
        pod = draw(pod_(j, target, hostile))
        if pod.requests.shortfalls(free[target.name]) or sum(
                1 for p in pods if p.node_name == target.name) >= target.allocatable.get("pods"):
            continue
        if port_failures(pod, [p for p in pods if p.node_name == target.name]):
            continue  # the scheduler never bound two pods whose host ports conflict
        free[target.name] = free[target.name] - pod.requests
        pods.append(pod)
    apps = APPS[:2] if calm else APPS
    pdbs = tuple(PodDisruptionBudget(
        namespace="default" if calm else draw(st.sampled_from(NAMESPACES)), name=f"b{k}",
        selector=LabelSelector(match_labels=(("app", draw(st.sampled_from(apps))),)),
        disruptions_allowed=draw(st.integers(1, 2) if calm else st.integers(-1, 2)),
    ) for k in range(draw(st.integers(1 if calm else 0, 3))))
    pools = {name: NodePool(name=name, allocatable=Resources(), min_size=draw(st.integers(0, 1)),
                            # a pool's own options (CA's per-node-group ones) or the policy's
                            scale_down_utilization_threshold=draw(st.sampled_from((None, None, 0.0, 0.7, 1.0))),
                            scale_down_gpu_utilization_threshold=draw(st.sampled_from((None, None, 0.0, 0.7, 1.0))),
                            scale_down_unneeded_time_s=draw(st.sampled_from((None, None, 0.0, 1_000.0))),
                            ignore_daemonsets_utilization=draw(st.sampled_from((None, None, True, False))),
                            usd_per_hour=draw(st.sampled_from((0.0, 1.0, 30.0))))  # orders the removal simulation
             for name in ("cpu", "gpu")}
    policy = Policy(max_drain_parallelism=draw(st.sampled_from((2, 10) if calm else (1, 2, 10))),
                    max_empty_bulk_delete=draw(st.integers(1, 10)),
                    scale_down_utilization_threshold=draw(st.sampled_from((0.5, 0.9, 1.0))),
                    scale_down_gpu_utilization_threshold=draw(st.sampled_from((0.5, 0.9, 1.0))),
                    ignore_daemonsets_utilization=draw(st.booleans()),
                    scale_down_replace_with_cheaper=draw(st.booleans()))
    since = {n.name: NOW - 5_000 if calm else draw(st.sampled_from((NOW - 5_000, NOW - 100))) for n in nodes
             if calm or draw(st.integers(0, 7)) > 0}
    return World(tuple(nodes), tuple(pods), pdbs, pools, policy, since)


def plan(world: World, nodes: Sequence[Node] | None = None, pods: Sequence[Pod] | None = None,
         pdbs: Sequence[PodDisruptionBudget] | None = None) -> ScaleDownResult:
    nodes = world.nodes if nodes is None else nodes
    pods = world.pods if pods is None else pods
    by_node: dict[str, list[Pod]] = {n.name: [] for n in nodes}
    for p in pods:
        by_node[p.node_name or ""].append(p)
    return plan_scale_down(
        nodes=nodes, table=whatif_of(nodes, [n.allocatable for n in nodes], pods), pods_by_node=by_node,
        pools=world.pools, pool_of={n.name: n.labels[POOL_LABEL] for n in nodes},
        pdbs=world.pdbs if pdbs is None else pdbs, policy=world.policy, state=EngineState(), now=NOW,
        unneeded_since=world.unneeded_since)


# ---------------------------------------------------------------------------------------------- independent checks


def evicted(world: World, result: ScaleDownResult) -> list[Pod]:
    keys = {k for r in result.removals for k in r.evict}
    return [p for p in world.pods if p.key in keys]


def fits_somewhere(pods: list[Pod], nodes: list[Node], used: dict[str, Resources], count: Counter[str],
                   here: dict[str, list[Pod]]) -> bool:
    """Brute force: is there any assignment of `pods` to `nodes` that passes every scheduler filter?"""
    if not pods:
        return True
    pod, rest = pods[0], pods[1:]
    for node in nodes:
        if not node_failures(pod, node, used[node.name], count[node.name], here=here[node.name]):
            used[node.name] = used[node.name] + pod.requests
            count[node.name] += 1
            here[node.name].append(pod)
            if fits_somewhere(rest, nodes, used, count, here):
                return True
            used[node.name] = used[node.name] - pod.requests
            count[node.name] -= 1
            here[node.name].pop()
    return False


def blocks(pod: Pod, pdbs: Sequence[PodDisruptionBudget]) -> bool:
    """The drainability spec, written out independently of engine/drain.py (for pods that would be evicted)."""
    safe = pod.annotations.get(SAFE_TO_EVICT)
    if safe in ("false", "on-completion") or pod.annotations.get(DO_NOT_DISRUPT) == "true":
        return True
    if pod.priority < POLICY.expendable_priority_cutoff:
        return False
    if safe != "true":
        covered = any(b.covers(pod.namespace, pod.labels) for b in pdbs)
        if pod.owner is None or pod.local_storage or (pod.namespace == "kube-system" and not covered):
            return True
    gpu = pod.requests.gpu_count() > 0 or pod.requests.get(GPU_MILLI) > 0
    return (pod.phase is PodPhase.RUNNING and pod.owner is not None and pod.owner.kind == "Job" and gpu
            and pod.annotations.get(CHECKPOINT_SAFE) != "true")


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(worlds())
def test_evicted_pods_fit_on_the_remaining_nodes(world: World) -> None:
    result = plan(world)
    gone = {r.node for r in result.removals}
    remaining = sorted((n for n in world.nodes if n.name not in gone and n.ready and not n.deleting),
                       key=lambda n: n.name)
    used = {n.name: Resources() for n in world.nodes}
    count: Counter[str] = Counter()
    here: dict[str, list[Pod]] = {n.name: [] for n in world.nodes}
    for p in world.pods:
        if p.node_name not in gone:
            used[p.node_name or ""] = used[p.node_name or ""] + p.requests
            count[p.node_name or ""] += 1
            here[p.node_name or ""].append(p)
    homeless = sorted((p for p in evicted(world, result) if p.priority >= POLICY.expendable_priority_cutoff),
                      key=lambda p: (-p.requests.get("cpu"), p.key))
    assert fits_somewhere(homeless, remaining, used, count, here)


@PROPERTY
@given(worlds())
def test_no_pdb_is_overspent(world: World) -> None:
    pods = evicted(world, plan(world))
    for budget in world.pdbs:
        assert sum(1 for p in pods if budget.covers(p.namespace, p.labels)) <= max(budget.disruptions_allowed, 0)


@PROPERTY
@given(worlds())
def test_blocking_pods_and_protected_nodes_are_never_touched(world: World) -> None:
    result = plan(world)
    assert not [p.key for p in evicted(world, result) if blocks(p, world.pdbs)]
    by_name = {n.name: n for n in world.nodes}
    for removal in result.removals:
        node = by_name[removal.node]
        assert node.annotations.get(SCALE_DOWN_DISABLED) != "true" and not node.deleting
        on_node = [p for p in world.pods if p.node_name == node.name]
        assert not [p.key for p in on_node if p.key not in removal.evict and blocks(p, world.pdbs)
                    and p.owner is not None and p.owner.kind != "DaemonSet"
                    and p.annotations.get("kubernetes.io/config.mirror") is None]
    live = Counter(n.labels[POOL_LABEL] for n in world.nodes if not n.deleting)
    for pool, gone in Counter(r.pool for r in result.removals).items():
        assert live[pool] - gone >= world.pools[pool].min_size
    drains = sum(1 for r in result.removals if r.reasons[0].code == "Underutilized")
    assert drains <= world.policy.max_drain_parallelism
    assert len(result.removals) - drains <= world.policy.max_empty_bulk_delete


@PROPERTY
@given(worlds(), st.randoms(use_true_random=False))
def test_result_does_not_depend_on_input_order(world: World, rnd: random.Random) -> None:
    nodes, pods, pdbs = list(world.nodes), list(world.pods), list(world.pdbs)
    rnd.shuffle(nodes)
    rnd.shuffle(pods)
    rnd.shuffle(pdbs)
    assert plan(world, nodes, pods, pdbs) == plan(world)
