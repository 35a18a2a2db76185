"""Drainability rules, one test per rule (engine/drain.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from gpuscale.engine.drain import (
    CHECKPOINT_SAFE,
    DO_NOT_DISRUPT,
    MIRROR,
    SAFE_TO_EVICT,
    SCALE_DOWN_DISABLED,
    DrainAction,
    PdbBudget,
    classify_pod,
    drain_node,
)
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import OwnerRef, Pod, PodPhase
from gpuscale.model.resources import GPU_MILLI, Resources
from gpuscale.model.selectors import LabelSelector
from tests.builders import make_node, make_pod

POLICY = Policy()
NO_PDBS = PdbBudget(())


def pod(name: str = "p", namespace: str = "default", *, owner: str | None = "ReplicaSet",
        annotations: Mapping[str, str] | None = None, phase: PodPhase = PodPhase.RUNNING, gpus: int = 0,
        labels: Mapping[str, str] | None = None, **fields: object) -> Pod:
    base = make_pod(name, namespace, gpus=gpus, node="n1", phase=phase, labels=labels)
    return replace(base, owner=OwnerRef(kind=owner, name=f"{name}-owner") if owner else None,
                   annotations=dict(annotations or {}), **fields)  # type: ignore[arg-type]


def pdb(name: str = "budget", allowed: int = 1, labels: Mapping[str, str] | None = None,
        namespace: str = "default") -> PodDisruptionBudget:
    return PodDisruptionBudget(namespace=namespace, name=name, disruptions_allowed=allowed,
                               selector=LabelSelector(match_labels=tuple(sorted((labels or {"app": "a"}).items()))))


def action(p: Pod, policy: Policy = POLICY, budget: PdbBudget = NO_PDBS) -> DrainAction:
    return classify_pod(p, policy=policy, budget=budget).action


def code(p: Pod, policy: Policy = POLICY, budget: PdbBudget = NO_PDBS) -> ReasonCode | None:
    verdict = classify_pod(p, policy=policy, budget=budget)
    return verdict.reason.code if verdict.reason is not None else None


# ------------------------------------------------------------------------------------------------------ ignored


def test_replicated_pod_moves() -> None:
    assert action(pod()) is DrainAction.MOVE


def test_daemonset_pod_is_ignored() -> None:
    assert action(pod(owner="DaemonSet")) is DrainAction.IGNORE


def test_daemonset_pod_is_ignored_even_if_not_safe_to_evict() -> None:
    assert action(pod(owner="DaemonSet", annotations={SAFE_TO_EVICT: "false"})) is DrainAction.IGNORE


def test_mirror_pod_is_ignored() -> None:
    assert action(pod(owner=None, annotations={MIRROR: "abc"})) is DrainAction.IGNORE


@pytest.mark.parametrize("phase", [PodPhase.SUCCEEDED, PodPhase.FAILED])
def test_terminal_pod_is_ignored(phase: PodPhase) -> None:
    assert action(pod(owner=None, phase=phase)) is DrainAction.IGNORE


def test_pod_being_deleted_is_ignored() -> None:
    assert action(pod(owner=None, deleting=True)) is DrainAction.IGNORE


def test_expendable_pod_is_evicted_without_a_new_home() -> None:
    assert action(pod(owner=None, priority=-11)) is DrainAction.EXPENDABLE
    assert action(pod(priority=-10)) is DrainAction.MOVE  # at the cutoff is not below it


# ------------------------------------------------------------------------------------------------------ blocking


def test_not_safe_to_evict_blocks() -> None:
    assert code(pod(annotations={SAFE_TO_EVICT: "false"})) is ReasonCode.NOT_SAFE_TO_EVICT


def test_explicit_protection_beats_expendable_priority() -> None:
    assert code(pod(priority=-100, annotations={SAFE_TO_EVICT: "false"})) is ReasonCode.NOT_SAFE_TO_EVICT


@pytest.mark.parametrize("phase", [PodPhase.RUNNING, PodPhase.PENDING])
def test_on_completion_blocks_while_running_or_pending(phase: PodPhase) -> None:
    assert code(pod(phase=phase, annotations={SAFE_TO_EVICT: "on-completion"})) is ReasonCode.ON_COMPLETION


def test_on_completion_pod_that_finished_is_ignored() -> None:
    assert action(pod(phase=PodPhase.SUCCEEDED, annotations={SAFE_TO_EVICT: "on-completion"})) is DrainAction.IGNORE


def test_karpenter_do_not_disrupt_blocks() -> None:
    assert code(pod(annotations={DO_NOT_DISRUPT: "true"})) is ReasonCode.DO_NOT_DISRUPT
    assert action(pod(annotations={DO_NOT_DISRUPT: "false"})) is DrainAction.MOVE


def test_kube_system_pod_without_pdb_blocks() -> None:
    assert code(pod(namespace="kube-system")) is ReasonCode.KUBE_SYSTEM


def test_kube_system_pod_with_pdb_moves() -> None:
    budget = PdbBudget([pdb(namespace="kube-system")])
    assert action(pod(namespace="kube-system", labels={"app": "a"}), budget=budget) is DrainAction.MOVE


def test_kube_system_rule_can_be_turned_off() -> None:
    assert action(pod(namespace="kube-system"), policy=Policy(skip_nodes_with_system_pods=False)) is DrainAction.MOVE


def test_pod_without_controller_blocks() -> None:
    assert code(pod(owner=None)) is ReasonCode.NO_CONTROLLER


def test_owner_that_is_not_a_controller_blocks() -> None:
    p = replace(pod(), owner=OwnerRef(kind="ReplicaSet", name="rs", controller=False))
    assert code(p) is ReasonCode.NO_CONTROLLER


def test_local_storage_blocks() -> None:
    assert code(pod(local_storage=True)) is ReasonCode.LOCAL_STORAGE
    assert action(pod(local_storage=True), policy=Policy(skip_nodes_with_local_storage=False)) is DrainAction.MOVE


@pytest.mark.parametrize("blocked", [
    {"namespace": "kube-system"}, {"owner": None}, {"local_storage": True},
])
def test_safe_to_evict_true_lifts_system_controller_and_storage_rules(blocked: dict[str, object]) -> None:
    assert action(pod(annotations={SAFE_TO_EVICT: "true"}, **blocked)) is DrainAction.MOVE  # type: ignore[arg-type]


def test_running_gpu_job_is_protected() -> None:
    verdict = classify_pod(pod(owner="Job", gpus=1), policy=POLICY, budget=NO_PDBS)
    assert verdict.reason is not None and verdict.reason.code is ReasonCode.TRAINING_JOB
    assert "loses its work" in verdict.reason.message


def test_fractional_gpu_job_is_protected() -> None:
    p = replace(pod(owner="Job"), requests=pod().requests + Resources.of({GPU_MILLI: 250}))
    assert code(p) is ReasonCode.TRAINING_JOB


def test_gpu_job_opts_in_with_checkpoint_safe() -> None:
    assert action(pod(owner="Job", gpus=1, annotations={CHECKPOINT_SAFE: "true"})) is DrainAction.MOVE


def test_safe_to_evict_true_does_not_lift_gpu_job_protection() -> None:
    assert code(pod(owner="Job", gpus=1, annotations={SAFE_TO_EVICT: "true"})) is ReasonCode.TRAINING_JOB


def test_gpu_job_protection_scope() -> None:
    assert action(pod(owner="Job")) is DrainAction.MOVE  # CPU-only job
    assert action(pod(owner="Job", gpus=1, phase=PodPhase.PENDING)) is DrainAction.MOVE  # not running yet
    assert action(pod(owner="ReplicaSet", gpus=1)) is DrainAction.MOVE  # a GPU service, not a job
    assert action(pod(owner="Job", gpus=1), policy=Policy(protect_gpu_jobs=False)) is DrainAction.MOVE


# ----------------------------------------------------------------------------------------------------- node level


def test_node_with_scale_down_disabled_is_blocked() -> None:
    node = replace(make_node("n1"), annotations={SCALE_DOWN_DISABLED: "true"})
    drain = drain_node(node, [], policy=POLICY, budget=NO_PDBS)
    assert drain.blocked is not None and drain.blocked.code is ReasonCode.SCALE_DOWN_DISABLED


def test_node_without_pods_drains_as_the_walk_over_them_does() -> None:
    """No pods (a list, a tuple, or an iterator that yields none): nothing to move or evict, whatever the budget."""
    budget = PdbBudget([pdb("zero", 0), pdb("one", 1)])
    walked = drain_node(make_node("n1"), iter(()), policy=POLICY, budget=budget)
    assert walked.blocked is None and walked.move == () and walked.evict == () and walked.node == "n1"
    for pods in ([], (), iter([])):
        assert drain_node(make_node("n1"), pods, policy=POLICY, budget=budget) == walked
    disabled = replace(make_node("n1"), annotations={SCALE_DOWN_DISABLED: "true"})
    blocked = drain_node(disabled, (), policy=POLICY, budget=NO_PDBS).blocked
    assert blocked is not None and blocked.code is ReasonCode.SCALE_DOWN_DISABLED


def test_node_drain_lists_moves_and_evictions_sorted() -> None:
    pods = [pod("b"), pod("a"), pod("ds", owner="DaemonSet"), pod("x", priority=-20)]
    drain = drain_node(make_node("n1"), pods, policy=POLICY, budget=NO_PDBS)
    assert drain.blocked is None
    assert [p.key for p in drain.move] == ["default/a", "default/b"]
    assert drain.evict_keys == ("default/a", "default/b", "default/x")
    assert not drain.empty


def test_node_with_only_ignored_and_expendable_pods_is_empty() -> None:
    drain = drain_node(make_node("n1"), [pod("ds", owner="DaemonSet"), pod("x", priority=-20)], policy=POLICY,
                       budget=NO_PDBS)
    assert drain.empty and drain.blocked is None


def test_node_blocked_by_first_blocking_pod_in_key_order() -> None:
    pods = [pod("z", owner=None), pod("a", annotations={SAFE_TO_EVICT: "false"})]
    drain = drain_node(make_node("n1"), pods, policy=POLICY, budget=NO_PDBS)
    assert drain.blocked is not None and drain.blocked.code is ReasonCode.NOT_SAFE_TO_EVICT
    assert "default/a" in drain.blocked.message


# ----------------------------------------------------------------------------------------------------------- PDBs


def test_pdb_with_no_disruptions_allowed_blocks() -> None:
    drain = drain_node(make_node("n1"), [pod(labels={"app": "a"})], policy=POLICY, budget=PdbBudget([pdb(allowed=0)]))
    assert drain.blocked is not None and drain.blocked.code is ReasonCode.PDB
    assert drain.blocked.numbers == {"needed": 1, "allowed": 0}


def test_pdb_counts_every_pod_of_the_node() -> None:
    pods = [pod("a", labels={"app": "a"}), pod("b", labels={"app": "a"})]
    assert drain_node(make_node("n1"), pods, policy=POLICY, budget=PdbBudget([pdb(allowed=1)])).blocked is not None
    assert drain_node(make_node("n1"), pods, policy=POLICY, budget=PdbBudget([pdb(allowed=2)])).blocked is None


def test_pdb_applies_to_safe_to_evict_true_pods() -> None:
    p = pod(labels={"app": "a"}, annotations={SAFE_TO_EVICT: "true"})
    drain = drain_node(make_node("n1"), [p], policy=POLICY, budget=PdbBudget([pdb(allowed=0)]))
    assert drain.blocked is not None and drain.blocked.code is ReasonCode.PDB


def test_pdb_in_another_namespace_does_not_cover() -> None:
    budget = PdbBudget([pdb(allowed=0, namespace="other")])
    assert drain_node(make_node("n1"), [pod(labels={"app": "a"})], policy=POLICY, budget=budget).blocked is None


def test_pdb_budget_is_shared_across_nodes() -> None:
    budget = PdbBudget([pdb(allowed=1)])
    first = drain_node(make_node("n1"), [pod("a", labels={"app": "a"})], policy=POLICY, budget=budget)
    assert first.blocked is None
    spent = budget.spend(first.evict)
    assert spent.left("default/budget") == 0
    assert budget.left("default/budget") == 1  # spending returns a new budget
    second = drain_node(make_node("n2"), [pod("b", labels={"app": "a"})], policy=POLICY, budget=spent)
    assert second.blocked is not None and second.blocked.code is ReasonCode.PDB


def test_negative_disruptions_allowed_counts_as_zero() -> None:
    assert PdbBudget([pdb(allowed=-3)]).left("default/budget") == 0
