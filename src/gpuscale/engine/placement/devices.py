"""Per-GPU device accounting for nodes that share GPUs by fraction (`gpuscale.io/gpu-milli`), as openb does.

A node that advertises `gpuscale.io/gpu-milli: G × 1000` has G devices of 1000 milli each. The API's per-resource
totals are not enough to decide whether a pod fits there: a pod asking for 600 milli fits only if *one* device has
600 free (a fraction never spans devices), and a pod asking for `nvidia.com/gpu: k` needs k *completely* free
devices — two devices with 500 free each are 1000 milli in the node total but hold neither. `GpuDevices` keeps the
free milli of every device of every such row (rows × width, 0 past a node's G) next to the totals, as the FGD
paper's simulator (Open-Gpu-Share) does. Rows without `gpuscale.io/gpu-milli` have no devices and are not
constrained here: time-sliced, MPS and MIG nodes are counted in the shares or MIG devices they advertise.

**Where per-device state comes from on a real cluster.** The API does not say which GPU a pod got: kubelet's device
manager keeps that in a node-local checkpoint, and for fractional sharing the component that picks the device (a
scheduler extender or a sharing device plugin) records it its own way. gpuscale therefore reads the annotation
`gpuscale.io/gpu-index` (comma-separated device indices, as the twin's scheduler writes it and as an extender can)
when a bound pod carries a valid one; otherwise it *reconstructs* a consistent assignment deterministically from the
bound pods: annotated pods first, then whole-GPU pods on the lowest-index free devices, then fractional pods from the
largest down, each on the tightest device that fits (best-fit decreasing, which packs as tightly as a heuristic can:
the reconstruction may be *less* fragmented than reality, never inconsistent with the totals). A pod that fits no
single device in the reconstruction (possible only when reality packed better than best-fit decreasing) is spread
over the devices with most free, so the node's total stays exact and no device goes negative.

Fragmentation-aware choices reuse the placement scorers (`FgdScorer`, `GpuscaleScorer`) on a `ClusterState` view of
the candidate rows: `FragChooser` scores candidates, breaks ties by a rank the caller gives, and picks devices.
Its target workload (FGD's "typical pods") is the GPU pods the caller counts — the GPU pods running and pending in
the cluster — not CPU-only pods, which in a cloud cluster run on CPU pools and would otherwise crowd the 95 %
popularity cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.fgd import DEDUPE_ABOVE, FgdScorer
from gpuscale.engine.placement.frag import ClassKey, FragTable, TypicalTables, class_key, typical_classes_of
from gpuscale.engine.placement.gpuscale import GpuscaleScorer
from gpuscale.engine.placement.shapes import MILLI, PodShape
from gpuscale.engine.placement.state import BoolArray, ClusterState, IntArray
from gpuscale.model.frozen import quick_init
from gpuscale.model.pod import Pod
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU, Resources

Ranks = npt.NDArray[np.int64] | npt.NDArray[np.float64]
"""Ranks of tied rows (lowest first): `FragChooser.choose` takes the first minimum."""

DEVICE_ANNOTATION = "gpuscale.io/gpu-index"
"""Devices a bound pod holds, comma-separated indices (`"2"`, `"0,1"`)."""
MIB = 2**20


@quick_init
@dataclass(frozen=True, slots=True)
class GpuNeed:
    """What a pod takes from a device-accounted node: `count` devices with `milli` each."""

    milli: int
    count: int

    @property
    def fractional(self) -> bool:
        return self.count == 1 and self.milli < MILLI


def gpu_need(requests: Resources) -> GpuNeed | None:
    """`gpuscale.io/gpu-milli: m` → m on one device; `nvidia.com/gpu: k` → k whole devices; else None."""
    milli = requests.get(GPU_MILLI)
    if milli > 0:
        return GpuNeed(milli, 1)
    whole = requests.get(NVIDIA_GPU)
    return GpuNeed(MILLI, whole) if whole > 0 else None


def device_count(allocatable: Resources) -> int:
    """Devices a node has for per-device accounting: its `gpuscale.io/gpu-milli` in whole GPUs (0: none)."""
    return allocatable.get(GPU_MILLI) // MILLI


def annotated_devices(pod: Pod) -> tuple[int, ...] | None:
    """The pod's `gpuscale.io/gpu-index` annotation, or None when absent or malformed (then it is reconstructed)."""
    text = pod.annotations.get(DEVICE_ANNOTATION)
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        return None


