"""Scenario 4 with `gpuscale run` as real processes (leader election on, lease 3 s / renew 2 s / retry 0.5 s, scan
0.5 s): `kill -9` between scale-up and node Ready → the restarted controller orders no duplicate node; `kill -9`
during the unneeded period → the DeletionCandidate taint's clock survives and the node goes on the original
schedule; two replicas → only the leader acts, and after `kill -9` of the leader the other takes over within the
lease duration (+ retry) and acts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import _set_pdeathsig, wait_for
from harness_recovery import wait_control_plane_recovered
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_controller import A100, SEED_CONFIG, T4, _delete_managed_nodes, training_pod

from gpuscale.config import load_config
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProfile, KwokProvider, KwokSettings

LEASE = ["--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "0.5s"]
LEASE_S, RETRY_S = 3.0, 0.5


def write_config(tmp_path: Path, **overrides: Any) -> Path:
    raw = yaml.safe_load(SEED_CONFIG.read_text(encoding="utf-8"))
    raw |= {"scan_interval": "0.5s", "new_pod_scale_up_delay": "0s", "new_gpu_pod_scale_up_delay": "0s",
            "warm_capacity": [], **overrides}
    path = tmp_path / f"gpuscale-{len(list(tmp_path.glob('gpuscale-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@dataclass
class Proc:
    """One `gpuscale run` process; its log (stderr) goes to a file the test reads."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            brace = line.find(" {")
            if brace >= 0:
                try:
                    out.append(json.loads(line[brace + 1:]))
                except json.JSONDecodeError:
                    continue
        return out

    def scaled_up(self) -> list[tuple[str, int]]:
        return [(s["pool"], s["nodes"]) for f in self.lines() if f.get("msg") == "tick"
                for s in f.get("scaled_up", [])]

    def acted(self) -> bool:
        return any(f.get("msg") == "tick" and any(k in f for k in ("scaled_up", "deleted", "marked_unneeded"))
                   for f in self.lines())

    def leading(self) -> bool:
        states = [f["msg"] for f in self.lines() if f.get("msg") in ("leading", "standby")]
        return bool(states) and states[-1] == "leading"

    def tail(self) -> str:
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])

    def kill9(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)


@pytest.fixture
def start_gpuscale(control_plane: Any, core_v1: client.CoreV1Api, namespace: str,
                   tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    procs: list[Proc] = []
    _delete_managed_nodes(core_v1)

    def start(name: str, config: Path, *extra: str) -> Proc:
        log = tmp_path / f"{name}-{len(procs)}.log"
        env = {**os.environ, "POD_NAME": name}
        cmd = [str(Path(sys.executable).parent / "gpuscale"), "run", "--config", str(config), "--kubeconfig",
               str(control_plane.kubeconfig_path), "--namespace", namespace, "--metrics-address", "127.0.0.1:0",
               *LEASE, *extra]
        popen = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env,
                                 preexec_fn=_set_pdeathsig if sys.platform == "linux" else None)
        proc = Proc(name, popen, log)
        procs.append(proc)
        return proc

    yield start
    for pod in core_v1.list_namespaced_pod(namespace).items:
        core_v1.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    wait_for(lambda: not core_v1.list_namespaced_pod(namespace).items, 30, desc="the test's pods deleted")
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.terminate()
            try:
                proc.popen.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill9()
    _delete_managed_nodes(core_v1)


