"""The DRA cases of the differential test (test_differential.py::test_dra_feasibility_matches_kube_scheduler): random
DeviceClasses, node-local ResourceSlices shaped as NVIDIA's DRA driver publishes them, ResourceClaimTemplates and
shared ResourceClaims, all created through the API (dicts in API form, `resource.k8s.io/v1`).

NVIDIA's driver (`gpu.nvidia.com`) publishes one device per GPU (`gpu-<index>`) with the attributes `type` ("gpu" or
"mig"), `uuid`, `productName`, `brand`, `architecture`, `index`, `minor`, `cudaComputeCapability`, `driverVersion`,
`cudaDriverVersion` (versions) and the capacity `memory`; the shapes below follow that. A second driver
(`nic.example.com`) publishes NICs with an int attribute, so that classes and requests meet devices without the GPU
driver's attributes.
"""

from __future__ import annotations

import random
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "nic.example.com"
API = "resource.k8s.io/v1"
H100, A100_40, A100_80, L4 = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB",
                              "NVIDIA L4")
PRODUCTS = {H100: ("Hopper", "80Gi", "9.0.0"), A100_40: ("Ampere", "40Gi", "8.0.0"),
            A100_80: ("Ampere", "80Gi", "8.0.0"), L4: ("Ada Lovelace", "24Gi", "8.9.0")}
DRIVER_VERSIONS = ["550.127.5", "570.86.15", "580.82.7"]


def gpu_device(index: int, product: str, driver_version: str = "580.82.7") -> dict[str, Any]:
    """One full GPU as NVIDIA's DRA driver publishes it."""
    arch, memory, cc = PRODUCTS[product]
    return {"name": f"gpu-{index}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{uuidlib.uuid4()}"},
        "productName": {"string": product}, "brand": {"string": "Nvidia"}, "architecture": {"string": arch},
        "index": {"int": index}, "minor": {"int": index}, "cudaComputeCapability": {"version": cc},
        "driverVersion": {"version": driver_version}, "cudaDriverVersion": {"version": "12.8.0"}},
        "capacity": {"memory": {"value": memory}}}


def mig_device(parent: int, index: int) -> dict[str, Any]:
    """A MIG partition (1g.10gb) as a device of its own (`type: mig`)."""
    return {"name": f"gpu-{parent}-mig-1g10gb-{index}", "attributes": {
        "type": {"string": "mig"}, "uuid": {"string": f"MIG-{uuidlib.uuid4()}"}, "profile": {"string": "1g.10gb"},
        "productName": {"string": A100_80}, "parentIndex": {"int": parent}, "index": {"int": index},
        "driverVersion": {"version": "580.82.7"}},
        "capacity": {"memory": {"value": "10Gi"}}}


def nic_device(index: int, gbps: int) -> dict[str, Any]:
    return {"name": f"nic-{index}", "attributes": {"type": {"string": "nic"}, "gbps": {"int": gbps}}}


def resource_slice(name: str, node: str, driver: str, devices: list[dict[str, Any]], count: int = 1,
                   pool: str | None = None) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": count},
                     "devices": devices}}


NODE_SHAPES = ["h100x8", "h100x2", "a100x4", "a100-80x8", "l4x2", "mixed", "mig", "none", "none", "incomplete"]


def node_slices(rng: random.Random, node: str) -> tuple[str, list[dict[str, Any]]]:
    """A random shape of devices for a node and its slices: 8 or 2 H100s, 4 A100 40 GB, 8 A100 80 GB, 2 L4, one H100
    with one A100 (matchAttribute fails), one A100 with seven MIG partitions, nothing, or an incomplete pool (one of
    its two slices). A third of the nodes also get two NICs from the second driver."""
    shape = rng.choice(NODE_SHAPES)
    version = rng.choice(DRIVER_VERSIONS)
    devices: list[dict[str, Any]] = []
    count = 1
    if shape in ("h100x8", "h100x2"):
        devices = [gpu_device(i, H100, version) for i in range(int(shape[-1]))]
    elif shape == "a100x4":
        devices = [gpu_device(i, A100_40, version) for i in range(4)]
    elif shape == "a100-80x8":
        devices = [gpu_device(i, A100_80, version) for i in range(8)]
    elif shape == "l4x2":
        devices = [gpu_device(i, L4, version) for i in range(2)]
    elif shape == "mixed":
        devices = [gpu_device(0, H100, version), gpu_device(1, A100_40, version)]
    elif shape == "mig":
        devices = [gpu_device(0, A100_80, version), *(mig_device(1, i) for i in range(7))]
    elif shape == "incomplete":
        devices, count = [gpu_device(i, L4, version) for i in range(4)], 2
    slices = [resource_slice(f"{node}-gpu", node, GPU_DRIVER, devices, count)] if devices else []
    if rng.random() < 0.33:
        slices.append(resource_slice(f"{node}-nic", node, NIC_DRIVER,
                                     [nic_device(i, rng.choice([200, 400])) for i in range(2)]))
    return shape, slices


