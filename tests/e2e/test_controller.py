"""The real controller against the real control plane: the objects `gpuscale run` composes (`build_controller`:
WatchCache, KubeWriter, KubeEvents, KwokProvider around the `Autoscaler`), driven in-process by calling `tick()`
with polling deadlines, so every step is observed between ticks.

Scenario 1: an A100 training pod goes Unschedulable → exactly one gpu-training-a100 node is added (not T4, not CPU)
→ kwok makes it Ready → its GPUs register after a delay → no second node is ordered meanwhile → the real scheduler
binds the pod → Running.
Scenario 5: the A100 pool is stocked out → it backs off → a second configured A100 pool is used instead.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ignore_status, wait_for
from kubernetes import client
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.config import Config, load_config
from gpuscale.controller import Controller, build_controller, run_loop
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT
from gpuscale.engine.state import FailureKind
from gpuscale.kube.cache import WatchCache
from gpuscale.kube.events import KubeEvents
from gpuscale.kube.tracer import Tracer
from gpuscale.kube.writer import KubeWriter
from gpuscale.loop.ports import EventType, EvictionOutcome, NotSynced
from gpuscale.loop.report import Action, TickReport
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProfile, KwokProvider, KwokSettings

REPO = Path(__file__).resolve().parents[2]
SEED_CONFIG = REPO / "examples" / "seed-pools" / "gpuscale.yaml"
A100, A100_B, T4, CPU = "gpu-training-a100", "gpu-training-a100-b", "gpu-inference-t4", "cpu-general"
TICK_EVERY_S = 0.2


def seed_config(extra_pools: tuple[NodePool, ...] = ()) -> Config:
    """The seed pools, with the batching delays at 0 and no warm-capacity buffer (it would add a T4 node)."""
    config = load_config(SEED_CONFIG)
    policy = replace(config.policy, new_pod_delay_s=0.0, new_gpu_pod_delay_s=0.0, buffers=())
    return replace(config, pools=config.pools + extra_pools, policy=policy)


KWOK = KwokSettings(default=KwokProfile(ready_after_s=2.0, gpu_register_after_s=4.0))


def training_pod(name: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "train"}),
        spec=client.V1PodSpec(
            node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
            tolerations=[client.V1Toleration(key=NVIDIA_GPU, operator="Exists", effect="NoSchedule")],
            containers=[client.V1Container(
                name="train", image="trainer:latest",
                resources=client.V1ResourceRequirements(requests={"cpu": "4", "memory": "16Gi", NVIDIA_GPU: "1"},
                                                        limits={NVIDIA_GPU: "1"}))]))


@dataclass
class Driver:
    """Ticks the controller and keeps every report; `pool_nodes()` reads the API directly (not the cache)."""

    controller: Controller
    core: client.CoreV1Api
    reports: list[TickReport] = field(default_factory=list)

    def tick(self) -> TickReport:
        report = self.controller.autoscaler.tick()
        self.reports.append(report)
        return report

    def tick_until(self, predicate: Callable[[], Any], timeout_s: float, desc: str,
                   check: Callable[[], None] | None = None) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            self.tick()
            if check is not None:
                check()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {desc}; last report: "
                                     f"{self.reports[-1]}")
            time.sleep(TICK_EVERY_S)

    def pool_nodes(self) -> dict[str, list[client.V1Node]]:
        by_pool: dict[str, list[client.V1Node]] = {}
        for node in self.core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
            by_pool.setdefault(node.metadata.labels[POOL_LABEL], []).append(node)
        return by_pool

    def scale_ups(self) -> list[tuple[str, int]]:
        return [(s.pool, s.nodes) for r in self.reports for s in r.scaled_up]


def _story(driver: Driver) -> str:
    """The ticks that did something, for assertion messages."""
    lines = []
    for i, r in enumerate(driver.reports):
        if r.scaled_up or r.errors or not r.synced:
            covered = [(v.pod, [x.message for x in v.reasons]) for v in (r.plan.covered if r.plan else ())]
            lines.append(f"tick {i} synced={r.synced} scaled_up={r.scaled_up} errors={r.errors} covered={covered}")
    nodes = [(n.metadata.name, str(n.metadata.creation_timestamp)) for ns in driver.pool_nodes().values()
             for n in ns]
    return "\n".join(lines[-10:]) + f"\nnodes: {nodes}; ticks: {len(driver.reports)}"


def _delete_managed_nodes(core: client.CoreV1Api) -> None:
    for node in core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
        ignore_status(404, core.delete_node, node.metadata.name)


@pytest.fixture
def make_driver(api_client: client.ApiClient,
                core_v1: client.CoreV1Api) -> Iterator[Callable[..., Driver]]:
    """Builds the controller as `gpuscale run` does (kwok delays shortened; a phase tracer if given) and cleans up its
    nodes afterwards."""
    _delete_managed_nodes(core_v1)
    built: list[Controller] = []

    def make(config: Config, tracer: Tracer | None = None) -> Driver:
        controller = build_controller(api_client, config, kwok=KWOK, tracer=tracer,
                                      settings=replace(LoopSettings.from_config(config), scan_interval_s=TICK_EVERY_S))
        built.append(controller)
        assert controller.wait_synced(30), controller.cache.status()
        return Driver(controller, core_v1)

    yield make
    for controller in built:
        controller.close()
    _delete_managed_nodes(core_v1)


@pytest.fixture
def create_pod(core_v1: client.CoreV1Api, namespace: str) -> Iterator[Callable[[client.V1Pod], None]]:
    """Creates pods in the test's namespace; afterwards deletes them (grace 0) and waits until they are gone, so no
    pod of this test is still pending or terminating when the next test's controller starts watching."""
    names: list[str] = []

    def create(pod: client.V1Pod) -> None:
        core_v1.create_namespaced_pod(namespace, pod)
        names.append(pod.metadata.name)

    yield create
    for name in names:
        ignore_status(404, core_v1.delete_namespaced_pod, name, namespace, grace_period_seconds=0)

    def gone() -> bool:
        return not [p for p in core_v1.list_namespaced_pod(namespace).items if p.metadata.name in names]

    wait_for(gone, 30, desc="the test's pods deleted")


