"""The Cluster API provider against the real API server with Cluster API's CRDs installed (pinned copy in
deploy/crds/cluster-api/). No Cluster API controller or infrastructure provider runs: the test plays them, creating
Machines and kwok Nodes by hand where a real infrastructure provider would, so every replica change observed is
gpuscale's own.

- An Unschedulable T4 pod raises the replicas of the MachineDeployment discovered from CA's scale-from-zero capacity
  annotations by exactly one (not the A100 or CPU ones); while its node is upcoming nothing more is ordered; once a
  Machine and its Node appear the real scheduler binds the pod.
- A configured pool mapped explicitly (`gpuscale.io/pool`) takes its bounds from the annotations: max 1 → one node for
  two 8-GPU pods, and a direct increase past the max is refused whole.
- An empty node backed by a Machine is removed CA's way: the Machine annotated `cluster.x-k8s.io/delete-machine`, the
  replicas lowered by one — never below the min, never twice for the same Machine.
- A malformed annotation is reported naming the object and the annotation; the controller acts on nothing for that
  group (at start-up and when it breaks later).
- `gpuscale run --provider clusterapi --once --dry-run` discovers the group and changes nothing; an API server without
  the CRDs is a one-line configuration error.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import kwok_node_body, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.config import Config, load_config
from gpuscale.controller import Controller, RunOptions, build_controller
from gpuscale.loop.ports import ProviderError
from gpuscale.loop.report import Action, TickReport
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.errors import ConfigError
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.clusterapi import (
    CAPACITY,
    DELETE_MACHINE,
    DEPLOYMENT_NAME_LABEL,
    MAX_SIZE,
    MIN_SIZE,
    OPTIONS,
    POOL_ANNOTATION,
    POOL_NAME_LABEL,
    ClusterAPIProvider,
    parse_auto_discovery,
)

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "crds" / "cluster-api"
SEED_CONFIG = REPO / "examples" / "seed-pools" / "gpuscale.yaml"
GROUP, VERSION = "cluster.x-k8s.io", "v1beta2"
CLUSTER = "workload"
A100_POOL = "gpu-training-a100"
T4_LABELS = "cloud.google.com/gke-accelerator=nvidia-tesla-t4,nvidia.com/gpu.product=Tesla-T4"
GPU_TAINTS = "nvidia.com/gpu=present:NoSchedule"
TICK_EVERY_S = 0.2
T4_CAPACITY = {CAPACITY + "cpu": "4", CAPACITY + "memory": "15G", CAPACITY + "gpu-type": NVIDIA_GPU,
               CAPACITY + "gpu-count": "1", CAPACITY + "labels": T4_LABELS, CAPACITY + "taints": GPU_TAINTS}
"""CA's scale-from-zero annotations of a 1×T4 group."""


@pytest.fixture(scope="module")
def capi_crds(api_client: client.ApiClient) -> Iterator[None]:
    """Install the pinned Cluster API CRDs (Cluster, MachineDeployment, MachineSet, Machine) and wait until they
    are Established; removed at the end of the module."""
    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as err:
            if err.status != 409:
                raise

    def established() -> bool:
        for name in names:
            status = ext.read_custom_resource_definition(name).status
            if not any(c.type == "Established" and c.status == "True" for c in (status.conditions or [])):
                return False
        return True

    wait_for(established, 60, desc="Cluster API CRDs Established")
    custom = client.CustomObjectsApi(api_client)
    wait_for(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "machinedeployments") is not None, 30,
             desc="MachineDeployments served")
    yield
    for name in names:
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as err:
            if err.status != 404:
                raise


def config_for_capi() -> Config:
    """The seed configuration with batching delays, the batch window and the warm buffer off, scale-down after 0 s of
    idleness: a tick decides what it sees."""
    config = load_config(SEED_CONFIG)
    policy = replace(config.policy, new_pod_delay_s=0.0, new_gpu_pod_delay_s=0.0, batch_idle_s=0.0, buffers=(),
                     scale_down_unneeded_time_s=0.0, scale_down_gpu_unneeded_time_s=None,
                     scale_down_delay_after_add_s=0.0)
    return replace(config, policy=policy)