def _cel(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}


def device_classes(run: str) -> dict[str, list[dict[str, Any]]]:
    """Class name → its selectors: GPUs, MIG partitions, both, big GPUs (memory above 40Gi, a quantity comparison),
    NICs, any device at all, and one whose selector fails at run time on every device (a missing attribute)."""
    gpu = f'device.driver == "{GPU_DRIVER}"'
    attrs = f'device.attributes["{GPU_DRIVER}"]'
    return {
        f"gpu-{run}": [_cel(gpu), _cel(f'{attrs}.type == "gpu"')],
        f"mig-{run}": [_cel(f'{gpu} && {attrs}.type == "mig"')],
        f"nvidia-{run}": [_cel(gpu)],
        f"big-{run}": [_cel(f'{gpu} && device.capacity["{GPU_DRIVER}"].memory.compareTo(quantity("40Gi")) > 0')],
        f"nic-{run}": [_cel(f'device.driver == "{NIC_DRIVER}"')],
        f"any-{run}": [],
        f"broken-{run}": [_cel(f'{attrs}.nosuch == "x"')],
    }


def device_class_body(name: str, selectors: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": selectors} if selectors else {}
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _selector(rng: random.Random, cls: str) -> dict[str, Any]:
    """A request's CEL selector, fitting the class: product, memory, index, driver version, type; now and then one
    that fails at run time (an attribute no device has)."""
    attrs = f'device.attributes["{GPU_DRIVER}"]'
    if cls.startswith("nic"):
        return _cel(f'device.attributes["{NIC_DRIVER}"].gbps >= {rng.choice([200, 400])}')
    roll = rng.random()
    if roll < 0.35:
        return _cel(f'{attrs}.productName == "{rng.choice([H100, H100, A100_40, A100_80, L4, "NVIDIA B200"])}"')
    if roll < 0.55:
        amount = rng.choice(["20Gi", "40Gi", "64Gi"])
        return _cel(f'device.capacity["{GPU_DRIVER}"].memory.compareTo(quantity("{amount}")) >= 0')
    if roll < 0.7:
        return _cel(f"{attrs}.index < {rng.choice([1, 2, 4])}")
    if roll < 0.85:
        return _cel(f'{attrs}.driverVersion.isGreaterThan(semver("{rng.choice(["560.0.0", "575.0.0"])}"))')
    if roll < 0.95:
        return _cel(f'{attrs}.architecture in ["Hopper", "Ada Lovelace"]')
    return _cel(f'{attrs}.nosuch == "x"')


CLASS_WEIGHTS = [6, 2, 2, 2, 1, 1, 1, 1]
"""For `device_classes`' classes in order (gpu, mig, nvidia, big, nic, any, broken), then a class that does not
exist."""


def _exact(rng: random.Random, classes: Sequence[str], run: str) -> dict[str, Any]:
    cls = rng.choices([*classes, f"nosuch-{run}"], weights=CLASS_WEIGHTS)[0]
    body: dict[str, Any] = {"deviceClassName": cls}
    if rng.random() < 0.06:
        body["allocationMode"] = "All"
    else:
        body["count"] = rng.choices([1, 2, 4, 8, 9], weights=[55, 20, 12, 8, 5])[0]
    if rng.random() < 0.5:
        body["selectors"] = [_selector(rng, cls) for _ in range(rng.choices([1, 2], weights=[85, 15])[0])]
    return body


def claim_spec(rng: random.Random, classes: Sequence[str], run: str) -> dict[str, Any]:
    """A claim's `spec`: one or two requests, each `exactly` (ExactCount 1–9 or All, class and request selectors) or
    `firstAvailable` (H100 ×2, then A100 ×2, then any GPU); sometimes `matchAttribute` on the product (over both
    requests, or over a request of several devices)."""
    requests: list[dict[str, Any]] = []
    for r in range(rng.choices([1, 2], weights=[80, 20])[0]):
        if rng.random() < 0.12:
            gpu = classes[0]
            requests.append({"name": f"r{r}", "firstAvailable": [
                {"name": "h100", "deviceClassName": gpu, "count": 2,
                 "selectors": [_cel(f'device.attributes["{GPU_DRIVER}"].productName == "{H100}"')]},
                {"name": "a100", "deviceClassName": gpu, "count": 2,
                 "selectors": [_cel(f'device.attributes["{GPU_DRIVER}"].architecture == "Ampere"')]},
                {"name": "any", "deviceClassName": gpu}]})
        else:
            requests.append({"name": f"r{r}", "exactly": _exact(rng, classes, run)})
    devices: dict[str, Any] = {"requests": requests}
    if rng.random() < 0.2:
        names = [r["name"] for r in requests]
        devices["constraints"] = [{"requests": names, "matchAttribute": f"{GPU_DRIVER}/productName"}]
    return {"devices": devices}


@dataclass
class DraPod:
    """A pod (API dict), the templates to create with it and what it exercises."""

    pod: dict[str, Any]
    templates: list[dict[str, Any]] = field(default_factory=list)
    categories: set[str] = field(default_factory=set)


def random_dra_pod(rng: random.Random, name: str, classes: Sequence[str], shared: Sequence[str],
                   run: str) -> DraPod:
    """A pod with one or two claims: from a template of its own (most), or a shared claim several pods use."""
    claims = []
    templates = []
    for c in range(rng.choices([1, 2], weights=[85, 15])[0]):
        if shared and rng.random() < 0.2:
            claims.append({"name": f"c{c}", "resourceClaimName": rng.choice(list(shared))})
            continue
        tname = f"{name}-c{c}"
        templates.append({"apiVersion": API, "kind": "ResourceClaimTemplate", "metadata": {"name": tname},
                          "spec": {"spec": claim_spec(rng, classes, run)}})
        claims.append({"name": f"c{c}", "resourceClaimTemplateName": tname})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 0, "resourceClaims": claims,
        "containers": [{"name": "c", "image": "registry.example/train:1",
                        "resources": {"requests": {"cpu": rng.choice(["100m", "1", "4"])},
                                      "claims": [{"name": c["name"]} for c in claims]}}]}}
    out = DraPod(pod=pod, templates=templates)
    out.categories = dra_categories(pod, templates)
    return out