def _pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    return core.read_namespaced_pod(name, namespace)


def _unschedulable(pod: client.V1Pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or [])


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _gpus(node: client.V1Node) -> int:
    return int((node.status.allocatable or {}).get(NVIDIA_GPU, "0"))


def test_a100_pod_gets_exactly_one_a100_node_and_runs(make_driver: Callable[[Config], Driver],
                                                       core_v1: client.CoreV1Api, namespace: str,
                                                       create_pod: Callable[[client.V1Pod], None]) -> None:
    driver = make_driver(seed_config())
    create_pod(training_pod("train-a100"))
    wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-a100")), 30, desc="pod Unschedulable")

    driver.tick_until(driver.scale_ups, 30, "a scale-up")
    assert driver.scale_ups() == [(A100, 1)], driver.reports[-1]
    nodes = driver.pool_nodes()
    assert set(nodes) == {A100} and len(nodes[A100]) == 1, nodes
    name = nodes[A100][0].metadata.name
    assert _gpus(nodes[A100][0]) == 0  # GPUs withheld until the fake device plugin registers them

    seen = {"ready_without_gpus": 0, "ticks_while_waiting": 0, "nominated": 0}

    def still_one_node() -> None:
        nodes = driver.pool_nodes()
        assert set(nodes) == {A100} and [n.metadata.name for n in nodes[A100]] == [name], _story(driver)
        assert driver.scale_ups() == [(A100, 1)], driver.reports[-1]
        node = nodes[A100][0]
        if _ready(node) and _gpus(node) == 0:
            seen["ready_without_gpus"] += 1
        if driver.reports[-1].synced:
            seen["ticks_while_waiting"] += 1
        pod = _pod(core_v1, namespace, "train-a100")
        if pod.spec.node_name is None and pod.status.nominated_node_name == name:
            seen["nominated"] += 1  # KEP-5278: kube-scheduler keeps the starting node's room for it

    def running() -> bool:
        pod = _pod(core_v1, namespace, "train-a100")
        return pod.status.phase == "Running" and pod.spec.node_name == name

    driver.tick_until(running, 60, "the pod Running on the new node", check=still_one_node)
    assert seen["ready_without_gpus"] >= 3, seen  # ticked several times while the node waited for its GPUs
    assert seen["ticks_while_waiting"] >= 10, seen
    assert seen["nominated"] >= 3, seen
    assert _pod(core_v1, namespace, "train-a100").status.nominated_node_name is None  # cleared at bind
    assert _gpus(core_v1.read_node(name)) == 8
    assert not [e for r in driver.reports for e in r.errors], [str(e) for r in driver.reports for e in r.errors]
    triggered = core_v1.list_namespaced_event(namespace, field_selector="reason=TriggeredScaleUp").items
    assert any(e.involved_object.name == "train-a100" and A100 in e.message for e in triggered)


