"""GPU fragmentation as the FGD paper measures it (`pkg/utils/frag.go` of the artifact).

The *typical pods* are the most popular resource classes (cpu, per-GPU milli, GPU count, model) of the original
trace, taken in decreasing popularity until they cover 95 % of the pods, with their frequencies renormalised.
A node's fragment amount F is, summed over classes c with weight p_c, the idle GPU milli that class c could not
use there: all of it when c is CPU-only, may not use the model, lacks CPU, or does not fit on the devices; and
when c fits, the idle milli of devices too small for it. F depends only on free CPU, the multiset of free device
milli and the model.

Go sums F per category first (Q1, Q2, Q3, Q4, XL, XR, no-access; class order inside each), then adds the
categories. FGD's scores floor 100·σ(ΔF/1000), and ΔF is often exactly zero, so we keep that order to the bit:
`node_frag` is the plain reference, `FragTable.frag` the vectorised equivalent (tests check they are equal).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.shapes import PodShape, model_allows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Go's FragRatioDataMap order; Q3 holds the usable part and is left out of F.
Q1_LACK_BOTH, Q2_LACK_GPU, Q3_SATISFIED, Q4_LACK_CPU, XL_SATISFIED, XR_LACK_CPU, NO_ACCESS = range(7)
_FRAG_BUCKETS = (Q1_LACK_BOTH, Q2_LACK_GPU, Q4_LACK_CPU, XL_SATISFIED, XR_LACK_CPU, NO_ACCESS)


def _case_category(case: int) -> int:
    """Category of a (node, class) case: bit 0 the class's devices fit, 1 its CPU fits, 2 it may use the model,
    3 it is a GPU class. Q3 (fits entirely) books its too-small devices under Q2, like the artifact."""
    fits, cpu_ok, access, gpu_class = (bool(case >> b & 1) for b in range(4))
    if not gpu_class:
        return XL_SATISFIED if cpu_ok else XR_LACK_CPU
    if not access:
        return NO_ACCESS
    if fits:
        return Q2_LACK_GPU if cpu_ok else Q4_LACK_CPU
    return Q2_LACK_GPU if cpu_ok else Q1_LACK_BOTH


_CASE_USABLE = np.array([case == 0b1111 for case in range(16)], dtype=np.bool_)
"""Cases where the class fits entirely (Q3): only devices too small for it count, not all idle milli."""
_CASE_ONE_HOT = np.array([[float(_case_category(case) == b) for b in _FRAG_BUCKETS] for case in range(16)])


@dataclass(frozen=True, slots=True, kw_only=True)
class TypicalClass:
    """A popular resource class and its renormalised frequency `weight`."""

    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    model_key: str
    """Allowed models joined by `|`; "" = any."""
    pods: int
    weight: float

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m for m in self.model_key.split("|") if m)


def typical_classes(pods: Sequence[PodShape], popularity_pct: int = 95, step: int = 1) -> tuple[TypicalClass, ...]:
    """The artifact's `GetTypicalPods` (CPU pods included, no GPU weighting), with its float operations.

    Classes go by count, descending; equal counts by descending (cpu, milli, count, model). Classes are added
    `step` at a time until their cumulative count reaches `popularity_pct` % of all pods.
    """
    counts = Counter(class_key(p) for p in pods)
    return typical_classes_of(counts, popularity_pct, step)


ClassKey = tuple[int, int, int, str]
"""A resource class: (cpu milli, per-GPU milli, GPU count, model key)."""


def class_key(shape: PodShape) -> ClassKey:
    """The resource class of a pod shape (its memory does not enter fragmentation)."""
    return (shape.cpu_milli, shape.gpu_milli, shape.gpu_count, shape.model_key)


def typical_classes_of(counts: Mapping[ClassKey, int], popularity_pct: int = 95,
                       step: int = 1) -> tuple[TypicalClass, ...]:
    """`typical_classes` from pod counts per class (cpu, per-GPU milli, GPU count, model key)."""
    ranked = _ranked(counts)
    shares = _typical_shares([n for _, n in ranked], popularity_pct, step)
    return tuple(TypicalClass(cpu_milli=k[0], gpu_milli=k[1], gpu_count=k[2], model_key=k[3], pods=n, weight=w)
                 for (k, n), w in zip(ranked[:len(shares)], shares, strict=True))


def _ranked(counts: Mapping[ClassKey, int]) -> list[tuple[ClassKey, int]]:
    """Classes by count, descending; equal counts by descending class key."""
    return sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)


def _typical_shares(ranked: Sequence[int], popularity_pct: int, step: int) -> list[float]:
    """The renormalised weights of the typical classes among `ranked` counts (as many as are typical), `step`
    classes at a time until their cumulative count reaches `popularity_pct` % of all, with the artifact's floats."""
    total = float(sum(ranked))
    expected = float(popularity_pct) * total / 100.0
    taken, cum = 0, 0.0
    shares: list[float] = []
    while cum < expected and taken < len(ranked):
        limit = taken + step
        while taken < limit and taken < len(ranked):
            cum += float(ranked[taken])
            shares.append(float(ranked[taken]) / total)
            taken += 1
    if taken < len(ranked):
        shares = [s / (cum / total) for s in shares]
    return shares


