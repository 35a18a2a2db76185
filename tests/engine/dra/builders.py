"""Builders for DRA objects with defaults: GPUs of one driver on one node, a class selecting the driver."""

from __future__ import annotations

from gpuscale.model.dra import (
    AllocationMode,
    ClaimSpec,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    ExactDeviceRequest,
    PoolRef,
    ResourceClaim,
    ResourceSlice,
    Version,
)
from gpuscale.model.quantity import to_milli

DRIVER = "gpu.example.com"
GPU_CLASS = DeviceClass(name="gpu", selectors=(f'device.driver == "{DRIVER}"',))


def gpu(name: str, *, model: str = "H100", index: int = 0, memory: str = "80Gi", **extra: object) -> Device:
    attributes: dict[str, str | int | bool | Version] = {f"{DRIVER}/model": model, f"{DRIVER}/index": index}
    attributes.update({f"{DRIVER}/{k}": v for k, v in extra.items()})
    return Device(name=name, attributes=attributes,
                  capacity={f"{DRIVER}/memory": DeviceCapacity(value_milli=to_milli(memory))})


def node_slice(node: str, *devices: Device, pool: str | None = None, driver: str = DRIVER, generation: int = 0,
               count: int = 1, name: str | None = None) -> ResourceSlice:
    return ResourceSlice(name=name or f"{node}-{driver}", driver=driver,
                         pool=PoolRef(name=pool or node, generation=generation, resource_slice_count=count),
                         node_name=node, devices=devices)


def request(name: str = "gpu", *, count: int = 1, selectors: tuple[str, ...] = (), device_class: str = "gpu",
            mode: AllocationMode = AllocationMode.EXACT_COUNT, admin: bool = False) -> DeviceRequest:
    return DeviceRequest(name=name, exactly=ExactDeviceRequest(device_class_name=device_class, selectors=selectors,
                                                               allocation_mode=mode, count=count, admin_access=admin))


def first_available(name: str, *subs: tuple[str, int, tuple[str, ...]]) -> DeviceRequest:
    return DeviceRequest(name=name, first_available=tuple(
        DeviceSubRequest(name=sub, device_class_name="gpu", count=count, selectors=selectors)
        for sub, count, selectors in subs))


def claim(name: str = "c", *requests: DeviceRequest, match: tuple[str, tuple[str, ...]] | None = None,
          distinct: tuple[str, tuple[str, ...]] | None = None, namespace: str = "default") -> ResourceClaim:
    constraints = []
    if match is not None:
        constraints.append(DeviceConstraint(match_attribute=match[0], requests=match[1]))
    if distinct is not None:
        constraints.append(DeviceConstraint(distinct_attribute=distinct[0], requests=distinct[1]))
    return ResourceClaim(namespace=namespace, name=name,
                         spec=ClaimSpec(requests=requests or (request(),), constraints=tuple(constraints)))
