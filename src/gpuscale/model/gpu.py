"""GPU identity and GPU sharing: what a GPU node advertises to the scheduler, and which labels say so.

One physical GPU reaches the scheduler in one of four ways (NVIDIA device plugin and GPU operator):
- `none`: `nvidia.com/gpu` = physical GPUs.
- `time-slicing` / `mps`: each GPU is offered `replicas` times, as `nvidia.com/gpu` (or `nvidia.com/gpu.shared` with
  the plugin's `renameByDefault`). A pod asking for 2 gets 2 shares, not 2 GPUs.
- `mig`: each GPU is partitioned into MIG devices by a named mig-parted layout (`nvidia.com/mig.config`). Strategy
  `single` offers them as `nvidia.com/gpu` (one profile per node); `mixed` as `nvidia.com/mig-<profile>` per profile.

This module holds the MIG profile tables (NVIDIA MIG user guide, "Supported MIG Profiles"), the named layouts of the GPU
operator's default mig-parted config, `advertised_resources` (what a node of a pool will offer), `operator_labels`
(the labels GPU feature discovery / the operator put on such a node) and `gpu_identity` (those labels read back).
Sources are listed in docs/gpu-sharing.md. Pure: no I/O. A setting gpuscale cannot honour raises `ConfigError` whose
`where` is the setting as a pool's `gpu:` section spells it (`model`, `resource`, `sharing.layout`, …); malformed
labels raise `InputError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.resources import NVIDIA_GPU, Resources

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
GPU_SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""The mig-parted config (layout) a node should have; the GPU operator's MIG manager applies it."""
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"
"""Appended to the resource name by the device plugin's `renameByDefault`."""
MIG_DISABLED = "all-disabled"
"""The operator's layout for "MIG off" (its default `nvidia.com/mig.config` on MIG-capable nodes)."""
MIG_ENABLED_EMPTY = "all-enabled"
"""The operator's layout for "MIG on, no MIG devices"."""


class SharingMode(StrEnum):
    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"


class MigStrategy(StrEnum):
    SINGLE = "single"
    """Every GPU has the same one-profile layout; MIG devices are offered as `nvidia.com/gpu`."""
    MIXED = "mixed"
    """MIG devices are offered as `nvidia.com/mig-<profile>`, one resource per profile."""


# ------------------------------------------------------------------------------------------------------ MIG tables
@dataclass(frozen=True, slots=True, kw_only=True)
class MigProfile:
    """One MIG profile on one GPU model: its share of the GPU's 7 compute and 8 memory slices."""

    name: str
    """As NVIDIA spells it: `1g.10gb`, `1g.10gb+me` (with media extensions)."""
    compute_slices: int
    memory_slices: int
    memory_gb: int
    max_instances: int
    """How many instances of this profile alone fit on one GPU."""

    @property
    def resource(self) -> str:
        """The resource name under the `mixed` strategy; the device plugin turns `+` into `.` (`mig-1g.5gb.me`)."""
        return MIG_RESOURCE_PREFIX + self.name.replace("+", ".")


@dataclass(frozen=True, slots=True, kw_only=True)
class MigGpu:
    """A MIG-capable GPU model: its profiles and the named layouts of the GPU operator's default mig-parted config."""

    name: str
    memory_gb: int
    profiles: Mapping[str, MigProfile]
    layouts: Mapping[str, Mapping[str, int]]
    """Layout name → MIG devices per GPU, by profile name."""
    compute_slices: int = 7
    memory_slices: int = 8


# (compute slices, memory slices, max instances, media extensions) of every profile of the A100 / H100 family; the
# name follows from the memory per slice: A100 40 GB → 1g.5gb, 1g.10gb, 2g.10gb, …; 80 GB → 1g.10gb, 1g.20gb, ….
_SHAPES = ((1, 1, 7, False), (1, 1, 1, True), (1, 2, 4, False), (2, 2, 3, False), (3, 4, 2, False),
           (4, 4, 1, False), (7, 8, 1, False))


