"""What a device has left: consumable capacity (`allowMultipleAllocations`) and partitionable devices' shared
counters, as kube-scheduler v1.37's structured allocator accounts them (its `CmpRequestOverCapacity` and counter
checks, beta and on by default).

Capacity: a request consumes, per capacity the device publishes, what it asks (rounded up to the policy's valid
values or range step) or, when it asks nothing of that capacity, the policy's default or else all of it; an amount the
policy does not allow rejects the device; the device fits while what is allocated, what this allocation is taking
and the request stay within each capacity. An exclusive device goes through the same check with nothing allocated,
so a request asking more than the device has, or a capacity it does not publish, skips it. All amounts are milli-units,
as Kubernetes computes range steps with `DRAFractionalCapacityRange` (beta, on by default in v1.37).

Counters: a pool's shared counter sets, less what its allocated devices consume (those serving other nodes too), are
what its partitions may take; a device fits while, with what this allocation takes, no counter goes below zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpuscale.engine.dra.pools import DeviceId, GatheredPool
from gpuscale.model.dra import CapacityPolicy, CapacityRange, Device, DeviceCapacity


def _round_up_range(requested: int, valid: CapacityRange) -> int:
    if requested < valid.min_milli:
        return valid.min_milli
    if valid.step_milli is None:
        return requested
    added = requested - valid.min_milli
    return valid.min_milli + valid.step_milli * -(-added // valid.step_milli)


def consumed(requested: int | None, capacity: DeviceCapacity) -> int:
    """What a share consumes of one capacity (`calculateConsumedCapacity`)."""
    policy = capacity.request_policy
    if requested is None:
        return policy.default_milli if policy is not None and policy.default_milli is not None \
            else capacity.value_milli
    if policy is None:
        return requested
    if policy.valid_range is not None:
        return _round_up_range(requested, policy.valid_range)
    for valid in policy.valid_values_milli:
        if requested <= valid:
            return valid
    return requested


def violates(amount: int, policy: CapacityPolicy | None) -> bool:
    if policy is None or (policy.default_milli is not None and amount == policy.default_milli):
        return False
    if policy.valid_range is not None:
        valid = policy.valid_range
        if valid.max_milli is not None and amount > valid.max_milli:
            return True
        return valid.step_milli is not None and (amount - valid.min_milli) % valid.step_milli != 0
    return bool(policy.valid_values_milli) and amount not in policy.valid_values_milli


def _asked(requests: Mapping[str, int], name: str) -> int | None:
    """What the request asks of the device's capacity `name` (fully qualified, as the model keeps it): under that
    name, or under its bare name as a request may write a capacity of the device's own driver."""
    asked = requests.get(name)
    return requests.get(name.rpartition("/")[2]) if asked is None else asked


def _publishes(device: Device, asked: str) -> bool:
    return asked in device.capacity or ("/" not in asked and any(n.rpartition("/")[2] == asked
                                                                  for n in device.capacity))


def consumption(device: Device, requests: Mapping[str, int]) -> dict[str, int]:
    """Per capacity of the device, what a share for these requests consumes (`GetConsumedCapacityFromRequest`)."""
    return {name: consumed(_asked(requests, name), capacity) for name, capacity in device.capacity.items()}


def fits(device: Device, requests: Mapping[str, int], allocated: Mapping[str, int] | None,
         allocating: Mapping[str, int] | None) -> bool:
    """Whether the request fits the device's capacity beside what is allocated and being allocated on it."""
    if not all(_publishes(device, name) for name in requests):
        return False
    for name, capacity in device.capacity.items():
        amount = consumed(_asked(requests, name), capacity)
        if violates(amount, capacity.request_policy):
            return False
        total = amount + (allocated or {}).get(name, 0) + (allocating or {}).get(name, 0)
        if total > capacity.value_milli:
            return False
    return True


Counters = dict[str, dict[str, int]]
"""Counter set → counter → milli-units."""


def available_counters(pool: GatheredPool, allocated: Callable[[DeviceId], bool]) -> Counters:
    """The pool's counters less what its allocated devices consume (may go negative: then none is left)."""
    available = {name: dict(counters) for name, counters in pool.counters.items()}
    for s in pool.slices + pool.others:
        for d in s.devices:
            if not d.consumes_counters or not allocated((pool.driver, pool.name, d.name)):
                continue
            for taken in d.consumes_counters:
                counter_set = available.get(taken.counter_set, {})
                for name, amount in taken.counters.items():
                    if name in counter_set:
                        counter_set[name] -= amount
    return available


def add_counters(used: Counters, device: Device, sign: int) -> None:
    """Count the device's consumption into (sign 1) or out of (sign -1) what an allocation takes."""
    for taken in device.consumes_counters:
        counter_set = used.setdefault(taken.counter_set, {})
        for name, amount in taken.counters.items():
            counter_set[name] = counter_set.get(name, 0) + sign * amount


def take_counters(available: Counters, used: Counters, device: Device) -> bool:
    """Take the device's counters if every counter stays within what is available; else leave `used` as it was."""
    add_counters(used, device, 1)
    for set_name, counters in available.items():
        for name, amount in counters.items():
            if amount < used.get(set_name, {}).get(name, 0):
                add_counters(used, device, -1)
                return False
    return True