def pod_shape(requests: Resources) -> PodShape | None:
    """The scorers' view of a pod (milli-CPU, MiB, per-device milli × devices); None if no scorer can take it."""
    need = gpu_need(requests)
    try:
        return PodShape(cpu_milli=requests.get(CPU), memory_mib=requests.get(MEMORY) // MIB,
                        gpu_milli=need.milli if need else 0, gpu_count=need.count if need else 0)
    except ValueError:
        return None


class RequestKinds:
    """`gpu_need` and `pod_shape` of each distinct request, computed once: pods repeat a handful of request shapes,
    and both the engine's `WhatIf` and the twin's scheduler ask per pod."""

    __slots__ = ("_needs", "_shapes")

    def __init__(self) -> None:
        self._needs: dict[Resources, GpuNeed | None] = {}
        self._shapes: dict[Resources, PodShape | None] = {}

    def need(self, requests: Resources) -> GpuNeed | None:
        try:  # one lookup: hashing a request is most of the cost
            return self._needs[requests]
        except KeyError:
            need = self._needs[requests] = gpu_need(requests)
            return need

    def shape(self, requests: Resources) -> PodShape | None:
        """The scorers' view of a GPU pod; None for a pod that needs no GPU device (or that no scorer can take)."""
        try:
            return self._shapes[requests]
        except KeyError:
            shape = self._shapes[requests] = pod_shape(requests) if self.need(requests) is not None else None
            return shape


