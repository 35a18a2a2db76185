"""GPU nodes start as operators really start them, on the real control plane: the controller orders exactly the nodes
four pending 8-GPU pods need and never one more while each node goes through its set-up, then every pod runs.

The set-up is played by a test-side "operator" acting through the API between ticks, as the NVIDIA GPU operator, GPU
feature discovery and the Node Readiness Controller do (they are API clients too): a new node turns Ready (kwok's
node-initialize stage), the operator cordons it, its GPUs register (kwok's fake device plugin stage), the GFD labels
`nvidia.com/gpu.product`, `nvidia.com/gpu.count` and `nvidia.com/mig.config` appear `LABELS_AFTER_S` later (20 s on
real hosts, compressed here; the order of events is kept), then the node is uncordoned and its `readiness.k8s.io/`
taint removed. kwok Stages are not used for the operator's steps: they patch the status subresource, and a chain of
spec patches (cordon, labels, uncordon, taint) keyed on each other would have kwok pick one matching stage at random
per event and restart its delay on every change, so the order of events could not be relied on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from test_controller import A100, Driver, _ready, create_pod, make_driver, seed_config  # noqa: F401  (fixtures)

from gpuscale.config import Config
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProvider

PRODUCT, COUNT, MIG = "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/mig.config"
GFD_LABELS = (PRODUCT, COUNT, MIG)
LABELS_AFTER_S = 2.0
PODS = 4


@dataclass
class Operator:
    """Advances each managed node one step of the set-up per call, in order; records what it did and when."""

    core: client.CoreV1Api
    taint: str
    gpus_seen_s: dict[str, float] = field(default_factory=dict)
    done: dict[str, list[str]] = field(default_factory=dict)

    def step(self) -> None:
        for node in self.core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
            self._advance(node)

    def _advance(self, node: client.V1Node) -> None:
        name, did = node.metadata.name, self.done.setdefault(node.metadata.name, [])
        gpus = int((node.status.allocatable or {}).get(NVIDIA_GPU, "0"))
        if "cordon" not in did and _ready(node):
            self.core.patch_node(name, {"spec": {"unschedulable": True}})
            did.append("cordon")
        elif "cordon" in did and gpus and name not in self.gpus_seen_s:
            self.gpus_seen_s[name] = time.monotonic()
            did.append("gpus")
        elif "gpus" in did and "labels" not in did and time.monotonic() - self.gpus_seen_s[name] >= LABELS_AFTER_S:
            self.core.patch_node(name, {"metadata": {"labels": {
                PRODUCT: "NVIDIA-A100-SXM4-40GB", COUNT: "8", MIG: "all-disabled"}}})
            did.append("labels")
        elif "labels" in did and "uncordon" not in did:
            self.core.patch_node(name, {"spec": {"unschedulable": False}})
            did.append("uncordon")
        elif "uncordon" in did and "untaint" not in did:
            kept = [t for t in node.spec.taints or [] if t.key != self.taint]
            self.core.patch_node(name, {"spec": {"taints": [t.to_dict() for t in kept]}})
            did.append("untaint")

    def finished(self) -> list[str]:
        return sorted(n for n, did in self.done.items() if "untaint" in did)


def _withholding(provider: KwokProvider, taint: str) -> None:
    """The provider's nodes register as real ones do: without GFD's labels, with the readiness taint."""
    body_of = provider.node_body

    def node_body(pool: Any, name: str, zone: str | None = None) -> dict[str, Any]:
        body = body_of(pool, name, zone)
        for label in GFD_LABELS:
            body["metadata"]["labels"].pop(label, None)
        body["spec"]["taints"].append({"key": taint, "value": "pending", "effect": "NoSchedule"})
        return body

    provider.node_body = node_body  # type: ignore[method-assign]


def _pod(name: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "train"}),
        spec=client.V1PodSpec(
            node_selector={PRODUCT: "NVIDIA-A100-SXM4-40GB"},
            tolerations=[client.V1Toleration(key=NVIDIA_GPU, operator="Exists", effect="NoSchedule")],
            containers=[client.V1Container(
                name="train", image="trainer:latest",
                resources=client.V1ResourceRequirements(requests={"cpu": "8", "memory": "60Gi", NVIDIA_GPU: "8"},
                                                        limits={NVIDIA_GPU: "8"}))]))


@pytest.mark.parametrize("taint", ["readiness.k8s.io/GPUReady", "readiness.k8s.io/NetworkReady"],
                         ids=["gpu-operator", "network-operator"])
def test_four_8_gpu_pods_selecting_gfd_labels_get_exactly_four_nodes_through_the_operators_set_up(
        taint: str, make_driver: Callable[[Config], Driver], core_v1: client.CoreV1Api,  # noqa: F811
        namespace: str, create_pod: Callable[[client.V1Pod], None]) -> None:  # noqa: F811
    driver = make_driver(seed_config())
    provider = driver.controller.provider
    assert isinstance(provider, KwokProvider)
    _withholding(provider, taint)
    operator = Operator(core_v1, taint)
    names = [f"train-{i}" for i in range(PODS)]
    for name in names:
        create_pod(_pod(name))

    def ordered() -> int:
        return sum(n for pool, n in driver.scale_ups() if pool == A100)

    def never_more() -> None:
        operator.step()
        assert [p for p, _ in driver.scale_ups()] == [A100] * len(driver.scale_ups()), driver.scale_ups()
        assert ordered() <= PODS and len(driver.pool_nodes().get(A100, [])) <= PODS, driver.reports[-1]

    driver.tick_until(lambda: ordered() == PODS, 60, "four A100 nodes ordered", check=never_more)
    start = len(driver.reports)

    def all_running() -> bool:
        pods = [core_v1.read_namespaced_pod(n, namespace) for n in names]
        return all(p.status.phase == "Running" for p in pods)

    driver.tick_until(all_running, 120, "every pod Running", check=never_more)
    while len(driver.reports) - start < 20:  # at least 20 ticks with the set-up under way or done: still four
        driver.tick()
        never_more()
    assert ordered() == PODS and len(driver.pool_nodes()[A100]) == PODS
    assert operator.finished() == sorted(n.metadata.name for n in driver.pool_nodes()[A100])
    for did in operator.done.values():
        assert did == ["cordon", "gpus", "labels", "uncordon", "untaint"], operator.done
    hosts = {core_v1.read_namespaced_pod(n, namespace).spec.node_name for n in names}
    assert len(hosts) == PODS  # one 8-GPU pod per node
    assert not [e for r in driver.reports for e in r.errors], [str(e) for r in driver.reports for e in r.errors]
    assert not [t for r in driver.reports for t in r.timed_out]
