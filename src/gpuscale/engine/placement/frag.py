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

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.shapes import PodShape, model_allows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

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
_CASE_COLUMN = np.array([_FRAG_BUCKETS.index(_case_category(case)) for case in range(16)], dtype=np.int64)
"""Each case's category as a position in `_FRAG_BUCKETS`."""
_SKIPPED = len(_FRAG_BUCKETS)
_CASE_COLUMN_ONE = np.where(_CASE_USABLE, _SKIPPED, _CASE_COLUMN)
"""`_CASE_COLUMN` for one-device states: a class that fits entirely adds nothing there (its device is no sliver for
it), so its term goes to a bin past the categories (`_SKIPPED`) that no state sums, instead of a 0 into Q2."""


def _sum_by_category(column: IntArray, terms: FloatArray) -> FloatArray:
    """Per state (row): the terms summed per category (`column`, a position in `_FRAG_BUCKETS`) in class order,
    then the categories summed in their order — Go's two loops, to the bit.

    `bincount` adds its weights one after the other in input order into zeroed bins: bin 6·state + category gets
    that state's terms of the category in class order (row-major input), then bin `state` gets its six categories
    in order. A category no class lands in stays +0.0, and adding +0.0 changes no partial sum (terms are ≥ 0)."""
    return _summed(column, terms, len(_FRAG_BUCKETS))


def _summed(column: IntArray, terms: FloatArray, width: int) -> FloatArray:
    """`_sum_by_category` with `width` bins per state: the categories, then (width 7) the `_SKIPPED` bin, which is
    booked to no state. Leaving out a term that is +0.0 changes no sum: adding +0.0 to a partial sum that is not
    −0.0 (none is: the terms are finite and never −0.0) leaves it as it was."""
    states = len(column)
    if not states:
        return np.zeros(0, dtype=np.float64)
    first, of_bin = _bins(states, width)
    per_category = np.bincount((column + first).ravel(), terms.ravel(), minlength=width * states)
    if width == len(_FRAG_BUCKETS):
        out: FloatArray = np.bincount(of_bin, per_category, minlength=states)  # type: ignore[assignment]
        return out
    skipped: FloatArray = np.bincount(of_bin, per_category, minlength=states + 1)[:states]  # type: ignore[assignment]
    return skipped


_BINS: dict[tuple[int, int], tuple[IntArray, IntArray]] = {}


def _bins(states: int, width: int = len(_FRAG_BUCKETS)) -> tuple[IntArray, IntArray]:
    """For `states` states and `width` bins each: each state's first bin (width·state, states × 1) and the state of
    each of the width·states bins, `states` (no state) for a bin past the categories (read-only, kept per count)."""
    known = _BINS.get((states, width))
    if known is None:
        if len(_BINS) >= 1024:
            _BINS.clear()
        first = (width * np.arange(states, dtype=np.int64))[:, None]
        of_bin = np.repeat(np.arange(states, dtype=np.int64), width)
        if width > len(_FRAG_BUCKETS):
            of_bin[len(_FRAG_BUCKETS)::width] = states
        first.setflags(write=False)
        of_bin.setflags(write=False)
        known = _BINS[states, width] = (first, of_bin)
    return known


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

    def __post_init__(self) -> None:
        if (self.gpu_count > 0) != (self.gpu_milli > 0):  # as a pod shape: `FragTable.frag_of_one_device` relies on it
            raise ValueError(f"gpu_count {self.gpu_count} and gpu_milli {self.gpu_milli} must both be set or unset")

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
                 for (k, n), w in zip(ranked[:len(shares)], shares.tolist(), strict=True))


_BY_COUNT = itemgetter(1, 0)
"""Sort key of (class, count): classes go by count, equal counts by class, both descending."""


def _ranked(counts: Mapping[ClassKey, int]) -> list[tuple[ClassKey, int]]:
    """Classes by count, descending; equal counts by descending class key."""
    return sorted(counts.items(), key=_BY_COUNT, reverse=True)


