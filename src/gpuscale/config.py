"""The configuration file: YAML validated by pydantic, names familiar to Cluster Autoscaler users.

`load_config(path)` returns a frozen `Config` of model values — the pools and the engine's `Policy` — and any problem
raises `ConfigError` with the file and the setting's path (`pools[1].allocatable.cpu`, `warm_capacity[0].pool`), so
the CLI prints one line and exits 2. Unknown keys are errors: a misspelt option silently ignored is how autoscalers
surprise people. Impossible settings (min above max, thresholds outside [0, 1], a buffer or GPU limit naming nothing a
pool has, a priority regex that does not compile) are errors too. Options left out keep `Policy`'s defaults, which are
Cluster Autoscaler's (see docs/config.md for each option, its default and the CA flag or Karpenter field it mirrors).
Durations are Go duration strings (`10m`, `30s`, `1h30m`) or numbers of seconds.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, ValidationError, WithJsonSchema, field_validator, model_validator

from gpuscale.engine.nodes import with_policy_taints
from gpuscale.engine.policy import Buffer, CooldownScope, ExpanderName, Limits, Policy, PriorityRule
from gpuscale.inputs import yaml12
from gpuscale.inputs.files import CONFIG_BYTES, excerpt, read_text
from gpuscale.inputs.strict import StrictModel
from gpuscale.model.dra import AttributeValue, DeviceCapacity, PoolRef, ResourceSlice, Version
from gpuscale.model.dra import Device as DraDevice
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.gpu import GpuSharing, MigStrategy, SharingMode, advertised_resources, operator_labels
from gpuscale.model.pool import NodePool
from gpuscale.model.quantity import QuantityError, parse_quantity, to_milli, to_units
from gpuscale.model.resources import CPU, GPU_MILLI, NVIDIA_GPU, Resources, is_gpu_resource
from gpuscale.model.selectors import is_label_value, label_key_problem, parse_int64
from gpuscale.model.taints import DEFAULT_STARTUP_TAINTS, StartupTaints, Taint, TaintEffect

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
ACCELERATOR_LABELS = ("cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator")
"""Labels naming a pool's GPU type the way CA's `--gpu-total` does; `gpu_total` accepts these names too."""

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(rf"({_NUMBER})(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ns|us|µs|μs|ms|s|m|h))+")


def parse_duration(value: object) -> float:
    """Seconds from a Go duration (`1h30m`, `10m`, `2.5s`, `300ms`; `time.ParseDuration`'s units) or a number of
    seconds (`600`, `"600"`). Negative and non-finite durations are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a duration like 10m, 30s or 1h30m, or a number of seconds; got {excerpt(value)}")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-") and (re.fullmatch(_NUMBER, text[1:]) or _DURATION.fullmatch(text[1:])):
            raise ValueError(f"must be a finite duration of zero or more; got {excerpt(value)}")
        if re.fullmatch(_NUMBER, text):
            seconds = float(text)
        elif _DURATION.fullmatch(text):
            seconds = sum(float(n) * _GO_UNITS[u] for n, u in _DURATION_PART.findall(text))
        else:
            raise ValueError("expected a duration like 10m, 30s or 1h30m, or a number of seconds; "
                             f"got {excerpt(value)}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"must be a finite duration of zero or more; got {excerpt(value)}")
    return seconds


DURATION_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "number", "minimum": 0},
              {"type": "string", "pattern": rf"^\s*(?:{_NUMBER}|{_DURATION.pattern})\s*$"}],
    "description": "a Go duration (10m, 30s, 1h30m, 300ms) or a number of seconds"}
"""What editors are told a duration is (`gpuscale config schema`); `parse_duration` is the check that counts."""
Duration = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)]
Fraction01 = Annotated[float, Field(ge=0, le=1)]


class _Strict(StrictModel):
    """Unknown keys refused; integers, booleans and numbers only as what they are (`gpuscale.inputs.strict`)."""


_INT64_MAX = 2**63 - 1
MAX_GPUS_PER_NODE = 64
"""More physical GPUs than any machine has (the largest today carry 16): a larger count is a typo."""
MAX_POOL_SIZE = 100_000
"""CA's `--max-nodes-total` has no limit, but no cloud group holds more nodes than this."""


def _label_key(key: str) -> str:
    problem = label_key_problem(key)
    if problem is not None:
        raise ValueError(problem)
    return key


def _label_value(value: str) -> str:
    if not is_label_value(value):
        raise ValueError(f"{excerpt(value)} is not a label value (at most 63 of [-A-Za-z0-9_.], alphanumeric at both "
                         "ends)")
    return value


