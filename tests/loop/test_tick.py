"""The act phase of `Autoscaler.tick`, driven by fixed plans (`ScriptedDecide`) against in-memory fakes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuscale.config import load_config
from gpuscale.engine.plan import (
    DELETION_CANDIDATE_TAINT,
    TO_BE_DELETED_TAINT,
    Plan,
    PodVerdict,
    Removal,
    ScaleUp,
    TimedOut,
)
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.loop import events as ev
from gpuscale.loop.ports import EvictionOutcome
from gpuscale.loop.report import Action
from gpuscale.loop.tick import Autoscaler, LoopSettings
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from tests.fakes import (
    T0,
    FakeClock,
    FakeCluster,
    FakeEvents,
    FakeProvider,
    ScriptedDecide,
    make_pool,
    node_of,
    owned_pod,
)

A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8, usd_per_hour=29.39)
CPU = make_pool("cpu-general", max_size=50)
POOLS = (CPU, A100)
R = (Reason(ReasonCode.SCALE_UP, "test"),)


@dataclass
class World:
    clock: FakeClock
    cluster: FakeCluster
    provider: FakeProvider
    events: FakeEvents
    decide: ScriptedDecide
    autoscaler: Autoscaler


def world(*plans: Plan, cluster: FakeCluster | None = None, pools: tuple[NodePool, ...] = POOLS,
          settings: LoopSettings | None = None, **provider_faults: Any) -> World:
    clock = FakeClock()
    cluster = cluster if cluster is not None else FakeCluster()
    provider = FakeProvider(pools, clock, cluster, **provider_faults)
    events = FakeEvents()
    decide = ScriptedDecide(*plans)
    autoscaler = Autoscaler(reader=cluster, writer=cluster, provider=provider, events=events, clock=clock,
                            pools=pools, policy=Policy(), settings=settings, decide=decide)
    return World(clock, cluster, provider, events, decide, autoscaler)


def cpu_node(name: str) -> Node:
    return node_of(CPU, name, created_s=T0 - 3600)


# --- observe


def test_not_synced_view_is_never_acted_on() -> None:
    w = world(Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=1, pods=(), reasons=R),)))
    w.cluster.not_synced = True
    report = w.autoscaler.tick()
    assert not report.synced and report.plan is None
    assert report.errors[0].action is Action.OBSERVE and report.errors[0].error == "NotSynced"
    assert w.decide.calls == [] and w.provider.actions() == [] and w.cluster.writes() == []


def test_provider_failure_while_observing_is_a_partial_view() -> None:
    w = world(Plan(), raise_on={"upcoming": TimeoutError("provider API timed out")})
    report = w.autoscaler.tick()
    assert not report.synced and report.errors[0].error == "TimeoutError"
    assert w.decide.calls == []


def test_snapshot_carries_upcoming_and_node_pools() -> None:
    w = world(Plan(), cluster=FakeCluster([cpu_node("cpu-1")]))
    w.provider.increase("gpu-training-a100", 1)
    w.autoscaler.tick()
    snapshot, _, now = w.decide.calls[0]
    assert now == T0
    assert [u.pool for u in snapshot.upcoming] == ["gpu-training-a100"]
    assert snapshot.node_pools == {"cpu-1": "cpu-general"}


def test_state_threads_from_one_tick_to_the_next() -> None:
    plan = Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=1, pods=(), reasons=R),))
    w = world(plan, Plan())
    w.autoscaler.tick()
    w.clock.advance(10)
    w.autoscaler.tick()
    assert w.decide.calls[1][1].last_scale_up_s == T0


# --- scale-up


def test_scale_up_requests_nodes_and_tells_each_pod() -> None:
    pods = ("ml/train-0", "ml/train-1")
    w = world(Plan(scale_up=(ScaleUp(pool="gpu-training-a100", nodes=1, pods=pods, reasons=R),)))
    report = w.autoscaler.tick()
    assert ("increase", "gpu-training-a100", 1) in w.provider.actions()
    assert [s.pool for s in report.scaled_up] == ["gpu-training-a100"] and len(report.scaled_up[0].request_ids) == 1
    assert w.autoscaler.state.last_scale_up_s == T0
    for pod in pods:
        [event] = w.events.about(pod, ev.TRIGGERED_SCALE_UP)
        assert event.message == "pod triggered scale-up: [gpu-training-a100 0->1 (max: 8)]"
        assert event.kind == "Pod" and event.type == "Normal"
    [group] = w.events.about(ev.STATUS_KEY, ev.SCALED_UP_GROUP)
    assert "size to 1 instead of 0 (max: 8)" in group.message
    assert report.ok


def test_scale_up_message_counts_registered_and_upcoming_nodes() -> None:
    w = world(Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=2, pods=("a/p",), reasons=R),)),
              cluster=FakeCluster([cpu_node("cpu-1")]))
    w.provider.increase("cpu-general", 1)
    w.autoscaler.tick()
    assert w.events.about("a/p")[0].message == "pod triggered scale-up: [cpu-general 2->4 (max: 50)]"


def test_stockout_backs_the_pool_off_and_other_scale_ups_go_on() -> None:
    plan = Plan(scale_up=(ScaleUp(pool="gpu-training-a100", nodes=2, pods=("ml/a",), reasons=R),
                          ScaleUp(pool="cpu-general", nodes=1, pods=("web/b",), reasons=R)))
    w = world(plan, stockout_pools={"gpu-training-a100"})
    report = w.autoscaler.tick()
    backoff = w.autoscaler.state.in_backoff("gpu-training-a100", T0 + 1)
    assert backoff is not None and backoff.kind is FailureKind.STOCKOUT
    assert backoff.until_s == T0 + Policy().backoff_initial_s
    assert [s.pool for s in report.scaled_up] == ["cpu-general"]
    [error] = report.errors
    assert (error.action, error.target, error.error) == (Action.SCALE_UP, "gpu-training-a100", "capacity-unavailable")
    [failed] = w.events.about(ev.STATUS_KEY, ev.SCALE_UP_FAILED)
    assert failed.type == "Warning" and "ZONE_RESOURCE_POOL_EXHAUSTED" in failed.message
    assert w.events.about("ml/a", ev.TRIGGERED_SCALE_UP) == []


def test_a_stockout_in_one_zone_backs_off_that_zone_only() -> None:
    """A scale-up naming a zone goes to the provider with it; its stockout backs off `pool/zone`, not the pool."""
    plan = Plan(scale_up=(ScaleUp(pool="cpu-general", zone="zone-c", nodes=1, pods=("web/c",), reasons=R),
                          ScaleUp(pool="cpu-general", zone="zone-a", nodes=1, pods=("web/a",), reasons=R)))
    w = world(plan, stockout_pools={"cpu-general/zone-c"})
    report = w.autoscaler.tick()
    assert w.autoscaler.state.in_backoff("cpu-general/zone-c", T0 + 1) is not None
    assert w.autoscaler.state.in_backoff("cpu-general", T0 + 1) is None
    assert [s.pool for s in report.scaled_up] == ["cpu-general"]
    assert [u.zone for u in w.provider.requests.values()] == ["zone-a"]
    [failed] = w.events.about(ev.STATUS_KEY, ev.SCALE_UP_FAILED)
    assert "in zone zone-c" in failed.message and "zone backs off" in failed.message


def test_repeated_stockouts_double_the_backoff() -> None:
    plan = Plan(scale_up=(ScaleUp(pool="gpu-training-a100", nodes=1, pods=(), reasons=R),))
    w = world(plan, stockout_pools={"gpu-training-a100"})
    w.autoscaler.tick()
    w.clock.advance(301)
    w.autoscaler.tick()
    entry = w.autoscaler.state.backoff["gpu-training-a100"]
    assert entry.failures == 2 and entry.until_s == T0 + 301 + 600


@pytest.mark.parametrize(("faults", "kind"), [({"quota_pools": {"gpu-training-a100"}}, FailureKind.QUOTA),
                                               ({"failing_pools": {"gpu-training-a100"}}, FailureKind.OTHER)])
def test_other_provider_refusals_back_off_with_their_kind(faults: dict[str, Any], kind: FailureKind) -> None:
    w = world(Plan(scale_up=(ScaleUp(pool="gpu-training-a100", nodes=1, pods=(), reasons=R),)), **faults)
    w.autoscaler.tick()
    assert w.autoscaler.state.backoff["gpu-training-a100"].kind is kind


def test_unexpected_provider_exception_does_not_escape() -> None:
    w = world(Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=1, pods=(), reasons=R),)),
              raise_on={"increase": ConnectionResetError("reset by peer")})
    report = w.autoscaler.tick()
    assert report.synced and report.errors[0].error == "ConnectionResetError"
    assert w.autoscaler.state.backoff["cpu-general"].kind is FailureKind.OTHER


# --- timed-out upcoming nodes

GPU_TIMEOUT = (Reason(ReasonCode.GPU_INIT_TIMEOUT, "GPUs not in allocatable after 600s"),)
PROVISION_TIMEOUT = (Reason(ReasonCode.PROVISION_TIMEOUT, "not registered after 900s"),)


def test_timed_out_nodes_are_deleted_and_requests_cancelled() -> None:
    w = world(cluster=FakeCluster([node_of(A100, "a100-x", gpus_registered=False)]))
    [request] = w.provider.increase("gpu-training-a100", 1)
    w.decide.plans = [Plan(timed_out=(
        TimedOut(pool="gpu-training-a100", node="a100-x", request_id=None, reasons=GPU_TIMEOUT),
        TimedOut(pool="gpu-training-a100", node=None, request_id=request, reasons=PROVISION_TIMEOUT)))]
    report = w.autoscaler.tick()
    assert ("delete", ("a100-x",)) in w.provider.actions() and ("cancel", (request,)) in w.provider.actions()
    assert report.timed_out == ("a100-x", request)
    assert w.events.about("a100-x", ev.SCALE_UP_TIMED_OUT)[0].type == "Warning"
    assert w.events.about(ev.STATUS_KEY, ev.SCALE_UP_TIMED_OUT)
    entry = w.autoscaler.state.backoff["gpu-training-a100"]
    assert entry.failures == 1 and entry.kind is FailureKind.GPU_INIT_TIMEOUT  # one backoff per pool per tick


def test_timeout_backoff_not_recorded_twice_when_the_engine_did() -> None:
    state = record_failure(EngineState(), "gpu-training-a100", FailureKind.PROVISION_TIMEOUT, T0, Policy())
    w = world(Plan(timed_out=(TimedOut(pool="gpu-training-a100", node=None, request_id="r-1",
                                       reasons=PROVISION_TIMEOUT),), state=state))
    w.autoscaler.tick()
    assert w.autoscaler.state.backoff["gpu-training-a100"].failures == 1


# --- NotTriggerScaleUp


def test_not_trigger_scale_up_is_rate_limited_per_pod() -> None:
    why = (Reason(ReasonCode.NO_POOL_FITS, "3 node(s) didn't match Pod's node affinity/selector"),)
    plan = Plan(unplaceable=(PodVerdict(pod="ml/a", reasons=why), PodVerdict(pod="ml/b", reasons=why)))
    w = world(plan, settings=LoopSettings(not_triggered_event_interval_s=300))
    w.autoscaler.tick()
    [event] = w.events.about("ml/a")
    assert event.reason == ev.NOT_TRIGGER_SCALE_UP
    assert event.message == "pod didn't trigger scale-up: 3 node(s) didn't match Pod's node affinity/selector"
    for _ in range(5):
        w.clock.advance(10)
        w.autoscaler.tick()
    assert len(w.events.about("ml/a")) == 1 and len(w.events.about("ml/b")) == 1
    w.clock.advance(300)
    w.autoscaler.tick()
    assert len(w.events.about("ml/a")) == 2


def test_rate_limiter_forgets_pods_that_left() -> None:
    why = (Reason(ReasonCode.NO_POOL_FITS, "no pool fits"),)
    w = world(Plan(unplaceable=(PodVerdict(pod="ml/a", reasons=why),)), Plan())
    w.autoscaler.tick()
    w.autoscaler.tick()
    assert len(w.autoscaler._not_triggered) == 0


# --- deletion-candidate taints


def test_unneeded_taints_are_written_and_cleared_independently() -> None:
    cluster = FakeCluster([cpu_node("cpu-1"), cpu_node("cpu-2"), cpu_node("cpu-3")])
    w = world(Plan(mark_unneeded={"cpu-1": T0 - 60, "gone": T0, "cpu-2": T0}, clear_unneeded=("cpu-3",)),
              cluster=cluster)
    report = w.autoscaler.tick()
    taint = next(t for t in w.cluster.nodes["cpu-1"].taints if t.key == DELETION_CANDIDATE_TAINT)
    assert taint.value == str(int(T0 - 60)) and taint.effect == "PreferNoSchedule"
    assert report.marked_unneeded == ("cpu-1", "cpu-2") and report.cleared_unneeded == ("cpu-3",)
    [error] = report.errors  # the unknown node failed alone
    assert (error.action, error.target) == (Action.SET_DELETION_CANDIDATE, "gone")


# --- scale-down: empty nodes


def test_empty_node_is_marked_then_deleted() -> None:
    w = world(Plan(scale_down=(Removal(node="cpu-1", pool="cpu-general", evict=(), reasons=R),)),
              cluster=FakeCluster([cpu_node("cpu-1")]))
    report = w.autoscaler.tick()
    assert w.cluster.writes() == [("mark_to_be_deleted", "cpu-1", T0)]
    assert ("delete", ("cpu-1",)) in w.provider.actions()
    assert report.deleted == ("cpu-1",) and w.autoscaler.state.last_scale_down_s == T0
    assert w.events.about("cpu-1", ev.SCALE_DOWN)


def test_empty_node_delete_failure_unmarks_and_records_failure() -> None:
    w = world(Plan(scale_down=(Removal(node="cpu-1", pool="cpu-general", evict=(), reasons=R),)),
              cluster=FakeCluster([cpu_node("cpu-1")]), raise_on={"delete": RuntimeError("instance locked")})
    report = w.autoscaler.tick()
    assert report.abandoned == ("cpu-1",) and w.autoscaler.state.last_scale_down_failure_s == T0
    assert not any(t.key == TO_BE_DELETED_TAINT for t in w.cluster.nodes["cpu-1"].taints)
    assert w.events.about("cpu-1", ev.SCALE_DOWN_FAILED)[0].type == "Warning"


def test_mark_failure_skips_that_removal_only() -> None:
    plan = Plan(scale_down=(Removal(node="missing", pool="cpu-general", evict=("a/p",), reasons=R),
                            Removal(node="cpu-2", pool="cpu-general", evict=(), reasons=R)))
    w = world(plan, cluster=FakeCluster([cpu_node("cpu-2")], [owned_pod("p", namespace="a", node="missing")]))
    report = w.autoscaler.tick()
    assert ("evict", "a/p") not in w.cluster.calls
    assert report.deleted == ("cpu-2",)
    assert report.errors[0].action is Action.MARK_TO_BE_DELETED


# --- scale-down: drains


def drain_world(*pods: str, **cluster_options: Any) -> World:
    cluster = FakeCluster([cpu_node("cpu-1"), cpu_node("cpu-2")],
                          [owned_pod(p.split("/")[1], namespace=p.split("/")[0], node="cpu-1") for p in pods],
                          **cluster_options)
    removal = Removal(node="cpu-1", pool="cpu-general", evict=pods, reasons=R)
    return world(Plan(scale_down=(removal,)), Plan(), cluster=cluster)


def test_drain_evicts_then_deletes_once_pods_are_gone() -> None:
    w = drain_world("web/a", "web/b", remove_evicted=False)
    report = w.autoscaler.tick()
    assert w.cluster.writes() == [("mark_to_be_deleted", "cpu-1", T0), ("evict", "web/a"), ("evict", "web/b")]
    assert report.drains_started == ("cpu-1",) and "cpu-1" in w.autoscaler.drains
    assert [e.outcome for e in report.evictions] == [EvictionOutcome.EVICTED] * 2
    assert w.events.about("web/a", ev.SCALE_DOWN)[0].message == "deleting pod for node scale down"
    w.clock.advance(10)
    report = w.autoscaler.tick()  # pods still terminating: wait, do not re-evict
    assert report.deleted == () and ("delete", ("cpu-1",)) not in w.provider.actions()
    assert w.cluster.writes().count(("evict", "web/a")) == 1
    w.cluster.remove_pod("web/a")
    w.cluster.remove_pod("web/b")
    w.clock.advance(10)
    report = w.autoscaler.tick()
    assert report.deleted == ("cpu-1",) and "cpu-1" not in w.autoscaler.drains
    assert w.autoscaler.state.last_scale_down_s == T0 + 20
    assert "node removed" in w.events.about("cpu-1", ev.SCALE_DOWN)[-1].message


def test_pdb_blocked_eviction_is_retried_never_forced() -> None:
    w = drain_world("web/a", "db/main", pdb_blocked={"db/main"})
    report = w.autoscaler.tick()
    assert {e.pod: e.outcome for e in report.evictions} == {"web/a": EvictionOutcome.EVICTED,
                                                           "db/main": EvictionOutcome.BLOCKED_BY_PDB}
    assert report.errors == ()  # a PDB saying "not now" is not an error
    for _ in range(3):
        w.clock.advance(10)
        report = w.autoscaler.tick()
        assert [e.pod for e in report.evictions] == ["db/main"]  # only the blocked pod is retried
        assert ("delete", ("cpu-1",)) not in w.provider.actions()
    w.cluster.pdb_blocked.clear()
    w.clock.advance(10)
    report = w.autoscaler.tick()
    assert report.evictions[0].outcome is EvictionOutcome.EVICTED and report.deleted == ()
    w.clock.advance(10)
    assert w.autoscaler.tick().deleted == ("cpu-1",)


def test_drain_past_the_bound_is_abandoned() -> None:
    w = drain_world("db/main", pdb_blocked={"db/main"})
    w.autoscaler.settings = LoopSettings(max_graceful_termination_s=600)
    w.autoscaler.tick()
    w.clock.advance(599)
    assert w.autoscaler.tick().abandoned == ()
    w.clock.advance(1)
    report = w.autoscaler.tick()
    assert report.abandoned == ("cpu-1",) and len(w.autoscaler.drains) == 0
    assert ("unmark_to_be_deleted", "cpu-1") in w.cluster.writes()
    assert w.autoscaler.state.last_scale_down_failure_s == T0 + 600
    assert "still on the node" in w.events.about("cpu-1", ev.SCALE_DOWN_FAILED)[0].message
    assert "db/main" in w.cluster.pods  # never forced


def test_failed_evictions_are_reported_and_retried() -> None:
    w = drain_world("web/a", evict_failures={"web/a"})
    report = w.autoscaler.tick()
    assert report.errors[0].action is Action.EVICT and report.errors[0].error == "Failed"
    w.cluster.evict_failures.clear()
    w.clock.advance(10)
    assert w.autoscaler.tick().evictions[0].outcome is EvictionOutcome.EVICTED


def test_evict_raising_counts_as_failed() -> None:
    w = drain_world("web/a", raise_on={"evict": ConnectionError("api down")})
    report = w.autoscaler.tick()
    assert report.evictions[0].outcome is EvictionOutcome.FAILED
    drain = w.autoscaler.drains.get("cpu-1")
    assert drain is not None and drain.unevicted == {"web/a"}


def test_pod_recreated_under_the_same_name_elsewhere_has_left() -> None:
    w = drain_world("db/db-0", remove_evicted=False)
    w.autoscaler.tick()
    w.cluster.remove_pod("db/db-0")
    w.cluster.add(owned_pod("db-0", namespace="db", node="cpu-2"))  # StatefulSet pod, same name, new node
    w.clock.advance(10)
    assert w.autoscaler.tick().deleted == ("cpu-1",)


def test_node_deleted_by_someone_else_ends_the_drain() -> None:
    w = drain_world("web/a", remove_evicted=False)
    w.autoscaler.tick()
    del w.cluster.nodes["cpu-1"]
    w.clock.advance(10)
    report = w.autoscaler.tick()
    assert len(w.autoscaler.drains) == 0 and report.errors == ()


def test_drain_is_not_restarted_for_a_node_already_draining() -> None:
    cluster = FakeCluster([cpu_node("cpu-1")], [owned_pod("a", namespace="web", node="cpu-1")], remove_evicted=False)
    removal = Removal(node="cpu-1", pool="cpu-general", evict=("web/a",), reasons=R)
    w = world(Plan(scale_down=(removal,)), cluster=cluster)
    w.autoscaler.tick()
    w.clock.advance(10)
    w.autoscaler.tick()
    assert w.cluster.writes().count(("mark_to_be_deleted", "cpu-1", T0)) == 1


# --- robustness


def test_event_sink_failure_does_not_stop_actions() -> None:
    w = world(Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=1, pods=("a/p",), reasons=R),),
                   scale_down=(Removal(node="cpu-1", pool="cpu-general", evict=(), reasons=R),)),
              cluster=FakeCluster([cpu_node("cpu-1")]))
    w.events.fail = True
    report = w.autoscaler.tick()
    assert report.scaled_up and report.deleted == ("cpu-1",)
    assert {e.action for e in report.errors} == {Action.EMIT_EVENT}


def test_orphaned_to_be_deleted_taints_are_removed_on_the_first_tick_only() -> None:
    cluster = FakeCluster([cpu_node("cpu-1")])
    cluster.mark_to_be_deleted("cpu-1", T0 - 3600)  # left by a previous process
    w = world(Plan(), cluster=cluster)
    assert w.autoscaler.tick().unmarked_orphans == ("cpu-1",)
    cluster.mark_to_be_deleted("cpu-1", T0)
    assert w.autoscaler.tick().unmarked_orphans == ()


def test_act_order_is_timeouts_scale_up_taints_removals() -> None:
    plan = Plan(timed_out=(TimedOut(pool="cpu-general", node=None, request_id="r-9", reasons=PROVISION_TIMEOUT),),
                scale_up=(ScaleUp(pool="gpu-training-a100", nodes=1, pods=(), reasons=R),),
                mark_unneeded={"cpu-2": T0},
                scale_down=(Removal(node="cpu-1", pool="cpu-general", evict=(), reasons=R),))
    w = world(plan, cluster=FakeCluster([cpu_node("cpu-1"), cpu_node("cpu-2")]))
    w.autoscaler.tick()
    order = [c[0] for c in w.provider.actions()]
    assert order == ["cancel", "increase", "delete"]
    writes = [c[0] for c in w.cluster.writes()]
    assert writes == ["set_deletion_candidate", "mark_to_be_deleted"]


def test_loop_settings_from_config() -> None:
    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml")
    settings = LoopSettings.from_config(config)
    assert (settings.scan_interval_s, settings.max_graceful_termination_s) == (10, 600)
