"""A pool's own scale-down options (CA's per-node-group autoscaling options) override the policy's for its nodes only:
utilization thresholds (non-GPU and GPU), unneeded time (which replaces the policy's GPU unneeded time too) and unready
time. The decision memo gives the same plans as a fresh decision, also as options change between decisions."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from tests.engine.test_scaledown import LONG_AGO, NOW, busy, codes, node, pod, pools_for, removed, run


def test_a_pool_threshold_makes_its_node_underutilized_and_no_other() -> None:
    nodes = [node("a", pool="tight"), node("b", pool="loose"), node("c", cpu="32", pool="spare")]
    pods = [pod("x", "a", cpu="3"), pod("y", "b", cpu="3"), pod("w", "c", cpu="17")]  # 75 %, 75 %, 53 %
    pools = pools_for(nodes)
    assert removed(run(nodes, pods, pools=pools)) == []  # the policy's 0.5
    pools["tight"] = replace(pools["tight"], scale_down_utilization_threshold=0.8)
    result = run(nodes, pods, pools=pools, policy=Policy(max_drain_parallelism=5))
    assert removed(result) == ["a"]  # its pod moves to c; b, at the same 75 %, stays
    reason = next(r for r in result.removals if r.node == "a").reasons[0]
    assert reason.numbers["threshold"] == 0.8 and "below the 80% threshold" in reason.message


def test_a_pool_threshold_can_keep_every_node_of_it() -> None:
    nodes = [node("a", pool="keep"), node("b")]
    pools = pools_for(nodes)
    pools["keep"] = replace(pools["keep"], scale_down_utilization_threshold=0.0)  # CA's "0": never underutilized
    assert removed(run(nodes, [busy("z", "b")], pools=pools)) == []
    assert removed(run(nodes, [busy("z", "b")])) == ["a"]


def test_a_pool_with_scale_down_disabled_keeps_even_its_empty_nodes_and_says_why() -> None:
    nodes = [node("a", pool="reserved"), node("b"), node("c")]
    pools = pools_for(nodes)
    pools["reserved"] = replace(pools["reserved"], scale_down_disabled="reserved capacity")
    result = run(nodes, [busy("z", "b")], pools=pools)
    assert removed(result) == ["c"]
    assert codes(result.blocked, "a") == [ReasonCode.SCALE_DOWN_DISABLED]
    assert "pool reserved: reserved capacity" in result.blocked[0].reasons[0].message


def test_gpu_threshold_of_a_pool_applies_to_its_gpu_nodes() -> None:
    nodes = [node("g", gpus=4, pool="gpu"), node("h", gpus=4, pool="gpu2")]
    pods = [pod("x", "g", gpus=3), pod("y", "h", gpus=3)]  # 75 % of the GPUs each
    pools = pools_for(nodes)
    pools["gpu"] = replace(pools["gpu"], scale_down_gpu_utilization_threshold=0.9,
                           scale_down_utilization_threshold=0.1)  # the non-GPU one is not read for a GPU node
    result = run(nodes, pods, pools=pools)
    assert codes(result.blocked, "g")[-1].name == "UNDERUTILIZED"  # underutilized, but its pods fit nowhere
    assert all(v.node != "h" for v in (*result.blocked, *result.unneeded))


def test_a_pool_unneeded_time_replaces_the_policy_times() -> None:
    nodes = [node("a", pool="quick"), node("g", gpus=1, pool="gpu"), node("b")]
    pools = pools_for(nodes)
    pools["quick"] = replace(pools["quick"], scale_down_unneeded_time_s=60.0)
    pools["gpu"] = replace(pools["gpu"], scale_down_unneeded_time_s=3600.0)  # also over the policy's GPU time
    since = {"a": NOW - 61, "g": NOW - 1000}
    result = run(nodes, [busy("z", "b")], pools=pools, unneeded_since=since, policy=Policy(max_empty_bulk_delete=5))
    assert removed(result) == ["a"]  # the policy's 600 s would keep a; its GPU 420 s would remove g
    waiting = {v.node: v.reasons[0].numbers for v in result.unneeded}
    assert waiting["g"]["required_s"] == 3600.0 and waiting["g"]["remaining_s"] == 2600.0


def test_a_pool_unready_time_applies_to_its_not_ready_nodes() -> None:
    nodes = [node("a", pool="flaky", ready=False), node("b")]
    pools = pools_for(nodes)
    pools["flaky"] = replace(pools["flaky"], scale_down_unready_time_s=300.0, scale_down_unneeded_time_s=9999.0)
    assert removed(run(nodes, [busy("z", "b")], pools=pools, unneeded_since={"a": NOW - 300})) == ["a"]
    assert removed(run(nodes, [busy("z", "b")], unneeded_since={"a": NOW - 300})) == []  # the policy's 1200 s


def test_the_memo_follows_pool_options_as_they_change() -> None:
    """Decisions with the loop's memo equal fresh ones while a pool's threshold and times change between them."""
    nodes = tuple(node(f"n{i}", pool="p" if i % 2 else "q") for i in range(6))
    pods = tuple(pod(f"x{i}", f"n{i}", cpu=str(1 + i % 3)) for i in range(6))
    base = [NodePool(name="p", allocatable=nodes[0].allocatable), NodePool(name="q", allocatable=nodes[0].allocatable)]
    snapshot = Snapshot(cluster=Cluster(nodes=nodes, pods=pods), node_pools={n.name: n.labels["gpuscale.io/pool"]
                                                                            for n in nodes})
    variants = [base,
                [replace(base[0], scale_down_utilization_threshold=0.9), base[1]],
                [replace(base[0], scale_down_utilization_threshold=0.9), replace(base[1],
                                                                                scale_down_unneeded_time_s=0.0)],
                [base[0], replace(base[1], scale_down_utilization_threshold=0.0)],
                base]
    memo = IncrementalStore()
    for k, pools in enumerate(variants):
        now = LONG_AGO + 10 * k
        kept = decide(snapshot, pools, EngineState(), Policy(), now, store=memo)
        assert kept == decide(snapshot, pools, EngineState(), Policy(), now), k


def test_pool_options_leave_other_pools_resources_alone() -> None:
    pool = NodePool(name="p", allocatable=Resources.of(cpu=1000))
    assert not pool.own_utilization()
    assert replace(pool, scale_down_gpu_utilization_threshold=0.2).own_utilization()
    assert not replace(pool, scale_down_unneeded_time_s=5.0).own_utilization()


def test_ignore_daemonsets_utilization_leaves_them_out_of_utilization_only() -> None:
    """CA's `--ignore-daemonsets-utilization`: a node whose DaemonSet pods alone keep it above the threshold becomes a
    candidate; the denominator stays its allocatable, and pods of other owners still count."""
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("ds-a", "a", cpu="3", owner="DaemonSet"), busy("z", "b"),
            pod("ds-c", "c", cpu="1", owner="DaemonSet"), pod("app-c", "c", cpu="2")]
    assert removed(run(nodes, pods)) == []  # 75 % each
    result = run(nodes, pods, policy=Policy(ignore_daemonsets_utilization=True, max_drain_parallelism=5))
    assert removed(result) == ["a"]  # a: 0 % without its DaemonSet pod; c: 50 % (its app pod), not below
    assert result.removals[0].reasons[0].numbers["utilization"] == 0.0
    assert all(v.node != "c" for v in (*result.blocked, *result.unneeded))


def test_a_pool_can_ignore_daemonsets_or_not_whatever_the_policy() -> None:
    nodes = [node("a", pool="lean"), node("b", pool="plain"), node("c", cpu="32", pool="room")]
    pods = [pod("ds-a", "a", cpu="3", owner="DaemonSet"), pod("ds-b", "b", cpu="3", owner="DaemonSet"),
            pod("w", "c", cpu="17")]
    pools = pools_for(nodes)
    pools["lean"] = replace(pools["lean"], ignore_daemonsets_utilization=True)
    assert removed(run(nodes, pods, pools=pools, policy=Policy(max_empty_bulk_delete=5))) == ["a"]
    pools["lean"] = replace(pools["lean"], ignore_daemonsets_utilization=False)
    ignoring = Policy(ignore_daemonsets_utilization=True, max_empty_bulk_delete=5)
    assert removed(run(nodes, pods, pools=pools, policy=ignoring)) == ["b"]  # the pool's "no" beats the policy


def test_a_pools_own_startup_bound_keeps_its_slow_node_starting_not_unready() -> None:
    """A not-Ready node 16 minutes old of a pool with a 20-minute provisioning time is still starting, as the time-outs
    see it, so it neither halts scale-down as unready nor is a candidate; under the policy's 15 minutes it would be."""
    slow = node("s", pool="slow", ready=False)
    slow = replace(slow, created_s=NOW - 16 * 60)
    nodes = [slow, node("a"), node("b")]
    pools = pools_for(nodes)
    strict = Policy(ok_total_unready_count=0, max_total_unready_percentage=0.0)
    halted = run(nodes, [busy("z", "b")], pools=pools, policy=strict)
    assert removed(halted) == [] and codes(halted.unneeded, "a")[0] is ReasonCode.TOO_MANY_UNREADY
    pools["slow"] = replace(pools["slow"], max_node_provision_time_s=20 * 60.0)
    result = run(nodes, [busy("z", "b")], pools=pools, policy=strict)
    assert removed(result) == ["a"]  # not halted; the starting node is no candidate