class Capi:
    """Creates Cluster API objects in one namespace and reads them back; deletes what it made."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.made: list[tuple[str, str]] = []
        self.nodes: list[str] = []

    def machine_deployment(self, name: str, *, replicas: int, min_size: int, max_size: int,
                           annotations: dict[str, str] | None = None,
                           labels: dict[str, str] | None = None) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MachineDeployment",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {},
                             "annotations": {MIN_SIZE: str(min_size), MAX_SIZE: str(max_size), **(annotations or {})}},
                "spec": {"clusterName": CLUSTER, "replicas": replicas,
                         "selector": {"matchLabels": {DEPLOYMENT_NAME_LABEL: name}},
                         "template": {"metadata": {"labels": {DEPLOYMENT_NAME_LABEL: name,
                                                              "node-role.kubernetes.io/worker": ""}},
                                      "spec": {"clusterName": CLUSTER, "bootstrap": {"dataSecretName": "bootstrap"},
                                               "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                                     "kind": "KwokMachineTemplate", "name": name}}}}}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "machinedeployments", body)
        self.made.append(("machinedeployments", name))
        return created

    def machine_pool(self, name: str, *, replicas: int, min_size: int, max_size: int,
                     annotations: dict[str, str] | None = None) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MachinePool",
                "metadata": {"name": name, "namespace": self.namespace,
                             "annotations": {MIN_SIZE: str(min_size), MAX_SIZE: str(max_size), **(annotations or {})}},
                "spec": {"clusterName": CLUSTER, "replicas": replicas,
                         "template": {"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}},
                                      "spec": {"clusterName": CLUSTER, "bootstrap": {"dataSecretName": "bootstrap"},
                                               "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                                     "kind": "KwokMachinePool", "name": name}}}}}
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "machinepools", body)
        self.made.append(("machinepools", name))

    def pool_instance(self, pool: str, node: str) -> None:
        """An instance of MachinePool `pool` with no Machine: the kwok Node `node`, listed in the pool's
        `spec.providerIDList` as its infrastructure provider would."""
        self.core.create_node(self._node_body(node, pool, f"capi-kwok://{node}"))
        self.nodes.append(node)
        mp = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "machinepools", pool)
        ids = [*(mp["spec"].get("providerIDList") or []), f"capi-kwok://{node}"]
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "machinepools", pool,
                                                   {"spec": {"providerIDList": ids}})

    def replicas(self, name: str, plural: str = "machinedeployments") -> int:
        md = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
        return int(md["spec"].get("replicas", 0))

    def annotate(self, name: str, annotations: dict[str, str | None]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "machinedeployments", name,
                                                   {"metadata": {"annotations": annotations}})

    @staticmethod
    def _node_body(node: str, group: str, provider_id: str) -> client.V1Node:
        """A kwok Node (Ready after 0 s) for an instance of `group`: a T4 node for groups named t4…."""
        labels = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4", "gpuscale.io/gpu-count": "1"} \
            if group.startswith("t4") else {}
        taints = [client.V1Taint(key=NVIDIA_GPU, value="present", effect="NoSchedule")] if labels else None
        body = kwok_node_body(node, labels=labels, taints=taints,
                              annotations={"gpuscale.io/ready-after": "0s", "gpuscale.io/gpu-register-after": "1s"})
        body.spec.provider_id = provider_id
        return body

    def machine(self, md: str, node: str, *, node_ref: bool, pool: bool = False) -> str:
        """A Machine of `md` (a MachinePool's Machine with `pool`) whose infrastructure is the kwok Node `node`
        (created here), linked by providerID, and by `status.nodeRef` too when `node_ref`."""
        provider_id = f"capi-kwok://{node}"
        self.core.create_node(self._node_body(node, md, provider_id))
        self.nodes.append(node)
        name = f"{md}-{uuid.uuid4().hex[:5]}"
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "machines", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Machine",
            "metadata": {"name": name, "namespace": self.namespace,
                         "labels": {POOL_NAME_LABEL if pool else DEPLOYMENT_NAME_LABEL: md,
                                    f"{GROUP}/cluster-name": CLUSTER}},
            "spec": {"clusterName": CLUSTER, "providerID": provider_id, "bootstrap": {"dataSecretName": "bootstrap"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KwokMachine",
                                           "name": name}}})
        self.made.append(("machines", name))
        if node_ref:
            self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, "machines", name,
                                                              {"status": {"nodeRef": {"name": node}}})
        return name

    def machine_annotations(self, name: str) -> dict[str, str]:
        m = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "machines", name)
        return dict(m["metadata"].get("annotations") or {})

    def cleanup(self) -> None:
        for plural, name in reversed(self.made):
            try:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
            except ApiException as err:
                if err.status != 404:
                    raise
        for node in self.nodes:
            try:
                self.core.delete_node(node)
            except ApiException as err:
                if err.status != 404:
                    raise


@pytest.fixture
def capi(capi_crds: None, api_client: client.ApiClient, namespace: str) -> Iterator[Capi]:
    made = Capi(api_client, namespace)
    yield made
    made.cleanup()


@pytest.fixture
def controllers(api_client: client.ApiClient) -> Iterator[Callable[..., Controller]]:
    built: list[Controller] = []

    def make(pool_refresh_s: float = 60.0) -> Controller:
        config = config_for_capi()
        controller = build_controller(api_client, config, provider_name="clusterapi",
                                      settings=replace(LoopSettings.from_config(config), scan_interval_s=TICK_EVERY_S),
                                      options=RunOptions(status_name=None, pool_refresh_s=pool_refresh_s))
        built.append(controller)
        assert controller.cache.wait_synced(30), controller.cache.status()
        return controller

    yield make
    for controller in built:
        controller.close()


@pytest.fixture
def pods(core_v1: client.CoreV1Api, namespace: str) -> Iterator[Callable[..., str]]:
    names: list[str] = []

    def create(name: str, *, accelerator: str, gpus: int) -> str:
        core_v1.create_namespaced_pod(namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodSpec(
                node_selector={"cloud.google.com/gke-accelerator": accelerator},
                tolerations=[client.V1Toleration(key=NVIDIA_GPU, operator="Exists", effect="NoSchedule")],
                containers=[client.V1Container(name="c", image="app:1", resources=client.V1ResourceRequirements(
                    requests={"cpu": "1", "memory": "2Gi", NVIDIA_GPU: str(gpus)}, limits={NVIDIA_GPU: str(gpus)}))])))
        names.append(name)
        wait_for(lambda: _unschedulable(core_v1.read_namespaced_pod(name, namespace)), 30, desc=f"{name} Unschedulable")
        return name

    yield create
    for name in names:
        try:
            core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise


def wait_ready(core_v1: client.CoreV1Api, *nodes: str) -> None:
    for node in nodes:
        wait_for(lambda node=node: any(c.type == "Ready" and c.status == "True"
                                       for c in core_v1.read_node(node).status.conditions or []), 30,
                 desc=f"{node} Ready")


def _unschedulable(pod: client.V1Pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or [])


def tick_until(controller: Controller, predicate: Callable[[], Any], timeout_s: float, desc: str,
               check: Callable[[], None] | None = None) -> list[TickReport]:
    reports = []
    deadline = time.monotonic() + timeout_s
    while True:
        reports.append(controller.autoscaler.tick())
        if check is not None:
            check()
        if predicate():
            return reports
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {desc}; last report: {reports[-1]}")
        time.sleep(TICK_EVERY_S)


def tick_for(controller: Controller, n: int, check: Callable[[], None]) -> list[TickReport]:
    reports = []
    for _ in range(n):
        reports.append(controller.autoscaler.tick())
        check()
        time.sleep(TICK_EVERY_S)
    return reports


def scaled(reports: list[TickReport]) -> list[tuple[str, int]]:
    return [(s.pool, s.nodes) for r in reports for s in r.scaled_up]


def test_t4_pod_scales_the_t4_machine_deployment_from_zero_by_one(capi: Capi, controllers: Callable[[], Controller],
                                                                 pods: Callable[..., str], core_v1: client.CoreV1Api,
                                                                 namespace: str) -> None:
    t4 = T4_CAPACITY
    capi.machine_deployment("t4-pool", replicas=0, min_size=0, max_size=5, annotations=t4)
    capi.machine_deployment("a100", replicas=0, min_size=0, max_size=3, annotations={POOL_ANNOTATION: A100_POOL})
    capi.machine_deployment("cpu-pool", replicas=0, min_size=0, max_size=5,
                            annotations={CAPACITY + "cpu": "16", CAPACITY + "memory": "64G"})
    controller = controllers()
    provider = controller.provider
    assert isinstance(provider, ClusterAPIProvider)
    pools = {p.name: p for p in controller.autoscaler.pools}
    assert set(pools) == {"t4-pool", A100_POOL, "cpu-pool"}, provider.problems()
    assert pools["t4-pool"].allocatable.get(NVIDIA_GPU) == 1 and pools["t4-pool"].gpu_model == "Tesla-T4"
    assert pools["t4-pool"].labels["node-role.kubernetes.io/worker"] == ""  # propagated from the template
    assert pools[A100_POOL].allocatable.get(NVIDIA_GPU) == 8 and pools[A100_POOL].max_size == 3

    pod = pods("infer", accelerator="nvidia-tesla-t4", gpus=1)
    reports = tick_until(controller, lambda: capi.replicas("t4-pool") > 0, 30, "a T4 scale-up")
    assert scaled(reports) == [("t4-pool", 1)]
    assert (capi.replicas("t4-pool"), capi.replicas("a100"), capi.replicas("cpu-pool")) == (1, 0, 0)
    assert [u.pool for u in provider.upcoming()] == ["t4-pool"]

    def one_t4_replica() -> None:
        assert (capi.replicas("t4-pool"), capi.replicas("a100"), capi.replicas("cpu-pool")) == (1, 0, 0)

    reports += tick_for(controller, 10, one_t4_replica)  # the upcoming replica covers the pod
    # The infrastructure provider's part: a Machine, its Node (linked by providerID only), Ready, GPU registered.
    node = f"t4-node-{uuid.uuid4().hex[:5]}"
    capi.machine("t4-pool", node, node_ref=False)

    def running() -> bool:
        p = core_v1.read_namespaced_pod(pod, namespace)
        return p.status.phase == "Running" and p.spec.node_name == node

    reports += tick_until(controller, running, 60, "the pod Running on the T4 node", check=one_t4_replica)
    assert scaled(reports) == [("t4-pool", 1)]
    assert provider.node_pools() == {node: "t4-pool"}
    assert provider.upcoming() == ()
    assert not [e for r in reports for e in r.errors], [e for r in reports for e in r.errors]


def test_max_size_annotation_bounds_an_explicitly_mapped_pool(capi: Capi, controllers: Callable[[], Controller],
                                                              pods: Callable[..., str]) -> None:
    capi.machine_deployment("a100", replicas=0, min_size=0, max_size=1, annotations={POOL_ANNOTATION: A100_POOL})
    controller = controllers()
    provider = controller.provider
    assert isinstance(provider, ClusterAPIProvider)
    assert [p.max_size for p in controller.autoscaler.pools] == [1]  # the annotation, not the config's 8
    pods("train-1", accelerator="nvidia-tesla-a100", gpus=8)
    pods("train-2", accelerator="nvidia-tesla-a100", gpus=8)
    reports = tick_until(controller, lambda: capi.replicas("a100") > 0, 30, "an A100 scale-up")
    reports += tick_for(controller, 8, lambda: None)
    assert scaled(reports) == [(A100_POOL, 1)] and capi.replicas("a100") == 1
    with pytest.raises(ProviderError, match="max size 1"):
        provider.increase(A100_POOL, 1)
    with pytest.raises(ProviderError, match="is one failure domain: it cannot add nodes in zone us-central1-b"):
        provider.increase(A100_POOL, 1, "us-central1-b")  # a MachineDeployment has one failureDomain
    assert capi.replicas("a100") == 1


def test_idle_machine_node_is_removed_by_delete_annotation_and_replicas(capi: Capi,
                                                                         controllers: Callable[[], Controller],
                                                                         core_v1: client.CoreV1Api) -> None:
    capi.machine_deployment("cpu-pool", replicas=2, min_size=1, max_size=3,
                            annotations={CAPACITY + "cpu": "16", CAPACITY + "memory": "64G"})
    first, second = (f"cpu-node-{uuid.uuid4().hex[:5]}" for _ in range(2))
    m1 = capi.machine("cpu-pool", first, node_ref=True)
    m2 = capi.machine("cpu-pool", second, node_ref=False)
    wait_ready(core_v1, first, second)
    controller = controllers()
    provider = controller.provider
    assert isinstance(provider, ClusterAPIProvider)
    assert provider.node_pools() == {first: "cpu-pool", second: "cpu-pool"}  # nodeRef and providerID
    assert len(provider.upcoming()) == 2  # registered = in the cache's last snapshot, and none was taken yet
    controller.cache.snapshot()
    assert provider.upcoming() == ()

    def marked() -> list[str]:
        return [m for m in (m1, m2) if DELETE_MACHINE in capi.machine_annotations(m)]

    reports = tick_until(controller, marked, 30, "one Machine marked for deletion")
    reports += tick_for(controller, 8, lambda: None)  # the node stays (no Cluster API controller): no second delete
    assert len(marked()) == 1 and capi.replicas("cpu-pool") == 1
    assert [d for r in reports for d in r.deleted] and len({d for r in reports for d in r.deleted}) == 1
    kept = second if marked() == [m1] else first
    with pytest.raises(ProviderError, match="min size 1"):
        provider.delete([kept])
    assert len(marked()) == 1 and capi.replicas("cpu-pool") == 1


def test_a_zero_or_max_group_grows_to_its_max_and_goes_whole(capi: Capi, controllers: Callable[[], Controller],
                                                             pods: Callable[..., str],
                                                             core_v1: client.CoreV1Api) -> None:
    """CA's `autoscaling-options-zeroormaxnodescaling`: one pod scales an empty group straight to its max size; a group
    whose nodes are all idle is scaled down whole, every Machine marked in one decision."""
    whole = {OPTIONS + "zeroormaxnodescaling": "true"}
    t4 = T4_CAPACITY
    capi.machine_deployment("t4-slice", replicas=0, min_size=0, max_size=3, annotations={**t4, **whole})
    capi.machine_deployment("cpu-slice", replicas=2, min_size=0, max_size=2,
                            annotations={CAPACITY + "cpu": "16", CAPACITY + "memory": "64G", **whole})
    nodes = [f"cpu-slice-{uuid.uuid4().hex[:5]}" for _ in range(2)]
    machines = [capi.machine("cpu-slice", node, node_ref=True) for node in nodes]
    wait_ready(core_v1, *nodes)
    controller = controllers()
    assert {p.name: p.zero_or_max for p in controller.autoscaler.pools} == {"t4-slice": True, "cpu-slice": True}

    pods("infer", accelerator="nvidia-tesla-t4", gpus=1)
    reports = tick_until(controller, lambda: capi.replicas("t4-slice") > 0, 30, "a T4 scale-up")
    assert scaled(reports) == [("t4-slice", 3)] and capi.replicas("t4-slice") == 3

    def marked() -> list[str]:
        return [m for m in machines if DELETE_MACHINE in capi.machine_annotations(m)]

    reports += tick_until(controller, marked, 30, "the idle group's Machines marked for deletion")
    assert sorted(marked()) == sorted(machines) and capi.replicas("cpu-slice") == 0
    deleted = [sorted(r.deleted) for r in reports if r.deleted]
    assert deleted == [sorted(nodes)], deleted  # both in one decision


def test_machine_pools_scale_up_and_lose_a_chosen_node_only_through_its_machine(
        capi: Capi, controllers: Callable[[], Controller], pods: Callable[..., str], core_v1: client.CoreV1Api) -> None:
    """MachinePools are node groups too (CA's clusterapi provider scales them): replicas through the scale
    subresource, nodes found by the pool's `spec.providerIDList` or its MachinePool Machines. A chosen node goes by its
    Machine's delete annotation, as in a MachineDeployment; a pool whose instances have no Machine is never scaled
    down (lowering the replicas would let the infrastructure pick the instance) and says so."""
    t4 = T4_CAPACITY
    cpu = {CAPACITY + "cpu": "16", CAPACITY + "memory": "64G"}
    capi.machine_pool("t4-mp", replicas=0, min_size=0, max_size=3, annotations=t4)
    capi.machine_pool("cpu-bare", replicas=1, min_size=0, max_size=2, annotations=cpu)
    capi.machine_pool("cpu-machines", replicas=1, min_size=0, max_size=2, annotations=cpu)
    bare, backed = (f"cpu-mp-{uuid.uuid4().hex[:5]}" for _ in range(2))
    capi.pool_instance("cpu-bare", bare)
    machine = capi.machine("cpu-machines", backed, node_ref=False, pool=True)
    wait_ready(core_v1, bare, backed)
    controller = controllers()
    provider = controller.provider
    assert isinstance(provider, ClusterAPIProvider)
    pools = {p.name: p for p in controller.autoscaler.pools}
    assert set(pools) == {"t4-mp", "cpu-bare", "cpu-machines"}, provider.problems()
    assert "has no MachinePool Machines" in (pools["cpu-bare"].scale_down_disabled or "")
    assert pools["cpu-machines"].scale_down_disabled is None and pools["t4-mp"].allocatable.get(NVIDIA_GPU) == 1
    assert provider.node_pools() == {bare: "cpu-bare", backed: "cpu-machines"}
    controller.cache.snapshot()
    assert provider.upcoming() == ()

    pods("infer", accelerator="nvidia-tesla-t4", gpus=1)
    reports = tick_until(controller, lambda: capi.replicas("t4-mp", "machinepools") > 0, 30, "a T4 scale-up")
    assert scaled(reports) == [("t4-mp", 1)]
    assert [u.request_id for u in provider.upcoming()] == ["t4-mp#0"]
    reports += tick_until(controller, lambda: DELETE_MACHINE in capi.machine_annotations(machine), 30,
                          "the idle MachinePool Machine marked for deletion")
    reports += tick_for(controller, 5, lambda: None)
    assert capi.replicas("cpu-machines", "machinepools") == 0
    assert capi.replicas("cpu-bare", "machinepools") == 1  # idle too, but no Machine names it
    assert {d for r in reports for d in r.deleted} == {backed}
    assert not [e for r in reports for e in r.errors], [e for r in reports for e in r.errors]


INFRA_GROUP = "infrastructure.cluster.x-k8s.io"


@pytest.fixture
def kwok_templates(api_client: client.ApiClient) -> Iterator[str]:
    """A stand-in infrastructure provider's machine template CRD (`KwokMachineTemplate`, with a status subresource,
    as Cluster API's scale-from-zero contract asks of providers); removed afterwards. Yields its plural."""
    ext = client.ApiextensionsV1Api(api_client)
    plural = "kwokmachinetemplates"
    name = f"{plural}.{INFRA_GROUP}"
    ext.create_custom_resource_definition({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
        "spec": {"group": INFRA_GROUP, "scope": "Namespaced",
                 "names": {"kind": "KwokMachineTemplate", "plural": plural, "singular": "kwokmachinetemplate"},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}})
    wait_for(lambda: any(c.type == "Established" and c.status == "True"
                         for c in ext.read_custom_resource_definition(name).status.conditions or []), 30,
             desc="KwokMachineTemplate CRD Established")
    yield plural
    ext.delete_custom_resource_definition(name)


def test_the_infrastructure_template_capacity_is_the_template_without_annotations(
        capi: Capi, api_client: client.ApiClient, kwok_templates: str) -> None:
    """CA's other scale-from-zero source: a MachineDeployment without capacity annotations takes cpu, memory and
    GPUs from its infrastructure machine template's `status.capacity`, and its architecture from `status.nodeInfo`
    (the template found by the API server's discovery)."""
    ns = capi.namespace
    custom = client.CustomObjectsApi(api_client)
    wait_for(lambda: custom.list_namespaced_custom_object(INFRA_GROUP, "v1alpha1", ns, kwok_templates) is not None,
             30, desc="KwokMachineTemplates served")
    custom.create_namespaced_custom_object(INFRA_GROUP, "v1alpha1", ns, kwok_templates, {
        "apiVersion": f"{INFRA_GROUP}/v1alpha1", "kind": "KwokMachineTemplate", "metadata": {"name": "t4-infra"},
        "spec": {"template": {"spec": {}}}})
    custom.patch_namespaced_custom_object_status(INFRA_GROUP, "v1alpha1", ns, kwok_templates, "t4-infra", {
        "status": {"capacity": {"cpu": "8", "memory": "30Gi", NVIDIA_GPU: "1"},
                   "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}}})
    capi.machine_deployment("t4-infra", replicas=0, min_size=0, max_size=2,
                            annotations={CAPACITY + "labels": T4_LABELS, CAPACITY + "taints": GPU_TAINTS})
    capi.machine_deployment("bare-infra", replicas=0, min_size=0, max_size=2)  # its template does not exist
    provider = ClusterAPIProvider(api_client, (), discovery=[parse_auto_discovery(f"clusterapi:namespace={ns}")])
    pools = {p.name: p for p in provider.pools}
    assert set(pools) == {"t4-infra"}, provider.problems()
    t4 = pools["t4-infra"]
    assert (t4.allocatable.get("cpu"), t4.allocatable.get("memory"), t4.allocatable.get(NVIDIA_GPU)) == (
        8_000, 30 * 2**30, 1)
    assert t4.gpu_model == "Tesla-T4" and t4.template().labels["kubernetes.io/arch"] == "arm64"
    assert any("bare-infra" in p and "required to build the node template" in p for p in provider.problems())


def test_auto_discovery_specs_narrow_the_node_groups(capi: Capi, api_client: client.ApiClient) -> None:
    """`--node-group-auto-discovery=clusterapi:…` as CA: by namespace, Cluster name and labels; several specs: a group
    any of them allows."""
    cpu = {CAPACITY + "cpu": "16", CAPACITY + "memory": "64G"}
    capi.machine_deployment("green-md", replicas=0, min_size=0, max_size=2, annotations=cpu, labels={"color": "green"})
    capi.machine_deployment("plain-md", replicas=0, min_size=0, max_size=2, annotations=cpu)
    ns = capi.namespace

    def groups(*specs: str) -> set[str]:
        provider = ClusterAPIProvider(api_client, (), discovery=[parse_auto_discovery(s) for s in specs])
        return {name for name, ref in provider.groups.items() if ref.namespace == ns}

    assert groups() == {"green-md", "plain-md"}
    assert groups(f"clusterapi:namespace={ns},color=green") == {"green-md"}
    assert groups(f"clusterapi:namespace={ns},clusterName={CLUSTER}") == {"green-md", "plain-md"}
    assert groups(f"clusterapi:namespace={ns},clusterName=elsewhere") == set()
    assert groups("clusterapi:namespace=elsewhere") == set()
    assert groups(f"clusterapi:namespace={ns},color=blue", f"clusterapi:namespace={ns},color=green") == {"green-md"}


def test_malformed_annotations_put_a_group_out_of_action(capi: Capi, controllers: Callable[[], Controller],
                                                         pods: Callable[..., str]) -> None:
    t4 = {CAPACITY + "cpu": "4", CAPACITY + "gpu-count": "1", CAPACITY + "labels": T4_LABELS,
          CAPACITY + "taints": GPU_TAINTS}
    capi.machine_deployment("t4-bad", replicas=0, min_size=0, max_size=5,
                            annotations={**t4, CAPACITY + "memory": "lots"})
    capi.machine_deployment("a100", replicas=0, min_size=0, max_size=2, annotations={POOL_ANNOTATION: A100_POOL})
    controller = controllers()
    provider = controller.provider
    assert isinstance(provider, ClusterAPIProvider)
    assert [p.name for p in controller.autoscaler.pools] == [A100_POOL]
    problems = provider.problems()
    assert len(problems) == 1 and problems[0].startswith(
        f"MachineDeployment {capi.namespace}/t4-bad: metadata.annotations[{CAPACITY}memory]: 'lots'"), problems
    pods("infer", accelerator="nvidia-tesla-t4", gpus=1)
    tick_for(controller, 5, lambda: None)
    assert capi.replicas("t4-bad") == 0

    capi.annotate("a100", {MAX_SIZE: "ten"})  # breaks at run time
    pods("train", accelerator="nvidia-tesla-a100", gpus=8)
    reports = tick_for(controller, 5, lambda: None)
    assert capi.replicas("a100") == 0
    errors = [e for r in reports for e in r.errors if e.action is Action.SCALE_UP]
    assert errors and errors[0].target == A100_POOL
    assert f"MachineDeployment {capi.namespace}/a100: metadata.annotations[{MAX_SIZE}]: 'ten' is not a whole " \
           "number" in errors[0].message
    assert any("'ten'" in p for p in provider.problems())


def test_node_groups_are_discovered_again_while_running(capi: Capi, controllers: Callable[..., Controller],
                                                       pods: Callable[..., str],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A MachineDeployment created after start-up becomes a pool at the next discovery and is scaled for its pod; one
    whose autoscaler annotations are taken off leaves (its gauges too); a discovery that cannot read keeps the pools.
    CA's per-group option annotations reach the pool; one gpuscale does not apply is logged."""
    caplog.set_level(logging.WARNING, logger="gpuscale")
    cpu = {CAPACITY + "cpu": "16", CAPACITY + "memory": "64G"}
    capi.machine_deployment("cpu-pool", replicas=0, min_size=0, max_size=5, annotations=cpu)
    controller = controllers(pool_refresh_s=0.0)
    provider = controller.provider
    assert isinstance(provider, ClusterAPIProvider)
    assert [p.name for p in controller.autoscaler.pools] == ["cpu-pool"]

    t4 = T4_CAPACITY
    capi.machine_deployment("t4-late", replicas=0, min_size=0, max_size=2, annotations={
        **t4, OPTIONS + "scaledownunneededtime": "2h", OPTIONS + "maxnodestartuptime": "10m",
        OPTIONS + "someoptionfromthefuture": "1"})
    pods("infer", accelerator="nvidia-tesla-t4", gpus=1)
    reports = []
    deadline = time.monotonic() + 30
    while capi.replicas("t4-late") == 0:
        assert time.monotonic() < deadline, f"no T4 scale-up; last report: {reports[-1] if reports else None}"
        reports.append(controller.tick())
        time.sleep(TICK_EVERY_S)
    reports.append(controller.tick())  # the replica ordered is upcoming now
    assert scaled(reports) == [("t4-late", 1)]
    assert sorted(p.name for p in controller.autoscaler.pools) == ["cpu-pool", "t4-late"]
    late = next(p for p in controller.autoscaler.pools if p.name == "t4-late")
    assert late.scale_down_unneeded_time_s == 7200.0 and late.scale_down_utilization_threshold is None
    assert late.max_node_startup_time_s == 600.0
    assert f"{OPTIONS}someoptionfromthefuture]: an option gpuscale does not apply, ignored" in caplog.text
    assert controller.metrics is not None
    metrics = controller.metrics.exposition().decode()
    assert 'gpuscale_nodes{pool="t4-late",state="upcoming"} 1.0' in metrics, metrics

    capi.annotate("cpu-pool", {MIN_SIZE: None, MAX_SIZE: None})  # no longer a node group
    controller.tick()
    assert [p.name for p in controller.autoscaler.pools] == ["t4-late"]
    metrics = controller.metrics.exposition().decode()
    assert 'gpuscale_nodes{pool="cpu-pool"' not in metrics and 'backoff_seconds{pool="cpu-pool"}' not in metrics
    assert 'gpuscale_nodes{pool="t4-late",state="upcoming"} 1.0' in metrics, metrics

    provider.version = "v1alpha9"  # an API the server does not serve: the discovery fails
    try:
        assert not controller.refresh_pools(time.monotonic())
    finally:
        provider.version = VERSION
    assert [p.name for p in controller.autoscaler.pools] == ["t4-late"]
    assert "Cluster API node groups not refreshed, kept as they were" in caplog.text
    assert capi.replicas("t4-late") == 1 and capi.replicas("cpu-pool") == 0


def test_run_once_dry_run_with_the_clusterapi_provider(capi: Capi, control_plane: Any, pods: Callable[..., str],
                                                       tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`gpuscale run --provider clusterapi --once --dry-run` discovers the node group, logs the scale-up it would
    make and changes no replicas."""
    capi.machine_deployment("a100", replicas=0, min_size=0, max_size=2, annotations={POOL_ANNOTATION: A100_POOL})
    raw = yaml.safe_load(SEED_CONFIG.read_text(encoding="utf-8"))
    raw |= {"new_pod_scale_up_delay": "0s", "new_gpu_pod_scale_up_delay": "0s", "batch_idle_duration": "0s",
            "warm_capacity": []}  # one tick decides
    config_path = tmp_path / "gpuscale.yaml"
    config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    pods("train", accelerator="nvidia-tesla-a100", gpus=8)

    caplog.set_level(logging.INFO, logger="gpuscale")
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(control_plane.kubeconfig_path), "--config",
                                      str(config_path), "--once", "--dry-run", "--provider", "clusterapi"])
    assert result.exit_code == 0, (result.output, caplog.text)
    would = [json.loads(r.getMessage()) for r in caplog.records
             if r.name == "gpuscale.controller" and "would scale up" in r.getMessage()]
    assert would == [{"msg": "dry-run: would scale up", "pool": A100_POOL, "nodes": 1}], caplog.text
    assert f"{A100_POOL} = MachineDeployment {capi.namespace}/a100" in caplog.text
    assert capi.replicas("a100") == 0


def test_a_cluster_without_the_crds_is_a_clear_config_error(api_client: client.ApiClient, tmp_path: Path,
                                                            control_plane: Any) -> None:
    """No Cluster API served (here: a version the CRDs do not have) → one line naming the cause, exit code 2."""
    with pytest.raises(ConfigError, match=r"does not serve cluster.x-k8s.io/v1alpha9 machinedeployments: are the "
                                          r"Cluster API CRDs installed\?"):
        ClusterAPIProvider(api_client, (), version="v1alpha9")
