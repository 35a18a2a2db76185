"""engine/explain.py: one hold per target, read off the engine's own verdicts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.engine.explain import Hold, QueueHold, explain
from gpuscale.engine.policy import Limits, Policy
from gpuscale.engine.provreq import CHECK_CAPACITY, CONSUME_ANNOTATIONS, FAILED, TRUE, Condition
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import InputError
from tests.engine.test_provreq import A100_POOL, POLICY, request
from tests.engine.test_scaleup import NOW, SEED_POOLS, pending, pool_node, training_pod


def why(cluster: Cluster, target: str, policy: Policy = POLICY, **kwargs: object):  # type: ignore[no-untyped-def]
    return explain(cluster, target, pools=SEED_POOLS, policy=policy, now=NOW, **kwargs)  # type: ignore[arg-type]


def test_capacity_when_a_scale_up_is_due() -> None:
    result = why(Cluster(pods=(training_pod(gpus=8),)), "default/train-0")
    assert result.hold is Hold.CAPACITY and A100_POOL.name in result.reason


def test_fits_existing_capacity_holds_nothing() -> None:
    cluster = Cluster(nodes=(pool_node(A100_POOL, "a100-0"),), pods=(training_pod(gpus=8),))
    assert why(cluster, "default/train-0").hold is Hold.NONE


def test_constraint_names_each_pools_refusal() -> None:
    pod = pending("h100", cpu="1", gpus=1, node_selector={"gpu": "h100"})
    result = why(Cluster(pods=(pod,)), "default/h100")
    assert result.hold is Hold.CONSTRAINT and result.code == "NoPoolFits"
    assert any(d.startswith(f"pool {A100_POOL.name}:") for d in result.details), result.details


def test_limits_when_a_cluster_limit_binds() -> None:
    policy = replace(POLICY, limits=Limits(max_nodes_total=0))
    result = why(Cluster(pods=(training_pod(gpus=8),)), "default/train-0", policy)
    assert result.hold is Hold.LIMITS and "max_nodes_total 0" in result.reason


def test_stockout_backoff() -> None:
    state = record_failure(EngineState(), A100_POOL.name, FailureKind.STOCKOUT, NOW - 10, POLICY, "no capacity")
    result = why(Cluster(pods=(training_pod(gpus=8),)), "default/train-0", state=state)
    assert result.hold is Hold.STOCKOUT and "backed off" in result.reason


def test_gated_pod_and_quota_hold() -> None:
    gated = replace(training_pod(gpus=8), scheduling_gated=True)
    assert why(Cluster(pods=(gated,)), "default/train-0").hold is Hold.GATED
    hold = QueueHold(workload="default/job-train-1", cluster_queue="team-a",
                     message="insufficient unused quota for nvidia.com/gpu in flavor a100, 8 more needed")
    result = why(Cluster(pods=(gated,)), "default/train-0", holds={"default/train-0": hold})
    assert result.hold is Hold.QUOTA and "8 more needed" in result.reason and "team-a" in result.reason


def test_requests_failed_check_capacity_and_consumers() -> None:
    failed = request(conditions=(Condition(type=FAILED, status=TRUE, reason="GangDoesNotFit", message="max"),))
    assert why(Cluster(), "team/req", requests=[failed]).hold is Hold.LIMITS
    check = request("c", count=1, class_name=CHECK_CAPACITY)
    assert why(Cluster(), "team/c", requests=[check]).hold is Hold.CAPACITY
    atomic = request("a", count=2)
    assert why(Cluster(), "team/a", requests=[atomic]).hold is Hold.CAPACITY
    consumer = replace(training_pod("w-0", gpus=8), namespace="team", annotations={CONSUME_ANNOTATIONS[0]: "a"})
    result = why(Cluster(pods=(consumer,)), "team/w-0", requests=[atomic])
    assert result.code == "ConsumesProvisioningRequest" and "team/a" in result.reason


def test_unknown_target_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no such pod, ProvisioningRequest or node"):
        why(Cluster(), "default/nope")
