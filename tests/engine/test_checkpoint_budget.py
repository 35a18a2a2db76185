"""Checkpoint-aware consolidation (engine/checkpoint.py, D38): a protected GPU job that says when it checkpointed
moves within its pool's lost-work budget — windowed per hour, per pool, never for a gang member, never past a PDB,
never past do-not-disrupt — and each such removal carries its numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.engine.checkpoint import (
    CHECKPOINT_INTERVAL,
    LAST_CHECKPOINT,
    WINDOW_S,
    LostWork,
    last_checkpoint_s,
    lost_gpu_minutes,
)
from gpuscale.engine.drain import DO_NOT_DISRUPT
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaledown import ScaleDownResult, plan_scale_down
from gpuscale.engine.state import EngineState, charge_lost_work
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import OwnerRef, Pod, PodGroupRef, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.selectors import LabelSelector
from tests.builders import make_node, make_pod

NOW = 100_000.0
POLICY = Policy(max_drain_parallelism=10)


def gpu_node(name: str, pool: str = "a100") -> Node:
    return make_node(name, cpu="64", memory="256Gi", gpus=8, labels={POOL_LABEL: pool})


def job(name: str, on: str, *, gpus: int = 1, started: float = NOW - 7_200.0, interval: str | None = "30m",
        last: str | None = None, app: str = "train", **fields: object) -> Pod:
    base = make_pod(name, cpu="1", memory="1Gi", gpus=gpus, node=on, phase=PodPhase.RUNNING, labels={"app": app})
    annotations = {**({CHECKPOINT_INTERVAL: interval} if interval else {}), **({LAST_CHECKPOINT: last} if last else {})}
    return replace(base, owner=OwnerRef(kind="Job", name=f"{name}-job"), annotations=annotations,  # type: ignore[arg-type]
                   started_s=started, **fields)


def run(nodes: Sequence[Node], pods: Sequence[Pod], *, state: EngineState | None = None, policy: Policy = POLICY,
        pools: Mapping[str, NodePool] | None = None, pdbs: Sequence[PodDisruptionBudget] = (),
        now: float = NOW) -> ScaleDownResult:
    by_node: dict[str, list[Pod]] = {n.name: [] for n in nodes}
    for p in pods:
        by_node[p.node_name or ""].append(p)
    names = {n.labels[POOL_LABEL] for n in nodes}
    return plan_scale_down(
        nodes=nodes, table=whatif_of(nodes, [n.allocatable for n in nodes], pods), pods_by_node=by_node,
        pools=pools or {p: NodePool(name=p, allocatable=nodes[0].allocatable, gpus_per_node=8) for p in names},
        pool_of={n.name: n.labels[POOL_LABEL] for n in nodes}, pdbs=pdbs, policy=policy,
        state=state or EngineState(), now=now,
        unneeded_since={n.name: now - 1_000 for n in nodes})  # past the unneeded time, after the jobs started (D39)


def removed(result: ScaleDownResult) -> list[str]:
    return [r.node for r in result.removals]


def first_reason(result: ScaleDownResult, node: str) -> ReasonCode:
    for v in (*result.blocked, *result.unneeded):
        if v.node == node:
            return v.reasons[0].code
    raise AssertionError(f"{node} neither blocked nor waiting")


def keeper(node: str) -> Pod:
    """A job that keeps `node` busy (5 of 8 GPUs) and has room for 3 more."""
    return job(f"keep-{node}", node, gpus=5, interval=None)


# ---------------------------------------------------------------------------------------------- the loss itself


def test_last_checkpoint_from_interval_and_annotation() -> None:
    p = job("j", "a", started=NOW - 4_000.0, interval="30m")
    assert last_checkpoint_s(p, NOW) == NOW - 4_000.0 + 3_600.0
    assert lost_gpu_minutes([p], NOW) == 400.0 / 60.0
    stamped = job("k", "a", gpus=2, interval=None, last="1970-01-02T03:45:00Z")  # 99_900 s
    assert last_checkpoint_s(stamped, NOW) == 99_900.0
    assert lost_gpu_minutes([stamped], NOW) == 2 * 100.0 / 60.0


def test_recent_checkpoint_moves_old_one_waits() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    recent = run(nodes, [keeper("b"), job("j", "a", started=NOW - 1_860.0)])  # checkpoint 60 s ago: 1 GPU-minute
    assert removed(recent) == ["a"]
    moved = recent.removals[0].reasons[-1]
    assert moved.code is ReasonCode.CHECKPOINTED_MOVE
    assert moved.numbers["lost_gpu_minutes"] == 1.0
    assert moved.numbers["idle_gpu_hours_saved_per_hour"] == 8.0
    assert moved.numbers["budget_left_gpu_minutes"] == 29.0
    assert recent.lost_work == (LostWork(at_s=NOW, pool="a100", gpu_minutes=1.0),)
    old = run(nodes, [keeper("b"), job("j", "a", gpus=3, started=NOW - 3_000.0)])  # 3 GPUs × 20 min = 60 > 30
    assert removed(old) == []
    assert first_reason(old, "a") is ReasonCode.LOST_WORK_BUDGET
    assert old.next_at_s == NOW - 3_000.0 + 3_600.0  # the next checkpoint


def test_job_without_checkpoints_or_malformed_keeps_its_node() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    for p in (job("j", "a", interval=None), job("j", "a", interval="often")):
        result = run(nodes, [keeper("b"), p])
        assert removed(result) == []
        assert first_reason(result, "a") is ReasonCode.TRAINING_JOB


def test_budget_is_windowed_per_hour_and_per_pool() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    pods = [keeper("b"), job("j", "a", gpus=2, started=NOW - 1_800.0 - 600.0)]  # 2 GPUs × 10 min = 20
    spent = EngineState(lost_work=(LostWork(at_s=NOW - 1_000.0, pool="a100", gpu_minutes=15.0),))
    assert first_reason(run(nodes, pods, state=spent), "a") is ReasonCode.LOST_WORK_BUDGET
    aged = EngineState(lost_work=(LostWork(at_s=NOW - WINDOW_S, pool="a100", gpu_minutes=15.0),))
    assert removed(run(nodes, pods, state=aged)) == ["a"]
    other = EngineState(lost_work=(LostWork(at_s=NOW - 10.0, pool="h100", gpu_minutes=30.0),))
    assert removed(run(nodes, pods, state=other)) == ["a"]
    # the pool's own budget wins over the policy's
    own = {"a100": NodePool(name="a100", allocatable=nodes[0].allocatable, gpus_per_node=8,
                            scale_down_lost_gpu_minutes_per_hour=10.0)}
    assert first_reason(run(nodes, pods, pools=own), "a") is ReasonCode.LOST_WORK_BUDGET


def test_budget_runs_across_removals_of_one_decision() -> None:
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    pods = [job("keep", "c", gpus=2, interval=None),
            job("j", "a", gpus=2, started=NOW - 1_800.0 - 600.0), job("k", "b", gpus=2, started=NOW - 1_800.0 - 600.0)]
    result = run(nodes, pods)
    assert len(result.removals) == 1  # 20 + 20 > 30
    waiting = [v.node for v in result.unneeded if v.reasons[0].code is ReasonCode.LOST_WORK_BUDGET]
    assert len(waiting) == 1


def test_charge_keeps_the_hour_and_only_changes_when_needed() -> None:
    state = EngineState(lost_work=(LostWork(at_s=0.0, pool="p", gpu_minutes=1.0),))
    assert charge_lost_work(state, (), 10.0) is state
    later = charge_lost_work(state, (LostWork(at_s=WINDOW_S + 5, pool="p", gpu_minutes=2.0),), WINDOW_S + 5)
    assert later.lost_work == (LostWork(at_s=WINDOW_S + 5, pool="p", gpu_minutes=2.0),)


# ---------------------------------------------------------------------------------------------- what still wins


def test_gang_member_is_never_moved() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    gang = job("j", "a", started=NOW - 1_860.0, group=PodGroupRef(key="t/j", source="kueue", min_member=2))
    result = run(nodes, [keeper("b"), gang])
    assert removed(result) == []
    assert first_reason(result, "a") is ReasonCode.TRAINING_JOB


def test_do_not_disrupt_wins() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    p = job("j", "a", started=NOW - 1_860.0)
    p = replace(p, annotations={**p.annotations, DO_NOT_DISRUPT: "true"})
    result = run(nodes, [keeper("b"), p])
    assert removed(result) == []
    assert first_reason(result, "a") is ReasonCode.DO_NOT_DISRUPT


def test_pdb_wins() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    pdb = PodDisruptionBudget(namespace="default", name="train",
                              selector=LabelSelector(match_labels=(("app", "train"),)), disruptions_allowed=0)
    result = run(nodes, [keeper("b"), job("j", "a", started=NOW - 1_860.0)], pdbs=[pdb])
    assert removed(result) == []
    assert first_reason(result, "a") is ReasonCode.PDB


# ---------------------------------------------------------------------------------------------- the property

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod], EngineState, Policy, list[PodDisruptionBudget]]:
    nodes = [gpu_node(f"n{i}", pool=draw(st.sampled_from(("a100", "h100")))) for i in range(draw(st.integers(2, 6)))]
    pods: list[Pod] = []
    for i, n in enumerate(nodes):
        free = 8
        for k in range(draw(st.integers(0, 3))):
            gpus = draw(st.integers(1, min(free, 4))) if free else 0
            if not gpus:
                break
            free -= gpus
            pods.append(job(f"p{i}-{k}", n.name, gpus=gpus, started=NOW - draw(st.floats(0, 20_000)),
                            interval=draw(st.sampled_from(("15m", "30m", "1h", None))),
                            app=draw(st.sampled_from(("a", "b")))))
    entries = tuple(LostWork(at_s=NOW - draw(st.floats(0, 2 * WINDOW_S)), pool=draw(st.sampled_from(("a100", "h100"))),
                             gpu_minutes=draw(st.floats(0, 40))) for _ in range(draw(st.integers(0, 3))))
    budget = draw(st.sampled_from((0.0, 10.0, 30.0, 120.0)))
    policy = Policy(max_drain_parallelism=10, scale_down_lost_gpu_minutes_per_hour=budget)
    pdbs = [PodDisruptionBudget(namespace="default", name=f"b{app}", selector=LabelSelector(
        match_labels=(("app", app),)), disruptions_allowed=draw(st.integers(0, 2))) for app in ("a", "b")
        if draw(st.booleans())]
    return nodes, pods, EngineState(lost_work=tuple(sorted(entries, key=lambda e: e.at_s))), policy, pdbs


@PROPERTY
@given(clusters())
def test_evictions_never_exceed_the_budget_nor_a_pdb(
        case: tuple[list[Node], list[Pod], EngineState, Policy, list[PodDisruptionBudget]]) -> None:
    nodes, pods, state, policy, pdbs = case
    result = run(nodes, pods, state=state, policy=policy, pdbs=pdbs)
    by_key = {p.key: p for p in pods}
    gone = {r.node for r in result.removals}
    evicted = [by_key[k] for r in result.removals for k in r.evict]
    # the loss, computed independently: every checkpointed pod on a removed node
    for pool in ("a100", "h100"):
        before = sum(e.gpu_minutes for e in state.lost_work if e.pool == pool and e.at_s > NOW - WINDOW_S)
        lost = sum(p.requests.gpu_count() * (NOW - last_checkpoint_s(p, NOW)) / 60.0 for p in evicted
                   if next(n for n in nodes if n.name == p.node_name).labels[POOL_LABEL] == pool)
        assert lost == 0.0 or before + lost <= policy.scale_down_lost_gpu_minutes_per_hour + 1e-6
    for pdb in pdbs:
        assert sum(1 for p in evicted if pdb.covers(p.namespace, p.labels)) <= pdb.disruptions_allowed
    assert all(CHECKPOINT_INTERVAL in p.annotations for p in evicted)  # never a job without checkpoints
    assert sum(e.gpu_minutes for e in result.lost_work) == pytest.approx(sum(  # summed in another order
        p.requests.gpu_count() * (NOW - last_checkpoint_s(p, NOW)) / 60.0 for p in evicted))
    assert gone == {r.node for r in result.removals}