def _pool_nodes(core: client.CoreV1Api, pool: str) -> list[client.V1Node]:
    return [n for n in core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items
            if n.metadata.labels.get(POOL_LABEL) == pool]


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_kill_between_scale_up_and_ready_orders_no_duplicate(
        start_gpuscale: Callable[..., Proc], core_v1: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = start_gpuscale("first", config, "--kwok-ready-after", "10s", "--kwok-gpu-register-after", "1s")
    core_v1.create_namespaced_pod(namespace, training_pod("train"))
    nodes = wait_for(lambda: _pool_nodes(core_v1, A100), 60, desc=f"a node ordered\n{first.tail()}")
    assert not _ready(nodes[0])
    first.kill9()
    name = nodes[0].metadata.name
    second = start_gpuscale("second", config, "--kwok-ready-after", "10s", "--kwok-gpu-register-after", "1s")

    def running() -> bool:
        assert [n.metadata.name for n in _pool_nodes(core_v1, A100)] == [name], "a duplicate node was ordered"
        assert not [n for n in core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items
                    if n.metadata.labels.get(POOL_LABEL) != A100]
        pod = core_v1.read_namespaced_pod("train", namespace)
        return pod.status.phase == "Running" and pod.spec.node_name == name

    wait_for(running, 60, desc=f"the pod Running on the first node\n{second.tail()}")
    # the second process did lead and tick while the node was still starting — and ordered nothing
    ticks = [f for f in second.lines() if f.get("msg") == "tick" and f.get("synced")]
    assert ticks and second.scaled_up() == [], second.tail()


def _candidate_since(core: client.CoreV1Api, name: str) -> int | None:
    try:
        node = core.read_node(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    for taint in node.spec.taints or []:
        if taint.key == DELETION_CANDIDATE_TAINT:
            return int(taint.value)
    return None


def test_kill_during_unneeded_period_keeps_the_clock(
        start_gpuscale: Callable[..., Proc], api_client: client.ApiClient, core_v1: client.CoreV1Api,
        tmp_path: Path) -> None:
    unneeded_s = 12
    config = write_config(tmp_path, scale_down_unneeded_time=f"{unneeded_s}s",
                          scale_down_gpu_unneeded_time=f"{unneeded_s}s", scale_down_delay_after_add="0s")
    pools = load_config(config).pools
    kwok = KwokProvider(api_client, pools, KwokSettings(default=KwokProfile(ready_after_s=0, gpu_register_after_s=0)))
    (name,) = kwok.increase(T4, 1)  # an idle T4 node, as left by an earlier scale-up
    wait_for(lambda: _ready(n := core_v1.read_node(name)) and (n.status.allocatable or {}).get(NVIDIA_GPU) == "1",
             30, desc="idle node Ready with its GPU")
    first = start_gpuscale("first", config)
    since = wait_for(lambda: _candidate_since(core_v1, name), 30, desc=f"marked unneeded\n{first.tail()}")
    wait_for(lambda: time.time() >= since + unneeded_s / 3, unneeded_s, interval_s=0.1, desc="a third of the way")
    first.kill9()
    second = start_gpuscale("second", config)
    restarted = time.time()
    seen: set[int] = set()

    def gone() -> bool:
        value = _candidate_since(core_v1, name)
        if value is not None:
            seen.add(value)
        try:
            core_v1.read_node(name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(gone, unneeded_s + 30, interval_s=0.1, desc=f"node removed\n{second.tail()}")
    deleted = time.time()
    assert seen == {since}, f"the unneeded clock was rewritten: {seen} (first: {since})"
    assert deleted >= since + unneeded_s - 1  # not early …
    assert deleted < restarted + unneeded_s, (  # … and not on a clock restarted by the restart
        f"removed {deleted - since:.1f}s after the original mark, {deleted - restarted:.1f}s after the restart")
    wait_for(lambda: any("deleted" in f for f in second.lines() if f.get("msg") == "tick"), 5,
             desc="the second process logs the deletion")  # the log line follows the API call


def test_two_replicas_only_the_leader_acts_and_the_standby_takes_over(
        start_gpuscale: Callable[..., Proc], core_v1: client.CoreV1Api, namespace: str, api_client: client.ApiClient,
        tmp_path: Path) -> None:
    config = write_config(tmp_path)
    a = start_gpuscale("replica-a", config)
    wait_for(a.leading, 30, desc=f"replica-a leads\n{a.tail()}")
    b = start_gpuscale("replica-b", config)
    wait_for(lambda: any(f.get("msg") == "standby" for f in b.lines()) or b.popen.poll() is not None, 30,
             desc=f"replica-b up as standby\n{b.tail()}")
    core_v1.create_namespaced_pod(namespace, training_pod("train"))
    wait_for(lambda: _pool_nodes(core_v1, A100), 60, desc="a scale-up")
    wait_for(lambda: a.scaled_up(), 10, desc="replica-a logs it")
    time.sleep(LEASE_S)  # give a double-acting standby every chance to show itself
    assert len(_pool_nodes(core_v1, A100)) == 1
    assert a.scaled_up() == [(A100, 1)] and not b.acted() and not b.leading(), b.tail()

    lease = client.CoordinationV1Api(api_client)
    assert lease.read_namespaced_lease("gpuscale", namespace).spec.holder_identity.startswith("replica-a_")
    a.kill9()
    killed = time.monotonic()
    wait_for(lambda: lease.read_namespaced_lease("gpuscale", namespace).spec.holder_identity.startswith(
        "replica-b_"), LEASE_S + 10, interval_s=0.05, desc="replica-b takes the lease")
    took = time.monotonic() - killed
    assert took <= LEASE_S + 2 * 1.2 * RETRY_S + 1.0, took  # the lease duration plus retries (and a poll's slack)
    wait_for(b.leading, 5, desc="replica-b leading")
    t4_pod = training_pod("infer")
    t4_pod.spec.node_selector = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    t4_pod.spec.containers[0].resources = client.V1ResourceRequirements(
        requests={"cpu": "1", "memory": "1Gi", NVIDIA_GPU: "1"}, limits={NVIDIA_GPU: "1"})
    core_v1.create_namespaced_pod(namespace, t4_pod)
    wait_for(lambda: _pool_nodes(core_v1, T4), 30, desc=f"replica-b scales up T4\n{b.tail()}")
    wait_for(lambda: b.scaled_up(), 10, desc=f"replica-b logs it\n{b.tail()}")  # the log line follows the API call
    assert b.scaled_up() == [(T4, 1)] and len(_pool_nodes(core_v1, A100)) == 1, b.tail()
    assert re.search(r"became leader", b.log.read_text()), b.tail()


def test_apiserver_restart_mid_run_resumes_without_duplicate_actions(
        start_gpuscale: Callable[..., Proc], control_plane: Any, core_v1: client.CoreV1Api, namespace: str,
        tmp_path: Path) -> None:
    """Scenario 6 with the real process: the API server restarts (3–4 s, longer than the 2 s renew deadline) while
    the ordered node is still starting. The process survives, stops acting while it cannot renew, leads again, and
    orders no second node; the pod runs on the first one."""
    proc = start_gpuscale("survivor", write_config(tmp_path), "--kwok-ready-after", "8s",
                          "--kwok-gpu-register-after", "1s")
    wait_for(proc.leading, 30, desc=f"leading\n{proc.tail()}")
    core_v1.create_namespaced_pod(namespace, training_pod("train"))
    (node,) = wait_for(lambda: _pool_nodes(core_v1, A100), 60, desc=f"a node ordered\n{proc.tail()}")
    control_plane.restart_apiserver()
    synced_before = len([f for f in proc.lines() if f.get("msg") == "tick" and f.get("synced")])

    def running() -> bool:
        assert [n.metadata.name for n in _pool_nodes(core_v1, A100)] == [node.metadata.name], "duplicate node"
        pod = core_v1.read_namespaced_pod("train", namespace)
        return pod.status.phase == "Running" and pod.spec.node_name == node.metadata.name

    wait_for(running, 60, desc=f"the pod Running on the first node\n{proc.tail()}")
    assert proc.popen.poll() is None, proc.tail()
    assert proc.scaled_up() == [(A100, 1)], proc.tail()
    wait_for(lambda: len([f for f in proc.lines() if f.get("msg") == "tick" and f.get("synced")]) > synced_before + 3,
             10, desc="synced ticks after the restart")
    wait_control_plane_recovered(core_v1)
