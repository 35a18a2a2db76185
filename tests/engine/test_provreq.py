"""engine/provreq.py: synthetic gangs, bookings, check-capacity answers and the conditions after a decision."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.provreq import (
    ACCEPTED,
    BEST_EFFORT_ATOMIC,
    BOOKING_EXPIRED,
    CHECK_CAPACITY,
    CONSUME_ANNOTATIONS,
    FAILED,
    PROVISIONED,
    TRUE,
    Condition,
    Outcome,
    PodSet,
    ProvisioningRequest,
    conditions_after,
    is_synthetic,
    prepare,
    request_of_synthetic,
    synthetic_pods,
)
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import Pod
from tests.builders import make_pod
from tests.engine.test_scaleup import A100, GPU_TOL, NOW, SEED_POOLS, pool_node

POLICY = Policy(new_pod_delay_s=0.0, new_gpu_pod_delay_s=0.0)
A100_POOL = SEED_POOLS[1]
POOLS = {p.name: p for p in SEED_POOLS}


def template(gpus: int = 8) -> Pod:
    return make_pod("ppt", cpu="4", memory="16Gi", gpus=gpus, tolerations=(GPU_TOL,), node_selector=A100)


def request(name: str = "req", count: int = 4, class_name: str = BEST_EFFORT_ATOMIC,
            conditions: tuple[Condition, ...] = (), gpus: int = 8) -> ProvisioningRequest:
    return ProvisioningRequest(namespace="team", name=name, class_name=class_name,
                               pod_sets=(PodSet(template_name=f"ppt-{name}-main", template=template(gpus),
                                                count=count),),
                               conditions={c.type: c for c in conditions}, created_s=NOW - 100)


def provisioned(since_s: float) -> Condition:
    return Condition(type=PROVISIONED, status=TRUE, reason="Provisioned", message="", since_s=since_s)


def step(cluster: Cluster, requests: list[ProvisioningRequest], policy: Policy = POLICY,
         outcome: Outcome | None = None, now: float = NOW) -> tuple[Plan, dict[str, dict[str, Condition]]]:
    prepared = prepare(cluster, requests, POOLS, {}, now)
    plan = decide(Snapshot(cluster=prepared.cluster), SEED_POOLS, EngineState(), policy, now)
    updates = conditions_after(requests, prepared, plan, outcome or Outcome(), now)
    return plan, {u.request: {c.type: c for c in u.conditions} for u in updates}


def test_synthetic_pods_are_one_gang_with_names_no_real_pod_can_have() -> None:
    pods = synthetic_pods(request(count=3))
    assert [p.name for p in pods] == ["req~0~0", "req~0~1", "req~0~2"]
    assert {p.group.key for p in pods if p.group} == {"team/req~"} and all(p.unschedulable for p in pods)
    assert all(is_synthetic(p.key) and request_of_synthetic(p.key) == "team/req" for p in pods)
    assert not is_synthetic("team/worker-0")


def test_atomic_request_scales_the_whole_gang_at_once() -> None:
    plan, updates = step(Cluster(), [request()])
    assert [(s.pool, s.nodes, len(s.pods)) for s in plan.scale_up] == [(A100_POOL.name, 4, 4)]
    conds = updates["team/req"]
    assert conds[ACCEPTED].status == TRUE
    assert (conds[PROVISIONED].status, conds[PROVISIONED].reason) == ("False", "ScaleUpInProgress")


def test_atomic_request_beyond_pool_max_fails_and_orders_nothing() -> None:
    plan, updates = step(Cluster(), [request(count=9)])  # the A100 pool's max_size is 8
    assert plan.scale_up == ()
    failed = updates["team/req"][FAILED]
    assert failed.status == TRUE and failed.reason in (ReasonCode.GANG_DOES_NOT_FIT, ReasonCode.LIMIT_REACHED)
    assert "max_size 8" in failed.message


def test_atomic_request_is_provisioned_only_on_usable_nodes() -> None:
    nodes = tuple(pool_node(A100_POOL, f"a100-{i}") for i in range(4))
    _, updates = step(Cluster(nodes=nodes), [request()])
    assert updates["team/req"][PROVISIONED].status == TRUE
    starting = tuple(replace(n, ready=False) for n in nodes)
    plan, updates = step(Cluster(nodes=starting), [request()])
    assert plan.scale_up == () and updates["team/req"][PROVISIONED].status == "False"


def test_provider_refusal_fails_the_request() -> None:
    prepared = prepare(Cluster(), [request()], POOLS, {}, NOW)
    plan = decide(Snapshot(cluster=prepared.cluster), SEED_POOLS, EngineState(), POLICY, NOW)
    updates = conditions_after([request()], prepared, plan,
                               Outcome(failed_pools={A100_POOL.name: "capacity-unavailable: stockout"}), NOW)
    failed = {c.type: c for c in updates[0].conditions}[FAILED]
    assert failed.reason == "ScaleUpFailed" and "stockout" in failed.message


def test_booking_holds_capacity_so_a_pending_pod_scales_up_elsewhere() -> None:
    node = pool_node(A100_POOL, "a100-0")
    other = replace(make_pod("other", cpu="4", memory="16Gi", gpus=8, tolerations=(GPU_TOL,), node_selector=A100),
                    unschedulable=True, created_s=NOW - 50)
    booked = request(count=1, conditions=(provisioned(NOW - 60),))
    prepared = prepare(Cluster(nodes=(node,), pods=(other,)), [booked], POOLS, {}, NOW)
    assert prepared.booked == {"team/req": 1}
    assert [p.node_name for p in prepared.cluster.pods if is_synthetic(p.key)] == ["a100-0"]
    plan = decide(Snapshot(cluster=prepared.cluster), SEED_POOLS, EngineState(), POLICY, NOW)
    assert [(s.pool, s.nodes) for s in plan.scale_up] == [(A100_POOL.name, 1)]  # not onto the booked node
    assert "a100-0" not in {v.node for v in plan.unneeded} and plan.scale_down == ()
    unbooked = decide(Snapshot(cluster=Cluster(nodes=(node,))), SEED_POOLS, EngineState(), POLICY, NOW)
    assert "a100-0" in {v.node for v in unbooked.unneeded}  # without the booking the empty node would go


def test_consumers_replace_their_synthetic_pods_and_never_scale_up() -> None:
    node = pool_node(A100_POOL, "a100-0")
    booked = request(count=2, conditions=(provisioned(NOW - 60),))
    consumer = replace(template(), name="worker-0", namespace="team", unschedulable=True, created_s=NOW - 10,
                       annotations={CONSUME_ANNOTATIONS[1]: "req"})
    bound = replace(template(), name="worker-1", namespace="team", node_name="a100-0",
                    annotations={CONSUME_ANNOTATIONS[0]: "req"})
    nodes = (node, pool_node(A100_POOL, "a100-1"))
    prepared = prepare(Cluster(nodes=nodes, pods=(consumer, bound)), [booked], POOLS, {}, NOW)
    assert prepared.hidden == ("team/worker-0",)
    assert prepared.booked == {"team/req": 1}  # one pod still to come; the bound one holds its own capacity
    plan = decide(Snapshot(cluster=prepared.cluster), SEED_POOLS, EngineState(), POLICY, NOW)
    assert plan.scale_up == ()


def test_booking_expires() -> None:
    booked = request(count=1, conditions=(provisioned(NOW - 601),))
    _, updates = step(Cluster(), [booked])
    assert updates["team/req"][BOOKING_EXPIRED].status == TRUE
    assert prepare(Cluster(), [booked], POOLS, {}, NOW).booked == {}


def test_check_capacity_answers_and_counts_earlier_bookings() -> None:
    node = pool_node(A100_POOL, "a100-0")
    first, second = (request(name, count=1, class_name=CHECK_CAPACITY) for name in ("a", "b"))
    plan, updates = step(Cluster(nodes=(node,)), [first, second])
    assert plan.scale_up == ()
    assert (updates["team/a"][PROVISIONED].status, updates["team/a"][PROVISIONED].reason) == (TRUE,
                                                                                              "CapacityIsFound")
    assert (updates["team/b"][PROVISIONED].status, updates["team/b"][PROVISIONED].reason) == ("False",
                                                                                              "CapacityIsNotFound")
    _, none = step(Cluster(), [request("c", count=1, class_name=CHECK_CAPACITY)])
    assert none["team/c"][PROVISIONED].status == "False"


def test_unchanged_conditions_are_not_rewritten_and_other_classes_are_ignored() -> None:
    accepted = Condition(type=ACCEPTED, status=TRUE, reason="Accepted",
                         message=f"gpuscale handles class {BEST_EFFORT_ATOMIC}")
    done = request(conditions=(accepted, provisioned(NOW - 10)))
    foreign = replace(request("x"), class_name="queued-provisioning.gke.io")
    _, updates = step(Cluster(), [done, foreign])
    assert updates == {}


def test_problem_is_written_instead_of_acting() -> None:
    problem = Condition(type=ACCEPTED, status="False", reason="PodTemplateNotFound", message="missing")
    broken = replace(request(), pod_sets=(), problem=problem)
    plan, updates = step(Cluster(), [broken])
    assert plan.scale_up == () and updates["team/req"][ACCEPTED].reason == "PodTemplateNotFound"


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
       nodes=st.integers(min_value=0, max_value=6), max_size=st.integers(min_value=1, max_value=8))
def test_a_request_is_scaled_whole_or_not_at_all(counts: list[int], nodes: int, max_size: int) -> None:
    """Property: for any mix of atomic requests, existing nodes and pool max, each request's synthetic pods are
    either all covered/ordered or all unplaceable — never part of a request — and the pool max holds."""
    pools = tuple(replace(p, max_size=max(max_size, nodes)) if p.name == A100_POOL.name else p for p in SEED_POOLS)
    requests = [request(f"r{i}", count=c) for i, c in enumerate(counts)]
    cluster = Cluster(nodes=tuple(pool_node(A100_POOL, f"a100-{i}") for i in range(nodes)))
    prepared = prepare(cluster, requests, {p.name: p for p in pools}, {}, NOW)
    plan = decide(Snapshot(cluster=prepared.cluster), pools, EngineState(), POLICY, NOW)
    served = {k for v in plan.covered for k in [v.pod]} | {k for s in plan.scale_up for k in s.pods}
    for r in requests:
        keys = {p.key for p in synthetic_pods(r)}
        assert keys <= served or not (keys & served), (r.key, keys & served)
    added = sum(s.nodes for s in plan.scale_up if s.pool == A100_POOL.name)
    assert nodes + added <= max(max_size, nodes)
    ordered = {k for s in plan.scale_up for k in s.pods}
    updates = {u.request: {c.type for c in u.conditions} for u in
               conditions_after(requests, prepared, plan, Outcome(), NOW)}
    for r in requests:
        if {p.key for p in synthetic_pods(r)} & ordered:
            assert FAILED not in updates.get(r.key, set())
