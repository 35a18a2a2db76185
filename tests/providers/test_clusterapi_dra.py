"""DRA scale from zero on Cluster API: CA's `dra-driver` + `gpu-count` annotations make the ResourceSlice CA's
clusterapi provider makes (devices `gpu-N` with a `type` attribute, no extended resource); gpuscale's
`gpuscale.io/resource-slices` annotation gives the full devices, as the pool config writes them."""

from __future__ import annotations

import json

import pytest

from gpuscale.model.errors import InputError
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.clusterapi import CAPACITY, MACHINE_DEPLOYMENT, RESOURCE_SLICES_ANNOTATION, template_pool
from tests.providers.test_clusterapi import BOUNDS, md

BASE = {**BOUNDS, CAPACITY + "cpu": "96", CAPACITY + "memory": "1Ti"}


def test_cas_dra_driver_annotation_makes_its_slice_and_no_extended_resource() -> None:
    pool = template_pool(MACHINE_DEPLOYMENT, md({**BASE, CAPACITY + "dra-driver": "gpu.nvidia.com",
                                                 CAPACITY + "gpu-count": "4"}), "h100", 0, 4)
    assert pool.allocatable.get(NVIDIA_GPU) == 0 and pool.gpu_model is None
    (one,) = pool.template_slices("n1")
    assert (one.driver, one.name, one.pool.name, one.pool.resource_slice_count) == (
        "gpu.nvidia.com", "n1-gpu.nvidia.com", "n1", 1)
    assert [(d.name, dict(d.attributes)) for d in one.devices] == [
        (f"gpu-{i}", {"gpu.nvidia.com/type": "gpu"}) for i in range(4)]
    both = template_pool(MACHINE_DEPLOYMENT, md({**BASE, CAPACITY + "dra-driver": "gpu.nvidia.com",
                                                 CAPACITY + "gpu-type": NVIDIA_GPU, CAPACITY + "gpu-count": "4"}),
                         "h100", 0, 4)
    assert both.allocatable.get(NVIDIA_GPU) == 4 and len(both.resource_slices[0].devices) == 4


def test_gpuscale_annotation_gives_the_devices_and_wins() -> None:
    slices = [{"driver": "gpu.nvidia.com", "count": 8, "device": {
        "name": "gpu-{index}", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}},
        "capacity": {"memory": "80Gi"}}}]
    pool = template_pool(MACHINE_DEPLOYMENT, md({**BASE, CAPACITY + "dra-driver": "gpu.nvidia.com",
                                                 CAPACITY + "gpu-count": "4",
                                                 RESOURCE_SLICES_ANNOTATION: json.dumps(slices)}), "h100", 0, 4)
    (one,) = pool.resource_slices
    assert len(one.devices) == 8
    assert one.devices[7].attributes == {"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize(("text", "where", "problem"), [
    ("[{", f"metadata.annotations[{RESOURCE_SLICES_ANNOTATION}]", "not JSON"),
    ('{"driver": "x"}', f"metadata.annotations[{RESOURCE_SLICES_ANNOTATION}]", "must be a JSON list"),
    ('[{"driver": "gpu.nvidia.com", "count": 2}]', "pool resource_slices.0", "count and device go together"),
])
def test_a_bad_annotation_names_the_object_and_the_field(text: str, where: str, problem: str) -> None:
    with pytest.raises(InputError) as err:
        template_pool(MACHINE_DEPLOYMENT, md({**BASE, RESOURCE_SLICES_ANNOTATION: text}), "h100", 0, 4)
    message = str(err.value)
    assert message.startswith("MachineDeployment capi/gpu-md: ") and where in message and problem in message, message
    assert "\n" not in message
