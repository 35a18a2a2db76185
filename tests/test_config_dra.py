"""A pool's `resource_slices` (DRA scale from zero, docs/dra-pools.md): the devices its nodes will publish, in the
API's own form or as `count` identical devices with `{index}`; bad input is one line naming the pool and field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuscale.config import parse_config
from gpuscale.model.dra import Version
from gpuscale.model.errors import ConfigError

DRIVER = "gpu.nvidia.com"
SHAPE: dict[str, Any] = {
    "name": "gpu-{index}",
    "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "type": {"string": "gpu"},
                   "architecture": {"string": "Hopper"}, "driverVersion": {"version": "560.35.3"},
                   "index": {"int": "{index}"}, "uuid": {"string": "GPU-{index}"}, "mig": {"bool": False},
                   "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}},
    "capacity": {"memory": "80Gi"},
}


def _pool(**slices: Any) -> dict[str, Any]:
    return {"pools": [{"name": "h100", "allocatable": {"cpu": 96, "memory": "1Ti"},
                       "resource_slices": [{"driver": DRIVER, **slices}]}]}


def test_count_and_shape_make_identical_devices_qualified_by_the_driver() -> None:
    (pool,) = parse_config(_pool(count=8, device=SHAPE)).pools
    (one,) = pool.resource_slices
    assert [d.name for d in one.devices] == [f"gpu-{i}" for i in range(8)]
    five = one.devices[5].attributes
    assert five[f"{DRIVER}/index"] == 5 and five[f"{DRIVER}/uuid"] == "GPU-5" and five[f"{DRIVER}/mig"] is False
    assert five[f"{DRIVER}/driverVersion"] == Version("560.35.3")
    assert five["resource.kubernetes.io/pcieRoot"] == "pci0000:00"  # a qualified name keeps its domain
    assert one.devices[0].capacity[f"{DRIVER}/memory"].value_milli == 80 * 2**30 * 1000


def test_devices_listed_as_the_api_writes_them() -> None:
    devices = [{"name": "gpu-0", "attributes": {"index": {"int": 0}}},
               {"name": "gpu-0-mig-1g-10gb-0", "attributes": {"type": {"string": "mig"}},
                "capacity": {"memory": "10Gi"}}]
    (pool,) = parse_config(_pool(devices=devices)).pools
    assert [d.name for d in pool.resource_slices[0].devices] == ["gpu-0", "gpu-0-mig-1g-10gb-0"]
    assert pool.resource_slices[0].devices[0].attributes == {f"{DRIVER}/index": 0}


def test_two_slices_of_one_driver_make_one_pool_of_two() -> None:
    raw = _pool(count=2, device=SHAPE)
    raw["pools"][0]["resource_slices"].append({"driver": DRIVER, "devices": [{"name": "nic-0"}]})
    (pool,) = parse_config(raw).pools
    first, second = pool.template_slices("n1")
    assert (first.name, second.name) == (f"n1-{DRIVER}", f"n1-{DRIVER}-1")
    assert first.pool.resource_slice_count == second.pool.resource_slice_count == 2


def _with(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    shape = copy.deepcopy(SHAPE)
    at: Any = shape
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return _pool(count=8, device=shape)


@pytest.mark.parametrize(("raw", "where", "says"), [
    (_pool(count=200, device=SHAPE), "resource_slices[0].count", "less than or equal to 128"),
    (_pool(count=8), "resource_slices[0]", "count and device go together"),
    (_pool(), "resource_slices[0]", "give either devices, or count with device"),
    (_pool(count=1, device=SHAPE, devices=[{"name": "a"}]), "resource_slices[0]", "either devices"),
    (_with(("name",), "gpu"), "resource_slices[0]", "must contain {index}"),
    (_with(("name",), "GPU-{index}"), "resource_slices[0].device", "not a DNS label"),
    (_with(("attributes", "index"), {"int": "x"}), "device.attributes.index", "an integer or '{index}'"),
    (_with(("attributes", "type"), {"string": "gpu", "int": 1}), "device.attributes.type", "exactly one"),
    (_with(("attributes", "driverVersion"), {"version": "v560"}), "driverVersion", "not a semantic version"),
    (_with(("attributes", "9lives"), {"string": "x"}), "resource_slices[0].device", "C identifier"),
    (_with(("attributes", "type"), {"strin": "gpu"}), "device.attributes.type.strin", "did you mean string?"),
    (_with(("capacity", "memory"), "80Gx"), "resource_slices[0].device", "capacity memory"),
    (_with(("capacity", "memory"), "-1Gi"), "resource_slices[0].device", "must not be negative"),
    ({"pools": [{"name": "h100", "allocatable": {"cpu": 1, "memory": 1},
                 "resource_slices": [{"driver": "GPU_X", "devices": [{"name": "a"}]}]}]},
     "resource_slices[0]", "not a DNS subdomain"),
    ({"pools": [{"name": "h100", "allocatable": {"cpu": 1, "memory": 1},
                 "resource_slices": [{"driver": DRIVER, "devices": [{"name": "a"}]},
                                     {"driver": DRIVER, "devices": [{"name": "a"}]}]}]},
     "pools[0]", "device a of driver gpu.nvidia.com is listed twice"),
])
def test_bad_slices_are_one_line_naming_the_field(raw: dict[str, Any], where: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "gpuscale.yaml")
    text = str(caught.value)
    assert "\n" not in text and "pools[0]" in text and where in text and says in text, text
