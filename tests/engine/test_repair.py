"""The opt-in repair policy (engine.repair): a degraded node of a `node_repair` pool is drained and removed through
the drain rules — PDBs, protections, protect_gpu_jobs — at most `max_nodes_under_repair` at once per pool."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuscale.config import parse_config
from gpuscale.engine.decide import decide
from gpuscale.engine.plan import TO_BE_DELETED_TAINT, Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod
from gpuscale.model.resources import NVIDIA_GPU, Resources
from gpuscale.model.selectors import LabelSelector
from gpuscale.model.taints import Taint, TaintEffect
from tests.fakes import T0, make_pool, node_of, owned_pod

A100 = replace(make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8), node_repair=True)
LONG_AGO = T0 - 86_400


def _degraded(name: str, gpus: int = 7) -> Node:
    node = node_of(A100, name, created_s=LONG_AGO)
    return replace(node, allocatable=Resources.of({**dict(node.allocatable.items), NVIDIA_GPU: gpus}))


def _plan(nodes: Sequence[Node], pods: Sequence[Pod] = (), pdbs: Sequence[PodDisruptionBudget] = (),
          pool: object = A100) -> Plan:
    cluster = Cluster(nodes=tuple(nodes), pods=tuple(pods), pdbs=tuple(pdbs))
    return decide(Snapshot(cluster=cluster), [pool], EngineState(), Policy(), T0)  # type: ignore[list-item]


def _serving(name: str, node: str) -> Pod:
    return owned_pod(name, node=node, gpus=1, cpu=2000, labels={"app": "serve"})


def test_a_degraded_node_is_drained_and_replaced_through_the_drain_path() -> None:
    plan = _plan([_degraded("a100-1")], [_serving("s-0", "a100-1")])
    [repair] = plan.scale_down
    assert repair.node == "a100-1" and repair.evict == ("default/s-0",)
    assert repair.reasons[0].code is ReasonCode.REPAIR and "7 of 8" in repair.reasons[0].message


def test_without_the_option_a_degraded_node_is_only_reported() -> None:
    plan = _plan([_degraded("a100-1")], [_serving("s-0", "a100-1")], pool=replace(A100, node_repair=False))
    assert plan.scale_down == () and [v.node for v in plan.degraded] == ["a100-1"]


def test_a_pdb_or_a_running_training_job_keeps_the_degraded_node_and_the_repair_waits() -> None:
    pdb = PodDisruptionBudget(namespace="default", name="serve", selector=LabelSelector(
        match_labels=(("app", "serve"),)), disruptions_allowed=0)
    plan = _plan([_degraded("a100-1")], [_serving("s-0", "a100-1")], pdbs=[pdb])
    assert plan.scale_down == ()
    assert [r.code for r in plan.degraded[0].reasons][:2] == [ReasonCode.REPAIR, ReasonCode.PDB]
    train = owned_pod("train-0", node="a100-1", gpus=7, owner="Job")
    plan = _plan([_degraded("a100-1")], [train])
    assert plan.scale_down == ()
    assert [r.code for r in plan.degraded[0].reasons][:2] == [ReasonCode.REPAIR, ReasonCode.TRAINING_JOB]


def test_at_most_max_nodes_under_repair_per_pool_counting_those_being_removed() -> None:
    nodes = [_degraded("a100-1"), _degraded("a100-2")]
    pods = [_serving("s-1", "a100-1"), _serving("s-2", "a100-2")]
    plan = _plan(nodes, pods)
    assert [r.node for r in plan.scale_down] == ["a100-1"]
    waiting = next(v for v in plan.degraded if v.node == "a100-2")
    assert "1 node(s) of gpu-training-a100 under repair (max 1)" in waiting.reasons[0].message
    deleting = replace(nodes[0], taints=(*nodes[0].taints, Taint(key=TO_BE_DELETED_TAINT,
                                                                  effect=TaintEffect.NO_SCHEDULE)))
    assert _plan([deleting, nodes[1]], pods).scale_down == ()
    assert [r.node for r in _plan(nodes, pods, pool=replace(A100, max_nodes_under_repair=2)).scale_down] == [
        "a100-1", "a100-2"]


def test_the_options_in_the_config_file() -> None:
    config = parse_config({"pools": [{"name": "a100", "allocatable": {"cpu": "95", "memory": "600Gi"},
                                      "node_repair": True, "max_nodes_under_repair": 2}]})
    assert config.pools[0].node_repair and config.pools[0].max_nodes_under_repair == 2
