"""The loop writes the plan's nominations (KEP-5278) once, forgets those that ended, and clears its own when the node
they name goes away."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.controller import report_fields
from gpuscale.engine.policy import Policy
from gpuscale.loop.report import Action
from gpuscale.loop.tick import Autoscaler
from tests.fakes import T0, FakeClock, FakeCluster, FakeEvents, FakeProvider, make_pool, node_of, owned_pod

A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8)


def _autoscaler(cluster: FakeCluster, policy: Policy | None = None) -> tuple[Autoscaler, FakeClock, FakeProvider]:
    clock = FakeClock()
    provider = FakeProvider([A100], clock, cluster)
    return Autoscaler(reader=cluster, writer=cluster, provider=provider, events=FakeEvents(), clock=clock,
                      pools=[A100], policy=policy or Policy()), clock, provider


def _calls(cluster: FakeCluster, name: str) -> list[tuple[object, ...]]:
    return [c for c in cluster.calls if c[0] == name]


def test_a_pod_expected_on_a_starting_node_is_nominated_once_and_forgotten_when_bound() -> None:
    cluster = FakeCluster([node_of(A100, "a100-1", created_s=T0 - 30, ready=False)],
                          [owned_pod("job", gpus=4, created_s=T0 - 60)])
    scaler, clock, _ = _autoscaler(cluster)
    report = scaler.tick()
    assert report.nominated == (("default/job", "a100-1"),) and report.ok
    assert report_fields(report)["nominated"] == [{"pod": "default/job", "node": "a100-1"}]  # the tick's log line
    assert cluster.pods["default/job"].nominated_node == "a100-1"
    clock.advance(5)
    assert scaler.tick().nominated == () and len(_calls(cluster, "nominate")) == 1
    cluster.pods["default/job"] = replace(cluster.pods["default/job"], node_name="a100-1", nominated_node=None)
    clock.advance(5)
    scaler.tick()
    assert _calls(cluster, "clear_nomination") == []


def test_a_nomination_whose_node_went_away_is_cleared_by_the_loop_that_wrote_it() -> None:
    cluster = FakeCluster([node_of(A100, "a100-1", created_s=T0 - 30, ready=False)],
                          [owned_pod("job", gpus=4, created_s=T0 - 60)])
    scaler, clock, _ = _autoscaler(cluster)
    scaler.tick()
    del cluster.nodes["a100-1"]  # deleted under the loop (a user, the cloud)
    clock.advance(5)
    scaler.tick()
    assert _calls(cluster, "clear_nomination") == [("clear_nomination", "default/job", "a100-1")]
    assert cluster.pods["default/job"].nominated_node is None


def test_another_components_nomination_is_never_touched() -> None:
    theirs = replace(owned_pod("job", gpus=4, created_s=T0 - 60), nominated_node="preemption-target")
    cluster = FakeCluster([node_of(A100, "a100-1", created_s=T0 - 30, ready=False)], [theirs])
    scaler, clock, _ = _autoscaler(cluster)
    scaler.tick()
    clock.advance(5)
    scaler.tick()
    assert _calls(cluster, "nominate") == [] and _calls(cluster, "clear_nomination") == []


def test_the_option_off_writes_nothing() -> None:
    cluster = FakeCluster([node_of(A100, "a100-1", created_s=T0 - 30, ready=False)],
                          [owned_pod("job", gpus=4, created_s=T0 - 60)])
    scaler, _, _ = _autoscaler(cluster, Policy(nominate_pods=False))
    assert scaler.tick().nominated == () and _calls(cluster, "nominate") == []


def test_a_nomination_kube_scheduler_cleared_after_a_failed_attempt_is_written_again() -> None:
    cluster = FakeCluster([node_of(A100, "a100-1", created_s=T0 - 30, ready=False)],
                          [owned_pod("job", gpus=4, created_s=T0 - 60)])
    scaler, clock, _ = _autoscaler(cluster)
    scaler.tick()
    cluster.pods["default/job"] = replace(cluster.pods["default/job"], nominated_node=None)  # preemption: no victims
    clock.advance(1)
    assert scaler.tick().nominated == (("default/job", "a100-1"),)
    assert cluster.pods["default/job"].nominated_node == "a100-1" and len(_calls(cluster, "nominate")) == 2


def test_a_nomination_not_written_is_not_remembered_and_a_failed_write_is_reported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = FakeCluster([node_of(A100, "a100-1", created_s=T0 - 30, ready=False)],
                          [owned_pod("job", gpus=4, created_s=T0 - 60)])
    scaler, clock, _ = _autoscaler(cluster)
    monkeypatch.setattr(cluster, "nominate", lambda key, node: False)  # the pod changed under the read
    report = scaler.tick()
    assert report.nominated == () and report.ok

    def refused(key: str, node: str) -> bool:
        raise ConnectionError("apiserver went away")

    monkeypatch.setattr(cluster, "nominate", refused)
    clock.advance(5)
    report = scaler.tick()
    assert report.nominated == () and [(e.action, e.target) for e in report.errors] == [
        (Action.NOMINATE, "default/job")]
    del cluster.nodes["a100-1"]
    clock.advance(5)
    scaler.tick()
    assert _calls(cluster, "clear_nomination") == []  # none of its own to clear


def test_its_own_nomination_moves_when_an_older_pod_is_matched_to_that_node() -> None:
    nodes = [node_of(A100, "a100-1", created_s=T0 - 50, ready=False),
             node_of(A100, "a100-2", created_s=T0 - 20, ready=False)]
    cluster = FakeCluster(nodes, [owned_pod("new", gpus=8, created_s=T0 - 10)])
    scaler, clock, _ = _autoscaler(cluster)
    assert scaler.tick().nominated == (("default/new", "a100-1"),)
    cluster.pods["default/old"] = owned_pod("old", gpus=8, created_s=T0 - 300)
    clock.advance(5)
    assert scaler.tick().nominated == (("default/new", "a100-2"), ("default/old", "a100-1"))
    assert _calls(cluster, "clear_nomination") == [("clear_nomination", "default/new", "a100-1")]
    assert {k: cluster.pods[k].nominated_node for k in ("default/new", "default/old")} == {
        "default/new": "a100-2", "default/old": "a100-1"}
    clock.advance(5)
    assert scaler.tick().nominated == () and len(_calls(cluster, "clear_nomination")) == 1
