"""`gpuscale.kube.tracer.Tracer` without an API server: raw Pod/Node/Event dicts as the watch delivers them, a fake
clock, and tick reports as the loop makes them. (The same tracer against the real control plane:
tests/e2e/test_tracing.py.)"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuscale.engine.plan import Plan, PodVerdict, ScaleUp, TimedOut
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.kube.metrics import Metrics, MetricsServer
from gpuscale.kube.trace_metrics import register_metrics, traces_route
from gpuscale.kube.tracer import EVENT_GRACE_S, Tracer
from gpuscale.lifecycle.phases import Milestone, Phase
from gpuscale.lifecycle.trace import parse_lines
from gpuscale.loop.report import Action, ActionError, ScaleUpDone, TickReport
from gpuscale.model.node import POOL_LABEL

T0 = 1_800_000_000.0
POOL = "a100"


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def pod(name: str = "p", *, created: float = T0, unschedulable: float | None = None, node: str | None = None,
        bound: float | None = None, ready: float | None = None) -> dict[str, Any]:
    conditions = []
    if unschedulable is not None and node is None:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "lastTransitionTime": stamp(unschedulable)})
    if node is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(bound or created)})
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": stamp(ready)})
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": stamp(created)},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": "Running" if ready else "Pending",
                                                                 "conditions": conditions}}


def node(name: str, *, created: float = T0, ready: float | None = None, gpus: int = 0,
         expects: int = 8) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready is not None else "False",
                   "lastTransitionTime": stamp(ready if ready is not None else created)}]
    allocatable = {"cpu": "96", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"metadata": {"name": name, "creationTimestamp": stamp(created),
                         "labels": {POOL_LABEL: POOL, "gpuscale.io/gpu-count": str(expects)}},
            "status": {"conditions": conditions, "allocatable": allocatable}}


def event(reason: str, pod_name: str = "p", at: float = T0) -> dict[str, Any]:
    return {"reason": reason, "involvedObject": {"kind": "Pod", "namespace": "ns", "name": pod_name},
            "firstTimestamp": stamp(at)}


def decided(now: float, pods: tuple[str, ...] = ("ns/p",), ids: tuple[str, ...] = ("n1",)) -> TickReport:
    plan = Plan(scale_up=(ScaleUp(pool=POOL, nodes=len(ids), pods=pods, reasons=()),))
    return TickReport(now_s=now, synced=True, plan=plan, scaled_up=(ScaleUpDone(pool=POOL, nodes=len(ids),
                                                                                request_ids=ids),))


Step = tuple[float, str, str, "dict[str, Any] | TickReport"]
"""Seconds after T0, the kind ("tick" for a loop report), the watch event type, the object or report."""


def play(tracer: Tracer, clock: Clock, steps: list[Step]) -> None:
    """Feed `steps` to the tracer live, each at its time."""
    for offset, kind, kind_of_event, obj in steps:
        clock.now = T0 + offset
        if isinstance(obj, TickReport):
            tracer.on_tick(obj)
        else:
            tracer.on_object(kind, kind_of_event, obj, False)


def until_ready(make_node: Callable[..., dict[str, Any]]) -> list[Step]:
    """A pod created 0, unschedulable 0.5, decided 1; its node (`make_node`) POSTed and registered 1.2, Ready 6.2."""
    return [
        (0.0, "Pod", "ADDED", pod()),
        (0.5, "Pod", "MODIFIED", pod(unschedulable=T0)),
        (1.2, "Node", "ADDED", make_node("n1", created=T0 + 1)),
        (1.3, "tick", "", decided(T0 + 1.0)),
        (6.2, "Node", "MODIFIED", make_node("n1", created=T0 + 1, ready=T0 + 6)),
    ]


def live_long_path(tracer: Tracer, clock: Clock) -> None:
    """A pod that waits for a new node, every step seen live: `until_ready`, then GPUs 14.2, bound 14.5, Pulled 17.5,
    Ready 18."""
    steps: list[Step] = [
        *until_ready(node),
        (14.2, "Node", "MODIFIED", node("n1", created=T0 + 1, ready=T0 + 6, gpus=8)),
        (14.5, "Pod", "MODIFIED", pod(node="n1", bound=T0 + 14)),
        (17.5, "Event", "ADDED", event("Pulled", at=T0 + 17)),
        (18.0, "Pod", "MODIFIED", pod(node="n1", bound=T0 + 14, ready=T0 + 18)),
    ]
    play(tracer, clock, steps)


def test_live_long_path_takes_receipt_times_and_splits_every_phase(tmp_path: Path) -> None:
    clock = Clock()
    tracer = Tracer(clock=clock, sink=tmp_path / "t.jsonl")
    live_long_path(tracer, clock)
    [trace] = tracer.traces()
    assert trace.new_node and trace.pool == POOL and trace.node == "n1" and trace.source == "controller"
    phases = trace.phases
    assert phases[Phase.FIRST_ATTEMPT] == pytest.approx(0.5)
    assert phases[Phase.DECISION] == pytest.approx(0.5)
    assert phases[Phase.REQUEST] == pytest.approx(0.2)  # the node was seen (1.2) before the tick returned (1.3)
    assert phases[Phase.NODE_READY] == pytest.approx(5.0)
    assert phases[Phase.GPU_REGISTRATION] == pytest.approx(8.0)
    assert phases[Phase.BIND] == pytest.approx(0.3)
    assert phases[Phase.IMAGE_PULL] == pytest.approx(3.0)
    assert phases[Phase.CONTAINER_START] == pytest.approx(0.5)
    assert sum(phases.values()) == pytest.approx(18.0) == trace.pending_to_running_s
    assert parse_lines((tmp_path / "t.jsonl").read_text(), "sink")[0].to_json() == trace.to_json()


def test_restarted_tracer_rederives_milestones_from_object_timestamps() -> None:
    """Listed objects (a fresh process, or a relist) carry their own times; receipt times would be wrong."""
    clock = Clock()
    clock.now = T0 + 100
    tracer = Tracer(clock=clock)
    tracer.on_object("Node", "LISTED", node("n1", created=T0 + 10, ready=T0 + 40, gpus=8), True)
    tracer.on_object("Pod", "LISTED", pod(created=T0, node="n1", bound=T0 + 60), True)
    tracer.on_object("Pod", "LISTED", pod("done", created=T0, node="n1", bound=T0 + 1, ready=T0 + 5), True)
    clock.now = T0 + 101
    tracer.on_object("Pod", "MODIFIED", pod(created=T0, node="n1", bound=T0 + 60, ready=T0 + 101), False)
    tracer.flush()
    [trace] = tracer.traces()  # the pod that was already Ready when listed is not traced
    assert trace.pod == "ns/p" and trace.new_node
    assert trace.milestones[Milestone.REGISTERED.value] == 10.0
    assert trace.milestones[Milestone.READY.value] == 40.0
    assert trace.milestones[Milestone.GPU_REGISTERED.value] == 40.0  # no timestamp of its own: from Ready
    assert trace.milestones[Milestone.BOUND.value] == 60.0
    assert trace.pending_to_running_s == 101.0


def test_a_pulled_event_arriving_after_ready_still_counts_and_a_missing_one_closes_after_the_grace() -> None:
    clock = Clock()
    tracer = Tracer(clock=clock)
    for name in ("late", "never"):
        tracer.on_object("Pod", "ADDED", pod(name), False)
    clock.now = T0 + 1
    for name in ("late", "never"):
        tracer.on_object("Pod", "MODIFIED", pod(name, node="old", bound=T0 + 1), False)
    clock.now = T0 + 5
    for name in ("late", "never"):
        tracer.on_object("Pod", "MODIFIED", pod(name, node="old", bound=T0 + 1, ready=T0 + 5), False)
    assert tracer.traces() == []
    clock.now = T0 + 5.2
    tracer.on_object("Event", "ADDED", event("Pulled", "late", at=T0 + 5), False)
    [late] = tracer.traces()
    assert late.pod == "ns/late" and late.phases[Phase.IMAGE_PULL] == pytest.approx(4.0)
    assert not late.new_node and late.phases[Phase.BIND] == pytest.approx(1.0)
    clock.now = T0 + 5 + EVENT_GRACE_S
    tracer.on_tick(TickReport(now_s=clock.now, synced=True))
    never = tracer.traces()[-1]
    assert never.pod == "ns/never" and never.phases[Phase.IMAGE_PULL] == 0.0
    assert never.phases[Phase.CONTAINER_START] == pytest.approx(4.0)


def test_blocked_wait_has_its_own_phase_and_reason() -> None:
    clock = Clock()
    tracer = Tracer(clock=clock)
    tracer.on_object("Pod", "ADDED", pod(), False)
    backoff = Reason(ReasonCode.POOL_BACKOFF, "a100 backed off after capacity-unavailable")
    tracer.on_tick(TickReport(now_s=T0 + 2, synced=True, plan=Plan(unplaceable=(PodVerdict(pod="ns/p",
                                                                                          reasons=(backoff,)),))))
    clock.now = T0 + 32
    tracer.on_object("Node", "ADDED", node("n1", created=T0 + 32), False)
    tracer.on_tick(decided(T0 + 32))
    tracer.on_object("Node", "MODIFIED", node("n1", created=T0 + 32, ready=T0 + 40, gpus=8), False)
    clock.now = T0 + 41
    tracer.on_object("Pod", "MODIFIED", pod(node="n1", bound=T0 + 41, ready=T0 + 41), False)
    tracer.flush()
    [trace] = tracer.traces()
    assert trace.phases[Phase.BLOCKED] == pytest.approx(30.0)
    assert trace.phases[Phase.DECISION] == pytest.approx(2.0)
    assert trace.reason == "PoolInBackoff: a100 backed off after capacity-unavailable"


def test_counters_gauges_and_histograms_on_a_registry() -> None:
    clock = Clock()
    tracer = Tracer(clock=clock)
    registry = CollectorRegistry()
    register_metrics(tracer, registry)
    stockout = ActionError(action=Action.SCALE_UP, target=POOL, error="capacity-unavailable", message="no A100")
    timed_out = TimedOut(pool="t4", node="t4-x", request_id=None, reasons=())
    tracer.on_tick(TickReport(now_s=T0, synced=True, plan=Plan(timed_out=(timed_out,)), errors=(stockout,)))
    tracer.on_tick(decided(T0, pods=(), ids=("m1", "m2")))
    tracer.on_object("Node", "ADDED", node("m1"), False)
    tracer.on_object("Node", "MODIFIED", node("m1", ready=T0), False)  # Ready, GPUs not registered yet
    live_long_path(tracer, clock)
    text = generate_latest(registry).decode()
    assert f'gpuscale_scale_up_stockouts_total{{pool="{POOL}"}} 1.0' in text
    assert f'gpuscale_pool_backoffs_total{{pool="{POOL}"}} 1.0' in text
    assert 'gpuscale_pool_backoffs_total{pool="t4"} 1.0' in text
    assert 'gpuscale_node_provision_timeouts_total{pool="t4"} 1.0' in text
    assert f'gpuscale_upcoming_nodes{{pool="{POOL}"}} 2.0' in text  # m1 without GPUs, m2 not registered
    assert f'gpuscale_unready_gpu_nodes{{pool="{POOL}"}} 1.0' in text  # m1 (n1's GPUs are registered)
    assert f'gpuscale_pod_pending_to_running_seconds_count{{path="new-node",pool="{POOL}"}} 1.0' in text
    assert f'gpuscale_pod_pending_to_running_seconds_bucket{{le="20.0",path="new-node",pool="{POOL}"}} 1.0' in text
    assert f'gpuscale_pod_phase_seconds_bucket{{le="5.0",phase="gpu_registration",pool="{POOL}"}} 0.0' in text
    assert f'gpuscale_pod_phase_seconds_bucket{{le="10.0",phase="gpu_registration",pool="{POOL}"}} 1.0' in text


def test_unready_gpu_gauge_counts_ready_nodes_without_gpus() -> None:
    tracer = Tracer(clock=Clock())
    tracer.on_object("Node", "ADDED", node("n1", ready=T0), False)
    tracer.on_object("Node", "ADDED", node("n2", ready=T0, gpus=8), False)
    assert tracer.node_gauges() == ({POOL: 1}, {POOL: 1})
    tracer.on_object("Node", "DELETED", node("n1"), False)
    assert tracer.node_gauges() == ({}, {})


def test_retention_bounds_memory_and_deleted_pods_leave_no_trace() -> None:
    clock = Clock()
    tracer = Tracer(clock=clock, retention=3)
    for i in range(5):
        tracer.on_object("Pod", "ADDED", pod(f"p{i}"), False)
        tracer.on_object("Pod", "MODIFIED", pod(f"p{i}", node="old", ready=T0), False)
    tracer.on_object("Pod", "ADDED", pod("gone"), False)
    tracer.on_object("Pod", "DELETED", pod("gone"), False)
    tracer.flush()
    assert [t.pod for t in tracer.traces()] == ["ns/p2", "ns/p3", "ns/p4"]
    assert tracer.traces(include_open=True) == tracer.traces()


def test_endpoint_serves_traces_and_metrics_on_loopback_only() -> None:
    clock = Clock()
    tracer = Tracer(clock=clock)
    registry = CollectorRegistry()
    register_metrics(tracer, registry)
    live_long_path(tracer, clock)
    tracer.on_object("Pod", "ADDED", pod("waiting"), False)
    server = MetricsServer("127.0.0.1:0").serve(Metrics([], registry), lambda: (True, "ok"),
                                                {"/traces": traces_route(tracer)})
    try:
        host, port = server.host, server.port
        assert host == "127.0.0.1"
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/traces") as response:
            assert [t.pod for t in parse_lines(response.read().decode(), "served")] == ["ns/p"]
        with urllib.request.urlopen(f"{base}/traces?open=1") as response:
            served = parse_lines(response.read().decode(), "served")
        assert [(t.pod, t.complete) for t in served] == [("ns/p", True), ("ns/waiting", False)]
        with urllib.request.urlopen(f"{base}/metrics") as response:
            assert b"gpuscale_pod_phase_seconds_bucket" in response.read()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/nope")
        assert err.value.code == 404
    finally:
        server.close()


def test_the_ticks_decision_time_wins_over_its_triggered_scale_up_event() -> None:
    """The loop POSTs TriggeredScaleUp inside the tick; the Event watch can hand it over before `on_tick` runs."""
    clock = Clock()
    tracer = Tracer(clock=clock)
    tracer.on_object("Pod", "ADDED", pod(), False)
    clock.now = T0 + 1.1
    tracer.on_object("Node", "ADDED", node("n1", created=T0 + 1), False)
    clock.now = T0 + 1.2
    tracer.on_object("Event", "ADDED", event("TriggeredScaleUp", at=T0 + 1), False)
    clock.now = T0 + 1.3
    tracer.on_tick(decided(T0 + 1.0))
    tracer.on_object("Node", "MODIFIED", node("n1", created=T0 + 1, ready=T0 + 2, gpus=8), False)
    tracer.on_object("Pod", "MODIFIED", pod(node="n1", ready=T0 + 3), False)
    tracer.flush()
    [trace] = tracer.traces()
    assert trace.milestones[Milestone.DECIDED.value] == pytest.approx(1.0)
    assert trace.milestones[Milestone.REQUESTED.value] == pytest.approx(1.1)


def resource_slice(node_name: str | None, *, created: float = T0) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": "gpu.nvidia.com", "pool": {"name": node_name or "shared", "generation": 0,
                                                                 "resourceSliceCount": 1}}
    spec |= {"nodeName": node_name} if node_name else {"allNodes": True}
    return {"metadata": {"name": f"{node_name}-gpu.nvidia.com", "creationTimestamp": stamp(created)}, "spec": spec}


def dra_node(name: str, *, created: float = T0, ready: float | None = None) -> dict[str, Any]:
    """A node whose GPUs come only as DRA devices: no GPU in allocatable, no GPU-count label."""
    raw = node(name, created=created, ready=ready)
    raw["metadata"]["labels"] = {POOL_LABEL: POOL}
    return raw


def test_a_dra_nodes_first_slice_splits_off_the_slice_publication_phase() -> None:
    """Ready 6.2, its first ResourceSlice 20.2 (a second slice and a slice for all nodes change nothing): the pod's
    wait for the node splits into node_ready and slice_publication, and the phases still sum to the total."""
    clock = Clock()
    tracer = Tracer(clock=clock)
    steps: list[Step] = [
        *until_ready(dra_node),
        (15.0, "ResourceSlice", "ADDED", resource_slice(None, created=T0 + 15)),
        (20.2, "ResourceSlice", "ADDED", resource_slice("n1", created=T0 + 20)),
        (21.0, "ResourceSlice", "ADDED", resource_slice("n1", created=T0 + 21)),
        (20.5, "Pod", "MODIFIED", pod(node="n1", bound=T0 + 20)),
        (22.0, "Pod", "MODIFIED", pod(node="n1", bound=T0 + 20, ready=T0 + 22)),
    ]
    play(tracer, clock, steps)
    clock.now += EVENT_GRACE_S
    tracer.flush()
    [trace] = tracer.traces()
    assert trace.new_node and trace.phases[Phase.NODE_READY] == pytest.approx(5.0)
    assert trace.phases[Phase.GPU_REGISTRATION] == pytest.approx(0.0)  # no GPUs in allocatable expected
    assert trace.phases[Phase.SLICE_PUBLICATION] == pytest.approx(14.0)
    assert trace.phases[Phase.BIND] == pytest.approx(0.3)
    assert sum(trace.phases.values()) == pytest.approx(22.0) == trace.pending_to_running_s


def test_a_slice_seen_before_its_node_and_a_relisted_one_date_from_the_slice() -> None:
    """The slice's watch may deliver before the node's: the time is kept for the node. A relisted slice takes its
    creationTimestamp. A trace of a node without slices names no slice_publication phase."""
    for listed in (False, True):
        clock = Clock()
        tracer = Tracer(clock=clock)
        clock.now = T0 + 30
        tracer.on_object("Pod", "ADDED", pod(created=T0), listed)
        tracer.on_object("ResourceSlice", "ADDED", resource_slice("n1", created=T0 + 20), listed)
        tracer.on_object("Node", "ADDED", dra_node("n1", created=T0 + 1, ready=T0 + 6), listed)
        tracer.on_object("Pod", "MODIFIED", pod(created=T0, node="n1", bound=T0 + 21, ready=T0 + 22), listed)
        clock.now += EVENT_GRACE_S
        tracer.flush()
        [trace] = tracer.traces()
        assert trace.phases[Phase.SLICE_PUBLICATION] == pytest.approx(14.0), listed  # late: the objects' times
    clock = Clock()
    tracer = Tracer(clock=clock)
    live_long_path(tracer, clock)
    [plain] = tracer.traces()
    assert Phase.SLICE_PUBLICATION not in plain.phases