def test_a_pod_arriving_mid_interval_is_decided_within_its_batch_window(
        api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str,
        create_pod: Callable[[client.V1Pod], None]) -> None:
    """`run_loop` with a 60 s scan: the watch sees the pod turn Unschedulable and the controller orders its node when
    the 3 s batch window closes (D39, D40), long before the next scan."""
    _delete_managed_nodes(core_v1)
    config = seed_config()
    assert (config.policy.batch_idle_s, config.policy.batch_max_s) == (3.0, 10.0)
    controller = build_controller(api_client, config, kwok=KWOK,
                                  settings=replace(LoopSettings.from_config(config), scan_interval_s=60.0))
    lines: list[dict[str, Any]] = []
    stop = threading.Event()
    loop = threading.Thread(target=run_loop, args=(controller,), kwargs={"stop": stop, "emit": lines.append})
    loop.start()
    try:
        wait_for(lambda: any("scaled_up" in line or line.get("synced") for line in lines), 30, desc="a first tick")
        create_pod(training_pod("train-now"))
        wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-now")), 30, desc="pod Unschedulable")
        wait_for(lambda: any("scaled_up" in line for line in lines), 30, desc="a scale-up before the next scan")
        [ordered] = [line for line in lines if "scaled_up" in line]
        assert [(s["pool"], s["nodes"]) for s in ordered["scaled_up"]] == [(A100, 1)]
        created = _pod(core_v1, namespace, "train-now").metadata.creation_timestamp.timestamp()
        # Decided once the window closed (3 s after the pod), within a few seconds (the scheduler's attempt, the
        # watch, one decision), against up to 60 s for the next scan.
        assert 3.0 <= ordered["now"] - created < 12.0, (ordered["now"] - created, lines)
    finally:
        stop.set()
        loop.join(30)
        controller.close()
        _delete_managed_nodes(core_v1)


def test_stockout_backs_off_and_falls_back_to_second_a100_pool(make_driver: Callable[[Config], Driver],
                                                               core_v1: client.CoreV1Api, namespace: str,
                                                               create_pod: Callable[[client.V1Pod], None]) -> None:
    base = next(p for p in seed_config().pools if p.name == A100)
    # A second A100 pool in another zone, a little dearer: the expanders pick the first until it is stocked out.
    second = replace(base, name=A100_B, zones=("us-central1-b",), usd_per_hour=base.usd_per_hour + 1,
                     labels={**base.labels, "cloud.google.com/gke-nodepool": A100_B})
    driver = make_driver(seed_config((second,)))
    provider = driver.controller.provider
    assert isinstance(provider, KwokProvider)
    provider.stockout_pools.add(A100)
    create_pod(training_pod("train-a100"))
    wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-a100")), 30, desc="pod Unschedulable")

    driver.tick_until(driver.scale_ups, 30, "a scale-up on the fallback pool")
    failures = [e for r in driver.reports for e in r.errors if e.action is Action.SCALE_UP]
    assert [(e.target, e.error) for e in failures] == [(A100, str(FailureKind.STOCKOUT))], failures
    assert A100 in driver.controller.autoscaler.state.backoff
    assert driver.scale_ups() == [(A100_B, 1)]
    name = driver.pool_nodes()[A100_B][0].metadata.name

    def one_fallback_node() -> None:
        nodes = driver.pool_nodes()
        assert set(nodes) == {A100_B} and len(nodes[A100_B]) == 1, nodes
        assert driver.scale_ups() == [(A100_B, 1)]

    driver.tick_until(lambda: _pod(core_v1, namespace, "train-a100").status.phase == "Running", 60,
                      "the pod Running on the fallback node", check=one_fallback_node)
    assert _pod(core_v1, namespace, "train-a100").spec.node_name == name


