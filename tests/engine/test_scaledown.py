"""Scale-down planning, one test per rule (engine/scaledown.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpuscale.config import preset_policy
from gpuscale.engine.drain import SAFE_TO_EVICT
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT
from gpuscale.engine.policy import CooldownScope, Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaledown import ScaleDownResult, SimulationCap, plan_scale_down, unneeded_since_from_taints
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import HostPort, OwnerRef, Pod, PodPhase, SchedulingConstraints
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, Resources
from gpuscale.model.selectors import LabelSelector
from gpuscale.model.taints import Taint, TaintEffect
from tests.builders import make_node, make_pod, pod_term

NOW = 10_000.0
LONG_AGO = NOW - 3_600.0


def node(name: str, *, cpu: str = "4", memory: str = "16Gi", gpus: int = 0, pool: str = "cpu",
         extra: Mapping[str, int] | None = None, **fields: object) -> Node:
    base = make_node(name, cpu=cpu, memory=memory, gpus=gpus, labels={POOL_LABEL: pool}, extra=extra)
    return replace(base, **fields)  # type: ignore[arg-type]


def pod(name: str, on: str, *, cpu: str = "100m", memory: str = "128Mi", gpus: int = 0, owner: str = "ReplicaSet",
        labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
        **fields: object) -> Pod:
    base = make_pod(name, cpu=cpu, memory=memory, gpus=gpus, node=on, phase=PodPhase.RUNNING, labels=labels)
    return replace(base, owner=OwnerRef(kind=owner, name=f"{name}-owner"), annotations=dict(annotations or {}),
                   **fields)  # type: ignore[arg-type]


def pools_for(nodes: Sequence[Node], min_size: int = 0) -> dict[str, NodePool]:
    pools: dict[str, NodePool] = {}
    for n in nodes:
        name = n.labels.get(POOL_LABEL)
        if name is not None:
            pools.setdefault(name, NodePool(name=name, allocatable=n.allocatable, min_size=min_size))
    return pools


def run(nodes: Sequence[Node], pods: Sequence[Pod] = (), *, policy: Policy | None = None,
        state: EngineState | None = None, unneeded_since: Mapping[str, float] | None = None,
        pdbs: Sequence[PodDisruptionBudget] = (), pools: Mapping[str, NodePool] | None = None,
        table: WhatIf | None = None, cap: SimulationCap | None = None, now: float = NOW) -> ScaleDownResult:
    by_node: dict[str, list[Pod]] = {n.name: [] for n in nodes}
    for p in pods:
        assert p.node_name is not None
        by_node[p.node_name].append(p)
    return plan_scale_down(
        nodes=nodes, table=table or whatif_of(nodes, [n.allocatable for n in nodes], pods),
        pods_by_node=by_node, pools=pools if pools is not None else pools_for(nodes),
        pool_of={n.name: n.labels[POOL_LABEL] for n in nodes if POOL_LABEL in n.labels},
        pdbs=pdbs, policy=policy or Policy(), state=state or EngineState(), now=now,
        unneeded_since=unneeded_since if unneeded_since is not None else {n.name: LONG_AGO for n in nodes},
        cap=cap)


def removed(result: ScaleDownResult) -> list[str]:
    return [r.node for r in result.removals]


def codes(verdicts: Sequence[object], name: str) -> list[ReasonCode]:
    for v in verdicts:
        if v.node == name:  # type: ignore[attr-defined]
            return [r.code for r in v.reasons]  # type: ignore[attr-defined]
    raise AssertionError(f"{name} not in {verdicts}")


def busy(name: str, on: str, share: str = "3") -> Pod:
    """A pod keeping its node above the 50% threshold (3 of 4 cores)."""
    return pod(name, on, cpu=share)


# ------------------------------------------------------------------------------------------------ basic removals


def test_empty_node_is_removed_with_reason_empty() -> None:
    result = run([node("a"), node("b")], [busy("x", "b")])
    assert removed(result) == ["a"]
    assert result.removals[0].reasons[0].code is ReasonCode.EMPTY
    assert result.removals[0].evict == ()
    assert result.removals[0].pool == "cpu"


def test_node_above_threshold_is_kept_and_not_reported() -> None:
    result = run([node("a")], [pod("x", "a", cpu="2")])  # exactly 50%: not strictly below
    assert removed(result) == [] and result.blocked == () and result.unneeded == ()


def test_underutilized_node_is_drained_when_its_pods_fit_elsewhere() -> None:
    result = run([node("a"), node("b")], [pod("y", "a", cpu="500m"), pod("x", "a", cpu="500m"), busy("z", "b", "2")])
    assert removed(result) == ["a"]
    removal = result.removals[0]
    assert removal.evict == ("default/x", "default/y")
    assert removal.reasons[0].code is ReasonCode.UNDERUTILIZED
    assert removal.reasons[0].numbers["utilization"] == 0.25
    assert removal.reasons[0].numbers["pods_to_move"] == 2


def test_no_place_to_move_names_the_pod() -> None:
    result = run([node("a"), node("b")], [pod("big", "a", cpu="1500m"), busy("z", "b")])
    assert removed(result) == []
    assert codes(result.blocked, "a")[0] is ReasonCode.NO_PLACE_TO_MOVE
    assert "default/big" in result.blocked[0].reasons[0].message


def test_drain_blocker_is_reported_with_utilization() -> None:
    result = run([node("a"), node("b")], [pod("x", "a", annotations={SAFE_TO_EVICT: "false"})])
    assert codes(result.blocked, "a") == [ReasonCode.NOT_SAFE_TO_EVICT, ReasonCode.UNDERUTILIZED]


def test_daemonset_pods_count_toward_utilization_but_do_not_move() -> None:
    ds = pod("ds", "a", cpu="1", owner="DaemonSet")
    result = run([node("a"), node("b")], [ds, busy("z", "b")])
    assert removed(result) == ["a"] and result.removals[0].reasons[0].code is ReasonCode.EMPTY
    assert result.removals[0].reasons[0].numbers["utilization"] == 0.25
    heavy = run([node("a"), node("b")], [pod("ds", "a", cpu="3", owner="DaemonSet"), busy("z", "b")])
    assert "a" not in removed(heavy)


def test_expendable_pods_are_evicted_but_need_no_room() -> None:
    result = run([node("a"), node("b")], [pod("x", "a", priority=-20), busy("z", "b", "3500m")])
    assert removed(result) == ["a"]
    assert result.removals[0].reasons[0].code is ReasonCode.EMPTY
    assert result.removals[0].evict == ("default/x",)


# --------------------------------------------------------------------------------------------------- utilization


def test_gpu_node_utilization_counts_gpus_only() -> None:
    gpu = node("g", cpu="10", gpus=4, pool="gpu")
    other = node("h", cpu="20", gpus=4, pool="gpu")
    keep_h = pod("h-user", "h", cpu="100m", gpus=3)
    result = run([gpu, other], [pod("cpu-heavy", "g", cpu="9"), keep_h])  # 90% CPU, 0 GPUs
    assert removed(result) == ["g"]
    assert result.removals[0].reasons[0].numbers["gpu"] == 0.0
    held = run([gpu, other], [pod("gpu-user", "g", cpu="100m", gpus=4), keep_h])
    assert "g" not in removed(held) and all(v.node != "g" for v in held.blocked)


def test_gpu_milli_counts_as_thousandths_of_a_gpu() -> None:
    gpu = node("g", gpus=4, pool="gpu", extra={GPU_MILLI: 4000})
    spare = node("h", gpus=4, pool="gpu", extra={GPU_MILLI: 4000})
    keep_h = pod("h-user", "h", cpu="100m", gpus=2)

    def share(milli: int, name: str) -> Pod:
        base = pod(name, "g", cpu="100m")
        return replace(base, requests=base.requests + Resources.of({GPU_MILLI: milli}))

    low = run([gpu, spare], [share(750, "a"), share(750, "b"), keep_h])  # 1.5 of 4 GPUs
    assert removed(low) == ["g"] and low.removals[0].reasons[0].numbers["gpu"] == 0.375
    high = run([gpu, spare], [share(750, "a"), share(750, "b"), share(500, "c"), pod("whole", "g", gpus=1),
                              keep_h])  # 3 of 4
    assert "g" not in removed(high)


def test_gpu_pool_node_without_gpus_in_allocatable_uses_gpu_threshold() -> None:
    pools = {"gpu": NodePool(name="gpu", allocatable=Resources.of({"nvidia.com/gpu": 1}))}
    # Allocatable without GPUs means the node is still waiting for its device plugin: never a candidate.
    result = run([node("g", pool="gpu")], pools=pools)
    assert result.removals == () and result.mark_unneeded == {}


def test_thresholds_come_from_the_policy() -> None:
    nodes = [node("a"), node("b", cpu="32")]
    pods = [pod("x", "a", cpu="3"), pod("y", "b", cpu="28")]  # 75% and 87.5%
    assert removed(run(nodes, pods)) == []
    assert removed(run(nodes, pods, policy=Policy(scale_down_utilization_threshold=0.8))) == ["a"]


# ------------------------------------------------------------------------------------------------ unneeded clock


def test_new_unneeded_node_is_marked_and_waits() -> None:
    result = run([node("a"), node("b")], [busy("z", "b")], unneeded_since={})
    assert result.mark_unneeded == {"a": NOW}
    assert removed(result) == []
    verdict = result.unneeded[0]
    assert verdict.node == "a" and verdict.reasons[0].code is ReasonCode.UNNEEDED_TOO_SHORT
    assert verdict.reasons[0].numbers["remaining_s"] == 600.0


def test_node_unneeded_long_enough_is_removed_and_keeps_its_mark() -> None:
    result = run([node("a"), node("b")], [busy("z", "b")], unneeded_since={"a": NOW - 600})
    assert removed(result) == ["a"] and result.mark_unneeded == {}
    early = run([node("a"), node("b")], [busy("z", "b")], unneeded_since={"a": NOW - 599})
    assert removed(early) == [] and early.unneeded[0].reasons[0].numbers["remaining_s"] == 1.0


def test_node_needed_again_is_cleared() -> None:
    result = run([node("a"), node("b")], [busy("x", "a"), busy("z", "b")], unneeded_since={"a": LONG_AGO,
                                                                                         "gone": LONG_AGO})
    assert result.clear_unneeded == ("a",)  # a node that no longer exists has no taint to clear


def test_a_pod_starting_on_an_unneeded_node_restarts_its_clock() -> None:
    """A Job pod that started on a node unneeded for 9 minutes: the node is still unneeded (the small pod could
    move), but its 10 minutes count again from now, so the pod is not evicted a minute after it started."""
    fresh = pod("job", on="a", owner="Job", started_s=NOW - 30)
    result = run([node("a"), node("b")], [fresh, busy("z", "b")], unneeded_since={"a": NOW - 540})
    assert removed(result) == [] and result.mark_unneeded == {"a": NOW}
    assert result.unneeded[0].reasons[0].numbers["remaining_s"] == 600.0
    earlier = pod("job", on="a", owner="Job", started_s=NOW - 600)  # running before the clock started: it runs on
    result = run([node("a"), node("b")], [earlier, busy("z", "b")], unneeded_since={"a": NOW - 540})
    assert result.mark_unneeded == {} and result.unneeded[0].reasons[0].numbers["remaining_s"] == 60.0


def test_ca_keeps_the_clock_when_a_pod_starts() -> None:
    fresh = pod("job", on="a", owner="Job", started_s=NOW - 30)
    result = run([node("a"), node("b")], [fresh, busy("z", "b")], unneeded_since={"a": NOW - 600},
                 policy=Policy(unneeded_restarts_on_pod_start=False))
    assert removed(result) == ["a"] and result.mark_unneeded == {}


def test_a_daemonset_pod_starting_does_not_restart_the_clock() -> None:
    agent = pod("agent", on="a", owner="DaemonSet", started_s=NOW - 30)
    result = run([node("a"), node("b")], [agent, busy("z", "b")], unneeded_since={"a": NOW - 600})
    assert removed(result) == ["a"] and result.mark_unneeded == {}


def test_a_restarted_clock_of_a_node_needed_again_is_cleared() -> None:
    heavy = pod("heavy", on="a", cpu="3", started_s=NOW - 5)
    result = run([node("a"), node("b")], [heavy, busy("z", "b")], unneeded_since={"a": NOW - 300})
    assert result.clear_unneeded == ("a",) and result.mark_unneeded == {}


def test_unneeded_since_from_taints() -> None:
    def tainted(name: str, value: str) -> Node:
        return node(name, taints=(Taint(key=DELETION_CANDIDATE_TAINT, value=value,
                                        effect=TaintEffect.PREFER_NO_SCHEDULE),))

    nodes = [tainted("a", "1700000000"), tainted("b", "garbage"), tainted("c", "-5"), node("d")]
    assert unneeded_since_from_taints(nodes) == {"a": 1_700_000_000.0}


def test_unready_node_is_removed_after_the_unready_time() -> None:
    sick = node("a", ready=False)
    fresh = run([sick, node("b")], [busy("z", "b")], unneeded_since={"a": NOW - 700})
    assert removed(fresh) == []  # 700 s is past the unneeded time but not the 1200 s unready time
    assert fresh.unneeded[0].reasons[0].numbers["required_s"] == 1200.0
    old = run([sick, node("b")], [busy("z", "b")], unneeded_since={"a": NOW - 1200})
    assert removed(old) == ["a"]


def test_deleting_node_is_neither_candidate_nor_destination() -> None:
    result = run([node("a", deleting=True), node("b")], [pod("x", "b", cpu="1")], unneeded_since={"a": LONG_AGO})
    assert removed(result) == []
    assert codes(result.blocked, "b")[0] is ReasonCode.NO_PLACE_TO_MOVE
    assert result.clear_unneeded == ()


# ------------------------------------------------------------------------------------------------- limits, order


def test_pool_min_size_is_respected() -> None:
    nodes = [node("a"), node("b"), node("c")]
    result = run(nodes, pools=pools_for(nodes, min_size=2))
    assert removed(result) == ["a"]
    assert codes(result.blocked, "b")[0] is ReasonCode.POOL_AT_MIN
    assert codes(result.blocked, "c")[0] is ReasonCode.POOL_AT_MIN
    assert set(result.mark_unneeded) == set()  # still unneeded: the clock is kept, not cleared
    assert result.clear_unneeded == ()


def test_pool_min_size_counts_deleting_nodes_out() -> None:
    nodes = [node("a"), node("b"), node("c", deleting=True)]
    result = run(nodes, pools=pools_for(nodes, min_size=1))
    assert removed(result) == ["a"]


def test_empty_nodes_first_up_to_the_bulk_limit() -> None:
    empties = [node(f"e{i:02}") for i in range(12)]
    nodes = [*empties, node("low"), node("sink")]
    pods = [pod("x", "low", cpu="500m"), busy("s", "sink", "2")]
    result = run(nodes, pods)
    assert removed(result) == [f"e{i:02}" for i in range(10)] + ["low"]
    assert codes(result.unneeded, "e10")[0] is ReasonCode.PARALLELISM
    assert codes(result.unneeded, "e11")[0] is ReasonCode.PARALLELISM


def test_one_drain_at_a_time_least_utilized_first() -> None:
    nodes = [node("a"), node("b"), node("c"), node("sink", cpu="16")]
    pods = [pod("pa", "a", cpu="1500m"), pod("pb", "b", cpu="500m"), pod("pc", "c", cpu="1"),
            busy("s", "sink", "9")]
    result = run(nodes, pods)
    assert removed(result) == ["b"]
    assert codes(result.unneeded, "a")[0] is ReasonCode.PARALLELISM
    assert codes(result.unneeded, "c")[0] is ReasonCode.PARALLELISM


def test_drain_tie_break_prefers_fewer_pods_then_name() -> None:
    nodes = [node("a"), node("b"), node("sink", cpu="16")]
    pods = [pod("a1", "a", cpu="500m"), pod("a2", "a", cpu="500m"), pod("b1", "b", cpu="1"), busy("s", "sink", "9")]
    assert removed(run(nodes, pods)) == ["b"]


def test_moved_pods_consume_capacity_for_later_candidates() -> None:
    nodes = [node("a"), node("b"), node("sink")]
    pods = [pod("pa", "a", cpu="1"), pod("pb", "b", cpu="1500m"), busy("s", "sink", "2")]
    result = run(nodes, pods, policy=Policy(max_drain_parallelism=5))
    # Room for one of them on the sink (2 cores free), not for both.
    assert removed(result) == ["a"]
    assert codes(result.blocked, "b")[0] is ReasonCode.NO_PLACE_TO_MOVE


def test_pods_that_landed_on_a_later_candidate_move_again() -> None:
    nodes = [node("x"), node("y"), node("sink")]
    pods = [pod("px", "x", cpu="1200m"),  # x: 30%, its pod fits only on y
            pod("py", "y", cpu="900m"), pod("ds", "y", cpu="800m", owner="DaemonSet"),  # y: 42.5%
            busy("s", "sink", "3")]  # 1 core free: room for py, not for px
    result = run(nodes, pods, policy=Policy(max_drain_parallelism=5))
    # Removing y too would strand px, which the simulation parked on y.
    assert removed(result) == ["x"]
    assert codes(result.blocked, "y")[0] is ReasonCode.NO_PLACE_TO_MOVE
    assert "default/px" in result.blocked[0].reasons[0].message


def test_destinations_prefer_nodes_that_stay() -> None:
    nodes = [node("a"), node("b"), node("z")]
    pods = [pod("pa", "a", cpu="500m"), pod("pb", "b", cpu="1"), busy("s", "z", "2")]
    result = run(nodes, pods, policy=Policy(max_drain_parallelism=5))
    # a's pod goes to z (not a candidate), so b stays removable too.
    assert removed(result) == ["a", "b"]


def test_upcoming_rows_in_the_table_are_not_destinations() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("x", "a", cpu="1"), busy("z", "b", "3500m")]
    template = node("template-cpu-0")
    table = whatif_of([*nodes, template], [n.allocatable for n in (*nodes, template)], pods)
    result = run(nodes, pods, table=table)
    assert codes(result.blocked, "a")[0] is ReasonCode.NO_PLACE_TO_MOVE


def test_inter_pod_anti_affinity_is_respected_when_the_table_tracks_topology() -> None:
    spread = (pod_term({"app": "web"}),)

    def web(name: str, on: str) -> Pod:
        return replace(pod(name, on, labels={"app": "web"}), constraints=SchedulingConstraints(
            pod_anti_affinity=spread))

    nodes = [node("a"), node("b"), node("c")]
    free_c = [web("w1", "a"), web("w2", "b"), busy("s", "c", "2")]
    table = whatif_of(nodes, [n.allocatable for n in nodes], free_c, with_topology=True)
    assert removed(run(nodes, free_c, table=table)) == ["a"]  # w1 moves to c (no web pod there)
    taken = [*free_c, web("w3", "c")]
    table = whatif_of(nodes, [n.allocatable for n in nodes], taken, with_topology=True)
    result = run(nodes, taken, table=table)
    assert removed(result) == [] and codes(result.blocked, "a")[0] is ReasonCode.NO_PLACE_TO_MOVE


def test_unknown_pool_is_reported() -> None:
    stray = replace(make_node("stray"), labels={})
    result = run([stray, node("b")], [busy("z", "b")])
    assert codes(result.blocked, "stray")[0] is ReasonCode.UNKNOWN_POOL


# ---------------------------------------------------------------------------------------------------------- PDBs


def test_pdb_budget_is_shared_across_nodes_of_one_plan() -> None:
    budget = PodDisruptionBudget(namespace="default", name="web", disruptions_allowed=1,
                                 selector=LabelSelector(match_labels=(("app", "web"),)))
    nodes = [node("a"), node("b"), node("sink")]
    pods = [pod("wa", "a", labels={"app": "web"}), pod("wb", "b", labels={"app": "web"}), busy("s", "sink", "2")]
    result = run(nodes, pods, pdbs=[budget], policy=Policy(max_drain_parallelism=5))
    assert removed(result) == ["a"]
    # b could go on its own: it stays unneeded (clock kept) and waits for the budget a's drain spends.
    assert codes(result.unneeded, "b")[0] is ReasonCode.PDB
    assert "b" not in result.clear_unneeded


def test_pdb_with_no_disruptions_blocks() -> None:
    budget = PodDisruptionBudget(namespace="default", name="web", disruptions_allowed=0,
                                 selector=LabelSelector(match_labels=(("app", "web"),)))
    result = run([node("a"), node("b")], [pod("w", "a", labels={"app": "web"}), busy("z", "b")], pdbs=[budget])
    assert removed(result) == [] and codes(result.blocked, "a")[0] is ReasonCode.PDB


# ---------------------------------------------------------------------------------------------------------- gate


CLUSTER_COOLDOWN = Policy(scale_down_delay_after_add_s=600.0,  # CA's
                          scale_down_delay_after_add_scope=CooldownScope.CLUSTER)


def test_cooldown_after_scale_up_withholds_removals_but_keeps_clocks() -> None:
    result = run([node("a"), node("b")], [busy("z", "b")], state=EngineState(last_scale_up_s=NOW - 60),
                 unneeded_since={"a": LONG_AGO, "c": LONG_AGO}, policy=CLUSTER_COOLDOWN)
    assert removed(result) == []
    assert codes(result.unneeded, "a")[0] is ReasonCode.SCALE_DOWN_COOLDOWN
    assert result.unneeded[0].reasons[0].numbers["remaining_s"] == 540.0
    fresh = run([node("a"), node("b")], [busy("z", "b")], state=EngineState(last_scale_up_s=NOW - 60),
                unneeded_since={}, policy=CLUSTER_COOLDOWN)
    assert fresh.mark_unneeded == {"a": NOW}


def test_pool_scoped_cooldown_only_holds_the_pool_that_grew() -> None:
    grew_here = EngineState(last_scale_up_s=NOW - 60, last_scale_up_by_pool={"cpu": NOW - 60})
    held = run([node("a"), node("b")], [busy("z", "b")], state=grew_here, unneeded_since={"a": LONG_AGO})
    assert removed(held) == []
    assert codes(held.unneeded, "a")[0] is ReasonCode.SCALE_DOWN_COOLDOWN
    grew_elsewhere = EngineState(last_scale_up_s=NOW - 60, last_scale_up_by_pool={"other-pool": NOW - 60})
    assert removed(run([node("a"), node("b")], [busy("z", "b")], state=grew_elsewhere,
                       unneeded_since={"a": LONG_AGO})) == ["a"]


def test_a_pool_that_grew_minutes_ago_gives_back_its_idle_nodes_unless_the_preset_is_ca_defaults() -> None:
    """D49: gpuscale pauses a grown pool's removals for 2 minutes (its removals already leave pending pods' homes);
    `ca-defaults` for CA's 10 minutes, cluster-wide."""
    grew = EngineState(last_scale_up_s=NOW - 180, last_scale_up_by_pool={"cpu": NOW - 180})
    nodes, pods = [node("a"), node("b")], [busy("z", "b")]
    assert removed(run(nodes, pods, state=grew, unneeded_since={"a": LONG_AGO})) == ["a"]
    ca = run(nodes, pods, state=grew, unneeded_since={"a": LONG_AGO}, policy=preset_policy("ca-defaults"))
    assert removed(ca) == [] and codes(ca.unneeded, "a")[0] is ReasonCode.SCALE_DOWN_COOLDOWN
    assert ca.unneeded[0].reasons[0].numbers["remaining_s"] == 420.0
    just_now = EngineState(last_scale_up_s=NOW - 60, last_scale_up_by_pool={"cpu": NOW - 60})
    assert removed(run(nodes, pods, state=just_now, unneeded_since={"a": LONG_AGO})) == []