class GpuDevices:
    """Free milli per device of every row (rows × width); rows with `count` 0 have no devices."""

    __slots__ = ("count", "free")

    def __init__(self, count: IntArray, free: IntArray) -> None:
        self.count = count
        self.free = free

    @staticmethod
    def of(capacity: Sequence[Resources], width: int | None = None) -> GpuDevices:
        counts: dict[int, int] = {}  # nodes of one pool share their capacity object: count its devices once
        count = np.array([counts[id(c)] if id(c) in counts else counts.setdefault(id(c), device_count(c))
                          for c in capacity], dtype=np.int64)
        width = max(width or 0, int(count.max(initial=0)))
        free = np.where(np.arange(width) < count[:, None], MILLI, 0).astype(np.int64)
        return GpuDevices(count, free)

    def copy(self) -> GpuDevices:
        return GpuDevices(self.count, self.free.copy())

    def extended(self, capacity: Sequence[Resources]) -> GpuDevices:
        extra = GpuDevices.of(capacity, self.free.shape[1])
        free = self.free
        if extra.free.shape[1] > free.shape[1]:
            free = np.pad(free, ((0, 0), (0, extra.free.shape[1] - free.shape[1])))
        return GpuDevices(np.concatenate([self.count, extra.count]), np.vstack([free, extra.free]))

    def __bool__(self) -> bool:
        return bool(np.count_nonzero(self.count))

    # ------------------------------------------------------------------------------------------------- queries
    def fits(self, need: GpuNeed, rows: IntArray) -> BoolArray:
        """Which of `rows` (indices) can take `need` on their devices; rows without devices pass."""
        if need.count == 1 and self.free.shape[1] == 1:  # one device per row (the twin's T4 nodes): no reduction
            ok = self.free[rows, 0] >= need.milli
        else:
            free = self.free[rows]
            ok = (free >= need.milli).any(axis=1) if need.count == 1 else (free == MILLI).sum(axis=1) >= need.count
        result: BoolArray = ok | (self.count[rows] == 0)
        return result

    def can_take(self, row: int, need: GpuNeed) -> bool:
        if self.count[row] == 0:
            return True
        free = self.free[row]
        if need.count == 1:
            return bool(np.count_nonzero(free >= need.milli))
        return int(np.count_nonzero(free == MILLI)) >= need.count

    def best_fit(self, row: int, need: GpuNeed) -> tuple[int, ...]:
        """Open-Gpu-Share's `best` pick: a fraction on the tightest device that fits (lowest index on ties), whole
        GPUs on the lowest-index free devices. Empty if the row cannot take it."""
        free = self.free[row]
        if need.fractional:
            fitting = (free >= need.milli).nonzero()[0]
            return (int(fitting[free[fitting].argmin()]),) if len(fitting) else ()
        whole = (free == MILLI).nonzero()[0]
        return tuple(int(g) for g in whole[:need.count]) if len(whole) >= need.count else ()

    def may_hold(self, row: int, need: GpuNeed, held: Sequence[int], *, free: bool = True) -> bool:
        """Whether `held` can be `need`'s devices on `row`: `count` distinct devices of the row (with `free`, each
        with `milli` free). An annotation that fails this is not honoured (the devices are reconstructed)."""
        return (len(held) == need.count and len(set(held)) == need.count
                and all(0 <= d < self.count[row] and (not free or self.free[row, d] >= need.milli) for d in held))

    # ------------------------------------------------------------------------------------------------ mutation
    def take(self, row: int, need: GpuNeed, devices: Sequence[int]) -> None:
        for d in devices:
            self.free[row, d] -= need.milli

    def give(self, row: int, need: GpuNeed, devices: Sequence[int]) -> None:
        for d in devices:
            self.free[row, d] = min(self.free[row, d] + need.milli, MILLI)

    def _spill(self, row: int, amount: int) -> None:
        """Take `amount` milli from the devices with most free (the reconstruction could not place a pod whole)."""
        for d in np.argsort(-self.free[row], kind="stable").tolist():
            part = min(int(self.free[row, d]), amount)
            self.free[row, d] -= part
            amount -= part

    def load(self, rows: Sequence[int] | IntArray, needs: Sequence[GpuNeed], pods: Sequence[Pod]) -> None:
        """Reconstruct the devices of device-accounted rows from their bound GPU pods (`pods[i]` with `needs[i]` on
        `rows[i]`), in the module docstring's order: annotated pods, whole-GPU pods (each row's lowest-index free
        devices), then fractions from the largest down on the tightest device that fits.

        Vectorised over rows: one NumPy round per position in a row's list of fractions (pods of equal milli are
        interchangeable, so their order does not matter)."""
        if not len(rows):
            return
        at = np.asarray(rows, dtype=np.int64)
        milli = np.array([n.milli for n in needs], dtype=np.int64)
        count = np.array([n.count for n in needs], dtype=np.int64)
        placed = np.zeros(len(at), dtype=bool)
        for i, pod in enumerate(pods):
            if DEVICE_ANNOTATION not in pod.annotations:
                continue
            held, row = annotated_devices(pod), int(at[i])
            if held is not None and self.may_hold(row, needs[i], held):
                self.take(row, needs[i], held)
                placed[i] = True
        whole = ~placed & (milli == MILLI)
        if whole.any():
            want = np.bincount(at[whole], weights=count[whole], minlength=len(self.count)).astype(np.int64)
            full = self.free == MILLI
            taken = full & (np.cumsum(full, axis=1) <= want[:, None])
            self.free[taken] = 0
            short = want - taken.sum(axis=1)
            for row in np.flatnonzero(short > 0).tolist():
                self._spill(row, int(short[row]) * MILLI)
        fractions = np.flatnonzero(~placed & (milli < MILLI))
        if not len(fractions):
            return
        order = fractions[np.lexsort((-milli[fractions], at[fractions]))]
        by_row, amounts = at[order], milli[order]
        first = np.flatnonzero(np.concatenate([[True], by_row[1:] != by_row[:-1]]))
        position = np.arange(len(order)) - np.repeat(first, np.diff(np.append(first, len(order))))
        for j in range(int(position.max()) + 1):
            round_rows, round_milli = by_row[position == j], amounts[position == j]
            free = self.free[round_rows]
            fits = free >= round_milli[:, None]
            device = np.argmin(np.where(fits, free, MILLI + 1), axis=1)
            ok = fits.any(axis=1)
            self.free[round_rows[ok], device[ok]] -= round_milli[ok]
            for row, amount in zip(round_rows[~ok].tolist(), round_milli[~ok].tolist(), strict=True):
                self._spill(row, amount)


