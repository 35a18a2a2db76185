"""Metrics from tick reports (kube/metrics.py), the HTTP endpoint on 127.0.0.1, and address parsing."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import Gauge

from gpuscale.config import load_config
from gpuscale.engine.plan import Plan, PodVerdict, Snapshot
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.kube.metrics import Metrics, MetricsServer, parse_address
from gpuscale.loop.ports import EvictionOutcome
from gpuscale.loop.report import Action, ActionError, Eviction, ScaleUpDone, TickReport
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import ConfigError
from gpuscale.model.node import POOL_LABEL
from tests.builders import make_node

SEED_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml"

CONFIG = load_config(SEED_CONFIG)
A100, T4 = "gpu-training-a100", "gpu-inference-t4"


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_use_pools_adds_and_removes_pool_gauges_and_keeps_counters() -> None:
    metrics = Metrics(CONFIG.pools)
    snapshot = Snapshot(cluster=Cluster(nodes=(make_node("a1", gpus=8, labels={POOL_LABEL: A100}),)))
    report = TickReport(now_s=10.0, synced=True, plan=Plan(),
                        scaled_up=(ScaleUpDone(pool=T4, nodes=1, request_ids=("x",)),))
    metrics.observe_tick(report, snapshot, EngineState(), 0.01)
    late = replace(CONFIG.pools[0], name="late-pool")
    metrics.use_pools([p for p in CONFIG.pools if p.name != T4] + [late])
    assert _value(metrics, "gpuscale_nodes", pool=T4, state="ready") is None  # gone, not left at its last value
    for zone in ("", "us-central1-a", "us-central1-b"):
        assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=T4, zone=zone) is None
    assert _value(metrics, "gpuscale_nodes", pool="late-pool", state="ready") == 0
    for zone in ("", *late.zones):
        assert _value(metrics, "gpuscale_pool_backoff_seconds", pool="late-pool", zone=zone) == 0
    one_zone = replace(late, zones=late.zones[:1])  # a zone leaves the pool's template: its series goes
    metrics.use_pools([p for p in CONFIG.pools if p.name != T4] + [one_zone])
    assert [_value(metrics, "gpuscale_pool_backoff_seconds", pool="late-pool", zone=z) for z in ("", *late.zones)] \
        == [0, 0, *([None] * (len(late.zones) - 1))]
    assert _value(metrics, "gpuscale_nodes", pool=A100, state="ready") == 1  # kept as it was
    assert _value(metrics, "gpuscale_scaled_up_nodes_total", pool=T4) == 1  # counters keep what they counted
    metrics.observe_tick(TickReport(now_s=20.0, synced=True, plan=Plan()), snapshot, EngineState(), 0.01)
    assert _value(metrics, "gpuscale_nodes", pool=T4, state="ready") is None


def test_observe_tick_counts_actions_per_pool() -> None:
    metrics = Metrics(CONFIG.pools)
    snapshot = Snapshot(cluster=Cluster(nodes=(make_node("a1", gpus=8, labels={POOL_LABEL: A100}),
                                               make_node("t1", gpus=1, labels={POOL_LABEL: T4}))))
    state = record_failure(EngineState(), T4, FailureKind.STOCKOUT, 100.0, CONFIG.policy)
    plan = Plan(unplaceable=(PodVerdict(pod="ns/a", reasons=()), PodVerdict(pod="ns/b", reasons=())))
    report = TickReport(now_s=110.0, synced=True, plan=plan, deleted=("t1",),
                        scaled_up=(ScaleUpDone(pool=A100, nodes=2, request_ids=("x", "y")),),
                        evictions=(Eviction(pod="ns/p", node="a1", outcome=EvictionOutcome.BLOCKED_BY_PDB),),
                        errors=(ActionError(action=Action.SCALE_UP, target=T4, error="e", message="m"),
                                ActionError(action=Action.EVICT, target="ns/p", error="e", message="m")))
    metrics.observe_tick(report, snapshot, state, 0.03)
    metrics.observe_tick(report, snapshot, state, 0.07)
    assert _value(metrics, "gpuscale_scaled_up_nodes_total", pool=A100) == 4
    assert _value(metrics, "gpuscale_scaled_down_nodes_total", pool=T4) == 2
    assert _value(metrics, "gpuscale_evictions_total", pool=A100, outcome="BlockedByPDB") == 2
    assert _value(metrics, "gpuscale_errors_total", pool=T4, action="scale-up") == 2
    assert _value(metrics, "gpuscale_errors_total", pool="", action="evict") == 2
    assert _value(metrics, "gpuscale_nodes", pool=A100, state="ready") == 1
    assert _value(metrics, "gpuscale_nodes", pool="cpu-general", state="ready") == 0
    assert _value(metrics, "gpuscale_unschedulable_pods", verdict="unplaceable") == 2
    assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=T4, zone="") == pytest.approx(
        CONFIG.policy.backoff_initial_s - 10)
    assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=A100, zone="") == 0
    for zone in ("us-central1-a", "us-central1-b"):  # the whole pool backs off, not one zone of it
        assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=T4, zone=zone) == 0
    assert _value(metrics, "gpuscale_tick_duration_seconds_count") == 2
    assert _value(metrics, "gpuscale_last_successful_tick_timestamp_seconds") == 110.0
    assert _value(metrics, "gpuscale_cache_synced") == 1
    metrics.observe_tick(TickReport(now_s=120.0, synced=False), None, state, 0.01)
    assert _value(metrics, "gpuscale_cache_synced") == 0
    assert _value(metrics, "gpuscale_last_successful_tick_timestamp_seconds") == 110.0


def test_server_serves_metrics_and_health_and_more_collectors() -> None:
    metrics = Metrics(CONFIG.pools)
    extra = Gauge("gpuscale_test_extra", "another collector on the same registry", registry=None)
    extra.set(7)
    metrics.register(extra)
    health = {"ok": True}
    server = MetricsServer("127.0.0.1:0").serve(metrics, lambda: (health["ok"], "why"))
    try:
        assert server.host == "127.0.0.1" and server.port > 0
        base = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "gpuscale_test_extra 7.0" in text and "# TYPE gpuscale_tick_duration_seconds histogram" in text
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
            assert resp.status == 200
        health["ok"] = False
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert err.value.code == 500 and err.value.read().decode().strip() == "why"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/other", timeout=5)
        assert err.value.code == 404
    finally:
        server.close()


@pytest.mark.parametrize(("text", "expected"), [("127.0.0.1:8085", ("127.0.0.1", 8085)), (":0", ("127.0.0.1", 0)),
                                                ("[::1]:9000", ("::1", 9000))])
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["8085", "host:port", "127.0.0.1:99999", ""])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="--metrics-address"):
        parse_address(text)


def test_a_port_in_use_is_a_config_error() -> None:
    first = MetricsServer("127.0.0.1:0")
    try:
        with pytest.raises(ConfigError, match=r"--metrics-address: cannot listen on 127\.0\.0\.1:"):
            MetricsServer(f"127.0.0.1:{first.port}")
    finally:
        first.close()


def test_a_zone_backoff_shows_in_its_zone_only() -> None:
    """A failed scale-up that named a zone backs off `pool/zone` (engine state); the gauge shows it under that zone."""
    metrics = Metrics(CONFIG.pools)
    state = record_failure(EngineState(), f"{T4}/us-central1-b", FailureKind.STOCKOUT, 100.0, CONFIG.policy)
    metrics.observe_tick(TickReport(now_s=110.0, synced=True, plan=Plan()), None, state, 0.01)
    assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=T4, zone="us-central1-b") == pytest.approx(
        CONFIG.policy.backoff_initial_s - 10)
    assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=T4, zone="us-central1-a") == 0
    assert _value(metrics, "gpuscale_pool_backoff_seconds", pool=T4, zone="") == 0
