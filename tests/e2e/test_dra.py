"""DRA scale from zero on the real control plane: a pending pod whose ResourceClaimTemplate asks
`device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"` scales the empty H100 pool (declared
with `resource_slices`), not the empty A100 pool beside it; the new node turns Ready, and only some seconds later its
ResourceSlice appears; no second node is ordered while it is missing; the real kube-scheduler allocates the claim
on the node's devices and binds the pod; kwok runs it.

The stand-in for NVIDIA's DRA kubelet plugin (`SlicePublisher`) acts through the API between ticks, as the real
plugin does once the GPU driver runs: it publishes `providers.kwok.resource_slice_bodies(pool, node)` for each node of
a pool with slices, `PUBLISH_AFTER_S` after the node is Ready. kwok runs no kubelet, so nothing prepares the device:
the pod goes Running by kwok's stages once bound.

Also here: the exact FailedScheduling messages kube-scheduler v1.37.2 gives for DRA pods, asserted against
tests/e2e/dra_messages.txt (the fixture gpuscale's DynamicResources filter words its verdicts after).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from differential_dra import A100_40, GPU_DRIVER, H100, NOT_YET, dra_unsupported, gpu_device, resource_slice
from harness import ignore_status, kwok_node_body, wait_for
from kubernetes import client
from test_controller import Driver, _ready, create_pod, make_driver  # noqa: F401  (fixtures)

from gpuscale.config import Config, parse_config
from gpuscale.kube.tracer import Tracer
from gpuscale.lifecycle.phases import Phase
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, resource_slice_bodies

H100_POOL, A100_POOL = "dra-h100", "dra-a100"
PUBLISH_AFTER_S = 3.0
MESSAGES = Path(__file__).with_name("dra_messages.txt")


def _shape(product: str, memory: str, arch: str) -> dict[str, Any]:
    return {"name": "gpu-{index}", "attributes": {
        "type": {"string": "gpu"}, "productName": {"string": product}, "architecture": {"string": arch},
        "driverVersion": {"version": "580.82.7"}, "index": {"int": "{index}"}, "uuid": {"string": "GPU-{index}"}},
        "capacity": {"memory": memory}}


def dra_config() -> Config:
    pools = [{"name": name, "max_size": 2, "allocatable": {"cpu": 96, "memory": "1Ti", "pods": 110},
              "resource_slices": [{"driver": GPU_DRIVER, "count": 8, "device": shape}]}
             for name, shape in ((H100_POOL, _shape(H100, "80Gi", "Hopper")),
                                 (A100_POOL, _shape(A100_40, "40Gi", "Ampere")))]
    config = parse_config({"pools": pools})
    return replace(config, policy=replace(config.policy, new_pod_delay_s=0.0, new_gpu_pod_delay_s=0.0, buffers=()))


@dataclass
class SlicePublisher:
    """Publishes a node's template slices `PUBLISH_AFTER_S` after it is first seen Ready; records when."""

    resource: client.ResourceV1Api
    core: client.CoreV1Api
    pools: dict[str, NodePool]
    ready_at: dict[str, float] = field(default_factory=dict)
    published_at: dict[str, float] = field(default_factory=dict)

    def step(self) -> None:
        for node in self.core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
            name = node.metadata.name
            pool = self.pools.get(node.metadata.labels.get(POOL_LABEL, ""))
            if pool is None or name in self.published_at or not _ready(node):
                continue
            first = self.ready_at.setdefault(name, time.monotonic())
            if time.monotonic() - first >= PUBLISH_AFTER_S:
                for body in resource_slice_bodies(pool, name):
                    self.resource.create_resource_slice(body)
                self.published_at[name] = time.monotonic()

    def remove(self) -> None:
        for name in self.published_at:
            for one in self.resource.list_resource_slice(field_selector=f"spec.nodeName={name}").items:
                ignore_status(404, self.resource.delete_resource_slice, one.metadata.name)


@pytest.fixture
def resource_v1(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


@pytest.fixture
def gpu_class(resource_v1: client.ResourceV1Api) -> Iterator[str]:
    name = "gpu.nvidia.com"
    ignore_status(409, resource_v1.create_device_class, {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]}})
    yield name
    ignore_status(404, resource_v1.delete_device_class, name)


def _template(name: str, cls: str, selector: str, count: int = 1) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": cls, "count": count, "selectors": [{"cel": {"expression": selector}}]}}]}}}}


def _claiming_pod(name: str, claim: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 0, "resourceClaims": [{"name": "gpu", **claim}],
        "containers": [{"name": "train", "image": "trainer:latest",
                        "resources": {"requests": {"cpu": "8"}, "claims": [{"name": "gpu"}]}}]}}