def test_a_pod_pinned_to_one_zone_of_a_multi_zone_pool_gets_a_node_in_that_zone(
        make_driver: Callable[[Config], Driver], core_v1: client.CoreV1Api, namespace: str,
        create_pod: Callable[[client.V1Pod], None]) -> None:
    """The A100 pool lists three zones; a pod whose nodeSelector asks the third gets exactly one node, created by
    the kwok provider in that zone, and runs there."""
    config = seed_config()
    zones = ("us-central1-a", "us-central1-b", "us-central1-c")
    config = replace(config, pools=tuple(replace(p, zones=zones) if p.name == A100 else p for p in config.pools))
    driver = make_driver(config)
    pod = training_pod("train-c")
    pod.spec.node_selector = {**pod.spec.node_selector, "topology.kubernetes.io/zone": zones[2]}
    create_pod(pod)
    wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-c")), 30, desc="pod Unschedulable")

    driver.tick_until(driver.scale_ups, 30, "a scale-up")
    assert driver.scale_ups() == [(A100, 1)], driver.reports[-1]
    [node] = driver.pool_nodes()[A100]
    assert node.metadata.labels["topology.kubernetes.io/zone"] == zones[2]

    def one_node() -> None:
        assert [n.metadata.name for n in driver.pool_nodes()[A100]] == [node.metadata.name], _story(driver)

    driver.tick_until(lambda: _pod(core_v1, namespace, "train-c").status.phase == "Running", 60,
                      "the pod Running on the zone-c node", check=one_node)
    assert _pod(core_v1, namespace, "train-c").spec.node_name == node.metadata.name


def _undelayed_config(tmp_path: Path) -> Path:
    """The seed config without scale-up delays or warm capacity, written to `tmp_path`: one tick decides."""
    raw = yaml.safe_load(SEED_CONFIG.read_text(encoding="utf-8"))
    raw |= {"new_pod_scale_up_delay": "0s", "new_gpu_pod_scale_up_delay": "0s", "batch_idle_duration": "0s",
            "warm_capacity": []}
    config_path = tmp_path / "gpuscale.yaml"
    config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return config_path


def test_run_once_dry_run_decides_and_acts_on_nothing(control_plane: Any, core_v1: client.CoreV1Api, namespace: str,
                                                      create_pod: Callable[[client.V1Pod], None], tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """`gpuscale run --once --dry-run`: the real composition from the CLI logs the A100 scale-up it would make and
    creates nothing."""
    config_path = _undelayed_config(tmp_path)
    _delete_managed_nodes(core_v1)
    create_pod(training_pod("train-a100"))
    wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-a100")), 30, desc="pod Unschedulable")

    caplog.set_level(logging.INFO, logger="gpuscale")
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(control_plane.kubeconfig_path),
                                      "--config", str(config_path), "--once", "--dry-run"])
    assert result.exit_code == 0, (result.output, caplog.text)
    would = [json.loads(r.getMessage()) for r in caplog.records
             if r.name == "gpuscale.controller" and "would scale up" in r.getMessage()]
    assert would == [{"msg": "dry-run: would scale up", "pool": A100, "nodes": 1}], caplog.text
    ticks = [json.loads(r.getMessage()) for r in caplog.records
             if r.name == "gpuscale.controller" and r.getMessage().startswith('{"') and '"msg": "tick"' in
             r.getMessage()]
    assert len(ticks) == 1 and ticks[0]["synced"] is True, caplog.text
    items = [json.loads(r.getMessage()) for r in caplog.records
             if r.name == "gpuscale.controller" and '"msg": "plan item"' in r.getMessage()]
    (up,) = [i for i in items if i["kind"] == "scale_up"]
    assert (up["pool"], up["nodes"], up["pods"], up["codes"][0]) == (A100, 1, [f"{namespace}/train-a100"], "ScaleUp")
    assert driver_free_of_nodes(core_v1)
    assert _pod(core_v1, namespace, "train-a100").spec.node_name is None


