"""Resource vectors: integer amounts in base units, keyed by Kubernetes resource name.

Units: `cpu` in millicores, `memory`/`ephemeral-storage`/`hugepages-*` in bytes, `pods` and extended resources
(`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, `amd.com/gpu`, …) in counts, `gpuscale.io/gpu-milli` in milli-GPUs.
Any name is kept: an unknown extended resource is carried through every computation, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gpuscale.model.frozen import quick_init

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
NVIDIA_GPU = "nvidia.com/gpu"
GPU_MILLI = "gpuscale.io/gpu-milli"
"""Fractional GPU demand (openb `gpu_milli`): thousandths of one GPU, on one GPU."""

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/", "habana.ai/gaudi")


def is_gpu_resource(name: str) -> bool:
    """Whether a resource name denotes GPUs or GPU slices (whole, shared or MIG)."""
    return name.startswith(GPU_RESOURCE_PREFIXES)


def asks_gpu(requests: Resources) -> bool:
    """Whether requests ask for GPUs in any form: whole, shared, MIG or by fraction (`GPU_MILLI`)."""
    return any(is_gpu_resource(n) or n == GPU_MILLI for n in requests.names())


@quick_init
@dataclass(frozen=True, slots=True)
class Resources:
    """An immutable resource vector; `items` is sorted by name and holds no zero amounts."""

    items: tuple[tuple[str, int], ...] = ()
    _hash: int = field(default=-1, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        """The frozen dataclass's hash, kept once computed (requests key many caches; -1 is never a hash)."""
        if self._hash == -1:
            object.__setattr__(self, "_hash", hash((self.items,)))
        return self._hash

    def __reduce__(self) -> tuple[type[Resources], tuple[tuple[tuple[str, int], ...]]]:
        return Resources, (self.items,)  # without the kept hash: another process hashes strings differently

    @staticmethod
    def of(amounts: Mapping[str, int] | Iterable[tuple[str, int]] | None = None, /, **named: int) -> Resources:
        """Build from a mapping or pairs (names as Kubernetes spells them) plus `cpu=`/`memory=`/`pods=` keywords."""
        merged: dict[str, int] = {}
        pairs = amounts.items() if isinstance(amounts, Mapping) else (amounts or ())
        for name, amount in (*pairs, *named.items()):
            merged[name] = merged.get(name, 0) + amount
        return Resources(tuple(sorted((n, a) for n, a in merged.items() if a != 0)))

    def get(self, name: str) -> int:
        for n, amount in self.items:
            if n == name:
                return amount
        return 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.items)

    def names(self) -> Iterator[str]:
        return (n for n, _ in self.items)

    def __add__(self, other: Resources) -> Resources:
        merged = dict(self.items)
        for name, amount in other.items:
            merged[name] = merged.get(name, 0) + amount
        return Resources(tuple(sorted((n, a) for n, a in merged.items() if a != 0)))

    def __sub__(self, other: Resources) -> Resources:
        merged = dict(self.items)
        for name, amount in other.items:
            merged[name] = merged.get(name, 0) - amount
        return Resources(tuple(sorted((n, a) for n, a in merged.items() if a != 0)))

    def scale(self, factor: int) -> Resources:
        return Resources(tuple((n, a * factor) for n, a in self.items)) if factor else Resources()

    def max(self, other: Resources) -> Resources:
        """Per-resource maximum (init containers against app containers)."""
        merged = dict(self.items)
        for name, amount in other.items:
            merged[name] = max(merged.get(name, 0), amount)
        return Resources(tuple(sorted((n, a) for n, a in merged.items() if a != 0)))

    def shortfalls(self, available: Resources) -> tuple[str, ...]:
        """Names whose request exceeds what is available (what NodeResourcesFit reports as Insufficient)."""
        have = dict(available.items)
        return tuple(n for n, amount in self.items if amount > 0 and amount > have.get(n, 0))

    def gpu_count(self) -> int:
        """Whole GPUs (and GPU slices) requested or offered, over every GPU resource name."""
        return sum(a for n, a in self.items if is_gpu_resource(n))

    def __bool__(self) -> bool:
        return bool(self.items)