def node_frag(cpu_free_milli: int, gpu_free_milli: Sequence[int], gpu_model: str,
              classes: Sequence[TypicalClass]) -> float:
    """F(node) in milli-GPU: the reference implementation, one class at a time in Go's order."""
    idle = sum(gpu_free_milli)
    data = [0.0] * 7
    for c in classes:
        cpu_ok = cpu_free_milli >= c.cpu_milli
        if c.gpu_milli == 0:
            data[XL_SATISFIED if cpu_ok else XR_LACK_CPU] += c.weight * float(idle)
        elif not model_allows(c.models, gpu_model):
            data[NO_ACCESS] += c.weight * float(idle)
        elif sum(1 for g in gpu_free_milli if g >= c.gpu_milli) >= c.gpu_count:
            if cpu_ok:
                small = sum(g for g in gpu_free_milli if g < c.gpu_milli)
                data[Q2_LACK_GPU] += c.weight * float(small)
                data[Q3_SATISFIED] += c.weight * float(idle - small)
            else:
                data[Q4_LACK_CPU] += c.weight * float(idle)
        else:
            data[Q2_LACK_GPU if cpu_ok else Q1_LACK_BOTH] += c.weight * float(idle)
    out = 0.0
    for b in _FRAG_BUCKETS:
        out += data[b]
    return out


class FragTable:
    """The typical classes as arrays, and F for many hypothetical node states at once."""

    def __init__(self, classes: Sequence[TypicalClass], models: Sequence[str]) -> None:
        self._classes: tuple[TypicalClass, ...] | None = tuple(classes)
        self._base = self._classes
        self._pods: Sequence[int] = ()
        self.cpu = np.array([c.cpu_milli for c in classes], dtype=np.int64)
        self.milli = np.array([c.gpu_milli for c in classes], dtype=np.int64)
        self.count = np.array([c.gpu_count for c in classes], dtype=np.int64)
        self.weight = np.array([c.weight for c in classes], dtype=np.float64)
        self.gpu_class = self.milli > 0
        # access[model index, class]: may the class use that model?
        self.access = np.array([[model_allows(c.models, m) for c in classes] for m in models], dtype=np.bool_)
        self._class_bits = 4 * self.access.astype(np.int64) + 8 * self.gpu_class.astype(np.int64)
        self.weight_sum = float(self.weight.sum())

    @property
    def classes(self) -> tuple[TypicalClass, ...]:
        if self._classes is None:
            self._classes = tuple(replace(c, pods=n, weight=w) for c, n, w
                                  in zip(self._base, self._pods, self.weight.tolist(), strict=True))
        return self._classes

    def reweighted(self, pods: Sequence[int], weights: Sequence[float]) -> FragTable:
        """The same classes with other pod counts and weights. F reads the classes' resources and weights only, so
        the arrays built from the resources are shared, not rebuilt."""
        table = FragTable.__new__(FragTable)
        table.__dict__.update(self.__dict__)
        table._classes, table._pods = None, pods
        table.weight = np.array(weights, dtype=np.float64)
        table.weight_sum = float(table.weight.sum())
        return table

    def stats(self, gpu_free: IntArray) -> tuple[IntArray, IntArray]:
        """Per state and class: devices with ≥ the class's milli free, and free milli on devices below it.

        `gpu_free` is (..., devices); results are (..., classes).
        """
        g = gpu_free[..., :, None]
        fits = g >= self.milli
        return fits.sum(axis=-2), np.where(fits, 0, g).sum(axis=-2)

    def frag(self, cpu_free: IntArray, gpu_left: IntArray, model: IntArray, fit_count: IntArray,
             small_milli: IntArray) -> FloatArray:
        """F for states given by free CPU, idle milli, model index (shape S) and `stats` (shape S × classes)."""
        case = (fit_count >= self.count) + 2 * (cpu_free[..., None] >= self.cpu) + self._class_bits[model]
        amount = np.where(_CASE_USABLE[case], small_milli, gpu_left[..., None]).astype(np.float64)
        # (S × classes × categories): each class's p·amount in its category's column, 0.0 in the others. cumsum
        # adds strictly in order (Go's class order, then category order) and +0.0 leaves a partial sum unchanged.
        per_category = (self.weight * amount)[..., None] * _CASE_ONE_HOT[case]
        sums = np.cumsum(per_category, axis=-2)[..., -1, :]
        out: FloatArray = np.cumsum(sums, axis=-1)[..., -1]
        return out

    def frag_of_nodes(self, cpu_free: IntArray, gpu_free: IntArray, model: IntArray) -> FloatArray:
        """F of actual node states: free CPU (S), free device milli (S × devices), model index (S)."""
        fit_count, small = self.stats(gpu_free)
        return self.frag(cpu_free, gpu_free.sum(axis=-1), model, fit_count, small)


class TypicalTables:
    """`FragTable`s of the typical classes of a workload that keeps changing (the twin's scheduler needs one per
    placement). The popular classes rank alike most of the time while their counts, hence weights, move: the table of
    a ranked class list seen before is reweighted, not rebuilt. Tables equal `FragTable(typical_classes_of(counts))`.
    """

    _KEEP = 4096
    """Ranked class lists remembered; past that the memory starts again (a cache, never a result)."""

    def __init__(self, models: Sequence[str] = ("",)) -> None:
        self.models = tuple(models)
        self._tables: dict[tuple[ClassKey, ...], FragTable] = {}

    def table(self, counts: Mapping[ClassKey, int]) -> FragTable | None:
        """The table of the typical classes of `counts` (classes with no pods left out); None if there are none."""
        ranked = _ranked({k: n for k, n in counts.items() if n > 0})
        if not ranked:
            return None
        pods = [n for _, n in ranked]
        shares = _typical_shares(pods, 95, 1)
        keys = tuple(k for k, _ in ranked[:len(shares)])
        base = self._tables.get(keys)
        if base is None:
            if len(self._tables) >= self._KEEP:
                self._tables.clear()
            base = self._tables[keys] = FragTable(typical_classes_of(dict(ranked)), self.models)
        return base.reweighted(pods[:len(shares)], shares)
