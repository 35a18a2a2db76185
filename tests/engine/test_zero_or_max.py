"""Zero-or-max pools (`NodePool.zero_or_max`, Cluster Autoscaler's ZeroOrMaxNodeScaling): a pool that grows straight
to its max size and goes only as a whole — scale-up, limits, warm capacity, gangs, scale-down, timeouts."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Plan, UpcomingNode
from gpuscale.engine.policy import Buffer, Limits, Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.model.node import Node
from gpuscale.model.pod import OwnerRef, Pod, PodPhase
from gpuscale.model.taints import Taint, TaintEffect
from tests.engine.test_scaleup import (
    A100,
    GPU_TAINT,
    NOW,
    SEED_POOLS,
    codes,
    gang,
    pool,
    pool_node,
    run,
    scale_ups,
    training_pod,
)

SLICE = replace(pool("gpu-slice", cpu="95", memory="630Gi", gpus=8, labels=A100, price=29.39, max_size=4),
                zero_or_max=True)
"""Four 8-GPU hosts that only work whole (one NVLink domain)."""
POOLS = (SEED_POOLS[0], SLICE)
LONG_AGO = NOW - 3_600.0


def slice_node(name: str, *, unneeded_since: float | None = LONG_AGO, **changes: object) -> Node:
    taints = (GPU_TAINT,) if unneeded_since is None else (GPU_TAINT, Taint(
        key=DELETION_CANDIDATE_TAINT, value=str(int(unneeded_since)), effect=TaintEffect.PREFER_NO_SCHEDULE))
    return pool_node(SLICE, name, taints=taints, created_s=NOW - 7_200, **changes)


def running(name: str, on: str, gpus: int = 8, owner: str = "Job") -> Pod:
    return replace(training_pod(name, gpus=gpus), node_name=on, phase=PodPhase.RUNNING,
                   owner=OwnerRef(kind=owner, name=f"{name}-owner"))


def removed(plan: Plan) -> list[str]:
    return sorted(r.node for r in plan.scale_down)


def reasons_of(plan: Plan, node: str) -> set[ReasonCode]:
    return {r.code for v in (*plan.blocked, *plan.unneeded) if v.node == node for r in v.reasons}


# --------------------------------------------------------------------------------------------------------- scale-up
def test_one_pod_orders_the_whole_pool() -> None:
    plan = run((training_pod(),), pools=POOLS)
    assert scale_ups(plan) == {"gpu-slice": 4}
    assert plan.scale_up[0].pods == ("default/train-0",)


def test_a_pool_partly_there_is_topped_up_to_its_max() -> None:
    full = tuple(running(f"busy-{i}", f"s{i}") for i in range(2))
    plan = run((*full, training_pod()), nodes=(slice_node("s0", unneeded_since=None),
                                               slice_node("s1", unneeded_since=None)), pools=POOLS)
    assert scale_ups(plan) == {"gpu-slice": 2}


def test_nodes_still_coming_count_toward_the_step() -> None:
    upcoming = (UpcomingNode(pool="gpu-slice", request_id="r1", requested_s=NOW - 30),)
    pods = (training_pod("a", gpus=8), training_pod("b", gpus=8))  # one fits the node coming, one needs more
    assert scale_ups(run(pods, pools=POOLS, upcoming=upcoming)) == {"gpu-slice": 3}


def test_a_limit_that_allows_less_than_the_step_orders_nothing() -> None:
    policy = Policy(limits=Limits(max_nodes_total=3))
    plan = run((training_pod(),), pools=POOLS, policy=policy)
    assert plan.scale_up == ()
    assert codes(plan.unplaceable) == {ReasonCode.LIMIT_REACHED}
    assert "zero-or-max step of 4 node(s) exceeds limit max_nodes_total 3" in plan.unplaceable[0].reasons[0].message


def test_an_ordinary_pool_still_takes_what_the_limit_leaves() -> None:
    ordinary = replace(SLICE, zero_or_max=False)
    plan = run(tuple(training_pod(f"t{i}", gpus=8) for i in range(4)), pools=(SEED_POOLS[0], ordinary),
               policy=Policy(limits=Limits(max_nodes_total=3)))
    assert scale_ups(plan) == {"gpu-slice": 3}


def test_a_pool_at_its_max_takes_nothing_more() -> None:
    nodes = tuple(slice_node(f"s{i}", unneeded_since=None) for i in range(4))
    pods = tuple(running(f"busy-{i}", f"s{i}") for i in range(4))
    plan = run((*pods, training_pod()), nodes=nodes, pools=POOLS)
    assert plan.scale_up == () and codes(plan.unplaceable) == {ReasonCode.LIMIT_REACHED}


def test_a_gang_orders_the_whole_pool_even_when_it_needs_fewer_nodes() -> None:
    plan = run(gang(2), pools=POOLS)
    assert scale_ups(plan) == {"gpu-slice": 4}
    assert plan.scale_up[0].pods == ("default/worker-0", "default/worker-1")


def test_warm_capacity_in_a_zero_or_max_pool_orders_the_whole_pool() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-slice", idle_nodes=1),), scale_down_enabled=False)
    plan = run((), pools=POOLS, policy=policy)
    assert scale_ups(plan) == {"gpu-slice": 4}
    assert {r.code for r in plan.scale_up[0].reasons} == {ReasonCode.BUFFER, ReasonCode.SCALE_UP}


def test_warm_capacity_does_not_count_nodes_an_estimate_left_unordered_as_idle() -> None:
    """Four 1-GPU pods pack onto one 8-GPU node: the estimate's three other template rows are not ordered, so the
    buffer's idle node is still missing (it counted them as idle before)."""
    policy = Policy(buffers=(Buffer(pool="gpu-training-a100", idle_nodes=1),), scale_down_enabled=False)
    plan = run(tuple(training_pod(f"p{i}") for i in range(4)), policy=policy)
    assert scale_ups(plan) == {"gpu-training-a100": 2}
    assert {r.code for r in plan.scale_up[0].reasons} == {ReasonCode.SCALE_UP, ReasonCode.BUFFER}


