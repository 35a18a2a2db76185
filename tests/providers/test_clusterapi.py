"""The Cluster API provider's pure parts: bounds and scale-from-zero templates from CA's annotations, and the error
each malformed annotation gives (object and annotation named). The API side is in tests/e2e/test_clusterapi.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.providers.clusterapi import (
    CAPACITY,
    CLUSTER_NAME_LABEL,
    MACHINE_DEPLOYMENT,
    MAX_SIZE,
    MIN_SIZE,
    OPTIONS,
    POOL_ANNOTATION,
    AutoDiscovery,
    group_options,
    group_state,
    is_autoscaled,
    parse_auto_discovery,
    pool_name_of,
    template_pool,
)


def md(annotations: dict[str, str], replicas: int | None = 2, template_labels: dict[str, str] | None = None,
       name: str = "gpu-md") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"metadata": {"labels": template_labels or {}}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": name, "namespace": "capi", "resourceVersion": "7", "annotations": annotations},
            "spec": spec}


BOUNDS = {MIN_SIZE: "0", MAX_SIZE: "4"}
GPU = {CAPACITY + "cpu": "16", CAPACITY + "memory": "128G", CAPACITY + "gpu-type": NVIDIA_GPU,
       CAPACITY + "gpu-count": "2", CAPACITY + "maxPods": "200",
       CAPACITY + "labels": "nvidia.com/gpu.product=NVIDIA-L4, team=ml",
       CAPACITY + "taints": "nvidia.com/gpu=present:NoSchedule,spot:PreferNoSchedule"}


def test_bounds_and_replicas() -> None:
    state = group_state(MACHINE_DEPLOYMENT, md(BOUNDS, replicas=3))
    assert (state.min_size, state.max_size, state.replicas) == (0, 4, 3)
    assert str(state.ref) == "MachineDeployment capi/gpu-md"
    assert group_state(MACHINE_DEPLOYMENT, md(BOUNDS, replicas=None)).replicas == 0
    assert is_autoscaled(md(BOUNDS)) and not is_autoscaled(md({MAX_SIZE: "4"}))


@pytest.mark.parametrize(("annotations", "field", "problem"), [
    ({MIN_SIZE: "0", MAX_SIZE: "ten"}, MAX_SIZE, "'ten' is not a whole number"),
    ({MIN_SIZE: "-1", MAX_SIZE: "3"}, MIN_SIZE, "-1 is negative"),
    ({MIN_SIZE: "5", MAX_SIZE: "3"}, MIN_SIZE, "5 is above the max size 3"),
])
def test_malformed_bounds_name_object_and_annotation(annotations: dict[str, str], field: str, problem: str) -> None:
    with pytest.raises(InputError) as err:
        group_state(MACHINE_DEPLOYMENT, md(annotations))
    assert str(err.value) == f"MachineDeployment capi/gpu-md: metadata.annotations[{field}]: {problem}"


def test_scale_from_zero_template() -> None:
    pool = template_pool(MACHINE_DEPLOYMENT, md({**BOUNDS, **GPU}, template_labels={
        "node-role.kubernetes.io/gpu": "", "cluster.x-k8s.io/deployment-name": "gpu-md"}), "gpu-md", 0, 4)
    assert pool.allocatable.get("cpu") == 16_000 and pool.allocatable.get("memory") == 128 * 10**9
    assert pool.allocatable.get(NVIDIA_GPU) == 2 and pool.allocatable.get("pods") == 200
    assert pool.gpu_model == "NVIDIA-L4" and pool.gpus_per_node == 2
    assert pool.labels["team"] == "ml" and pool.labels["node-role.kubernetes.io/gpu"] == ""
    assert "cluster.x-k8s.io/deployment-name" not in pool.labels  # Cluster API does not put it on the Node
    assert pool.taints == (Taint(key=NVIDIA_GPU, value="present", effect=TaintEffect.NO_SCHEDULE),
                           Taint(key="spot", value="", effect=TaintEffect.PREFER_NO_SCHEDULE))
    assert (pool.min_size, pool.max_size) == (0, 4)


def test_template_defaults_max_pods_and_needs_no_gpu() -> None:
    pool = template_pool(MACHINE_DEPLOYMENT, md({CAPACITY + "cpu": "4", CAPACITY + "memory": "8Gi"}), "cpu-md", 1, 3)
    assert pool.allocatable.get("pods") == 110 and not pool.is_gpu_pool() and pool.gpu_model is None
    assert pool.allocatable.get("ephemeral-storage") == 0  # not given: none (CA's ephemeral-disk is optional)
    disk = template_pool(MACHINE_DEPLOYMENT, md({CAPACITY + "cpu": "4", CAPACITY + "memory": "8Gi",
                                                 CAPACITY + "ephemeral-disk": "20Gi"}), "cpu-md", 1, 3)
    assert disk.allocatable.get("ephemeral-storage") == 20 * 2**30


def test_the_infrastructure_template_capacity_fills_what_the_annotations_leave_out() -> None:
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "58", NVIDIA_GPU: "1", "ephemeral-storage": "100Gi"}
    status = {"capacity": capacity, "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}}
    pool = template_pool(MACHINE_DEPLOYMENT, md({CAPACITY + "labels": "nvidia.com/gpu.product=Tesla-T4"}), "t4-md",
                         0, 3, status)
    assert (pool.allocatable.get("cpu"), pool.allocatable.get("memory")) == (8_000, 32 * 2**30)
    assert pool.allocatable.get("pods") == 58 and pool.allocatable.get(NVIDIA_GPU) == 1
    assert pool.allocatable.get("ephemeral-storage") == 100 * 2**30
    assert pool.gpu_model == "Tesla-T4" and pool.gpus_per_node == 1
    template = pool.template()  # the node info's architecture, and the kubelet's labels that follow it
    assert (template.labels["kubernetes.io/arch"], template.labels["beta.kubernetes.io/arch"]) == ("arm64", "arm64")
    assert template.labels["kubernetes.io/os"] == "linux"
    both = template_pool(MACHINE_DEPLOYMENT, md({CAPACITY + "cpu": "4", CAPACITY + "gpu-count": "0"}), "t4-md", 0, 3,
                         {"capacity": capacity})
    assert both.allocatable.get("cpu") == 4_000 and both.allocatable.get("memory") == 32 * 2**30  # annotations win
    assert not both.is_gpu_pool()
    with pytest.raises(InputError) as err:
        template_pool(MACHINE_DEPLOYMENT, md({}), "t4-md", 0, 3, {"capacity": {"cpu": "8", "memory": "a lot"}})
    assert str(err.value).startswith("MachineDeployment capi/gpu-md: infrastructure template status.capacity.memory: "
                                     "'a lot'")
    with pytest.raises(InputError, match=r"status\.capacity\.pods: 'many' is not a whole number"):
        template_pool(MACHINE_DEPLOYMENT, md({}), "t4-md", 0, 3,
                      {"capacity": {"cpu": "8", "memory": "1Gi", "pods": "many"}})
    with pytest.raises(InputError, match=r"metadata.annotations\[.*memory\]: required .* or in the infrastructure"):
        template_pool(MACHINE_DEPLOYMENT, md({}), "t4-md", 0, 3, {"capacity": {"cpu": "8"}})


@pytest.mark.parametrize(("change", "field", "problem"), [
    ({CAPACITY + "memory": "lots"}, "memory", "'lots'"),
    ({CAPACITY + "cpu": None}, "cpu", "required"),
    ({CAPACITY + "gpu-count": "two"}, "gpu-count", "'two' is not a whole number"),
    ({CAPACITY + "gpu-type": "gpu"}, "gpu-type", "not an extended resource name"),
    ({CAPACITY + "labels": "team"}, "labels", "'team' is not key=value"),
    ({CAPACITY + "taints": "a=b:Sometimes"}, "taints", "'a=b:Sometimes' is not key=value:NoSchedule"),
    ({CAPACITY + "maxPods": "many"}, "maxPods", "'many' is not a whole number"),
    ({CAPACITY + "ephemeral-disk": "big"}, "ephemeral-disk", "'big'"),
])
def test_malformed_capacity_annotations(change: dict[str, str | None], field: str, problem: str) -> None:
    annotations = {k: v for k, v in {**GPU, **change}.items() if v is not None}
    with pytest.raises(InputError) as err:
        template_pool(MACHINE_DEPLOYMENT, md(annotations), "gpu-md", 0, 4)
    text = str(err.value)
    assert text.startswith(f"MachineDeployment capi/gpu-md: metadata.annotations[{CAPACITY}{field}]: "), text
    assert problem in text


def test_pool_name_from_annotation_else_object_name() -> None:
    assert pool_name_of(MACHINE_DEPLOYMENT, md({POOL_ANNOTATION: "gpu-training-a100"})) == "gpu-training-a100"
    assert pool_name_of(MACHINE_DEPLOYMENT, md({})) == "gpu-md"


def test_an_invalid_pool_name_is_reported_on_the_object() -> None:
    with pytest.raises(InputError) as err:
        template_pool(MACHINE_DEPLOYMENT, md(GPU, name="gpu.md"), "gpu.md", 0, 4)
    assert str(err.value).startswith("MachineDeployment capi/gpu.md: pool name: ")


def test_per_group_autoscaling_options_as_ca_spells_them() -> None:
    options, unknown = group_options(MACHINE_DEPLOYMENT, md({
        **BOUNDS, OPTIONS + "scaledownutilizationthreshold": "0.3", OPTIONS + "scaledowngpuutilizationthreshold": "0",
        OPTIONS + "scaledownunneededtime": "1h30m", OPTIONS + "scaledownunreadytime": "300",
        OPTIONS + "maxnodeprovisiontime": "25m", OPTIONS + "maxnodestartuptime": "20m",
        OPTIONS + "someoptionfromthefuture": "1",
        OPTIONS + "ignoredaemonsetsutilization": "TRUE"}))
    assert options == {"scale_down_utilization_threshold": 0.3, "scale_down_gpu_utilization_threshold": 0.0,
                       "scale_down_unneeded_time_s": 5400.0, "scale_down_unready_time_s": 300.0,
                       "max_node_provision_time_s": 1500.0, "max_node_startup_time_s": 1200.0,
                       "ignore_daemonsets_utilization": True}
    assert group_options(MACHINE_DEPLOYMENT, md({OPTIONS + "ignoredaemonsetsutilization": "0"}))[0] == {
        "ignore_daemonsets_utilization": False}  # Go's ParseBool spellings, as CA reads them
    assert group_options(MACHINE_DEPLOYMENT, md({OPTIONS + "zeroormaxnodescaling": "true"}))[0] == {
        "zero_or_max": True}
    assert unknown == [OPTIONS + "someoptionfromthefuture"]  # reported by the caller, nothing applied
    assert group_options(MACHINE_DEPLOYMENT, md(BOUNDS)) == ({}, [])


@pytest.mark.parametrize(("option", "text", "problem"), [
    ("scaledownutilizationthreshold", "half", "'half': could not convert"),
    ("scaledownutilizationthreshold", "1.5", "'1.5' is not a fraction between 0 and 1"),
    ("scaledowngpuutilizationthreshold", "-0.1", "'-0.1' is not a fraction between 0 and 1"),
    ("scaledownunneededtime", "soon", "'soon': expected a duration"),
    ("maxnodeprovisiontime", "-5m", "'-5m': must be a finite duration"),
    ("ignoredaemonsetsutilization", "yes", "'yes' is not true or false"),
    ("zeroormaxnodescaling", "on", "'on' is not true or false"),
])
def test_malformed_autoscaling_options_name_object_and_annotation(option: str, text: str, problem: str) -> None:
    with pytest.raises(InputError) as err:
        group_options(MACHINE_DEPLOYMENT, md({**BOUNDS, OPTIONS + option: text}))
    message = str(err.value)
    assert message.startswith(f"MachineDeployment capi/gpu-md: metadata.annotations[{OPTIONS}{option}]: "), message
    assert problem in message


def test_auto_discovery_specs_as_ca_writes_them() -> None:
    spec = parse_auto_discovery("clusterapi:namespace=blue,clusterName=fred,color=green,team.example.com/owner=ml")
    assert spec == AutoDiscovery("blue", "fred", (("color", "green"), ("team.example.com/owner", "ml")))
    group = md({}, name="gpu-md")
    group["metadata"] |= {"namespace": "blue", "labels": {"color": "green", "team.example.com/owner": "ml"}}
    group["spec"] = {"clusterName": "fred"}
    assert spec.allows(group)
    assert not spec.allows({**group, "spec": {"clusterName": "wilma"}})
    assert not spec.allows({**group, "metadata": {**group["metadata"], "namespace": "red"}})
    assert not spec.allows({**group, "metadata": {**group["metadata"], "labels": {"color": "green"}}})
    labels = {**group["metadata"]["labels"], CLUSTER_NAME_LABEL: "fred"}
    by_label = {**group, "spec": {}, "metadata": {**group["metadata"], "labels": labels}}
    assert spec.allows(by_label)  # the cluster-name label when the spec has no clusterName
    assert parse_auto_discovery("clusterapi:") == AutoDiscovery() and AutoDiscovery().allows(group)


@pytest.mark.parametrize(("spec", "problem"), [
    ("namespace=blue", "should be clusterapi:key=value,key=value"),
    ("gce:namespace=blue", "unsupported discoverer 'gce'"),
    ("clusterapi:namespace", "'namespace' is not key=value"),
    ("clusterapi:a=b=c", "'a=b=c' is not key=value"),
    ("clusterapi:-bad=1", "'-bad' is not a label key"),
    ("clusterapi:Bad_Prefix/x=1", "the label key's prefix must be a DNS subdomain"),
    ("clusterapi:color=no way", "'no way' is not a label value"),
])
def test_malformed_auto_discovery_names_the_flag(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_auto_discovery(spec)
    assert str(err.value).startswith("--node-group-auto-discovery: ") and problem in str(err.value)
