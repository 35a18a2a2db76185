"""Consumable capacity as kube's allocator rounds and checks it (milli-units, `DRAFractionalCapacityRange` on)."""

from __future__ import annotations

from gpuscale.engine.dra.capacity import consumed, fits, violates
from gpuscale.model.dra import CapacityPolicy, CapacityRange, Device, DeviceCapacity

RANGE = CapacityPolicy(valid_range=CapacityRange(min_milli=1000, max_milli=4000, step_milli=500))


def test_a_request_rounds_up_to_the_range_step_in_milli_units() -> None:
    capacity = DeviceCapacity(value_milli=8000, request_policy=RANGE)
    assert consumed(1200, capacity) == 1500
    assert consumed(1500, capacity) == 1500
    assert consumed(200, capacity) == 1000
    assert violates(4500, RANGE) and not violates(3500, RANGE) and violates(1250, RANGE)


def test_valid_values_and_defaults() -> None:
    values = DeviceCapacity(value_milli=8000, request_policy=CapacityPolicy(valid_values_milli=(1000, 2000)))
    assert consumed(1500, values) == 2000 and consumed(2500, values) == 2500
    assert violates(2500, values.request_policy) and not violates(2000, values.request_policy)
    assert consumed(None, DeviceCapacity(value_milli=8000)) == 8000
    assert consumed(None, DeviceCapacity(value_milli=8000, request_policy=CapacityPolicy(default_milli=100))) == 100


def test_fits_counts_what_is_allocated_and_being_allocated() -> None:
    device = Device(name="d", allow_multiple_allocations=True,
                    capacity={"x/mem": DeviceCapacity(value_milli=4000, request_policy=RANGE)})
    assert fits(device, {"x/mem": 1200}, {"x/mem": 2000}, {"x/mem": 500})  # 1500 + 2500 = 4000
    assert not fits(device, {"x/mem": 1200}, {"x/mem": 2000}, {"x/mem": 600})
    assert not fits(device, {"x/other": 1}, None, None)  # a capacity the device does not publish