def _mig_gpu(name: str, memory_gb: int) -> MigGpu:
    per_slice = memory_gb // 8
    profiles = {}
    for compute, memory, most, media in _SHAPES:
        profile = MigProfile(name=f"{compute}g.{memory * per_slice}gb{'+me' if media else ''}", compute_slices=compute,
                             memory_slices=memory, memory_gb=memory * per_slice, max_instances=most)
        profiles[profile.name] = profile
    # The operator's default config: `all-<profile>` fills a GPU with that profile (`+` spelt `.`), `all-balanced`
    # is 2 × 1g + 1 × 2g + 1 × 3g (2 + 2 + 3 compute slices, 2 + 2 + 4 memory slices).
    layouts: dict[str, Mapping[str, int]] = {
        f"all-{p.name.replace('+', '.')}": MappingProxyType({p.name: p.max_instances}) for p in profiles.values()}
    layouts["all-balanced"] = MappingProxyType({f"1g.{per_slice}gb": 2, f"2g.{2 * per_slice}gb": 1,
                                                f"3g.{4 * per_slice}gb": 1})
    return MigGpu(name=name, memory_gb=memory_gb, profiles=MappingProxyType(profiles),
                  layouts=MappingProxyType(layouts))


MIG_GPUS: Mapping[str, MigGpu] = MappingProxyType(
    {g.name: g for g in (_mig_gpu("A100-40GB", 40), _mig_gpu("A100-80GB", 80), _mig_gpu("H100-80GB", 80))})


def mig_gpu(product: str) -> MigGpu:
    """The MIG table of a GPU product as GFD (`NVIDIA-A100-SXM4-80GB`, `NVIDIA-H100-80GB-HBM3`) or a cloud
    (`nvidia-tesla-a100`, `nvidia-a100-80gb`, `nvidia-h100-80gb`) names it. Unknown or not MIG-capable: ConfigError."""
    text = re.sub(r"[\s_]+", "-", product.strip().upper())
    if re.search(r"\bA100\b", text):
        return MIG_GPUS["A100-80GB" if re.search(r"\b80GB?\b", text) else "A100-40GB"]
    if re.search(r"\bH100\b", text) and not re.search(r"NVL|GH200|\b9[46]GB?\b", text):
        return MIG_GPUS["H100-80GB"]
    raise ConfigError("model", f"no MIG profile table for GPU {product!r} (gpuscale knows A100 40/80 GB and "
                               "H100 80 GB)")


def check_layout(gpu: MigGpu, layout: Mapping[str, int], name: str = "layout") -> None:
    """A layout (MIG devices per GPU, by profile) must use known profiles, each at most `max_instances` times, and fit
    the GPU's compute and memory slices. Necessary, not sufficient: slice *placement* is left to mig-parted."""
    where = "sharing.layout"
    compute = memory = 0
    for profile_name, count in sorted(layout.items()):
        profile = gpu.profiles.get(profile_name)
        if profile is None:
            raise ConfigError(where, f"{name}: {gpu.name} has no MIG profile {profile_name!r} (it has "
                                     f"{', '.join(gpu.profiles)})")
        if count < 0 or count > profile.max_instances:
            raise ConfigError(where, f"{name}: {count} × {profile_name} on one {gpu.name} (0 to "
                                     f"{profile.max_instances})")
        compute += count * profile.compute_slices
        memory += count * profile.memory_slices
    if compute > gpu.compute_slices or memory > gpu.memory_slices:
        raise ConfigError(where, f"{name} needs {compute} compute and {memory} memory slices; one {gpu.name} has "
                                 f"{gpu.compute_slices} and {gpu.memory_slices}")


