"""Scale-up's carried waiting pods under churn: the memo keeps the gathered units (while the pending pods are the very
same objects and the expendable cutoff, declared gangs and member counts are equal), their order (while the
normalizer is), and their split into live units and dead pods — single pods asking more than any row has free that no
pool hosts — with the dead pods' verdicts (while the same requests are hopeless and the pools are equal). Every
decision made with the memo equals one made without, as pods come (some batched, some gated, some expendable), bind
(lowering what rows have free), leave, gangs grow and shrink and are declared anew, nodes come and go, pools, backoff,
limits and the cutoff change, and as the very same snapshot is decided again."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.limits import Totals
from gpuscale.engine.plan import Snapshot, UpcomingNode
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaleup import ScaleUpCache, ScaleUpResult, plan_scale_up
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster, PodGroupSpec
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodGroupRef, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU, Resources
from tests.engine.test_scaleup_cache import LIMITS, NAMES, POOL_VARIANTS, pod

OPS = ["pod", "pod", "pod", "fresh", "gated", "gang", "gang", "declare", "bind", "bind", "delete", "pools",
       "backoff", "limits", "cutoff", "node", "node", "drop", "upcoming", "wait", "same", "same"]

steps = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 40), st.integers(0, 20), st.integers(-1, 2)),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(0, 2**16))
# Dead pods (a shape no pool hosts, more than any node has) beside a gang that must span the two GPU pools once the
# first is capped: the spill keeps the singles first, the dead pod among them.
@example([("node", 1, 0, 0), ("pod", 3, 3, -1), ("pod", 9, 5, -1), ("limits", 3, 0, 0), ("gang", 0, 4, 2),
          ("same", 0, 0, 0)], 0)
# A dead pod, then a node big enough for its request: the same pod is no longer hopeless for the same order.
@example([("pod", 1, 2, -1), ("same", 0, 0, 0), ("node", 1, 0, 0), ("same", 0, 0, 0)], 0)
# A bound gang member leaves: the pending pods are the same objects, the member count is not.
@example([("gang", 0, 4, 1), ("same", 0, 0, 0), ("bind", 100, 0, 0), ("node", 1, 0, 0), ("bind", 100, 0, 0),
          ("delete", 0, 0, 0)], 0)
# A dead pod (its pool redefined smaller) whose node frees the room it asks when a bound pod leaves: the same pending
# pods, the same normalizer, a higher ceiling; it is covered now.
@example([("pools", 0, 1, 0), ("node", 0, 0, 0), ("pod", 1, 2, -1), ("bind", 0, 0, 0), ("pod", 2, 2, -1),
          ("pools", 0, 0, 0), ("same", 0, 0, 0), ("delete", 0, 0, 0)], 0)
# The same, with an empty GPU node beside it that has the most free pod slots: the ceiling's pod slots stay the same
# when the bound pod leaves, only its CPU rises.
@example([("pools", 0, 1, 0), ("node", 0, 0, 0), ("node", 1, 1, 0), ("pod", 1, 2, -1), ("bind", 0, 0, 0),
          ("pod", 2, 2, -1), ("pools", 0, 0, 0), ("same", 0, 0, 0), ("delete", 0, 0, 0)], 0)
# A limit reached, then another limit binding: the pods left over get another reason with the same pools and backoff.
@example([("node", 0, 0, 0), ("pod", 1, 1, 1), ("limits", 1, 5, 0), ("limits", 0, 0, 0)], 0)
# A waiting pod replaced under its name by one of another shape that no pool takes either: another reason.
@example([("pod", 1, 3, -1), ("pod", 1, 5, -1)], 0)
# Pods a backed-off pool hosts, of a higher priority than a dead pod: unplaceable before it, in order.
@example([("pod", 1, 1, 2), ("backoff", 0, 0, 0), ("pod", 10, 3, -1), ("same", 0, 0, 0)], 0)
def test_carried_waiting_pods_equal_a_fresh_decision(ops: list[tuple[str, int, int, int]], seed: int) -> None:
    shuffle = random.Random(seed)
    memo = IncrementalStore()
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
        assert decide(snapshot, pools(), state, policy, now, store=memo) == \
            decide(snapshot, pools(), state, policy, now)

    for op, i, shape, extra in ops:
        if op == "pod":  # new pods of one shape, or pods under known names with another shape or priority
            for k in range(extra + 2):
                p = pod(i + k, shape, priority=extra)
                pods[p.key] = p
        elif op == "fresh":  # created just now: the batching delay holds them, GPU pods longer
            for k in range(extra + 2):
                p = replace(pod(i + k, shape), created_s=now - shape % 12)
                pods[p.key] = p
        elif op == "gated":
            p = replace(pod(i, shape), scheduling_gated=True)
            pods[p.key] = p
        elif op == "gang":  # members of one gang; its declared size is sometimes more than exist
            key = f"default/job{i % 3}"
            ref = PodGroupRef(key=key, source="kueue", min_member=None)
            for k in range(extra + 2):
                p = pod(100 + 10 * (i % 3) + k, shape, group=ref)
                pods[p.key] = p
            groups[key] = PodGroupSpec(key=key, min_member=extra + 2 + (shape % 3 == 0))
        elif op == "declare":  # only the declared size changes: the pending pods stay the same objects
            key = f"default/job{i % 3}"
            groups[key] = PodGroupSpec(key=key, min_member=shape % 5)
        elif op == "bind" and pods and nodes:  # lowers the target's free capacity (and so perhaps the ceiling)
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
        elif op == "cutoff":  # priorities run from -1 to 2: some pods become expendable, or stop being
            policy = replace(policy, expendable_priority_cutoff=extra)
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
        elif op == "wait":  # long enough for a batching delay (short waits) or a backoff (long ones) to end
            now += (30.0 if extra > 0 else 2.0) * shape
        check()  # a decision after every change ("same": the very same pods, nodes and pools again)
        now += 1.0


def test_an_unchanged_decision_reuses_the_carried_split() -> None:
    """The very same pending pods, table and pools: the memo hands back the same split, whose dead pods are exactly the
    single pods no pool hosts that ask more than any row has free, with the verdicts a fresh decision gives them."""
    pools = [POOL_VARIANTS[0][1], POOL_VARIANTS[1][0]]  # 32-core CPU nodes; 2-GPU nodes (tainted)
    node = replace(POOL_VARIANTS[0][0].template("n0"), created_s=0.0, ready_since_s=0.0)  # 8 cores
    waiting = (pod(1, 3), pod(2, 0), pod(3, 8), pod(4, 2))  # no pool; fits n0; no pool (16 GPUs); a pool, not n0
    cluster = Cluster(nodes=(node,), pods=waiting)
    totals = Totals(nodes=1, nodes_by_pool={"cpu": 1}, gpus_by_model={})

    def plan(kept: bool) -> ScaleUpResult:  # forks share the stage caches of the what-if they came from
        return plan_scale_up(cluster=cluster, table=table.fork() if kept else table_of(), pools=pools,
                             upcoming_rows=np.zeros(1, dtype=bool), totals=totals, state=EngineState(),
                             policy=Policy(), now=100.0)

    def table_of() -> WhatIf:
        return whatif_of([node], [node.allocatable], [], [NVIDIA_GPU])

    table = table_of()
    memo = table.kept(ScaleUpCache)
    first = plan(True)
    order = memo._order
    assert order is not None and order.split is not None
    split = order.split
    assert sorted(order.units[i].pods[0].name for i, _ in split.dead) == ["p1", "p3"]
    assert [u.pods[0].name for u in split.live] == ["p4", "p2"]  # p4 asks more than n0 has, but a pool hosts it
    again = plan(True)
    assert memo._order is order and order.split is split  # nothing changed: nothing judged again
    fresh = plan(False)
    for result in (first, again):
        assert (result.unplaceable, result.covered, result.scale_ups, result.waiting) == \
            (fresh.unplaceable, fresh.covered, fresh.scale_ups, fresh.waiting)
    assert {v.pod for v in fresh.unplaceable} == {"default/p1", "default/p3"}
    assert [s.pool for s in fresh.scale_ups] == ["cpu"] and fresh.covered[0].pod == "default/p2"


def test_dead_pods_keep_their_place_in_the_order_among_the_pods_left_over() -> None:
    """Unplaceable pods are reported in first-fit-decreasing order, whether dead (no pool hosts them, no row has
    room) or left over (their pool is backed off): priority first."""
    pools = [POOL_VARIANTS[0][1]]  # 32-core CPU nodes
    state = record_failure(EngineState(), "cpu", FailureKind.STOCKOUT, 90.0, Policy())
    waiting = (pod(1, 2, priority=1), pod(2, 3, priority=0), pod(3, 3, priority=2))  # a pool hosts p1 only
    plan = plan_scale_up(cluster=Cluster(pods=waiting), table=whatif_of([], [], []),
                         upcoming_rows=np.zeros(0, dtype=bool), pools=pools, totals=Totals(), state=state,
                         policy=Policy(), now=100.0)
    assert [v.pod for v in plan.unplaceable] == ["default/p3", "default/p1", "default/p2"]
    assert [v.reasons[0].code for v in plan.unplaceable] == [ReasonCode.NO_POOL_FITS, ReasonCode.POOL_BACKOFF,
                                                            ReasonCode.NO_POOL_FITS]


def test_pods_asking_what_the_roomiest_rows_have_free_are_covered_by_them() -> None:
    """The ceiling the split works out (the most any row has free) is the one placement checks pods against: pods
    asking exactly what each node has free are covered by them, with a memo or without, decision after decision."""
    pools = [POOL_VARIANTS[0][0]]  # 8-core CPU nodes
    nodes = tuple(replace(POOL_VARIANTS[0][0].template(name), created_s=0.0, ready_since_s=0.0)
                  for name in ("n0", "n1"))
    bound = pod(9, 0, node="n1")  # half a core on n1: 7.5 cores free there
    waiting = tuple(replace(pod(i, 1), requests=Resources.of(cpu=cpu)) for i, cpu in ((1, 7500), (2, 8000)))
    cluster = Cluster(nodes=nodes, pods=(bound, *waiting))
    totals = Totals(nodes=2, nodes_by_pool={"cpu": 2}, gpus_by_model={})
    base = whatif_of(list(nodes), [n.allocatable for n in nodes], [bound], [NVIDIA_GPU])
    for kept in (True, True, False):  # forks share the stage caches of the what-if they came from
        table = base.fork() if kept else whatif_of(list(nodes), [n.allocatable for n in nodes], [bound], [NVIDIA_GPU])
        result = plan_scale_up(cluster=cluster, table=table, upcoming_rows=np.zeros(2, dtype=bool), pools=pools,
                               totals=totals, state=EngineState(), policy=Policy(), now=100.0)
        assert sorted(v.pod for v in result.covered) == ["default/p1", "default/p2"]
        assert {v.reasons[0].code for v in result.covered} == {ReasonCode.FITS_EXISTING}
        assert not result.scale_ups and not result.unplaceable