def test_cooldown_after_failure_and_delete() -> None:
    nodes = [node("a"), node("b")]
    pods = [busy("z", "b")]
    assert removed(run(nodes, pods, state=EngineState(last_scale_down_failure_s=NOW - 100))) == []
    assert removed(run(nodes, pods, state=EngineState(last_scale_down_failure_s=NOW - 180))) == ["a"]
    assert removed(run(nodes, pods, state=EngineState(last_scale_down_s=NOW))) == ["a"]  # delay after delete 0
    policy = Policy(scale_down_delay_after_delete_s=30)
    assert removed(run(nodes, pods, state=EngineState(last_scale_down_s=NOW - 10), policy=policy)) == []


def test_too_many_unready_nodes_halts_removals() -> None:
    nodes = [node(f"u{i}", ready=False) for i in range(4)] + [node("a"), node("b")]
    result = run(nodes, [busy("z", "b")])
    assert removed(result) == []
    assert codes(result.unneeded, "a")[0] is ReasonCode.TOO_MANY_UNREADY
    # Unready nodes still starting (younger than the provision time) are not counted.
    starting = [node(f"u{i}", ready=False, created_s=NOW - 10) for i in range(4)] + [node("a"), node("b")]
    assert removed(run(starting, [busy("z", "b")])) == ["a"]