def dra_categories(pod: Mapping[str, Any], templates: Sequence[Mapping[str, Any]]) -> set[str]:
    found: set[str] = set()
    claims = pod["spec"]["resourceClaims"]
    found.add(f"{len(claims)} claim(s)")
    found.update("shared claim" for c in claims if "resourceClaimName" in c)
    for t in templates:
        devices = t["spec"]["spec"]["devices"]
        if "constraints" in devices:
            found.add("matchAttribute")
        for r in devices["requests"]:
            if "firstAvailable" in r:
                found.add("firstAvailable")
                continue
            ex = r["exactly"]
            found.add(f"class {ex['deviceClassName'].rsplit('-', 1)[0]}")
            found.add("All" if ex.get("allocationMode") == "All" else f"count {ex['count']}")
            for s in ex.get("selectors", []):
                text = s["cel"]["expression"]
                found.add("selector " + next((k for k in ("productName", "memory", "index", "driverVersion",
                                                          "architecture", "nosuch", "gbps") if k in text), "?"))
    return found


def shared_claims(rng: random.Random, classes: Sequence[str], run: str, n: int) -> list[dict[str, Any]]:
    """ResourceClaims several pods may name: allocated (and then pinned to their node) by the first that binds."""
    return [{"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": f"shared-{run}-{i}"},
             "spec": claim_spec(rng, classes, run)} for i in range(n)]


def dra_unsupported() -> bool:
    """Whether gpuscale still reads a pod with ResourceClaims as an unsupported constraint (the DynamicResources
    filter not in yet): the DRA e2e tests are then expected to fail, strictly, so they run for real once it is."""
    from gpuscale.kube.convert import cluster_from_objects

    pod = {"kind": "Pod", "metadata": {"name": "probe", "namespace": "default"},
           "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "c", "resourceClaimName": "x"}]}}
    (one,) = cluster_from_objects([pod]).pods
    return any("dynamic resource allocation" in u for u in one.constraints.unsupported)


NOT_YET = "gpuscale reads pods with ResourceClaims as unsupported until the DynamicResources filter lands (dra-model)"
