"""Values the placement scorers work on: a pod's shape, a node's spec and a node's current state.

Units follow the FGD artifact: CPU in milli-cores, memory in MiB, GPU in milli-GPUs per device (1000 = a whole GPU).
A pod asks for `gpu_count` devices with `gpu_milli` each; a *fractional* pod asks for part of one device
(`gpu_count == 1`, `gpu_milli < 1000`) and never spans devices. Multi-device pods always take whole devices.
"""

from __future__ import annotations

from dataclasses import dataclass

MILLI = 1000
"""Milli-GPUs of one whole device."""
MAX_SPEC_CPU_MILLI = 128_000
"""CPU of the largest node shape; the artifact normalises CPU by it (DotProd, BestFit)."""
MAX_SPEC_GPU_MILLI = 8_000
"""GPU milli of the largest node shape (8 devices); used to normalise GPU whatever the node size."""
MAX_GPUS_PER_NODE = 8
SHARE_TAG = 0
"""GPU tag index of fractional pods; tag k (1…8) is "k whole GPUs" (GpuClustering)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodShape:
    """What a pod requests. Pods with equal shapes are interchangeable for every scorer (scores are cached by shape)."""

    cpu_milli: int
    memory_mib: int = 0
    gpu_milli: int = 0
    """Per device, 1…1000; 0 for a CPU-only pod."""
    gpu_count: int = 0
    gpu_models: tuple[str, ...] = ()
    """Allowed GPU models; empty = any model."""

    def __post_init__(self) -> None:
        if (self.gpu_count > 0) != (self.gpu_milli > 0):
            raise ValueError(f"gpu_count {self.gpu_count} and gpu_milli {self.gpu_milli} must both be set or unset")
        if not 0 <= self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli {self.gpu_milli} is outside 0…{MILLI}")
        if self.gpu_count > 1 and self.gpu_milli < MILLI:
            raise ValueError("a multi-GPU pod must take whole GPUs (the artifact panics on it too)")

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_milli * self.gpu_count

    @property
    def is_fractional(self) -> bool:
        return self.gpu_count == 1 and self.gpu_milli < MILLI

    @property
    def uses_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def gpu_tag(self) -> int:
        """GpuClustering's tag: SHARE_TAG for fractional pods, k for k whole GPUs, −1 for CPU-only pods."""
        if not self.uses_gpu:
            return -1
        return SHARE_TAG if self.is_fractional else self.gpu_count

    @property
    def model_key(self) -> str:
        """The artifact's model annotation: allowed models joined by `|` (part of the pod's resource class)."""
        return "|".join(self.gpu_models)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """A node's capacity. All its devices are of `gpu_model` ("" for a CPU node)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    max_pods: int = 1001


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """A node's spec plus what is left on it: the input of the one-node scoring API (`score_node`)."""

    spec: NodeSpec
    cpu_free_milli: int
    memory_free_mib: int
    pods_free: int
    gpu_free_milli: tuple[int, ...]
    """Free milli per device, in device-index order."""
    gpu_tags: tuple[int, ...] = (0,) * (MAX_GPUS_PER_NODE + 1)
    """Number of GPU pods per GpuClustering tag on the node (index SHARE_TAG, 1, …, 8)."""

    @classmethod
    def empty(cls, spec: NodeSpec) -> NodeState:
        return cls(spec=spec, cpu_free_milli=spec.cpu_milli, memory_free_mib=spec.memory_mib, pods_free=spec.max_pods,
                   gpu_free_milli=(MILLI,) * spec.gpu_count)


def model_allows(pod_models: tuple[str, ...], node_model: str) -> bool:
    """The artifact's GPU-model rule: no constraint fits any node; otherwise the node model must be listed."""
    if not pod_models:
        return True
    return bool(node_model) and node_model in pod_models
