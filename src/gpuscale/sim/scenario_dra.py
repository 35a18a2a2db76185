"""A scenario's Dynamic Resource Allocation: `deviceClasses` at the top level and, on a workload (`training`, `batch`,
each of `services`), `resourceClaims` (docs/twin.md, "Devices by claim").

A workload's `resourceClaims` make its pods ask for devices by ResourceClaim instead of by extended resource: the
GPUs a pod would request (`nvidia.com/gpu`, a fraction of one) leave its requests, and so does the GPU-model node
selector the generator gives it (the claim's selectors choose the device); each entry is a claim template per pod
(`claim: per-pod`) or one claim the workload's pods share (`claim: shared`), of `count` devices (default: the pod's
GPUs) of a DeviceClass, with CEL `selectors`. DeviceClasses are the scenario's `deviceClasses`, else the one
NVIDIA's DRA driver installs (`DEFAULT_CLASS`). The nodes publish their pool's `resource_slices` (the pool config's,
docs/dra-pools.md). A bad entry is one `ConfigError` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field

from gpuscale.engine.dra.cel import CompileError
from gpuscale.engine.dra.cel import compile as compile_cel
from gpuscale.inputs.strict import StrictModel, unique_names
from gpuscale.model.dra import (
    NVIDIA_GPU_DRIVER,
    AllocationMode,
    ClaimSpec,
    DeviceClass,
    DeviceRequest,
    ExactDeviceRequest,
)
from gpuscale.model.errors import ConfigError
from gpuscale.model.pod import SchedulingConstraints
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, Resources, is_gpu_resource
from gpuscale.sim.traces import GKE_ACCELERATOR_LABEL
from gpuscale.sim.workloads import DeviceClaim, JobSpec, ServiceSpec

DEFAULT_CLASS = DeviceClass(name=NVIDIA_GPU_DRIVER, selectors=(
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",))
"""The DeviceClass NVIDIA's DRA driver for GPUs installs (its Helm chart's `gpu.nvidia.com`): whole GPUs of that
driver, the devices whose `type` attribute is `gpu`."""
MAX_CLAIMS = 32
"""Entries a pod's `spec.resourceClaims` may hold (the API server's limit)."""
MAX_DEVICES = 128
"""Devices one request may ask for (`DeviceRequest.count`'s limit, `AllocationResultsMaxSize`)."""
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class _Strict(StrictModel):
    """Unknown keys refused (`gpuscale.inputs.strict`)."""


class DeviceClassConfig(_Strict):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    selectors: tuple[str, ...] = ()
    """CEL expressions a device of the class meets (ANDed with a request's)."""


class ResourceClaimConfig(_Strict):
    """One `resourceClaims` entry of a workload's pods."""

    name: str = Field(min_length=1, max_length=63, pattern=_DNS_LABEL)
    claim: Literal["per-pod", "shared"] = "per-pod"
    deviceClassName: str = NVIDIA_GPU_DRIVER
    count: int | None = Field(default=None, ge=1, le=MAX_DEVICES)
    """Devices asked for; None: the pod's GPUs (at least 1). Ignored with `allocationMode: All`."""
    allocationMode: Literal["ExactCount", "All"] = "ExactCount"
    selectors: tuple[str, ...] = ()
    """CEL expressions the devices meet, ANDed (`device.attributes["gpu.nvidia.com"].productName == "…"`)."""

    def spec(self, gpus: int) -> ClaimSpec:
        return ClaimSpec(requests=(DeviceRequest(name=self.name, exactly=ExactDeviceRequest(
            device_class_name=self.deviceClassName, selectors=self.selectors,
            allocation_mode=AllocationMode(self.allocationMode), count=self.count or max(gpus, 1))),))


class WorkloadDevices(_Strict):
    """What a workload section may add to its pods (mixed into `TrainingConfig`, `BatchConfig`, `ServiceConfig`)."""

    resourceClaims: tuple[ResourceClaimConfig, ...] = ()


# ----------------------------------------------------------------------------------------------------- checking
def _selectors_problem(selectors: Sequence[str], where: str) -> None:
    for i, expression in enumerate(selectors):
        compiled = compile_cel(expression)
        if isinstance(compiled, CompileError):
            raise ConfigError(f"{where}.selectors.{i}", compiled.message.splitlines()[0])


def check_classes(classes: Sequence[DeviceClassConfig], where: str) -> None:
    """Unique names; every selector compiles."""
    unique_names((c.name for c in classes), lambda i: f"{where}.{i}.name")
    for i, device_class in enumerate(classes):
        _selectors_problem(device_class.selectors, f"{where}.{i}")


def check_workload(section: WorkloadDevices, classes: Sequence[DeviceClassConfig], where: str) -> None:
    """Unique claim names, at most `MAX_CLAIMS`; each names a declared class (or the default one when the scenario
    declares none); every selector compiles."""
    declared = {c.name for c in classes} or {DEFAULT_CLASS.name}
    if len(section.resourceClaims) > MAX_CLAIMS:
        raise ConfigError(f"{where}.resourceClaims", f"at most {MAX_CLAIMS} claims per pod, got "
                                                     f"{len(section.resourceClaims)}")
    unique_names((c.name for c in section.resourceClaims), lambda i: f"{where}.resourceClaims.{i}.name", "claim name")
    for i, claim in enumerate(section.resourceClaims):
        at = f"{where}.resourceClaims.{i}"
        if claim.deviceClassName not in declared:
            raise ConfigError(f"{at}.deviceClassName", f"no device class {claim.deviceClassName!r} "
                                                       f"(declared: {', '.join(sorted(declared))})")
        _selectors_problem(claim.selectors, at)


def uses_dra(sections: Sequence[WorkloadDevices | None], pools: Sequence[NodePool]) -> bool:
    """Whether the scenario opts in: some workload asks for devices by claim, or some pool declares slices."""
    return any(s is not None and s.resourceClaims for s in sections) or any(p.resource_slices for p in pools)


def device_classes(classes: Sequence[DeviceClassConfig], used: bool) -> tuple[DeviceClass, ...]:
    """The scenario's DeviceClasses, else the default one when it uses DRA."""
    if classes:
        return tuple(DeviceClass(name=c.name, selectors=c.selectors) for c in classes)
    return (DEFAULT_CLASS,) if used else ()


# ------------------------------------------------------------------------------------------------------ building
def _by_claim(requests: Resources, constraints: SchedulingConstraints, section: WorkloadDevices,
              workload: str) -> tuple[Resources, SchedulingConstraints, tuple[DeviceClaim, ...]]:
    """The pods' requests without their GPUs, their constraints without the GPU-model node selector and with the
    claims, and the claims (the pod's GPUs are the default count)."""
    gpus = requests.gpu_count() or (1 if requests.get(GPU_MILLI) else 0)
    kept = Resources.of({n: a for n, a in requests.items if not is_gpu_resource(n) and n != GPU_MILLI})
    claims = tuple(DeviceClaim(name=c.name, shared=c.claim == "shared", spec=c.spec(gpus))
                   for c in section.resourceClaims)
    affinity = constraints.affinity
    selector = tuple((k, v) for k, v in affinity.node_selector if k != GKE_ACCELERATOR_LABEL)
    constraints = replace(constraints, affinity=replace(affinity, node_selector=selector),
                          resource_claims=(*constraints.resource_claims,
                                           *(c.pod_claim(workload) for c in claims)))
    return kept, constraints, claims


def job_by_claim(job: JobSpec, section: WorkloadDevices | None) -> JobSpec:
    if section is None or not section.resourceClaims:
        return job
    requests, constraints, claims = _by_claim(job.requests, job.constraints, section, job.name)
    return replace(job, requests=requests, constraints=constraints, device_claims=claims)


def service_by_claim(service: ServiceSpec, section: WorkloadDevices) -> ServiceSpec:
    if not section.resourceClaims:
        return service
    requests, constraints, claims = _by_claim(service.requests, service.constraints, section, service.name)
    return replace(service, requests=requests, constraints=constraints, device_claims=claims)