def test_run_log_format_json_writes_one_object_per_line(control_plane: Any, core_v1: client.CoreV1Api,
                                                         namespace: str, create_pod: Callable[[client.V1Pod], None],
                                                         tmp_path: Path) -> None:
    """`gpuscale run --log-format json` as its own process: every stderr line is a JSON object with time, level and
    logger, and the plan item for the A100 scale-up carries its kind, pool, pod and reason codes as fields."""
    config_path = _undelayed_config(tmp_path)
    _delete_managed_nodes(core_v1)
    create_pod(training_pod("train-json"))
    wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-json")), 30, desc="pod Unschedulable")
    gpuscale = Path(sys.executable).parent / "gpuscale"
    done = subprocess.run([str(gpuscale), "run", "--kubeconfig", str(control_plane.kubeconfig_path), "--config",
                           str(config_path), "--once", "--dry-run", "--log-format", "json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line parses
    assert all({"time", "level", "logger", "msg"} <= line.keys() for line in lines), done.stderr
    (up,) = [line for line in lines if line["msg"] == "plan item" and line["kind"] == "scale_up"]
    assert (up["logger"], up["level"], up["pool"], up["pods"], up["codes"][0]) == (
        "gpuscale.controller", "INFO", A100, [f"{namespace}/train-json"], "ScaleUp")
    assert any(line["msg"] == "tick" and line["synced"] is True for line in lines)


def driver_free_of_nodes(core: client.CoreV1Api) -> bool:
    return not core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items


def test_cache_relists_after_an_apiserver_restart(control_plane: Any, api_client: client.ApiClient,
                                                  core_v1: client.CoreV1Api, namespace: str,
                                                  create_pod: Callable[[client.V1Pod], None]) -> None:
    """The watches break when the API server goes away; the cache closes its gate, relists once it is back, and
    sees objects created after the restart."""
    cache = WatchCache(api_client, max_backoff_s=0.5).start()
    try:
        assert cache.wait_synced(30), cache.status()
        lists_before = {k: v["lists"] for k, v in cache.status().items()}
        control_plane.restart_apiserver()
        wait_for(lambda: all(v["lists"] > lists_before[k] for k, v in cache.status().items()), 60,
                 desc=f"every kind relisted: {cache.status()}")
        create_pod(training_pod("after-restart"))
        pods = wait_for(lambda: [p for p in _snapshot_or_none(cache) or () if p.name == "after-restart"], 30,
                        desc="the new pod in the cache")
        assert pods[0].namespace == namespace
    finally:
        cache.close()


def _snapshot_or_none(cache: WatchCache) -> tuple[Any, ...] | None:
    try:
        return cache.snapshot().pods
    except NotSynced:
        return None


def test_writer_taints_cordons_and_evicts_through_the_api(api_client: client.ApiClient, core_v1: client.CoreV1Api,
                                                          namespace: str, make_node: Callable[..., client.V1Node],
                                                          create_pod: Callable[[client.V1Pod], None]) -> None:
    writer, events = KubeWriter(api_client), KubeEvents(api_client)
    name = make_node("writer", annotations={"gpuscale.io/ready-after": "0s"}).metadata.name
    wait_for(lambda: _ready(core_v1.read_node(name)), 30, desc="node Ready")

    def taints() -> dict[str, tuple[str, str]]:
        return {t.key: (t.value, t.effect) for t in core_v1.read_node(name).spec.taints or []}

    writer.set_deletion_candidate(name, 1_800_000_000.7)
    rv = core_v1.read_node(name).metadata.resource_version
    writer.set_deletion_candidate(name, 1_800_000_000)  # the same taint again: nothing written
    assert core_v1.read_node(name).metadata.resource_version == rv
    assert taints()[DELETION_CANDIDATE_TAINT] == ("1800000000", "PreferNoSchedule")
    writer.set_deletion_candidate(name, 1_800_000_100)  # a newer one replaces it
    assert taints()[DELETION_CANDIDATE_TAINT] == ("1800000100", "PreferNoSchedule")
    writer.clear_deletion_candidate(name)
    assert DELETION_CANDIDATE_TAINT not in taints()

    writer.mark_to_be_deleted(name, 1_800_000_200)
    writer.mark_to_be_deleted(name, 1_800_000_300)  # keeps the first mark's time
    assert taints()[TO_BE_DELETED_TAINT] == ("1800000200", "NoSchedule")
    assert core_v1.read_node(name).spec.unschedulable is True
    writer.unmark_to_be_deleted(name)
    assert TO_BE_DELETED_TAINT not in taints() and not core_v1.read_node(name).spec.unschedulable

    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="victim", labels={"app": "victim"}),
                       spec=client.V1PodSpec(node_name=name, containers=[client.V1Container(name="c", image="x")]))
    create_pod(pod)
    wait_for(lambda: _pod(core_v1, namespace, "victim").status.phase == "Running", 30, desc="pod Running")
    policy = client.PolicyV1Api(api_client)
    policy.create_namespaced_pod_disruption_budget(namespace, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="keep-one"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1,
                                              selector=client.V1LabelSelector(match_labels={"app": "victim"}))))
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("keep-one", namespace).status.observed_generation
                      or 0) >= 1, 30, desc="PDB status computed")
    assert writer.evict(f"{namespace}/victim") is EvictionOutcome.BLOCKED_BY_PDB
    policy.delete_namespaced_pod_disruption_budget("keep-one", namespace)
    assert wait_for(lambda: writer.evict(f"{namespace}/victim") is EvictionOutcome.EVICTED, 30, desc="evicted")
    assert writer.evict(f"{namespace}/no-such-pod") is EvictionOutcome.GONE

    events.emit("Pod", f"{namespace}/victim", EventType.NORMAL, "ScaleDown", "deleting pod for node scale down")
    events.emit("Node", name, EventType.WARNING, "ScaleDownFailed", "failed to remove the node")
    pod_events = core_v1.list_namespaced_event(namespace, field_selector="reason=ScaleDown").items
    assert [(e.involved_object.kind, e.involved_object.name, e.type, e.source.component) for e in pod_events] == [
        ("Pod", "victim", "Normal", "gpuscale")]
    node_events = core_v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    assert [(e.reason, e.type) for e in node_events if e.source.component == "gpuscale"] == [
        ("ScaleDownFailed", "Warning")]