def _typical_shares(ranked: Sequence[int], popularity_pct: int, step: int) -> FloatArray:
    """The renormalised weights of the typical classes among `ranked` counts (as many as are typical).

    The artifact adds classes `step` at a time while their cumulative count is below `popularity_pct` % of all, then
    divides each count by the total and, if classes were left out, by the taken share: the same float operations
    here (cumulative counts are integers below 2⁵³: summed as integers they are what the artifact's float sums
    give), the divisions vectorised."""
    total = float(sum(ranked))
    expected = float(popularity_pct) * total / 100.0
    cum = list(accumulate(ranked))
    one_by_one = bisect_left(cum, expected) + 1 if expected > 0.0 else 0  # ints against a float: exact
    taken = min(len(ranked), -(-one_by_one // step) * step)
    shares: FloatArray = np.array(ranked[:taken], dtype=np.float64) / total
    if 0 < taken < len(ranked):
        shares = shares / (float(cum[taken - 1]) / total)
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
        self._class_bits = (4 * self.access + 8 * self.gpu_class).astype(np.uint8)
        self._one_fit = _one_device_fit(self.milli, self.count)
        self._weight_sum: float | None = None

    @property
    def weight_sum(self) -> float:
        """The weights' sum (the packing loop's idle milli reads it; the twin's choosers never do)."""
        if self._weight_sum is None:
            self._weight_sum = float(self.weight.sum())
        return self._weight_sum

    @property
    def classes(self) -> tuple[TypicalClass, ...]:
        if self._classes is None:
            self._classes = tuple(replace(c, pods=n, weight=w) for c, n, w
                                  in zip(self._base, self._pods, self.weight.tolist(), strict=True))
        return self._classes

    def subset(self, ids: Sequence[int], pods: Sequence[int], weights: FloatArray) -> FragTable:
        """The table of classes `ids` (positions in this one, in that order) with other pod counts and weights, as
        `FragTable` would build it: the per-class arrays are this table's columns, not computed again."""
        at = np.array(ids, dtype=np.int64)
        table = FragTable.__new__(FragTable)
        table._base = tuple(map(self._base.__getitem__, ids))
        table.cpu, table.milli, table.count = self.cpu[at], self.milli[at], self.count[at]
        table.gpu_class = self.gpu_class[at]
        table.access, table._class_bits = self.access[:, at], self._class_bits[:, at]
        table._one_fit = self._one_fit[at]
        return table.weighed(pods, weights)

    def weighed(self, pods: Sequence[int], weights: FloatArray) -> FragTable:
        """This table's classes with other pod counts and weights (the per-class arrays are shared, never
        written)."""
        table = FragTable.__new__(FragTable)
        table._base, table._classes, table._pods = self._base, None, pods
        table.cpu, table.milli, table.count, table.gpu_class = self.cpu, self.milli, self.count, self.gpu_class
        table.access, table._class_bits, table._one_fit = self.access, self._class_bits, self._one_fit
        table.weight = weights
        table._weight_sum = None
        return table

    def stats(self, gpu_free: IntArray) -> tuple[IntArray, IntArray]:
        """Per state and class: devices with ≥ the class's milli free, and free milli on devices below it.

        `gpu_free` is (..., devices); results are (..., classes).
        """
        _, fit_count, small = self.device_stats(gpu_free)
        return fit_count, small

    def device_stats(self, gpu_free: IntArray) -> tuple[BoolArray, IntArray, IntArray]:
        """`stats` and the (..., devices, classes) "device fits the class" it counts."""
        g = gpu_free[..., :, None]
        fits = g >= self.milli
        small = np.where(fits, 0, g)
        if gpu_free.shape[-1] == 1:  # one device (the twin's T4 nodes): its own values, no reduction
            return fits, fits[..., 0, :].astype(np.int64), small[..., 0, :]
        return fits, fits.sum(axis=-2), small.sum(axis=-2)

    def frag(self, cpu_free: IntArray, gpu_left: IntArray, model: IntArray, fit_count: IntArray,
             small_milli: IntArray) -> FloatArray:
        """F for states given by free CPU, idle milli, model index (shape S; read only when the table has several
        models) and `stats` (shape S × classes)."""
        # One model (the autoscaler's views): every index is 0, and row 0 broadcasts like the lookup would.
        bits = self._class_bits[0] if len(self._class_bits) == 1 else self._class_bits[model]
        case = np.add(fit_count >= self.count, bits, dtype=np.uint8)  # small integers: no casts to int64
        case += (cpu_free[:, None] >= self.cpu).view(np.uint8) << 1
        terms = np.where(_CASE_USABLE.take(case), small_milli, gpu_left[:, None]) * self.weight
        return _sum_by_category(_CASE_COLUMN.take(case), terms)

    def frag_of_one_device(self, cpu_free: IntArray, gpu_free: IntArray, model: IntArray) -> FloatArray:
        """F of states with one device (shape S each: free CPU, the device's free milli, model index): `frag` of
        their `stats`, in fewer steps. With one device, a class fits when that device has its milli (a CPU-only
        class always does, a class of several devices never), and where it fits entirely (the only case whose
        term is not all idle milli) the device is no sliver for it: its term is 0."""
        bits = self._class_bits[0] if len(self._class_bits) == 1 else self._class_bits[model]
        g = gpu_free[:, None]
        case = np.add(g >= self._one_fit, bits, dtype=np.uint8)
        case += (cpu_free[:, None] >= self.cpu).view(np.uint8) << 1
        # every term is the idle milli weighed; those of classes that fit entirely land in the bin no state sums
        return _summed(_CASE_COLUMN_ONE.take(case), g * self.weight, _SKIPPED + 1)

    def frag_of_nodes(self, cpu_free: IntArray, gpu_free: IntArray, model: IntArray) -> FloatArray:
        """F of actual node states: free CPU (S), free device milli (S × devices), model index (S)."""
        fit_count, small = self.stats(gpu_free)
        return self.frag(cpu_free, gpu_free.sum(axis=-1), model, fit_count, small)


def _one_device_fit(milli: IntArray, count: IntArray) -> IntArray:
    """Per class, the free milli a node's only device needs for `fit_count >= count`: any for a CPU-only class,
    the class's milli for one device, more than a device has for several."""
    bound = np.iinfo(np.int64)
    fit: IntArray = np.where(count == 0, bound.min, np.where(count == 1, milli, bound.max))
    return fit


class TypicalTables:
    """`FragTable`s of the typical classes of a workload that keeps changing (the twin's scheduler needs one per
    placement). Every class met gets a column in one table of all of them, once; a workload's table takes its
    typical classes' columns from there, in their order, with their weights. Tables equal
    `FragTable(typical_classes_of(counts), models)`."""

    def __init__(self, models: Sequence[str] = ("",)) -> None:
        self.models = tuple(models)
        self._id: dict[ClassKey, int] = {}
        self._all = FragTable((), self.models)
        self._of_keys: dict[tuple[int, ...], FragTable] = {}
        """Tables by their typical classes' numbers in `_id` (in order): a workload's table reweighs the one of its
        class list, which changes far less often than the counts do."""
        self._ranked: list[tuple[int, ClassKey]] = []
        """(count, class) of the classes with pods at the last call, ascending: the ranking read backwards."""
        self._pods: list[int] = []
        self._keys: list[ClassKey] = []
        """`_ranked`'s counts and classes, as lists of their own (read backwards: the ranking's columns)."""
        self._ids: list[int] = []
        """`_keys`' numbers in `_id` (a class list is looked up by its numbers: ints hash and compare at once, class
        keys field by field)."""
        self._counts: dict[ClassKey, int] | None = {}
        """The counts of `_ranked` by class (None: not made yet, after a ranking of all classes)."""

    def table(self, counts: Mapping[ClassKey, int], moved: Iterable[ClassKey] | None = None) -> FragTable | None:
        """The table of the typical classes of `counts` (classes with no pods left out); None if there are none.

        `moved`: the classes whose counts may differ from the last call's (a caller that counts pods as they come
        and go knows them); the ranking is then patched for those only. Without it, every class is looked at."""
        if moved is None:
            self._rank(counts)
        else:
            self._rerank(counts, moved)
        if not self._pods:
            return None
        pods = self._pods[::-1]
        shares = _typical_shares(pods, 95, 1)
        taken = len(shares)
        ids = tuple(self._ids[:-taken - 1:-1])
        known = self._of_keys.get(ids)
        if known is not None:
            return known.weighed(pods[:taken], shares)
        if max(ids) >= len(self._all.cpu):  # a class without a column yet
            self._all = FragTable([TypicalClass(cpu_milli=k[0], gpu_milli=k[1], gpu_count=k[2], model_key=k[3], pods=0,
                                                weight=0.0) for k in self._id], self.models)
        if len(self._of_keys) >= _KEPT_TABLES:
            self._of_keys.clear()
        table = self._of_keys[ids] = self._all.subset(ids, pods[:taken], shares)
        return table

    def _rank(self, counts: Mapping[ClassKey, int]) -> None:
        """Rank the classes with pods into `_ranked` (ascending: read backwards, by count then class, both descending).

        Sorted from the last call's order: counts move by a few pods between two calls, so the list is almost in
        order already and the sort takes about one comparison per class. The result does not depend on where the
        sort started (no two entries are equal)."""
        get = counts.get
        ranked = [(n, k) for _, k in self._ranked if (n := get(k, 0)) > 0]
        if len(ranked) < len(counts):  # a class came (or a class without pods is listed)
            listed = set(self._keys)
            ranked += [(n, k) for k, n in counts.items() if n > 0 and k not in listed]
        ranked.sort()
        self._ranked = ranked
        self._pods = [n for n, _ in ranked]
        self._keys = [k for _, k in ranked]
        number = self._id.setdefault
        self._ids = [number(k, len(self._id)) for k in self._keys]
        self._counts = None

    def _rerank(self, counts: Mapping[ClassKey, int], moved: Iterable[ClassKey]) -> None:
        """`_rank` by moving the entries of the classes in `moved` (each found by bisection) to their new places."""
        ranked, pods, keys, ids, kept = self._ranked, self._pods, self._keys, self._ids, self._counts
        if kept is None:
            kept = self._counts = dict(zip(keys, pods, strict=True))
        for k in moved:
            old, new = kept.get(k, 0), counts.get(k, 0)
            if old == new or (old <= 0 and new <= 0):
                continue
            if old > 0:
                at = bisect_left(ranked, (old, k))
                del ranked[at], pods[at], keys[at], ids[at]
            if new > 0:
                at = bisect_left(ranked, (new, k))
                ranked.insert(at, (new, k))
                pods.insert(at, new)
                keys.insert(at, k)
                ids.insert(at, self._id.setdefault(k, len(self._id)))
                kept[k] = new
            else:
                del kept[k]


_KEPT_TABLES = 4096
"""`TypicalTables` forgets its tables by class list past this many (a long run meets many lists)."""
