"""What a stand-in for a DRA driver's kubelet plugin publishes for a kwok node: the pool's template slices as API
objects, every attribute type and capacity written back as the API spells it."""

from __future__ import annotations

from gpuscale.config import parse_config
from gpuscale.providers.kwok import resource_slice_bodies


def test_slice_bodies_write_the_template_back_as_the_api_spells_it() -> None:
    (pool,) = parse_config({"pools": [{"name": "h100", "allocatable": {"cpu": 8, "memory": "64Gi"},
                                       "resource_slices": [{"driver": "gpu.nvidia.com", "count": 2, "device": {
                                           "name": "gpu-{index}",
                                           "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"},
                                                          "index": {"int": "{index}"}, "mig": {"bool": True},
                                                          "driverVersion": {"version": "580.82.7"}},
                                           "capacity": {"memory": "80Gi", "cores": "1500m"}}}]}]}).pools
    (body,) = resource_slice_bodies(pool, "h100-x")
    assert body["metadata"]["name"] == "h100-x-gpu.nvidia.com"
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        "gpu.nvidia.com", "h100-x", {"name": "h100-x", "generation": 0, "resourceSliceCount": 1})
    second = spec["devices"][1]
    assert second["name"] == "gpu-1"
    assert second["attributes"] == {"gpu.nvidia.com/productName": {"string": "NVIDIA H100 80GB HBM3"},
                                    "gpu.nvidia.com/index": {"int": 1}, "gpu.nvidia.com/mig": {"bool": True},
                                    "gpu.nvidia.com/driverVersion": {"version": "580.82.7"}}
    assert second["capacity"] == {"gpu.nvidia.com/memory": {"value": "80Gi"},
                                  "gpu.nvidia.com/cores": {"value": "1500m"}}