class TaintConfig(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        return _label_key(key)

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        return _label_value(value)


class SharingConfig(_Strict):
    """How the pool's GPUs are shared (docs/gpu-sharing.md); checked against the GPU model by `model.gpu`."""

    mode: SharingMode = SharingMode.NONE
    replicas: int = Field(default=1, ge=1, description="time-slicing / mps: shares per physical GPU")
    rename_by_default: bool = Field(default=False, description="time-slicing / mps: offer `<resource>.shared`")
    strategy: MigStrategy | None = Field(default=None, description="mig: single (the default) or mixed")
    layout: str | None = Field(default=None, description="mig: mig-parted config name, e.g. all-1g.10gb")

    def to_sharing(self) -> GpuSharing:
        if self.strategy is not None and self.mode is not SharingMode.MIG:
            raise ConfigError("sharing.strategy", f"applies to mode mig, not {self.mode}")
        return GpuSharing(mode=self.mode, replicas=self.replicas, rename_by_default=self.rename_by_default,
                          strategy=self.strategy or MigStrategy.SINGLE, layout=self.layout)


class GpuConfig(_Strict):
    model: str = Field(min_length=1, description="GPU product, e.g. nvidia-tesla-a100 or NVIDIA-A100-SXM4-40GB")
    count: int = Field(ge=1, le=MAX_GPUS_PER_NODE, description="physical GPUs per node")
    resource: str = Field(default=NVIDIA_GPU, description="extended resource the device plugin advertises")
    sharing: SharingConfig | None = None


def _taint_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    for key in keys:
        problem = label_key_problem(key)
        if problem is not None:
            raise ValueError(f"{problem} (a taint key is a label key)")
    return keys


def _taint_prefixes(prefixes: tuple[str, ...]) -> tuple[str, ...]:
    for prefix in prefixes:
        if not prefix:
            raise ValueError("an empty prefix would match every taint")
    return prefixes


def _quantity(name: str, value: Any) -> int:
    if isinstance(value, str) and value != value.strip():
        raise QuantityError(f"remove the spaces around {excerpt(value)}")
    if "/" in name and not name.startswith("kubernetes.io/") and name != GPU_MILLI and \
            parse_quantity(value).denominator != 1:
        raise QuantityError(f"must be a whole number (an extended resource), got {excerpt(value)}")
    return to_milli(value) if name in (CPU, GPU_MILLI) else to_units(value)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SLICE_DEVICES = 128
"""`ResourceSliceMaxDevices`: the API server refuses a ResourceSlice with more devices."""
MAX_DEVICE_ATTRIBUTES = 32
"""`ResourceSliceMaxAttributesAndCapacitiesPerDevice`: attributes and capacities of one device together."""
INDEX = "{index}"
"""Replaced by the device's index (0, 1, …) in a `count:` shape's name and string attributes; `int: "{index}"` is the
index itself."""


def _dns_subdomain(text: str) -> str | None:
    """The problem with a DNS subdomain (lowercase labels joined by dots, at most 253 characters), or None."""
    if len(text) > 253 or not all(_DNS_LABEL.fullmatch(part) for part in text.split(".")):
        return f"{excerpt(text)} is not a DNS subdomain (lowercase letters, digits, '-' and '.')"
    return None


def _qualified_name(text: str) -> str | None:
    """The problem with a `QualifiedName` of an attribute or capacity (`name` or `domain/name`, the name a C
    identifier of at most 32 characters), or None."""
    domain, _, name = text.rpartition("/")
    if domain and (_dns_subdomain(domain) is not None or len(domain) > 63):
        return f"{excerpt(text)}: the domain must be a DNS subdomain of at most 63 characters"
    if not _C_IDENTIFIER.fullmatch(name) or len(name) > 32:
        return f"{excerpt(text)}: the name must be a C identifier of at most 32 characters"
    return None


class AttributeConfig(_Strict):
    """A device attribute as the API writes it: exactly one of `string`, `int`, `bool`, `version`."""

    string: str | None = Field(default=None, max_length=64)
    int_: int | str | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    version: str | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _one(self) -> AttributeConfig:
        given = [v for v in (self.string, self.int_, self.bool_, self.version) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of string, int, bool, version")
        if isinstance(self.int_, str) and self.int_ != INDEX:
            raise ValueError(f"int must be an integer or {INDEX!r}, got {excerpt(self.int_)}")
        if self.version is not None and Version.parse(self.version) is None:
            raise ValueError(f"version {excerpt(self.version)} is not a semantic version (1.2.3)")
        return self

    def value(self, index: int) -> AttributeValue:
        if self.string is not None:
            return self.string.replace(INDEX, str(index))
        if self.int_ is not None:
            return index if isinstance(self.int_, str) else self.int_
        if self.bool_ is not None:
            return self.bool_
        version = Version.parse(self.version or "")
        assert version is not None  # checked by _one
        return version


class DeviceConfig(_Strict):
    name: str = Field(min_length=1, max_length=63)
    attributes: dict[str, AttributeConfig] = Field(default_factory=dict)
    capacity: dict[str, int | str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> DeviceConfig:
        if not _DNS_LABEL.fullmatch(self.name.replace(INDEX, "0")):
            raise ValueError(f"name {excerpt(self.name)} is not a DNS label (lowercase letters, digits and '-')")
        for name in (*self.attributes, *self.capacity):
            problem = _qualified_name(name)
            if problem is not None:
                raise ValueError(problem)
        if len(self.attributes) + len(self.capacity) > MAX_DEVICE_ATTRIBUTES:
            raise ValueError(f"at most {MAX_DEVICE_ATTRIBUTES} attributes and capacities together")
        for name, text in self.capacity.items():
            try:
                if to_milli(text) < 0:
                    raise QuantityError("must not be negative")
            except QuantityError as err:
                raise ValueError(f"capacity {name}: {err}") from None
        return self

    def to_device(self, driver: str, index: int) -> DraDevice:
        def qualified(name: str) -> str:
            return name if "/" in name else f"{driver}/{name}"
        return DraDevice(name=self.name.replace(INDEX, str(index)),
                         attributes={qualified(k): a.value(index) for k, a in self.attributes.items()},
                         capacity={qualified(k): DeviceCapacity(value_milli=to_milli(v))
                                   for k, v in self.capacity.items()})


class ResourceSliceConfig(_Strict):
    """A ResourceSlice a node of the pool publishes (DRA scale from zero, docs/dra-pools.md): `devices` as the API
    lists them, or `count` identical ones shaped by `device` (`{index}` in its name and string attributes)."""

    driver: str = Field(min_length=1, max_length=63)
    devices: tuple[DeviceConfig, ...] = ()
    count: int | None = Field(default=None, ge=1, le=MAX_SLICE_DEVICES)
    device: DeviceConfig | None = None

    @model_validator(mode="after")
    def _shape(self) -> ResourceSliceConfig:
        problem = _dns_subdomain(self.driver)
        if problem is not None:
            raise ValueError(f"driver: {problem}")
        if bool(self.devices) == (self.count is not None or self.device is not None):
            raise ValueError("give either devices, or count with device")
        if (self.count is None) != (self.device is None):
            raise ValueError("count and device go together")
        if self.device is not None and (self.count or 0) > 1 and INDEX not in self.device.name:
            raise ValueError(f"device.name must contain {INDEX} so that the {self.count} devices differ")
        if len(self.devices) > MAX_SLICE_DEVICES:
            raise ValueError(f"at most {MAX_SLICE_DEVICES} devices in one slice")
        names = [d.name for d in self.devices]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"device names must be unique in a slice, repeated: {', '.join(dupes)}")
        return self

    def to_slice(self) -> ResourceSlice:
        if self.device is not None:
            devices = tuple(self.device.to_device(self.driver, i) for i in range(self.count or 0))
        else:
            devices = tuple(d.to_device(self.driver, i) for i, d in enumerate(self.devices))
        return ResourceSlice(name=self.driver, driver=self.driver, pool=PoolRef(name=""), devices=devices)


class PoolConfig(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    instance_type: str = ""
    min_size: int = Field(default=0, ge=0, le=MAX_POOL_SIZE)
    max_size: int = Field(default=1000, ge=0, le=MAX_POOL_SIZE)
    usd_per_hour: float = Field(default=0.0, ge=0)
    zones: tuple[str, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[TaintConfig, ...] = ()
    allocatable: dict[str, int | float | str]
    gpu: GpuConfig | None = None
    resource_slices: tuple[ResourceSliceConfig, ...] = ()
    max_node_provision_time: Duration | None = None
    max_node_startup_time: Duration | None = None
    scale_down_utilization_threshold: Fraction01 | None = None
    scale_down_gpu_utilization_threshold: Fraction01 | None = None
    scale_down_unneeded_time: Duration | None = None
    scale_down_unready_time: Duration | None = None
    ignore_daemonsets_utilization: bool | None = None
    scale_down_lost_gpu_minutes_per_hour: float | None = Field(default=None, ge=0)
    zero_or_max_scaling: bool = False
    scale_down_enabled: bool = True
    startup_taints: tuple[str, ...] = ()
    startup_taint_prefixes: tuple[str, ...] = ()
    node_repair: bool = False
    max_nodes_under_repair: int = Field(default=1, ge=1)

    @field_validator("startup_taints")
    @classmethod
    def _startup_keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _taint_keys(value)

    @field_validator("startup_taint_prefixes")
    @classmethod
    def _startup_prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _taint_prefixes(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            try:
                _label_key(key)
                _label_value(text)
            except ValueError as err:
                raise ValueError(f"{str(key)[:80]}: {err}") from None
        return value

    @field_validator("allocatable")
    @classmethod
    def _quantities(cls, value: dict[str, int | float | str]) -> dict[str, int | float | str]:
        for name, text in value.items():
            try:
                amount = _quantity(name, text)
            except QuantityError as err:
                raise ValueError(f"{name}: {err}") from None
            if amount < 0:
                raise ValueError(f"{name}: must not be negative")
        if "cpu" not in value or "memory" not in value:
            raise ValueError("must give at least cpu and memory")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> PoolConfig:
        if self.min_size > self.max_size:
            raise ValueError(f"min_size {self.min_size} is above max_size {self.max_size}")
        seen: set[tuple[str, str]] = set()
        for r in self.resource_slices:
            for d in r.to_slice().devices:
                if (r.driver, d.name) in seen:
                    raise ValueError(f"resource_slices: device {d.name} of driver {r.driver} is listed twice")
                seen.add((r.driver, d.name))
        return self

    def to_pool(self) -> NodePool:
        amounts = {name: _quantity(name, text) for name, text in self.allocatable.items()}
        amounts.setdefault("pods", 110)
        labels = dict(self.labels)
        if self.instance_type:
            labels.setdefault("node.kubernetes.io/instance-type", self.instance_type)
        if self.gpu is not None and self.gpu.sharing is None:
            amounts.setdefault(self.gpu.resource, self.gpu.count)
            labels.setdefault(GPU_PRODUCT_LABEL, self.gpu.model)
            labels.setdefault(GPU_COUNT_LABEL, str(self.gpu.count))
        elif self.gpu is not None and self.gpu.sharing is not None:
            # The GPUs the device plugin will offer and the labels GFD / the GPU operator will set; the user's win.
            gpu_amounts, gpu_labels = _shared_gpus(self.gpu, self.gpu.sharing, amounts)
            amounts |= gpu_amounts
            labels = {**gpu_labels, **labels}
        return NodePool(
            name=self.name, allocatable=Resources.of(amounts), labels=labels,
            taints=tuple(Taint(key=t.key, value=t.value, effect=TaintEffect(t.effect)) for t in self.taints),
            gpu_model=self.gpu.model if self.gpu else None, gpus_per_node=self.gpu.count if self.gpu else 0,
            usd_per_hour=self.usd_per_hour, min_size=self.min_size, max_size=self.max_size, zones=self.zones,
            max_node_provision_time_s=self.max_node_provision_time,
            max_node_startup_time_s=self.max_node_startup_time,
            scale_down_utilization_threshold=self.scale_down_utilization_threshold,
            scale_down_gpu_utilization_threshold=self.scale_down_gpu_utilization_threshold,
            scale_down_unneeded_time_s=self.scale_down_unneeded_time,
            scale_down_unready_time_s=self.scale_down_unready_time,
            ignore_daemonsets_utilization=self.ignore_daemonsets_utilization,
            scale_down_lost_gpu_minutes_per_hour=self.scale_down_lost_gpu_minutes_per_hour,
            zero_or_max=self.zero_or_max_scaling, resource_slices=tuple(r.to_slice() for r in self.resource_slices),
            node_repair=self.node_repair, max_nodes_under_repair=self.max_nodes_under_repair,
            startup_taints=DEFAULT_STARTUP_TAINTS.merged(StartupTaints(
                keys=frozenset(self.startup_taints), prefixes=self.startup_taint_prefixes, status_prefixes=())),
            scale_down_disabled=None if self.scale_down_enabled else "scale-down is turned off for it in the "
                                                                     "configuration",
        )


def _shared_gpus(gpu: GpuConfig, config: SharingConfig,
                 amounts: Mapping[str, int]) -> tuple[dict[str, int], dict[str, str]]:
    """The GPU resources a pool with `gpu.sharing` offers, and the labels its nodes will carry. GPU resources written
    in `allocatable` must agree with them exactly. Raises `ConfigError` at the setting, relative to the pool."""
    try:
        sharing = config.to_sharing()
        advertised = advertised_resources(gpu.model, gpu.count, sharing, gpu.resource)
        labels = operator_labels(gpu.model, gpu.count, sharing)
    except ConfigError as err:
        raise ConfigError(f"gpu.{err.where}", err.problem) from None
    written = {n: a for n, a in amounts.items() if is_gpu_resource(n)}
    for name, amount in sorted(written.items()):
        if advertised.get(name) != amount:
            offered = ", ".join(f"{n}: {a}" for n, a in advertised.items)
            raise ConfigError(f"allocatable.{name}", f"{amount} disagrees with gpu.sharing, which offers {offered}; "
                                                     "leave GPU resources out of allocatable or make them agree")
    return advertised.as_dict(), labels


class WarmCapacityConfig(_Strict):
    pool: str
    idle_nodes: int = Field(default=0, ge=0)
    free_gpus: int = Field(default=0, ge=0)
    free_gpus_ratio: Fraction01 = 0.0


Preset = Literal["gpuscale", "ca-defaults"]

_PRESETS: Mapping[str, Mapping[str, Any]] = {
    "gpuscale": {},
    # Cluster Autoscaler's behaviour where ours differs on purpose: GPU-blind least-waste (#2215), batching by the
    # oldest pod's age (2 s, 30 s with a GPU pod) at the scans instead of a batch window (D39), running GPU Jobs
    # evictable, unremovable nodes left alone for 5 minutes, an unneeded clock a new pod does not restart, every
    # removal paused for 10 minutes after any scale-up (D49).
    "ca-defaults": {"new_pod_delay_s": 2.0, "new_gpu_pod_delay_s": 30.0, "batch_idle_s": 0.0,
                    "least_waste_counts_gpus": False, "protect_gpu_jobs": False,
                    "unneeded_restarts_on_pod_start": False,
                    "expanders": (ExpanderName.LEAST_WASTE,),
                    "scale_down_delay_after_add_s": 600.0, "scale_down_delay_after_add_scope": CooldownScope.CLUSTER,
                    "scale_down_gpu_unneeded_time_s": None, "gpu_placement": None,
                    "unremovable_node_recheck_timeout_s": 300.0, "scale_down_replace_with_cheaper": False,
                    "nominate_pods": False},
}

def preset_policy(name: str, limits: Limits | None = None, buffers: tuple[Buffer, ...] = (),
                  options: Mapping[str, Any] | None = None) -> Policy:
    """A preset's policy (`gpuscale`, `ca-defaults`), keeping the given limits and warm buffers, and the `options`
    (`Policy` field → value, as `Config.options`) the preset does not name: a scenario's own settings stay."""
    if name not in _PRESETS:
        raise ConfigError(f"preset {name!r}", f"unknown (presets: {', '.join(_PRESETS)})")
    preset = _PRESETS[name]
    kept = {k: v for k, v in (options or {}).items() if k not in preset}
    return Policy(**{**kept, **preset}, limits=limits or Limits(), buffers=buffers)


def preset_names(name: str) -> frozenset[str]:
    """The `Policy` fields a preset sets (what it changes whatever a configuration says)."""
    return frozenset(_PRESETS[name])


_POLICY_NAMES: Mapping[str, str] = {
    "new_pod_scale_up_delay": "new_pod_delay_s",
    "new_gpu_pod_scale_up_delay": "new_gpu_pod_delay_s",
    "batch_idle_duration": "batch_idle_s",
    "batch_max_duration": "batch_max_s",
    "expendable_pods_priority_cutoff": "expendable_priority_cutoff",
    "expander_random_seed": "random_seed",
    "least_waste_counts_gpus": "least_waste_counts_gpus",
    "balance_similar_node_groups": "balance_similar_node_groups",
    "gpu_placement": "gpu_placement",
    "max_nodes_per_scale_up": "max_nodes_per_scale_up",
    "max_node_provision_time": "max_node_provision_time_s",
    "max_node_startup_time": "max_node_startup_time_s",
    "max_gpu_init_time": "max_gpu_init_time_s",
    "initial_node_group_backoff_duration": "backoff_initial_s",
    "max_node_group_backoff_duration": "backoff_max_s",
    "node_group_backoff_reset_timeout": "backoff_reset_s",
    "scale_down_enabled": "scale_down_enabled",
    "scale_down_utilization_threshold": "scale_down_utilization_threshold",
    "scale_down_gpu_utilization_threshold": "scale_down_gpu_utilization_threshold",
    "scale_down_unneeded_time": "scale_down_unneeded_time_s",
    "scale_down_gpu_unneeded_time": "scale_down_gpu_unneeded_time_s",
    "scale_down_unready_time": "scale_down_unready_time_s",
    "ignore_daemonsets_utilization": "ignore_daemonsets_utilization",
    "scale_down_delay_after_add": "scale_down_delay_after_add_s",
    "scale_down_delay_after_add_scope": "scale_down_delay_after_add_scope",
    "scale_down_delay_after_delete": "scale_down_delay_after_delete_s",
    "scale_down_delay_after_failure": "scale_down_delay_after_failure_s",
    "unremovable_node_recheck_timeout": "unremovable_node_recheck_timeout_s",
    "node_deletion_candidate_ttl": "node_deletion_candidate_ttl_s",
    "max_empty_bulk_delete": "max_empty_bulk_delete",
    "max_drain_parallelism": "max_drain_parallelism",
    "max_total_unready_percentage": "max_total_unready_percentage",
    "ok_total_unready_count": "ok_total_unready_count",
    "skip_nodes_with_system_pods": "skip_nodes_with_system_pods",
    "skip_nodes_with_local_storage": "skip_nodes_with_local_storage",
    "protect_gpu_jobs": "protect_gpu_jobs",
    "scale_down_lost_gpu_minutes_per_hour": "scale_down_lost_gpu_minutes_per_hour",
    "unneeded_restarts_on_pod_start": "unneeded_restarts_on_pod_start",
    "scale_down_replace_with_cheaper": "scale_down_replace_with_cheaper",
    "nominate_pods": "nominate_pods",
}
"""Config option → `Policy` field, for the options that map one to one (the rest are built below)."""

_GPU_SPECIFIC: tuple[tuple[str, str, str], ...] = (
    ("scale_down_unneeded_time", "scale_down_gpu_unneeded_time", "scale_down_gpu_unneeded_time_s"),
    ("new_pod_scale_up_delay", "new_gpu_pod_scale_up_delay", "new_gpu_pod_delay_s"),
)
"""(CA's option, gpuscale's GPU-specific one, its `Policy` field). Set alone, CA's option means what it means in CA —
every node or pod, GPU ones too — so the GPU-specific default gives way (`None`: engine/options.py falls back)."""


class ConfigFile(_Strict):
    """The file as written. `None` means "not given": `Policy`'s default (or the preset's) applies."""

    pools: Annotated[tuple[PoolConfig, ...], Field(min_length=1)]
    preset: Preset = "gpuscale"
    # loop
    scan_interval: Annotated[Duration, Field(gt=0)] | None = None
    max_graceful_termination_sec: Duration | None = None
    # scale-up
    new_pod_scale_up_delay: Duration | None = None
    new_gpu_pod_scale_up_delay: Duration | None = None
    batch_idle_duration: Duration | None = None
    batch_max_duration: Annotated[Duration, Field(gt=0)] | None = None
    expendable_pods_priority_cutoff: int | None = None
    expander: str | tuple[str, ...] | None = None
    priorities: dict[int, tuple[str, ...]] | None = None
    expander_random_seed: int | None = None
    least_waste_counts_gpus: bool | None = None
    balance_similar_node_groups: bool | None = None
    gpu_placement: Literal["gpuscale", "fgd", "first-fit"] | None = None
    max_nodes_per_scale_up: int | None = Field(default=None, ge=1)
    max_node_provision_time: Duration | None = None
    max_node_startup_time: Duration | None = None
    max_gpu_init_time: Duration | None = None
    initial_node_group_backoff_duration: Duration | None = None
    max_node_group_backoff_duration: Duration | None = None
    node_group_backoff_reset_timeout: Duration | None = None
    warm_capacity: tuple[WarmCapacityConfig, ...] = ()
    # limits
    max_nodes_total: int | None = Field(default=None, ge=0)
    cores_total: int | str | None = None
    memory_total: int | float | str | None = None
    gpu_total: dict[str, int | str] | str | tuple[str, ...] | None = None
    max_usd_per_hour: float | None = Field(default=None, gt=0)
    # scale-down
    scale_down_enabled: bool | None = None
    scale_down_utilization_threshold: Fraction01 | None = None
    scale_down_gpu_utilization_threshold: Fraction01 | None = None
    scale_down_unneeded_time: Duration | None = None
    scale_down_gpu_unneeded_time: Duration | None = None
    scale_down_unready_time: Duration | None = None
    ignore_daemonsets_utilization: bool | None = None
    scale_down_delay_after_add: Duration | None = None
    scale_down_delay_after_add_scope: CooldownScope | None = None
    scale_down_delay_after_delete: Duration | None = None
    scale_down_delay_after_failure: Duration | None = None
    unremovable_node_recheck_timeout: Duration | None = None
    node_deletion_candidate_ttl: Duration | None = None
    max_empty_bulk_delete: int | None = Field(default=None, ge=1)
    max_drain_parallelism: int | None = Field(default=None, ge=1)
    max_total_unready_percentage: float | None = Field(default=None, ge=0, le=100)
    ok_total_unready_count: int | None = Field(default=None, ge=0)
    skip_nodes_with_system_pods: bool | None = None
    skip_nodes_with_local_storage: bool | None = None
    protect_gpu_jobs: bool | None = None
    scale_down_lost_gpu_minutes_per_hour: float | None = Field(default=None, ge=0)
    unneeded_restarts_on_pod_start: bool | None = None
    scale_down_replace_with_cheaper: bool | None = None
    nominate_pods: bool | None = None
    # start-up (added to the defaults: docs/config.md)
    startup_taints: tuple[str, ...] = ()
    startup_taint_prefixes: tuple[str, ...] = ()
    status_taints: tuple[str, ...] = ()
    status_taint_prefixes: tuple[str, ...] = ()

    @field_validator("startup_taints", "status_taints")
    @classmethod
    def _keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _taint_keys(value)

    @field_validator("startup_taint_prefixes", "status_taint_prefixes")
    @classmethod
    def _prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _taint_prefixes(value)

    @model_validator(mode="after")
    def _unique(self) -> ConfigFile:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique, repeated: {', '.join(dupes)}")
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    pools: tuple[NodePool, ...]
    policy: Policy = field(default_factory=Policy)
    scan_interval_s: float = 10.0
    """How often the loop runs (CA `--scan-interval`); read by the twin and the controller, not by the engine."""
    max_graceful_termination_s: float = 600.0
    """How long a drain may take before it is given up (CA `--max-graceful-termination-sec`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The `Policy` fields the file set itself (after its preset), field → value: what a preset applied to this
    configuration keeps unless it names the field (`preset_policy`)."""


class _SettingError(Exception):
    """A semantic problem found after parsing, at a setting path; becomes a `ConfigError` naming the file."""

    def __init__(self, where: str, problem: str) -> None:
        self.where, self.problem = where, problem
        super().__init__(f"{where}: {problem}")


def _expanders(value: str | tuple[str, ...], has_priorities: bool) -> tuple[ExpanderName, ...]:
    """CA's `--expander=priority,least-waste` as a comma-separated string, or a YAML list."""
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
    known = ", ".join(e.value for e in ExpanderName)
    chain: list[ExpanderName] = []
    for i, name in enumerate(names):
        where = "expander" if isinstance(value, str) else f"expander[{i}]"
        if name not in {e.value for e in ExpanderName}:
            raise _SettingError(where, f"unknown expander {excerpt(name)} (known: {known})")
        if ExpanderName(name) in chain:
            raise _SettingError(where, f"expander {excerpt(name)} is listed twice")
        chain.append(ExpanderName(name))
    if not chain:
        raise _SettingError("expander", f"give at least one expander (known: {known})")
    if ExpanderName.PRIORITY in chain and not has_priorities:
        raise _SettingError("expander", "the priority expander needs `priorities`")
    return tuple(chain)


def _priorities(value: Mapping[int, Sequence[str]]) -> tuple[PriorityRule, ...]:
    """CA's priority-expander ConfigMap (`{10: [regex, …]}`); every regex must compile. Highest priority first."""
    rules = []
    for priority, patterns in sorted(value.items(), reverse=True):
        if not patterns:
            raise _SettingError(f"priorities.{priority}", "give at least one pool name regex")
        for i, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as err:
                raise _SettingError(f"priorities.{priority}[{i}]", f"bad regex {excerpt(pattern)}: {err}") from None
        rules.append(PriorityRule(priority=priority, patterns=tuple(patterns)))
    return tuple(rules)


def _decimal(text: str) -> int:
    """ASCII digits only, as Go's `strconv.Atoi` (Python's `int` also takes `1_000` and non-ASCII digits)."""
    value = parse_int64(text.strip())
    if value is None:
        raise ValueError(f"not an integer: {excerpt(text)}")
    return value


def _max_of(where: str, value: int | float | str, parse: Any = _decimal) -> int:
    """A limit as CA spells it, `MAX` or `MIN:MAX`; only the maximum bounds scale-up, so a minimum must be 0."""
    low_text, sep, high_text = str(value).strip().rpartition(":")
    try:
        high = parse(high_text)
        low = parse(low_text) if sep else 0
    except (ValueError, QuantityError):
        raise _SettingError(where, f"expected MAX or MIN:MAX, got {excerpt(value)}") from None
    if high < 0 or low < 0:
        raise _SettingError(where, "limits must not be negative")
    if high > _INT64_MAX:
        raise _SettingError(where, f"{excerpt(high_text)} is beyond int64")
    if low > high:
        raise _SettingError(where, f"minimum {low_text} is above maximum {high_text}")
    if low:
        raise _SettingError(where, "a minimum is not supported (the autoscaler never adds nodes to reach one); give "
                                   "MAX or 0:MAX")
    return int(high)


def _gib_or_quantity(text: str) -> int:
    """Memory as CA counts it: a bare number is GiB (`--memory-total`); a quantity (`4Ti`, `512Gi`) is exact."""
    text = text.strip()
    if re.fullmatch(_NUMBER, text):
        gib = float(text) * 2**30
        if not math.isfinite(gib) or gib > _INT64_MAX:
            raise ValueError(f"{excerpt(text)} GiB is beyond int64 bytes")
        return math.ceil(gib)
    return to_units(text)


def _gpu_models(pools: Sequence[NodePool]) -> dict[str, set[str]]:
    """Every name a pool's GPU type goes by (its model, product label, accelerator labels) → the models it means."""
    names: dict[str, set[str]] = {}
    for pool in pools:
        if pool.gpu_model is None:
            continue
        for name in (pool.gpu_model, pool.labels.get(GPU_PRODUCT_LABEL),
                     *(pool.labels.get(label) for label in ACCELERATOR_LABELS)):
            if name:
                names.setdefault(name, set()).add(pool.gpu_model)
    return names


def _gpu_entries(value: Mapping[str, int | str] | str | Sequence[str]) -> list[tuple[str, str, int | str]]:
    """(where, GPU type, MAX or MIN:MAX) for each limit: a mapping `{TYPE: MAX}`, or CA's `--gpu-total` form
    `TYPE:MIN:MAX` as one string or a list of them."""
    if isinstance(value, Mapping):
        return [(f"gpu_total.{name}", name, limit) for name, limit in sorted(value.items())]
    texts = [("gpu_total", value)] if isinstance(value, str) else [(f"gpu_total[{i}]", t) for i, t in enumerate(value)]
    entries: list[tuple[str, str, int | str]] = []
    for where, text in texts:
        name, sep, limit = text.strip().partition(":")
        if not sep or not name:
            raise _SettingError(where, f"expected TYPE:MIN:MAX or TYPE:MAX (CA's --gpu-total), got {text!r}")
        entries.append((where, name, limit))
    return entries


def _gpu_limits(value: Mapping[str, int | str] | str | Sequence[str], pools: Sequence[NodePool],
                resources: Mapping[str, str]) -> tuple[dict[str, int], int | None]:
    """Per-model GPU limits, and the limit on all GPUs together (a GPU resource name as the type, CA's
    `--gpu-total=nvidia.com/gpu:0:64`; every GPU pool must advertise that resource). `resources`: pool → the GPU
    resource its device plugin advertises."""
    names = _gpu_models(pools)
    limits: dict[str, int] = {}
    total: int | None = None
    for where, name, limit in _gpu_entries(value):
        models = names.get(name)
        if not models and is_gpu_resource(name):
            others = sorted(p for p, r in resources.items() if r != name)
            if not resources:
                raise _SettingError(where, "no pool has GPUs")
            if others:
                raise _SettingError(where, f"pools {', '.join(others)} advertise other GPU resources than {name}: "
                                           "limit them by GPU type instead")
            if total is not None:
                raise _SettingError(where, f"{name} is limited twice")
            total = _max_of(where, limit)
            continue
        if not models:
            raise _SettingError(where, f"no pool has GPU type {excerpt(name)} (pools have: {', '.join(sorted(names))})"
                                if names else "no pool has GPUs")
        if len(models) > 1:
            raise _SettingError(where, f"{excerpt(name)} names several GPU models ({', '.join(sorted(models))}): "
                                       "use one")
        model = next(iter(models))
        if model in limits:
            raise _SettingError(where, f"GPU model {model} is limited twice")
        limits[model] = _max_of(where, limit)
    return limits, total


def _limits(parsed: ConfigFile, pools: Sequence[NodePool]) -> Limits:
    resources = {p.name: p.gpu.resource for p in parsed.pools if p.gpu is not None}
    by_model, total = _gpu_limits(parsed.gpu_total if parsed.gpu_total is not None else {}, pools, resources)
    return Limits(
        max_nodes_total=parsed.max_nodes_total or None,  # 0 is "unlimited", as for CA's --max-nodes-total
        max_cores_total=_max_of("cores_total", parsed.cores_total) if parsed.cores_total is not None else None,
        max_memory_bytes_total=(_max_of("memory_total", parsed.memory_total, _gib_or_quantity)
                                if parsed.memory_total is not None else None),
        max_gpus_by_model=by_model,
        max_gpus_total=total,
        max_usd_per_hour=parsed.max_usd_per_hour,
    )


def _buffers(items: Sequence[WarmCapacityConfig], pools: Sequence[NodePool]) -> tuple[Buffer, ...]:
    by_name = {p.name: p for p in pools}
    seen: set[str] = set()
    for i, item in enumerate(items):
        pool = by_name.get(item.pool)
        if pool is None:
            raise _SettingError(f"warm_capacity[{i}].pool", f"no pool named {excerpt(item.pool)}")
        if item.pool in seen:
            raise _SettingError(f"warm_capacity[{i}].pool", f"pool {excerpt(item.pool)} has two buffers")
        seen.add(item.pool)
        if not item.idle_nodes and not item.free_gpus and not item.free_gpus_ratio:
            raise _SettingError(f"warm_capacity[{i}]", "give idle_nodes, free_gpus or free_gpus_ratio")
        if item.idle_nodes > pool.max_size:
            raise _SettingError(f"warm_capacity[{i}].idle_nodes",
                                f"{item.idle_nodes} idle nodes exceed the pool's max_size {pool.max_size}")
        for key in ("free_gpus", "free_gpus_ratio"):
            if getattr(item, key) and not pool.is_gpu_pool():
                raise _SettingError(f"warm_capacity[{i}].{key}", f"pool {excerpt(item.pool)} has no GPUs")
        if item.free_gpus > pool.max_size * pool.allocatable.gpu_count():
            raise _SettingError(f"warm_capacity[{i}].free_gpus",
                                f"{item.free_gpus} free GPUs exceed what the pool can hold at max_size")
    return tuple(Buffer(pool=b.pool, idle_nodes=b.idle_nodes, free_gpus=b.free_gpus,
                        free_gpus_ratio=b.free_gpus_ratio) for b in items)


def _options(parsed: ConfigFile) -> dict[str, Any]:
    """The `Policy` fields the file sets itself, one to one or by CA's fallback for GPU-specific options."""
    options: dict[str, Any] = {}
    for name, attribute in _POLICY_NAMES.items():
        value = getattr(parsed, name)
        if value is not None:
            options[attribute] = value
    for general, gpu_specific, attribute in _GPU_SPECIFIC:
        if getattr(parsed, general) is not None and getattr(parsed, gpu_specific) is None:
            options[attribute] = None
    if options.get("gpu_placement") == "first-fit":
        options["gpu_placement"] = None
    priorities = _priorities(parsed.priorities or {})
    if parsed.expander is not None:
        options["expanders"] = _expanders(parsed.expander, bool(priorities))
    if priorities:
        options["priorities"] = priorities
    options["startup_taints"] = DEFAULT_STARTUP_TAINTS.merged(StartupTaints(
        keys=frozenset(parsed.startup_taints), prefixes=parsed.startup_taint_prefixes,
        status_keys=frozenset(parsed.status_taints), status_prefixes=parsed.status_taint_prefixes))
    return options


def _policy(parsed: ConfigFile, pools: Sequence[NodePool]) -> Policy:
    options: dict[str, Any] = dict(_PRESETS[parsed.preset]) | _options(parsed)
    policy = Policy(**options, limits=_limits(parsed, pools), buffers=_buffers(parsed.warm_capacity, pools))
    if policy.backoff_initial_s > policy.backoff_max_s:
        raise _SettingError("initial_node_group_backoff_duration",
                            f"{policy.backoff_initial_s:g}s is above max_node_group_backoff_duration "
                            f"{policy.backoff_max_s:g}s")
    return policy


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            out += " (key)"
        else:
            text = str(part)[:80]  # a key of the user's: cut, as values are
            out += f"[{part}]" if isinstance(part, int) else (f".{text}" if out else text)
    return out or "(top level)"


_KNOWN_NAMES = sorted({f.alias or n for m in (ConfigFile, PoolConfig, WarmCapacityConfig, GpuConfig, SharingConfig,
                                              TaintConfig, ResourceSliceConfig, DeviceConfig, AttributeConfig)
                       for n, f in m.model_fields.items()})


def parse_config(raw: Mapping[str, Any], source: str = "config") -> Config:
    try:
        parsed = ConfigFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            guess = difflib.get_close_matches(str(first["loc"][-1]), _KNOWN_NAMES, n=1)
            message = "unknown setting" + (f" (did you mean {guess[0]}?)" if guess else "")
        elif first["type"] not in ("missing", "value_error") and isinstance(first.get("input"), str | int | float):
            message = f"{message}, got {excerpt(first['input'])}"  # bool is an int: covered
        raise ConfigError(f"{source}: {_location(first['loc'])}", message) from None
    pools = []
    for i, pool_config in enumerate(parsed.pools):
        try:
            pools.append(pool_config.to_pool())
        except ConfigError as err:
            raise ConfigError(f"{source}: pools[{i}].{err.where}", err.problem) from None
    try:
        policy = _policy(parsed, pools)
    except _SettingError as err:
        raise ConfigError(f"{source}: {err.where}", err.problem) from None
    return Config(pools=with_policy_taints(pools, policy.startup_taints), policy=policy, options=_options(parsed),
                  scan_interval_s=parsed.scan_interval if parsed.scan_interval is not None else 10.0,
                  max_graceful_termination_s=(parsed.max_graceful_termination_sec
                                              if parsed.max_graceful_termination_sec is not None else 600.0))


def load_yaml_file(path: Path, what: str) -> Any:
    """A YAML file of at most `CONFIG_BYTES`, read as YAML 1.2 (`gpuscale.inputs.yaml12`); problems raise
    `InputError` (the file) or `ConfigError` (the YAML, at its line)."""
    try:
        text = read_text(path, CONFIG_BYTES, what)
    except InputError as err:
        raise ConfigError(err.obj if err.field == "file" else f"{err.obj}: {err.field}", err.problem) from None
    try:
        return yaml12.load(text)
    except yaml.YAMLError as err:
        where, problem = yaml12.describe(err)
        raise ConfigError(f"{path}: {where}" if where else str(path), problem) from None


def load_config(path: Path) -> Config:
    raw = load_yaml_file(path, "a configuration")
    if not isinstance(raw, Mapping):
        raise ConfigError(str(path), "expected a mapping at the top level")
    return parse_config(raw, str(path))