# ------------------------------------------------------------------------------------------------------- scale-down
def test_an_idle_pool_goes_whole() -> None:
    plan = run((), nodes=tuple(slice_node(f"s{i}") for i in range(4)), pools=POOLS)
    assert removed(plan) == ["s0", "s1", "s2", "s3"]
    assert all(ReasonCode.ZERO_OR_MAX in {r.code for r in rm.reasons} for rm in plan.scale_down)


def test_one_busy_node_keeps_the_whole_pool() -> None:
    nodes = tuple(slice_node(f"s{i}") for i in range(4))
    plan = run((running("train", "s3"),), nodes=nodes, pools=POOLS)
    assert removed(plan) == []
    for name in ("s0", "s1", "s2"):
        assert ReasonCode.ATOMIC_SCALE_DOWN in reasons_of(plan, name)


def test_one_node_not_unneeded_long_enough_holds_the_others() -> None:
    nodes = (*(slice_node(f"s{i}") for i in range(3)), slice_node("s3", unneeded_since=NOW - 60))
    plan = run((), nodes=nodes, pools=POOLS)
    assert removed(plan) == []
    assert ReasonCode.UNNEEDED_TOO_SHORT in reasons_of(plan, "s3")
    assert ReasonCode.ZERO_OR_MAX in reasons_of(plan, "s0")


def test_a_min_size_keeps_a_zero_or_max_pool() -> None:
    pools = (SEED_POOLS[0], replace(SLICE, min_size=1))
    plan = run((), nodes=tuple(slice_node(f"s{i}") for i in range(4)), pools=pools)
    assert removed(plan) == [] and ReasonCode.POOL_AT_MIN in reasons_of(plan, "s0")


def test_the_first_whole_pool_may_exceed_the_slots_and_the_next_waits() -> None:
    other = replace(SLICE, name="gpu-slice-b")
    nodes = (*(slice_node(f"s{i}") for i in range(4)),
             *(replace(pool_node(other, f"t{i}", created_s=NOW - 7_200), taints=slice_node("x").taints)
               for i in range(4)))
    policy = Policy(max_empty_bulk_delete=2)
    plan = run((), nodes=nodes, pools=(*POOLS, other), policy=policy)
    gone = removed(plan)
    assert gone in (["s0", "s1", "s2", "s3"], ["t0", "t1", "t2", "t3"])
    kept = "t0" if gone[0] == "s0" else "s0"
    assert ReasonCode.PARALLELISM in reasons_of(plan, kept)


def test_a_zero_or_max_pool_leaves_ordinary_pools_alone() -> None:
    cpu = SEED_POOLS[0]
    nodes = (*(slice_node(f"s{i}") for i in range(4)), pool_node(cpu, "cpu-0"), pool_node(cpu, "cpu-1"))
    plan = run((running("train", "s0"),), nodes=nodes, pools=POOLS, policy=Policy(scale_down_unneeded_time_s=0))
    assert removed(plan) == ["cpu-0", "cpu-1"]


def test_pods_of_a_whole_pool_move_to_other_pools() -> None:
    ordinary = replace(SLICE, name="gpu-training-a100", zero_or_max=False)
    a100 = pool_node(ordinary, "a100-0", created_s=NOW - 7_200)
    nodes = (*(slice_node(f"s{i}") for i in range(4)), a100)
    pods = (replace(running("light", "s0", gpus=1, owner="ReplicaSet")), running("holder", "a100-0", gpus=1))
    plan = run(pods, nodes=nodes, pools=(*POOLS, ordinary), policy=Policy(scale_down_gpu_unneeded_time_s=0))
    assert removed(plan) == ["s0", "s1", "s2", "s3"]
    assert next(r for r in plan.scale_down if r.node == "s0").evict == ("default/light",)


# --------------------------------------------------------------------------------------------------------- timeouts
def test_a_timed_out_request_rolls_back_the_whole_scale_up() -> None:
    upcoming = tuple(UpcomingNode(pool="gpu-slice", request_id=f"r{i}", requested_s=NOW - (2_000 if i == 0 else 600))
                     for i in range(3))
    starting = replace(slice_node("s-new", unneeded_since=None), ready=False, created_s=NOW - 300)
    plan = run((), nodes=(starting,), pools=POOLS, upcoming=upcoming)
    assert sorted(t.request_id or t.node or "" for t in plan.timed_out) == ["r0", "r1", "r2", "s-new"]
    assert "rolled back" in next(t for t in plan.timed_out if t.request_id == "r1").reasons[0].message


def test_a_timed_out_request_of_an_ordinary_pool_goes_alone() -> None:
    ordinary = replace(SLICE, zero_or_max=False)
    upcoming = tuple(UpcomingNode(pool="gpu-slice", request_id=f"r{i}", requested_s=NOW - (2_000 if i == 0 else 600))
                     for i in range(3))
    plan = run((), pools=(SEED_POOLS[0], ordinary), upcoming=upcoming)
    assert [t.request_id for t in plan.timed_out] == ["r0"]


def test_usable_nodes_are_not_rolled_back() -> None:
    upcoming = (UpcomingNode(pool="gpu-slice", request_id="r0", requested_s=NOW - 2_000),)
    plan = run((), nodes=(slice_node("s0", unneeded_since=None),), pools=POOLS, upcoming=upcoming,
               policy=Policy(scale_down_enabled=False))
    assert [t.request_id for t in plan.timed_out] == ["r0"]
