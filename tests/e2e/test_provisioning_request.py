"""ProvisioningRequests against the real control plane: the pinned CRD installed into the API server, requests and
PodTemplates created as Kueue creates them (`ppt-<request>-<podset>`), the controller built as `gpuscale run` builds
it and ticked in-process; conditions are read back from the API server.

- best-effort-atomic, 4 × 8-GPU pods: 4 A100 nodes, Provisioned once they are Ready with GPUs; the consuming pods then
  run on them without a second scale-up;
- the same with the A100 pool's max_size 3: Failed with the limit as the reason, nothing ordered;
- check-capacity: answered without scaling; a second request for the same capacity is refused while the first one
  holds its booking, and the booking expires after `booking_s`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ignore_status, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_controller import (  # noqa: F401  (make_driver is a fixture)
    A100,
    KWOK,
    TICK_EVERY_S,
    Driver,
    make_driver,
    seed_config,
)

from gpuscale.config import Config
from gpuscale.controller import build_controller
from gpuscale.engine.provreq import BEST_EFFORT_ATOMIC, CHECK_CAPACITY, CONSUME_ANNOTATIONS
from gpuscale.kube.provreq import GROUP, PLURAL, VERSION
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.resources import NVIDIA_GPU

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy" / "crds" / "provisioning-request" / "autoscaling.x-k8s.io_provisioningrequests.yaml"


def install_crds(api_client: client.ApiClient, paths: list[Path]) -> None:
    """Create the CRDs (if absent) and wait until each is Established."""
    ext = client.ApiextensionsV1Api(api_client)
    for path in paths:
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        name = body["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise

        def established(name: str = name) -> bool:
            crd = ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for(established, 30, desc=f"CRD {name} Established")


@pytest.fixture(scope="module")
def provreq_crd(api_client: client.ApiClient) -> None:
    install_crds(api_client, [CRD])
    custom = client.CustomObjectsApi(api_client)
    wait_for(lambda: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1) is not None, 30,
             desc="ProvisioningRequests served")


def gpu_spec(gpus: int = 8) -> dict[str, Any]:
    return {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
            "tolerations": [{"key": NVIDIA_GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "trainer:latest",
                            "resources": {"requests": {"cpu": "4", "memory": "16Gi", NVIDIA_GPU: str(gpus)},
                                          "limits": {NVIDIA_GPU: str(gpus)}}}]}


@pytest.fixture
def make_request(api_client: client.ApiClient, core_v1: client.CoreV1Api,
                 namespace: str) -> Callable[..., str]:
    """Creates a PodTemplate `ppt-<name>-main` and a ProvisioningRequest `<name>` for `count` pods of it."""
    custom = client.CustomObjectsApi(api_client)

    def make(name: str, class_name: str, count: int) -> str:
        template = f"ppt-{name}-main"
        core_v1.create_namespaced_pod_template(namespace, {
            "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": template},
            "template": {"metadata": {"labels": {"app": name}}, "spec": gpu_spec()}})
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProvisioningRequest", "metadata": {"name": name},
            "spec": {"provisioningClassName": class_name,
                     "podSets": [{"podTemplateRef": {"name": template}, "count": count}]}})
        return name

    return make


def conditions(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    obj = client.CustomObjectsApi(api_client).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def condition_true(api_client: client.ApiClient, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
    found = conditions(api_client, namespace, name).get(type_)
    return found if found and found["status"] == "True" else None


def _ready_with_gpus(node: client.V1Node) -> bool:
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and int((node.status.allocatable or {}).get(NVIDIA_GPU, "0")) == 8


@pytest.fixture
def consumer_pods(core_v1: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        ignore_status(404, core_v1.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
    wait_for(lambda: not [p for p in core_v1.list_namespaced_pod(namespace).items if p.metadata.name in names], 30,
             desc="consumer pods deleted")


def test_atomic_request_for_four_8_gpu_pods_provisions_four_nodes(
        provreq_crd: None, make_driver: Callable[[Config], Driver], make_request: Callable[..., str],  # noqa: F811
        api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str, consumer_pods: list[str]) -> None:
    driver = make_driver(seed_config())
    name = make_request("train-4x8", BEST_EFFORT_ATOMIC, 4)

    def no_second_scale_up() -> None:
        assert driver.scale_ups() in ([], [(A100, 4)]), driver.scale_ups()

    provisioned = driver.tick_until(lambda: condition_true(api_client, namespace, name, "Provisioned"), 90,
                                    "Provisioned=True", check=no_second_scale_up)
    assert provisioned["reason"] == "Provisioned", provisioned
    assert driver.scale_ups() == [(A100, 4)]
    nodes = driver.pool_nodes()
    assert set(nodes) == {A100} and len(nodes[A100]) == 4, nodes
    assert all(_ready_with_gpus(n) for n in nodes[A100])  # Provisioned only once the capacity is really there
    seen = conditions(api_client, namespace, name)
    assert seen["Accepted"]["status"] == "True" and "Failed" not in seen, seen

    # The workload's pods arrive (as Kueue creates them after admission): the real scheduler binds them to the
    # provisioned nodes, and they trigger no second scale-up.
    for i in range(4):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"worker-{i}", "annotations": {CONSUME_ANNOTATIONS[0]: name}},
               "spec": gpu_spec()}
        core_v1.create_namespaced_pod(namespace, pod)
        consumer_pods.append(f"worker-{i}")

    def all_running() -> bool:
        pods = [core_v1.read_namespaced_pod(n, namespace) for n in consumer_pods]
        return all(p.status.phase == "Running" for p in pods)

    driver.tick_until(all_running, 60, "the 4 consuming pods Running", check=no_second_scale_up)
    hosts = {core_v1.read_namespaced_pod(n, namespace).spec.node_name for n in consumer_pods}
    assert hosts == {n.metadata.name for n in nodes[A100]}
    for _ in range(3):
        driver.tick()
    assert driver.scale_ups() == [(A100, 4)]
    assert not [e for r in driver.reports for e in r.errors], [str(e) for r in driver.reports for e in r.errors]


def test_atomic_request_beyond_pool_max_fails_and_orders_nothing(
        provreq_crd: None, make_driver: Callable[[Config], Driver], make_request: Callable[..., str],  # noqa: F811
        api_client: client.ApiClient, namespace: str) -> None:
    config = seed_config()
    config = replace(config, pools=tuple(replace(p, max_size=3) if p.name == A100 else p for p in config.pools))
    driver = make_driver(config)
    name = make_request("train-4x8", BEST_EFFORT_ATOMIC, 4)
    failed = driver.tick_until(lambda: condition_true(api_client, namespace, name, "Failed"), 60, "Failed=True")
    assert failed["reason"] in ("GangDoesNotFit", "LimitReached"), failed
    assert "max_size 3" in failed["message"], failed
    assert conditions(api_client, namespace, name)["Provisioned"]["status"] == "False"
    for _ in range(3):
        driver.tick()
    assert driver.scale_ups() == [] and driver.pool_nodes() == {}


def test_check_capacity_answers_without_scaling_and_counts_bookings(
        provreq_crd: None, make_driver: Callable[[Config], Driver], make_request: Callable[..., str],  # noqa: F811
        api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str) -> None:
    driver = make_driver(seed_config())
    first = make_request("check-a", CHECK_CAPACITY, 1)
    answer = driver.tick_until(lambda: conditions(api_client, namespace, first).get("Provisioned"), 30,
                               "an answer")
    assert (answer["status"], answer["reason"]) == ("False", "CapacityIsNotFound"), answer
    assert driver.scale_ups() == [] and driver.pool_nodes() == {}

    # One A100 node, added by hand (not by the autoscaler), becomes Ready with its GPUs.
    driver.controller.provider.increase(A100, 1)
    wait_for(lambda: [n for n in driver.pool_nodes().get(A100, []) if _ready_with_gpus(n)], 60,
             desc="an A100 node Ready with GPUs")
    found = driver.tick_until(lambda: condition_true(api_client, namespace, first, "Provisioned"), 30,
                              "Provisioned=True")
    assert found["reason"] == "CapacityIsFound", found

    # The first request's booking holds the node: a second request for the same capacity is refused.
    second = make_request("check-b", CHECK_CAPACITY, 1)
    refused = driver.tick_until(lambda: conditions(api_client, namespace, second).get("Provisioned"), 30,
                                "an answer for the second request")
    assert (refused["status"], refused["reason"]) == ("False", "CapacityIsNotFound"), refused
    assert driver.scale_ups() == []
    assert len(driver.pool_nodes()[A100]) == 1


@pytest.fixture
def create_and_clean(api_client: client.ApiClient) -> Iterator[Callable[..., dict[str, Any]]]:
    """Creates custom objects (`group, version, namespace or None, plural, body`); deletes the cluster-scoped ones
    afterwards (namespaced ones go with the test's namespace)."""
    custom = client.CustomObjectsApi(api_client)
    cluster_scoped: list[tuple[str, str, str, str]] = []

    def create(group: str, version: str, namespace: str | None, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        kind = {"resourceflavors": "ResourceFlavor", "provisioningrequestconfigs": "ProvisioningRequestConfig",
                "admissionchecks": "AdmissionCheck", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue",
                "workloads": "Workload"}.get(plural, "")
        body = {"apiVersion": f"{group}/{version}", "kind": kind, **body}
        if namespace is None:
            cluster_scoped.append((group, version, plural, body["metadata"]["name"]))
            result: dict[str, Any] = custom.create_cluster_custom_object(group, version, plural, body)
        else:
            result = custom.create_namespaced_custom_object(group, version, namespace, plural, body)
        return result

    yield create
    for group, version, plural, name in reversed(cluster_scoped):
        ignore_status(404, custom.delete_cluster_custom_object, group, version, plural, name)


def test_booking_expires_on_the_real_api_server(
        provreq_crd: None, make_driver: Callable[[Config], Driver], make_request: Callable[..., str],  # noqa: F811
        api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str) -> None:
    """A check-capacity answer books the node for `booking_s` (3 s here), then `BookingExpired=True`; the expiry is
    computed from the `lastTransitionTime` gpuscale wrote, read back from the API server."""
    driver = make_driver(seed_config())
    expiring = build_controller(api_client, seed_config(), kwok=KWOK, booking_s=3.0,
                                settings=replace(LoopSettings.from_config(seed_config()), scan_interval_s=TICK_EVERY_S))
    try:
        assert expiring.wait_synced(30)
        quick = Driver(expiring, core_v1)
        expiring.provider.increase(A100, 1)
        wait_for(lambda: [n for n in driver.pool_nodes().get(A100, []) if _ready_with_gpus(n)], 60,
                 desc="an A100 node Ready with GPUs")
        name = make_request("check-expiry", CHECK_CAPACITY, 1)
        found = quick.tick_until(lambda: condition_true(api_client, namespace, name, "Provisioned"), 30,
                                 "Provisioned=True")
        expired = quick.tick_until(lambda: condition_true(api_client, namespace, name, "BookingExpired"), 30,
                                   "BookingExpired=True")
        assert expired["reason"] == "BookingExpired"
        assert _seconds(expired["lastTransitionTime"]) - _seconds(found["lastTransitionTime"]) >= 3
        assert quick.scale_ups() == []
    finally:
        expiring.close()


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
