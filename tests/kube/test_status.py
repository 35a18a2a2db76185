"""The status document (kube/status.py) from plain values: node states per pool, backoff, history, health."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from gpuscale.config import load_config
from gpuscale.engine.nodes import NodePhase, phase
from gpuscale.engine.plan import TO_BE_DELETED_TAINT, Plan, PodVerdict, Snapshot, UpcomingNode
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.kube.status import History, ReportedState, build_status, node_states, render, reported_state
from gpuscale.loop.report import ScaleUpDone, TickReport
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.taints import READINESS_TAINT_PREFIX
from tests.builders import make_node, taint

SEED_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml"

A100, T4 = "gpu-training-a100", "gpu-inference-t4"
CONFIG = load_config(SEED_CONFIG)


def _snapshot() -> Snapshot:
    nodes = (
        make_node("a-ready", gpus=8, labels={POOL_LABEL: A100}),
        make_node("a-nogpu", gpus=0, labels={POOL_LABEL: A100}),  # Ready, GPUs not registered yet
        replace(make_node("a-booting", gpus=0, labels={POOL_LABEL: A100}), ready=False),
        make_node("t-going", gpus=1, labels={POOL_LABEL: T4}, taints=[taint(TO_BE_DELETED_TAINT)]),
        make_node("stranger", labels={"other": "x"}),
    )
    return Snapshot(cluster=Cluster(nodes=nodes), upcoming=(UpcomingNode(pool=A100, request_id="r1", requested_s=1),))


def test_node_states_per_pool() -> None:
    counts = node_states(_snapshot(), {p.name: p for p in CONFIG.pools})
    assert dict(counts[A100]) == {ReportedState.USABLE: 1, ReportedState.UNREADY_GPU: 1, ReportedState.UPCOMING: 2}
    assert dict(counts[T4]) == {ReportedState.DELETING: 1}
    assert dict(counts["cpu-general"]) == {}



def test_each_phase_is_reported_in_one_state_and_degraded_wins_until_deletion() -> None:
    pools = {p.name: p for p in CONFIG.pools}
    tainted = make_node("a-tainted", gpus=8, labels={POOL_LABEL: A100},
                        taints=[taint(READINESS_TAINT_PREFIX + "NetworkReady")])
    assert phase(tainted, pools[A100]) is NodePhase.READY  # GPUs registered, a start-up taint left: not usable
    assert {p: reported_state(p, degraded=False) for p in NodePhase} == {
        NodePhase.REGISTERED: ReportedState.UPCOMING, NodePhase.READY: ReportedState.UNREADY_GPU,
        NodePhase.USABLE: ReportedState.USABLE, NodePhase.DELETING: ReportedState.DELETING}
    assert {p: reported_state(p, degraded=True) for p in NodePhase} == {
        NodePhase.REGISTERED: ReportedState.DEGRADED, NodePhase.READY: ReportedState.DEGRADED,
        NodePhase.USABLE: ReportedState.DEGRADED, NodePhase.DELETING: ReportedState.DELETING}
    counts = node_states(_snapshot(), pools, degraded=frozenset({"a-ready", "t-going"}))
    assert counts[A100][ReportedState.DEGRADED] == 1 and counts[T4] == {ReportedState.DELETING: 1}

def test_status_document_has_targets_backoff_history_and_reasons() -> None:
    now = 1_800_000_000.0
    state = record_failure(EngineState(), T4, FailureKind.STOCKOUT, now - 10, CONFIG.policy, "no T4 in zone")
    plan = Plan(unplaceable=(PodVerdict(pod="ns/p", reasons=(Reason(ReasonCode.NO_POOL_FITS, "nothing fits"),)),))
    report = TickReport(now_s=now, synced=True, plan=plan,
                        scaled_up=(ScaleUpDone(pool=A100, nodes=1, request_ids=("r1",)),))
    history = History()
    history.observe(report, _snapshot())
    doc = build_status(report=report, snapshot=_snapshot(), pools=CONFIG.pools, limits=CONFIG.policy.limits,
                       state=state, history=history, leader="me")
    assert yaml.safe_load(render(doc)) == doc
    groups = {g["name"]: g for g in doc["nodeGroups"]}
    assert groups[A100].items() >= {"target": 4, "ready": 1, "upcoming": 2, "unreadyGpu": 1, "deleting": 0,
                                 "minSize": 0, "maxSize": 8, "lastScaleUpTime": "2027-01-15T08:00:00Z"}.items()
    assert groups[A100]["scaleUp"] == {"status": "InProgress"}
    assert groups[T4]["target"] == 0 and groups[T4]["deleting"] == 1
    assert groups[T4]["scaleUp"]["status"] == "Backoff"
    assert groups[T4]["scaleUp"]["backoff"]["reason"] == "capacity-unavailable"
    assert groups[T4]["scaleUp"]["backoff"]["message"] == "no T4 in zone"
    assert groups["cpu-general"]["scaleUp"] == {"status": "NoActivity"}
    wide = doc["clusterWide"]
    assert wide["health"]["status"] == "Healthy" and wide["unschedulablePods"]["unplaceable"] == 1
    assert wide["unplaceable"] == [{"pod": "ns/p", "reasons": ["nothing fits"]}]
    assert wide["limits"]["maxNodesTotal"] == 80 and doc["leader"] == "me"


def test_status_when_the_view_is_partial_or_unready_halts_scale_down() -> None:
    doc = build_status(report=TickReport(now_s=0, synced=False), snapshot=None, pools=CONFIG.pools,
                       limits=CONFIG.policy.limits, state=EngineState(), history=History(), leader=None)
    assert doc["autoscalerStatus"] == "NotSynced" and doc["clusterWide"]["health"]["status"] == "NotSynced"
    from gpuscale.engine.plan import NodeVerdict
    halted = Plan(blocked=(NodeVerdict(node="n", reasons=(Reason(ReasonCode.TOO_MANY_UNREADY, "4 of 5"),)),))
    doc = build_status(report=TickReport(now_s=0, synced=True, plan=halted), snapshot=None, pools=CONFIG.pools,
                       limits=CONFIG.policy.limits, state=EngineState(), history=History(), leader=None)
    assert doc["clusterWide"]["health"]["status"] == "Unhealthy"