def _claim_volume(pod: client.V1Pod, claim: str) -> client.V1Pod:
    pod.spec.volumes = [client.V1Volume(name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
        claim_name=claim))]
    return pod


def test_a_pod_whose_claim_is_bound_to_a_zone_b_volume_gets_a_node_in_zone_b(
        make_driver: Callable[[Config], Driver], core_v1: client.CoreV1Api, namespace: str,
        create_pod: Callable[[client.V1Pod], None]) -> None:
    """The A100 pool lists three zones; the pod's PVC is bound (by kube-controller-manager's PV controller) to a PV
    whose node affinity holds in the second zone only: the scale-up adds one node there, and the pod runs on it."""
    config = seed_config()
    zones = ("us-central1-a", "us-central1-b", "us-central1-c")
    config = replace(config, pools=tuple(replace(p, zones=zones) if p.name == A100 else p for p in config.pools))
    pv_name = f"data-{namespace}"
    core_v1.create_persistent_volume({"metadata": {"name": pv_name}, "spec": {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain", "csi": {"driver": "csi.example.com", "volumeHandle": pv_name},
        "claimRef": {"namespace": namespace, "name": "data"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zones[1]]}]}]}}}})
    try:
        core_v1.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}}}})
        wait_for(lambda: core_v1.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound",
                 60, desc="the claim Bound by the PV controller")
        driver = make_driver(config)
        create_pod(_claim_volume(training_pod("train-b"), "data"))
        wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-b")), 30, desc="pod Unschedulable")
        driver.tick_until(driver.scale_ups, 30, "a scale-up")
        assert driver.scale_ups() == [(A100, 1)], driver.reports[-1]
        [node] = driver.pool_nodes()[A100]
        assert node.metadata.labels["topology.kubernetes.io/zone"] == zones[1]
        driver.tick_until(lambda: _pod(core_v1, namespace, "train-b").status.phase == "Running", 60,
                          "the pod Running on the zone-b node")
        assert _pod(core_v1, namespace, "train-b").spec.node_name == node.metadata.name
    finally:
        ignore_status(404, core_v1.delete_persistent_volume, pv_name)


def test_a_wait_for_first_consumer_claim_scales_a_pool_in_an_allowed_zone(
        make_driver: Callable[[Config], Driver], core_v1: client.CoreV1Api, namespace: str,
        create_pod: Callable[[client.V1Pod], None]) -> None:
    """An unbound claim of a WaitForFirstConsumer class allowed in the third zone only: the scale-up adds one node
    there (no provisioner runs here, so the pod is not expected to start)."""
    config = seed_config()
    zones = ("us-central1-a", "us-central1-b", "us-central1-c")
    config = replace(config, pools=tuple(replace(p, zones=zones) if p.name == A100 else p for p in config.pools))
    storage_v1 = client.StorageV1Api(core_v1.api_client)
    cls = f"zone-c-{namespace}"
    storage_v1.create_storage_class({"metadata": {"name": cls}, "provisioner": "csi.example.com",
                                     "volumeBindingMode": "WaitForFirstConsumer", "allowedTopologies": [
                                         {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone",
                                                                     "values": [zones[2]]}]}]})
    try:
        core_v1.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "scratch"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": cls, "resources": {"requests": {"storage": "1Gi"}}}})
        driver = make_driver(config)
        create_pod(_claim_volume(training_pod("train-c"), "scratch"))
        wait_for(lambda: _unschedulable(_pod(core_v1, namespace, "train-c")), 30, desc="pod Unschedulable")
        driver.tick_until(driver.scale_ups, 30, "a scale-up")
        assert driver.scale_ups() == [(A100, 1)], driver.reports[-1]
        [node] = driver.pool_nodes()[A100]
        assert node.metadata.labels["topology.kubernetes.io/zone"] == zones[2]
    finally:
        ignore_status(404, storage_v1.delete_storage_class, cls)