FRAG_POLICIES = ("fgd", "gpuscale")
"""Placement policies `FragChooser` offers: deterministic, fragmentation-aware."""


def class_counts(workload: Mapping[PodShape, int]) -> Counter[ClassKey]:
    """Pods per class (`class_key`) of a workload counted per shape, shapes counted zero or less left out."""
    counts: Counter[ClassKey] = Counter()
    for shape, n in workload.items():
        if n > 0:
            counts[class_key(shape)] += n
    return counts


class FragChooser:
    """Fragmentation-aware node and device choice with a placement scorer (`fgd` or `gpuscale`).

    `workload` counts the GPU pod shapes FGD measures fragmentation against (its typical pods: the most popular
    classes up to 95 % of the pods). Scores are computed on a `ClusterState` view of the candidates only.
    A caller whose workload changes at every placement keeps class counts and a `TypicalTables` and builds its
    choosers with `of_classes`, which does not redo the parts of the table that only the class list decides.
    """

    def __init__(self, policy: str, workload: Counter[PodShape]) -> None:
        counts = class_counts(workload)
        self._use(policy, FragTable(typical_classes_of(counts), ("",)) if counts else None)

    @classmethod
    def of_classes(cls, policy: str, counts: Mapping[ClassKey, int], tables: TypicalTables,
                   moved: Iterable[ClassKey] | None = None) -> FragChooser:
        """The chooser for a workload given as pods per class (`class_key`), its table from `tables` (`moved`: the
        classes whose counts may have changed since its last table, if the caller knows them)."""
        chooser = cls.__new__(cls)
        chooser._use(policy, tables.table(counts, moved))
        return chooser

    def _use(self, policy: str, table: FragTable | None) -> None:
        self.table = table
        scorer = {"fgd": FgdScorer, "gpuscale": GpuscaleScorer}[policy]
        self.scorer: FgdScorer | None = scorer(table) if table is not None else None

    def scores(self, shape: PodShape, cpu_free: IntArray, devices: GpuDevices, rows: IntArray) -> IntArray | None:
        """Score of `shape` on each of `rows` (higher is better; each depends on that row's state only), or None
        when there is no workload to measure fragmentation against (the caller then falls back)."""
        if self.scorer is None:
            return None
        view = ClusterState.view(cpu_free[rows], devices.free[rows], devices.count[rows])
        return self.scorer.score(view, shape, np.arange(len(rows), dtype=np.int64), _NO_DRAWS)

    def pick(self, shape: PodShape, cpu_free: IntArray, devices: GpuDevices, row: int) -> tuple[int, ...]:
        """The devices `shape` takes on `row` under this policy (empty on a row without devices)."""
        if self.scorer is None or not shape.uses_gpu or not devices.count[row]:
            return ()
        if not shape.is_fractional:  # the lowest-index free devices, as the scorers' `lowest_free_gpus`
            return tuple(int(g) for g in (devices.free[row] == MILLI).nonzero()[0][:shape.gpu_count])
        rows = np.array([row], dtype=np.int64)
        view = ClusterState.view(cpu_free[rows], devices.free[rows], devices.count[rows])
        return self.scorer.pick_gpus(view, shape, 0, _NO_DRAWS)

    def choose(self, shape: PodShape, cpu_free: IntArray, devices: GpuDevices, rows: IntArray,
               rank: Callable[[IntArray], Ranks]) -> tuple[int, tuple[int, ...]] | None:
        """The best of `rows` (all feasible, in ascending order) for `shape` and the devices to use there: highest
        score, then lowest rank, `rank(tied)` giving the ranks of the tied rows (asked only when there is a tie;
        any keys whose first minimum is the row ranked first will do). None when there is no workload to measure
        against.

        A choice that scores cannot decide (`unscored`: one row, or rows all alike) is made without scoring; the
        others are `choose_by_scores`."""
        if self.scorer is None or not len(rows):
            return None
        chosen = self.unscored(shape, cpu_free, devices, rows, rank)
        return chosen if chosen is not None else self.choose_by_scores(shape, cpu_free, devices, rows, rank)

    @staticmethod
    def unscored(shape: PodShape, cpu_free: IntArray, devices: GpuDevices, rows: IntArray,
                 rank: Callable[[IntArray], Ranks]) -> tuple[int, tuple[int, ...]] | None:
        """`choose`'s answer when scores do not decide it, else None; the same for every workload that is not empty,
        so a caller may ask before it builds a chooser (the twin's scheduler: ≈ 30 % of its choices).

        Scores do not decide on a single row, nor on rows whose states the scorers read (free CPU, free milli per
        device, device count) are all alike: each row then scores the same, every row ties and the lowest rank
        wins. The devices are then the policy's pick without scores too — a fraction's only device, or the
        lowest-index free devices for whole GPUs — except a fraction on rows of several devices, whose device is
        picked by score (None)."""
        if shape.is_fractional and devices.free.shape[1] > 1:
            return None
        if len(rows) == 1:
            row = int(rows[0])
        else:
            cpu = cpu_free[rows]
            if np.count_nonzero(cpu != cpu[0]):
                return None
            free = devices.free[rows]
            if (free != free[0]).any():
                return None
            count = devices.count[rows]
            if (count != count[0]).any():
                return None
            row = int(rows[int(np.argmin(rank(rows)))])
        if not shape.uses_gpu or not devices.count[row]:
            return row, ()
        if shape.is_fractional:  # the row's only device
            return row, (0,)
        return row, tuple(int(g) for g in (devices.free[row] == MILLI).nonzero()[0][:shape.gpu_count])

    def choose_by_scores(self, shape: PodShape, cpu_free: IntArray, devices: GpuDevices, rows: IntArray,
                         rank: Callable[[IntArray], Ranks]) -> tuple[int, tuple[int, ...]] | None:
        """`choose` by scoring `rows`, whether or not scores decide (`unscored` may have answered before).

        A fractional pod on a few rows is scored by the scorer's device matrix directly: the chosen row's devices
        are read off its row of the matrix rather than scored again."""
        if self.scorer is None or not len(rows):
            return None
        if devices.free.shape[1] == 1:  # one device per row (the twin's T4 nodes)
            keys = self.scorer.one_device_scores(cpu_free[rows], devices.free[rows, 0], devices.count[rows], shape)
            row = int(rows[_best(keys, rows, rank)])
            if shape.is_fractional:  # the matrix's only column
                return row, (0,) if devices.count[row] else ()
            return row, self.pick(shape, cpu_free, devices, row)
        if shape.is_fractional and len(rows) <= DEDUPE_ABOVE:
            view = ClusterState.view(cpu_free[rows], devices.free[rows], devices.count[rows])
            matrix = self.scorer.device_matrix(view, shape, np.arange(len(rows), dtype=np.int64))
            at = _best(matrix.max(axis=1), rows, rank)
            row = int(rows[at])
            return row, (int(np.argmax(matrix[at])),) if devices.count[row] else ()
        scores = self.scores(shape, cpu_free, devices, rows)
        assert scores is not None
        row = int(rows[_best(scores, rows, rank)])
        return row, self.pick(shape, cpu_free, devices, row)


def _best(scores: IntArray, rows: IntArray, rank: Callable[[IntArray], Ranks]) -> int:
    """Position of the highest score, ties to the lowest `rank` of the tied rows."""
    best = (scores == scores[scores.argmax()]).nonzero()[0]
    return int(best[0]) if len(best) == 1 else int(best[rank(rows[best]).argmin()])


class _NoDraws:
    """FGD and gpuscale never draw; a random policy is not offered for the engine and the twin."""

    def intn(self, n: int) -> int:
        raise AssertionError("fragmentation-aware placement is deterministic")


_NO_DRAWS = _NoDraws()