def mig_layout(product: str, config_name: str) -> dict[str, int]:
    """MIG devices per GPU, by profile, for a layout of the GPU operator's default mig-parted config
    (`all-1g.10gb`, `all-balanced`, …) on `product`. `all-disabled` and `all-enabled` have no MIG devices (empty).
    Unknown name: ConfigError."""
    gpu = mig_gpu(product)
    if config_name in (MIG_DISABLED, MIG_ENABLED_EMPTY):
        return {}
    layout = gpu.layouts.get(config_name)
    if layout is None:
        raise ConfigError("sharing.layout", f"unknown MIG layout {config_name!r} for {gpu.name} (known: "
                                            f"{', '.join((*gpu.layouts, MIG_DISABLED, MIG_ENABLED_EMPTY))})")
    check_layout(gpu, layout, config_name)
    return dict(layout)


# ------------------------------------------------------------------------------------------------- sharing, advertised
@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSharing:
    """How a node's GPUs are shared. `replicas` and `rename_by_default` are for time-slicing and MPS; `strategy` and
    `layout` (a mig-parted config name) for MIG."""

    mode: SharingMode = SharingMode.NONE
    replicas: int = 1
    """Shares per physical GPU (the device plugin's `replicas`)."""
    rename_by_default: bool = False
    """The device plugin's `renameByDefault`: shares are offered as `<resource>.shared`."""
    strategy: MigStrategy = MigStrategy.SINGLE
    layout: str | None = None


NO_SHARING = GpuSharing()


def _mig_devices(product: str, sharing: GpuSharing, resource: str) -> dict[str, int]:
    """MIG devices per GPU by profile, after checking the MIG settings."""
    if resource != NVIDIA_GPU:
        raise ConfigError("resource", f"MIG devices are offered by the NVIDIA device plugin, not as {resource}")
    if sharing.layout is None:
        raise ConfigError("sharing.layout", "MIG needs a layout: a mig-parted config name such as all-1g.10gb")
    layout = mig_layout(product, sharing.layout)
    if not layout:
        raise ConfigError("sharing.layout", f"{sharing.layout} has no MIG devices: use mode none, or a layout with "
                                            "devices such as all-1g.10gb")
    if sharing.strategy is MigStrategy.SINGLE and len(layout) != 1:
        raise ConfigError("sharing.strategy", f"strategy single needs a one-profile layout; {sharing.layout} has "
                                              f"{', '.join(sorted(layout))}: use strategy mixed")
    return layout


def check_sharing(product: str, sharing: GpuSharing, resource: str = NVIDIA_GPU) -> None:
    """Refuse what the device plugin would not do — time-slicing or MPS with fewer than 2 replicas, MPS on a resource
    other than `nvidia.com/gpu`, MIG without a valid layout for `product`, `single` with a multi-profile layout — and
    settings of another mode (replicas with MIG, a layout with time-slicing), which would be silently ignored."""
    shares = sharing.mode in (SharingMode.TIME_SLICING, SharingMode.MPS)
    if not shares and (sharing.replicas != 1 or sharing.rename_by_default):
        setting = "replicas" if sharing.replicas != 1 else "rename_by_default"
        raise ConfigError(f"sharing.{setting}", f"applies to modes time-slicing and mps, not {sharing.mode}")
    if sharing.mode is not SharingMode.MIG and sharing.layout is not None:
        raise ConfigError("sharing.layout", f"applies to mode mig, not {sharing.mode}")
    if sharing.mode is SharingMode.MIG:
        _mig_devices(product, sharing, resource)
    elif shares:
        if sharing.replicas < 2:
            raise ConfigError("sharing.replicas", f"{sharing.mode} needs replicas: 2 or more shares per GPU; "
                                                  f"got {sharing.replicas}")
        if sharing.mode is SharingMode.MPS and resource != NVIDIA_GPU:
            raise ConfigError("resource", f"MPS shares whole {NVIDIA_GPU} devices only, not {resource}")


