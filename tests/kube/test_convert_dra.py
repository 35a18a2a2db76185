"""`gpuscale.kube.convert_dra` and the pod side in `kube.convert`: resource.k8s.io/v1 JSON → `model.dra`, and one
line naming the object and field for what the API server would refuse."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuscale.kube.convert import cluster_from_objects, pod_from_k8s
from gpuscale.kube.convert_dra import (
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_claim_template_from_k8s,
    resource_slice_from_k8s,
)
from gpuscale.model.dra import (
    AllocationMode,
    DeviceToleration,
    PodResourceClaim,
    TaintEffect,
    Version,
)
from gpuscale.model.errors import InputError
from tests.builders import k8s_list, k8s_pod

DRIVER = "gpu.nvidia.com"
Gi = 2**30


def k8s_slice(name: str = "node1-gpus", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": DRIVER, "pool": {"name": "node1", "generation": 1, "resourceSliceCount": 1}, "nodeName": "node1",
        "devices": [{
            "name": "gpu-0",
            "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": 0},
                           "driverVersion": {"version": "580.65.6"}, "mig.capable": {"bool": True},
                           "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}},
            "capacity": {"memory": {"value": "80Gi"}},
        }],
    }
    body.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}


def k8s_claim(name: str = "c", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].index == 0'}}]}}]}},
            "status": status}


def test_a_slice_reads_devices_with_typed_qualified_attributes() -> None:
    s = resource_slice_from_k8s(k8s_slice())
    assert (s.name, s.driver, s.node_name, s.pool.name, s.pool.generation, s.pool.resource_slice_count) == (
        "node1-gpus", DRIVER, "node1", "node1", 1, 1)
    device = s.devices[0]
    assert device.attributes == {f"{DRIVER}/productName": "NVIDIA H100 80GB HBM3", f"{DRIVER}/index": 0,
                                 f"{DRIVER}/driverVersion": Version("580.65.6"), f"{DRIVER}/mig.capable": True,
                                 "resource.kubernetes.io/pcieRoot": "pci0000:00"}
    # capacities qualified like attributes: CEL's `device.capacity["gpu.nvidia.com"].memory` reads them by domain
    assert list(device.capacity) == [f"{DRIVER}/memory"]
    assert device.capacity[f"{DRIVER}/memory"].value_milli == 80 * Gi * 1000
    assert s.serves("node1", {}) and not s.serves("node2", {})


def test_a_fully_qualified_attribute_wins_over_its_short_twin() -> None:
    raw = k8s_slice()
    raw["spec"]["devices"][0]["attributes"] = {f"{DRIVER}/index": {"int": 7}, "index": {"int": 0}}
    assert resource_slice_from_k8s(raw).devices[0].attributes == {f"{DRIVER}/index": 7}


def test_partitionable_and_shared_devices() -> None:
    raw = k8s_slice(sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}])
    raw["spec"]["devices"][0].update({
        "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "10Gi"}}}],
        "allowMultipleAllocations": True, "bindsToNode": True, "bindingConditions": ["Ready"],
        "taints": [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}, {"key": "x", "effect": "New"}],
        "capacity": {"memory": {"value": "80Gi", "requestPolicy": {
            "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}},
    })
    s = resource_slice_from_k8s(raw)
    device = s.devices[0]
    assert s.shared_counters[0].counters == {"memory": 80 * Gi * 1000}
    assert device.consumes_counters[0].counter_set == "gpu-0-counters"
    assert device.consumes_counters[0].counters == {"memory": 10 * Gi * 1000}
    assert device.allow_multiple_allocations and device.binds_to_node and device.binding_conditions == ("Ready",)
    assert [t.effect for t in device.taints] == [TaintEffect.NO_SCHEDULE, TaintEffect.NONE]  # unknown: None
    policy = device.capacity[f"{DRIVER}/memory"].request_policy
    assert policy is not None and policy.default_milli == Gi * 1000
    assert policy.valid_range is not None and policy.valid_range.step_milli == Gi * 1000
    assert policy.valid_range.max_milli is None


def test_node_selection_per_slice_and_per_device() -> None:
    terms = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    by_selector = resource_slice_from_k8s(k8s_slice(nodeName=None, nodeSelector=terms))
    assert by_selector.node_name is None and by_selector.serves("n9", {"zone": "a"})
    assert not by_selector.serves("n9", {"zone": "b"})
    everywhere = resource_slice_from_k8s(k8s_slice(nodeName=None, allNodes=True))
    assert everywhere.all_nodes and everywhere.serves("any", {})
    raw = k8s_slice(nodeName=None, perDeviceNodeSelection=True)
    raw["spec"]["devices"][0]["nodeName"] = "n3"
    per_device = resource_slice_from_k8s(raw)
    assert per_device.serves("n3", {}) and not per_device.serves("n4", {})


def test_what_v1_37_keeps_off_is_named_once_per_slice() -> None:
    raw = k8s_slice()
    raw["spec"]["devices"][0]["attributes"]["ids"] = {"ints": [1, 2]}
    raw["spec"]["devices"].append({"name": "gpu-1", "attributes": {"ids": {"ints": [3]}}})
    s = resource_slice_from_k8s(raw)
    assert f"{DRIVER}/ids" not in s.devices[0].attributes and len(s.devices) == 2
    assert s.unsupported == ("list-valued device attributes",)
    cluster = cluster_from_objects([raw])
    assert cluster.dra.unsupported() == ("ResourceSlice node1-gpus: list-valued device attributes",)


def test_device_class_and_template() -> None:
    cls = device_class_from_k8s({"kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}, "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
        "extendedResourceName": "nvidia.com/gpu"}})
    assert cls.selectors == ("device.driver == 'gpu.nvidia.com'",) and cls.extended_resource_name == "nvidia.com/gpu"
    template = resource_claim_template_from_k8s({
        "kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "gpus", "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2,
                 "tolerations": [{"key": "maintenance", "operator": "Exists"}]},
                {"name": "all", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All",
                 "capacity": {"requests": {"memory": "10Gi"}}}]}],
            "constraints": [{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]}}}})
    assert template.key == "ns/t"
    request = template.spec.requests[0]
    assert request.exactly is None and [s.name for s in request.first_available] == ["big", "all"]
    big, every = request.first_available
    assert big.count == 2 and big.tolerations == (DeviceToleration(key="maintenance", operator="Exists"),)
    assert every.allocation_mode is AllocationMode.ALL and every.capacity_requests == {"memory": 10 * Gi * 1000}
    assert template.spec.constraints[0].match_attribute == "resource.kubernetes.io/pcieRoot"


def test_claim_with_allocation_reservation_and_owner() -> None:
    raw = k8s_claim(allocation={
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node1"]}]}]}},
        reservedFor=[{"resource": "pods", "name": "p", "uid": "uid-p"}])
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p",
                                           "controller": True}]
    raw["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    claim = resource_claim_from_k8s(raw)
    assert claim.key == "ns/c" and claim.owner_pod_uid == "uid-p" and claim.pod_claim_name == "gpu"
    assert claim.reserved_for_pod("uid-p") and not claim.reserved_for_pod("uid-q")
    assert claim.allocation is not None and claim.allocation.devices[0].device_id == (DRIVER, "node1", "gpu-0")
    assert claim.allocation.allows("node1", {}) and not claim.allocation.allows("node2", {})
    request = claim.spec.requests[0].exactly
    assert request is not None and request.count == 1 and request.allocation_mode is AllocationMode.EXACT_COUNT
    assert not resource_claim_from_k8s(k8s_claim()).allocation


def test_pods_read_their_claims_and_statuses() -> None:
    pod = pod_from_k8s(k8s_pod(
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"},
                        {"name": "shared", "resourceClaimName": "c"}],
        status={"phase": "Pending", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "x-gpu-abc"}]}))
    assert pod.constraints.resource_claims == (PodResourceClaim(name="gpu", template_name="t"),
                                               PodResourceClaim(name="shared", claim_name="c"))
    assert pod.claim_statuses == {"gpu": "x-gpu-abc"}


def test_a_dump_of_every_kind_fills_the_index() -> None:
    template = {"kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "ns"}, "spec": {"spec": {}}}
    cls = {"kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}, "spec": {}}
    cluster = cluster_from_objects([k8s_list(k8s_slice(), k8s_claim(), template), cls])
    dra = cluster.dra
    assert dra.node_slices("node1")[0].name == "node1-gpus" and dra.claim("ns/c") is not None
    assert dra.template("ns/t") is not None and dra.device_class("gpu.nvidia.com") is not None
    assert not cluster.other_kinds and not cluster_from_objects([]).dra


def _with(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    *parents, last = path.split("/")
    at: Any = raw
    for part in parents:
        at = at[int(part)] if part.isdigit() else at[part]
    at[last] = value
    return raw


@pytest.mark.parametrize(("raw", "field", "words"), [
    (_with(k8s_slice(), "spec/devices/0/attributes/index", {"int": "x"}),
     "spec.devices[0].attributes.index.int", "expected int"),
    (_with(k8s_slice(), "spec/devices/0/attributes/index", {"int": 1, "string": "1"}),
     "spec.devices[0].attributes.index", "exactly one of"),
    (_with(k8s_slice(), "spec/devices/0/attributes/driverVersion", {"version": "v580"}),
     "spec.devices[0].attributes.driverVersion.version", "semantic version"),
    (_with(k8s_slice(), "spec/devices/0/capacity/memory", {"value": "80 Gi"}),
     "spec.devices[0].capacity.memory.value", "quantities must match"),
    (_with(k8s_slice(), "spec/pool/resourceSliceCount", 0), "spec.pool.resourceSliceCount", "greater than zero"),
    (_with(k8s_slice(), "spec/devices/0/attributes", {7: {"int": 1}}),  # a YAML dump may have a number as a key
     "spec.devices[0].attributes.7", "expected a string key"),
    (_with(k8s_slice(), "spec/allNodes", True), "spec", "exactly one of nodeName"),
    (_with(k8s_slice(), "spec/driver", ""), "spec.driver", "required"),
    (_with(k8s_claim(), "spec/devices/requests/0/exactly/allocationMode", "Some"),
     "spec.devices.requests[0].exactly.allocationMode", "unknown allocation mode"),
    (_with(k8s_claim(), "spec/devices/requests/0/exactly/count", 0),
     "spec.devices.requests[0].exactly.count", "greater than zero"),
    (_with(k8s_claim(), "spec/devices/requests/0/firstAvailable", [{"name": "a", "deviceClassName": "x"}]),
     "spec.devices.requests[0]", "exactly one of exactly or firstAvailable"),
    (_with(k8s_claim(), "spec/devices/requests/0/exactly/selectors", [{"cel": {}}]),
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "required"),
    (_with(k8s_claim(), "spec/devices/requests/0/exactly/capacity", {"requests": {"memory": "lots"}}),
     "spec.devices.requests[0].exactly.capacity.requests.memory", "quantities must match"),
    (k8s_pod(resourceClaims=[{"name": "gpu"}]), "spec.resourceClaims[0]", "exactly one of resourceClaimName"),
    (k8s_pod(resourceClaims=[{"resourceClaimName": "c"}]), "spec.resourceClaims[0].name", "required"),
])
def test_bad_input_names_the_object_and_field(raw: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        cluster_from_objects([raw])
    assert caught.value.field == field and words in caught.value.problem
    assert "\n" not in str(caught.value)
