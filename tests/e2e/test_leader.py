"""Leader election on a real Lease (kube/lease.py), the leader fence, the status ConfigMap and /metrics + /healthz,
against the real API server. Timings are shortened (lease 3 s, renew deadline 2 s, retry 0.25 s)."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml
from harness import wait_for
from harness_recovery import wait_control_plane_recovered
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_controller import (
    A100,
    create_pod,  # noqa: F401 (a fixture)
    seed_config,
    training_pod,
)

from gpuscale.controller import RunOptions, build_controller
from gpuscale.kube.fence import NotLeader
from gpuscale.kube.lease import LeaderElector, LeaseSettings
from gpuscale.kube.metrics import MetricsServer
from gpuscale.loop.report import Action
from gpuscale.loop.tick import LoopSettings
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL


@pytest.fixture
def lease(namespace: str) -> LeaseSettings:
    return LeaseSettings(name=f"lease-{uuid.uuid4().hex[:6]}", namespace=namespace, lease_duration_s=3,
                         renew_deadline_s=2.0, retry_period_s=0.25)


@pytest.fixture
def electors(api_client: client.ApiClient) -> Iterator[list[LeaderElector]]:
    made: list[LeaderElector] = []
    yield made
    for e in made:
        e.stop(release=False)


def _holder(api_client: client.ApiClient, lease: LeaseSettings) -> Any:
    return client.CoordinationV1Api(api_client).read_namespaced_lease(lease.name, lease.namespace).spec


def test_one_leader_then_takeover_after_expiry_and_at_once_after_release(
        api_client: client.ApiClient, lease: LeaseSettings, electors: list[LeaderElector]) -> None:
    a = LeaderElector(api_client, lease, identity="replica-a")
    b = LeaderElector(api_client, lease, identity="replica-b")
    electors += [a, b]
    a.start()
    wait_for(a.is_leader, 10, interval_s=0.05, desc="a leads")
    b.start()
    deadline = time.monotonic() + 3 * lease.lease_duration_s
    while time.monotonic() < deadline:  # b never leads while a renews
        assert a.is_leader() and not b.is_leader()
        time.sleep(0.05)
    spec = _holder(api_client, lease)
    assert (spec.holder_identity, spec.lease_duration_seconds, spec.lease_transitions) == ("replica-a", 3, 0)

    # a crashes (stops renewing, no release): b waits for the lease to expire by its own clock, then takes it
    a.stop(release=False)
    stopped = time.monotonic()
    wait_for(b.is_leader, lease.lease_duration_s + 5, interval_s=0.05, desc="b takes over")
    took = time.monotonic() - stopped
    # not before the lease could have expired (b saw a's last renewal at most one retry before a stopped) …
    assert took >= lease.lease_duration_s - 1.2 * lease.retry_period_s - 0.1, took
    spec = _holder(api_client, lease)
    assert (spec.holder_identity, spec.lease_transitions) == ("replica-b", 1)

    # b releases on a clean shutdown: a new candidate takes over at its first retry, long before expiry
    c = LeaderElector(api_client, lease, identity="replica-c")
    electors.append(c)
    c.start()
    time.sleep(0.5)
    assert not c.is_leader()
    b.stop(release=True)
    released = time.monotonic()
    wait_for(c.is_leader, 5, interval_s=0.02, desc="c takes over after the release")
    assert time.monotonic() - released < lease.lease_duration_s - 1, "waited for expiry despite the release"
    assert _holder(api_client, lease).lease_transitions == 2


def test_a_stale_write_loses_with_409(api_client: client.ApiClient, lease: LeaseSettings,
                                      electors: list[LeaderElector]) -> None:
    """Two candidates racing for a free lease: the write carrying an old resourceVersion is refused by the API
    server (optimistic concurrency), so only one becomes leader."""
    a = LeaderElector(api_client, lease, identity="a")
    b = LeaderElector(api_client, lease, identity="b")
    assert a.try_acquire_or_renew()
    a._release()  # free, as after a clean shutdown
    stale = b._read(5)
    assert not stale["spec"].get("holderIdentity")
    assert a.try_acquire_or_renew()  # a takes it back first …
    b._read = lambda timeout: stale  # type: ignore[method-assign]
    assert not b.try_acquire_or_renew()  # … b's write on the stale resourceVersion gets a 409
    assert _holder(api_client, lease).holder_identity == "a"


def test_leader_that_cannot_renew_stops_acting_before_the_lease_expires(
        control_plane: Any, api_client: client.ApiClient, lease: LeaseSettings,
        electors: list[LeaderElector]) -> None:
    a = LeaderElector(api_client, lease, identity="cut-off")
    electors.append(a)
    a.start()
    wait_for(a.is_leader, 10, interval_s=0.05, desc="a leads")
    control_plane.stop_apiserver()
    try:
        cut = time.monotonic()
        wait_for(lambda: not a.is_leader(), lease.lease_duration_s + 2, interval_s=0.02, desc="a stops leading")
        stopped_after = time.monotonic() - cut
    finally:
        control_plane.start_apiserver()
        wait_control_plane_recovered(client.CoreV1Api(api_client))
    # It stopped within the renew deadline of its last renewal, hence before anyone could see the lease expire.
    assert stopped_after <= lease.renew_deadline_s + 0.1 < lease.lease_duration_s, stopped_after


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_only_the_leader_acts_and_publishes_status_and_metrics(
        api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str, lease: LeaseSettings,
        create_pod: Callable[[client.V1Pod], None]) -> None:  # noqa: F811
    config = seed_config()
    settings = replace(LoopSettings.from_config(config), scan_interval_s=0.2)
    opts = RunOptions(namespace=namespace, leader_elect=True, lease=lease, status_name="gpuscale-status")
    leader = build_controller(api_client, config, settings=settings, options=replace(opts, identity="leader"))
    servers: list[MetricsServer] = []
    standby = None
    try:
        wait_for(leader.is_leader, 10, interval_s=0.05, desc="leader elected")
        standby = build_controller(api_client, config, settings=settings, options=replace(opts, identity="standby"))
        assert leader.cache.wait_synced(30) and standby.cache.wait_synced(30)
        create_pod(training_pod("train"))

        # the standby's writes are fenced: its tick decides the same scale-up but every action fails NotLeader
        def standby_decides() -> Any:
            report = standby.tick()
            return report if report.plan is not None and report.plan.scale_up else None

        report = wait_for(standby_decides, 30, desc="the standby decides a scale-up")
        assert report.scaled_up == ()
        assert {e.action for e in report.errors} >= {Action.SCALE_UP}
        assert all(e.error in ("NotLeader", NotLeader.__name__) or "not the leader" in e.message
                   for e in report.errors), report.errors
        assert not core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items

        report = wait_for(lambda: (r := leader.tick()).scaled_up and r, 30, desc="the leader scales up")
        assert [(s.pool, s.nodes) for s in report.scaled_up] == [(A100, 1)]

        def status() -> dict[str, Any] | None:
            leader.tick()
            try:
                cm = core_v1.read_namespaced_config_map("gpuscale-status", namespace)
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
            doc = yaml.safe_load(cm.data["status"])
            groups = {g["name"]: g for g in doc["nodeGroups"]}
            return doc if groups[A100]["target"] == 1 else None

        doc = wait_for(status, 30, desc="status ConfigMap with the A100 target")
        groups = {g["name"]: g for g in doc["nodeGroups"]}
        assert doc["leader"] == "leader" and doc["autoscalerStatus"] == "Running"
        assert groups[A100]["maxSize"] == 8 and "lastScaleUpTime" in groups[A100]
        assert groups["gpu-inference-t4"]["target"] == 0
        assert doc["clusterWide"]["limits"]["maxNodesTotal"] == 80

        assert leader.metrics is not None and standby.metrics is not None
        servers += [MetricsServer("127.0.0.1:0").serve(leader.metrics, leader.health),
                    MetricsServer("127.0.0.1:0").serve(standby.metrics, standby.health)]
        code, text = _get(f"http://127.0.0.1:{servers[0].port}/metrics")
        assert code == 200
        assert f'gpuscale_scaled_up_nodes_total{{pool="{A100}"}} 1.0' in text
        assert "gpuscale_leader 1.0" in text and "gpuscale_cache_synced 1.0" in text
        assert 'gpuscale_status_writes_total{result="ok"}' in text
        code, text = _get(f"http://127.0.0.1:{servers[1].port}/metrics")
        assert "gpuscale_leader 0.0" in text and "gpuscale_scaled_up_nodes_total{" not in text
        assert _get(f"http://127.0.0.1:{servers[0].port}/healthz")[0] == 200
        assert _get(f"http://127.0.0.1:{servers[1].port}/healthz")[0] == 200  # a standby that reaches the lease
        leader.last_tick_s = time.monotonic() - leader.health_window_s() - 1
        code, text = _get(f"http://127.0.0.1:{servers[0].port}/healthz")
        assert code == 500 and "last synced tick" in text
    finally:
        for s in servers:
            s.close()
        for c in (leader, standby):
            if c is not None:
                c.close()
        for node in core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
            core_v1.delete_node(node.metadata.name)