def test_three_unready_nodes_are_tolerated() -> None:
    nodes = [node(f"u{i}", ready=False) for i in range(3)] + [node("a"), node("b")]
    assert "a" in removed(run(nodes, [busy("z", "b")]))


def test_no_nodes_plans_nothing() -> None:
    assert run([]) == ScaleDownResult()


def test_scale_down_disabled_plans_nothing() -> None:
    assert run([node("a"), node("b")], policy=Policy(scale_down_enabled=False)) == ScaleDownResult()


# ---------------------------------------------------------------------------------------------------- simulation cap


def test_simulation_cap_limits_new_candidates_but_not_known_ones() -> None:
    nodes = [node("a"), node("b"), node("c"), node("sink", cpu="32")]
    pods = [pod("pa", "a", cpu="1"), pod("pb", "b", cpu="1"), pod("pc", "c", cpu="1"), busy("s", "sink", "17")]
    cap = SimulationCap(pool_ratio=0.0, pool_min_count=1)
    result = run(nodes, pods, unneeded_since={"c": NOW - 10}, cap=cap)
    assert result.mark_unneeded == {"a": NOW}  # one new candidate simulated; b waits for a later decision
    assert {v.node for v in result.unneeded} == {"a", "c"}
    assert result.clear_unneeded == ()


def test_a_pod_with_a_host_port_moves_only_where_the_port_is_free() -> None:
    """Both nodes are underutilized and each runs a pod binding host port 8080: neither pod can move to the other
    node (NodePorts), so neither node goes; with the port free on a third node (bound there over UDP only), one of
    them is drained there."""
    port = SchedulingConstraints(host_ports=(HostPort(8080),))
    pods = [pod("web-a", "a", constraints=port), pod("web-b", "b", constraints=port)]
    result = run([node("a"), node("b")], pods)
    assert removed(result) == []
    assert codes(result.blocked, "a")[0] is ReasonCode.NO_PLACE_TO_MOVE
    udp = pod("dns", "c", cpu="3", constraints=SchedulingConstraints(host_ports=(HostPort(8080, "UDP"),)))
    assert len(removed(run([node("a"), node("b"), node("c")], [*pods, udp]))) == 1