@pytest.mark.xfail(dra_unsupported(), reason=NOT_YET, strict=True)
def test_an_h100_claim_scales_the_h100_pool_from_zero_and_waits_for_its_slices(
        make_driver: Callable[..., Driver], core_v1: client.CoreV1Api,  # noqa: F811
        resource_v1: client.ResourceV1Api, namespace: str, gpu_class: str) -> None:
    config = dra_config()
    tracer = Tracer()
    driver = make_driver(config, tracer)
    publisher = SlicePublisher(resource_v1, core_v1, {p.name: p for p in config.pools})
    selector = f'device.attributes["{GPU_DRIVER}"].productName == "{H100}"'
    resource_v1.create_namespaced_resource_claim_template(namespace, _template("h100", gpu_class, selector))
    core_v1.create_namespaced_pod(namespace, _claiming_pod("train-h100", {"resourceClaimTemplateName": "h100"}))
    try:
        wait_for(lambda: _unschedulable(core_v1.read_namespaced_pod("train-h100", namespace)), 30,
                 desc="the pod Unschedulable (no node has devices)")
        driver.tick_until(driver.scale_ups, 60, "a scale-up")
        assert driver.scale_ups() == [(H100_POOL, 1)], driver.reports[-1]
        (node,) = driver.pool_nodes()[H100_POOL]
        name = node.metadata.name
        seen = {"ready_without_slices": 0}

        def one_node() -> None:
            publisher.step()
            nodes = driver.pool_nodes()
            assert set(nodes) == {H100_POOL} and [n.metadata.name for n in nodes[H100_POOL]] == [name], nodes
            assert driver.scale_ups() == [(H100_POOL, 1)], driver.reports[-1]
            if name in publisher.ready_at and name not in publisher.published_at and driver.reports[-1].synced:
                seen["ready_without_slices"] += 1

        def running() -> bool:
            pod = core_v1.read_namespaced_pod("train-h100", namespace)
            return pod.status.phase == "Running" and pod.spec.node_name == name

        driver.tick_until(running, 120, "the pod Running on the new H100 node", check=one_node)
        assert seen["ready_without_slices"] >= 5, seen  # ticked while the node was Ready without its slices
        assert publisher.published_at[name] - publisher.ready_at[name] >= PUBLISH_AFTER_S
        (claim,) = [c for c in resource_v1.list_namespaced_resource_claim(namespace).items
                    if c.metadata.annotations.get("resource.kubernetes.io/pod-claim-name") == "gpu"]
        results = claim.status.allocation.devices.results
        assert [(r.driver, r.pool) for r in results] == [(GPU_DRIVER, name)] and results[0].device.startswith("gpu-")
        for _ in range(10):  # running, with its slices: still one node
            driver.tick()
            one_node()
        tracer.flush()
        (trace,) = [t for t in tracer.traces() if t.pod == f"{namespace}/train-h100"]
        # Its wait for the node splits off the slices' publication, seen from the ResourceSlice watch.
        assert trace.new_node and trace.phases[Phase.SLICE_PUBLICATION] >= PUBLISH_AFTER_S - 1.0, trace.to_json()
        assert sum(trace.phases.values()) == pytest.approx(trace.pending_to_running_s, abs=1e-6)
        assert not [e for r in driver.reports for e in r.errors], [str(e) for r in driver.reports for e in r.errors]
    finally:
        ignore_status(404, core_v1.delete_namespaced_pod, "train-h100", namespace, grace_period_seconds=0)
        publisher.remove()


def _unschedulable(pod: client.V1Pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or [])


# ---------------------------------------------------------------- kube-scheduler's own words for DRA pods

NO_VERDICT_S = 5.0
"""How long a pod must stay without a PodScheduled condition to count as held before scheduling (PreEnqueue)."""


def fixture_messages() -> dict[str, str]:
    """case → verdict, from dra_messages.txt (`case<TAB>verdict` lines; `<node>`, `<claim>` and `<device>` stand
    for the names that change from run to run)."""
    out = {}
    for line in MESSAGES.read_text(encoding="utf-8").splitlines():
        case, _, verdict = line.partition("\t")
        out[case] = verdict
    return out