def advertised_resources(product: str, gpus: int, sharing: GpuSharing = NO_SHARING,
                         resource: str = NVIDIA_GPU) -> Resources:
    """The GPU resources a node with `gpus` physical GPUs of `product` offers once its device plugin has registered:
    none → `resource` × gpus; time-slicing / MPS → gpus × replicas, as `resource` or `resource.shared`;
    MIG single → `nvidia.com/gpu` × gpus × instances; MIG mixed → `nvidia.com/mig-<profile>` × gpus × count."""
    if gpus < 1:
        raise ConfigError("count", f"a GPU node has 1 or more GPUs; got {gpus}")
    check_sharing(product, sharing, resource)
    if sharing.mode in (SharingMode.TIME_SLICING, SharingMode.MPS):
        name = resource + SHARED_SUFFIX if sharing.rename_by_default else resource
        return Resources.of({name: gpus * sharing.replicas})
    if sharing.mode is SharingMode.MIG:
        layout = _mig_devices(product, sharing, resource)
        if sharing.strategy is MigStrategy.SINGLE:
            return Resources.of({NVIDIA_GPU: gpus * sum(layout.values())})
        profiles = mig_gpu(product).profiles
        return Resources.of({profiles[p].resource: gpus * n for p, n in layout.items()})
    return Resources.of({resource: gpus})


# ------------------------------------------------------------------------------------------------------------ labels
def operator_labels(product: str, gpus: int, sharing: GpuSharing = NO_SHARING) -> dict[str, str]:
    """The labels GPU feature discovery and the GPU operator put on such a node once it is configured (device plugin
    rules: `-SHARED` is appended to the product unless renamed; `single` appends `-MIG-<profile>` and counts MIG
    devices in `gpu.count`; `mixed` adds `nvidia.com/mig-<profile>.count` / `.product`)."""
    advertised_resources(product, gpus, sharing)  # validates
    labels = {GPU_PRODUCT_LABEL: product, GPU_COUNT_LABEL: str(gpus), GPU_REPLICAS_LABEL: "1",
              GPU_SHARING_STRATEGY_LABEL: SharingMode.NONE.value}
    if sharing.mode in (SharingMode.TIME_SLICING, SharingMode.MPS):
        labels[GPU_REPLICAS_LABEL] = str(sharing.replicas)
        labels[GPU_SHARING_STRATEGY_LABEL] = sharing.mode.value
        if not sharing.rename_by_default:
            labels[GPU_PRODUCT_LABEL] = f"{product}-SHARED"
        if sharing.mode is SharingMode.MPS:
            labels[MPS_CAPABLE_LABEL] = "true"
    elif sharing.mode is SharingMode.MIG:
        assert sharing.layout is not None  # checked by advertised_resources
        layout = mig_layout(product, sharing.layout)
        labels |= {MIG_CAPABLE_LABEL: "true", MIG_CONFIG_LABEL: sharing.layout, MIG_CONFIG_STATE_LABEL: "success",
                   MIG_STRATEGY_LABEL: sharing.strategy.value}
        if sharing.strategy is MigStrategy.SINGLE:
            profile, per_gpu = next(iter(layout.items()))
            labels |= {GPU_PRODUCT_LABEL: f"{product}-MIG-{profile}", GPU_COUNT_LABEL: str(gpus * per_gpu)}
        else:
            labels[GPU_REPLICAS_LABEL] = "0"  # GFD labels MIG-enabled GPUs "without sharing"
            profiles = mig_gpu(product).profiles
            for name, count in sorted(layout.items()):
                key = profiles[name].resource
                labels |= {f"{key}.count": str(gpus * count), f"{key}.product": f"{product}-MIG-{name}"}
    return labels


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuIdentity:
    """A node's GPUs as its labels describe them."""

    model: str
    """`nvidia.com/gpu.product` without the `-MIG-<profile>` / `-SHARED` suffixes GFD adds."""
    count: int | None
    """Physical GPUs; `None` when the labels do not say (no count, or `single` MIG with a layout not in the tables)."""
    sharing: GpuSharing = NO_SHARING