def _verdict(core_v1: client.CoreV1Api, namespace: str, name: str, node: str) -> str:
    """The scheduler's first verdict on a pod, its run-dependent names replaced: `bound`, `<reason>: <message>`, or
    `no verdict` when the pod stays without a PodScheduled condition (held by a PreEnqueue check)."""
    def outcome() -> str | None:
        pod = core_v1.read_namespaced_pod(name, namespace)
        if pod.spec.node_name:
            return "bound"
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False":
                return f"{c.reason}: {c.message}"
        return None

    try:
        text = str(wait_for(outcome, NO_VERDICT_S, interval_s=0.05, desc=f"the scheduler's verdict on {name}"))
    except AssertionError:
        return "no verdict"
    text = re.sub(r"claim ([-a-z0-9]+)/[-a-z0-9]+:", r"claim \1/<claim>:", text.replace(node, "<node>"))
    return re.sub(r"on device ([^/ ]+)/<node>/[-a-z0-9]+:", r"on device \1/<node>/<device>:", text)


def test_kube_scheduler_words_its_dra_verdicts_as_the_fixture_says(
        core_v1: client.CoreV1Api, resource_v1: client.ResourceV1Api, namespace: str, gpu_class: str) -> None:
    """One kwok node, then one pod per case: each pod's first verdict must be the fixture's (namespace `<ns>`)."""
    node = f"dra-words-{namespace[-5:]}"
    body = kwok_node_body(node, annotations={"gpuscale.io/ready-after": "0s"})
    body.status.allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    body.status.capacity = dict(body.status.allocatable)
    core_v1.create_node(body)
    got: dict[str, str] = {}
    attrs = f'device.attributes["{GPU_DRIVER}"]'

    def case(key: str, claim: dict[str, str], keep: bool = False) -> None:
        pod = f"words-{key}"
        core_v1.create_namespaced_pod(namespace, _claiming_pod(pod, claim))
        got[key] = _verdict(core_v1, namespace, pod, node).replace(namespace, "<ns>")
        if not keep:
            ignore_status(404, core_v1.delete_namespaced_pod, pod, namespace, grace_period_seconds=0)

    def template(key: str, selector: str = "true", count: int | None = 1, cls: str = gpu_class,
                 constraints: list[dict[str, Any]] | None = None) -> dict[str, str]:
        body = _template(key, cls, selector, count or 1)
        if count is None:
            exactly = body["spec"]["spec"]["devices"]["requests"][0]["exactly"]
            exactly.pop("count")
            exactly["allocationMode"] = "All"
        if constraints:
            body["spec"]["spec"]["devices"]["constraints"] = constraints
        resource_v1.create_namespaced_resource_claim_template(namespace, body)
        return {"resourceClaimTemplateName": key}

    try:
        wait_for(lambda: _ready(core_v1.read_node(node)), 30, desc="node Ready")
        time.sleep(1)  # the scheduler's informers see the node (no pod's verdict can tell)
        case("no-slices", template("no-slices"))
        devices = [gpu_device(0, H100), gpu_device(1, A100_40), *(gpu_device(i, H100) for i in range(2, 8))]
        resource_v1.create_resource_slice(resource_slice(f"{node}-gpu", node, GPU_DRIVER, devices))
        time.sleep(1)  # as above, for the slice
        case("exhausted", template("exhausted", count=9))
        case("cel-mismatch", template("cel-mismatch", f'{attrs}.productName == "NVIDIA B200"'))
        case("cel-missing-attribute", template("cel-missing-attribute", f'{attrs}.nosuch == "x"'))
        case("cel-missing-domain", template("cel-missing-domain", 'device.attributes["other.example.com"].x == 1'))
        case("cel-type-mismatch", template("cel-type-mismatch", f'{attrs}.index == "x"'))
        case("missing-device-class", template("missing-device-class", cls="nosuch"))
        case("missing-claim", {"resourceClaimName": "does-not-exist"})
        case("missing-template", {"resourceClaimTemplateName": "does-not-exist"})
        match = [{"matchAttribute": f"{GPU_DRIVER}/productName"}]
        case("match-attribute", template("match-attribute", f'{attrs}.index < 2', count=2, constraints=match))
        case("cel-and-quantity", template("cel-and-quantity", f'{attrs}.productName == "{H100}" && device.capacity['
                                          f'"{GPU_DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0'), keep=True)
        case("all-while-one-is-taken", template("all-while-one-is-taken", count=None))
    finally:
        for p in core_v1.list_namespaced_pod(namespace).items:
            ignore_status(404, core_v1.delete_namespaced_pod, p.metadata.name, namespace, grace_period_seconds=0)
        ignore_status(404, resource_v1.delete_resource_slice, f"{node}-gpu")
        ignore_status(404, core_v1.delete_node, node)
    expected = fixture_messages()
    assert got == expected, "\n".join(f"{k}\t{v}" for k, v in got.items())