def _int_label(labels: Mapping[str, str], name: str, obj: str) -> int | None:
    text = labels.get(name)
    if text is None or text == "":
        return None
    if not re.fullmatch(r"[0-9]+", text):
        raise InputError(obj, f"label {name}", f"expected a whole number, got {text!r}")
    return int(text)


def _mig_sharing(labels: Mapping[str, str], single_profile: str | None) -> GpuSharing | None:
    """The MIG part of a node's identity, or `None` when MIG is off."""
    strategy = labels.get(MIG_STRATEGY_LABEL, "")
    layout = labels.get(MIG_CONFIG_LABEL) or None
    mixed_devices = any(k.startswith(MIG_RESOURCE_PREFIX) and k.endswith(".count") and v not in ("", "0")
                        for k, v in labels.items())
    if strategy == MigStrategy.SINGLE and (single_profile or (layout and layout != MIG_DISABLED)):
        return GpuSharing(mode=SharingMode.MIG, strategy=MigStrategy.SINGLE, layout=layout)
    if strategy == MigStrategy.MIXED and (mixed_devices or (layout and layout != MIG_DISABLED)):
        return GpuSharing(mode=SharingMode.MIG, strategy=MigStrategy.MIXED, layout=layout)
    return None


def gpu_identity(labels: Mapping[str, str], obj: str = "node") -> GpuIdentity | None:
    """Read `nvidia.com/gpu.product`, `gpu.count`, `gpu.replicas`, `gpu.sharing-strategy`, `mig.config` and
    `mig.strategy` (as GFD, the device plugin and the MIG manager set them). `None` without a product label. A layout
    name gpuscale does not know (a custom mig-parted config) is kept; only the physical count may then be unknown."""
    product = labels.get(GPU_PRODUCT_LABEL)
    if not product:
        return None
    count = _int_label(labels, GPU_COUNT_LABEL, obj)
    replicas = _int_label(labels, GPU_REPLICAS_LABEL, obj)
    shared_suffix = product.endswith("-SHARED")
    model = product.removesuffix("-SHARED")
    model, _, single_profile = model.partition("-MIG-")
    mig = _mig_sharing(labels, single_profile or None)
    if mig is not None:
        if mig.strategy is MigStrategy.SINGLE and count is not None:
            count = _physical_from_single(model, mig.layout, count)
        return GpuIdentity(model=model, count=count, sharing=mig)
    strategy = labels.get(GPU_SHARING_STRATEGY_LABEL, "")
    if strategy not in ("", SharingMode.NONE, SharingMode.TIME_SLICING, SharingMode.MPS):
        raise InputError(obj, f"label {GPU_SHARING_STRATEGY_LABEL}", f"unknown sharing strategy {strategy!r}")
    if strategy == "" and replicas is not None and replicas > 1:
        strategy = SharingMode.TIME_SLICING  # GFD before the sharing-strategy label: replicas meant time-slicing
    if strategy in (SharingMode.TIME_SLICING, SharingMode.MPS) and replicas is not None and replicas > 1:
        return GpuIdentity(model=model, count=count, sharing=GpuSharing(
            mode=SharingMode(strategy), replicas=replicas, rename_by_default=not shared_suffix))
    return GpuIdentity(model=model, count=count)


def _physical_from_single(model: str, layout_name: str | None, devices: int) -> int | None:
    """Under `single`, `gpu.count` counts MIG devices: physical GPUs = devices / devices per GPU, if the layout is
    known and divides evenly."""
    if layout_name is None:
        return None
    try:
        layout = mig_layout(model, layout_name)
    except ConfigError:
        return None
    per_gpu = sum(layout.values())
    return devices // per_gpu if per_gpu and devices % per_gpu == 0 else None
