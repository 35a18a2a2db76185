"""FGD, Fragmentation Gradient Descent (Weng et al., ATC'23): place a pod where it grows fragmentation least.

Score = floor(100·σ((F(before) − F(after))/1000)) with F the node's fragment amount against the typical pods
(`frag.py`); ΔF = 0 scores exactly 50, one point is ≈ 40 milli of ΔF near 0. A fractional pod is tried on every
device that fits it (free ones included); the node scores its best device, and the device chosen is the first
reaching that floored score. Whole-GPU and CPU-only pods have one outcome per node (the lowest-index free devices).

Vectorised over candidate nodes × devices × classes: instead of rebuilding every hypothetical node, each class's
"devices that fit" count and "milli on devices too small" sum are adjusted for the one device that changes.
"""

from __future__ import annotations

import numpy as np

from gpuscale.engine.placement.frag import FloatArray, FragTable
from gpuscale.engine.placement.scorers import MAX_NODE_SCORE, RandomSource
from gpuscale.engine.placement.shapes import MILLI, PodShape
from gpuscale.engine.placement.state import ClusterState, IntArray


def frag_score(before: FloatArray, after: FloatArray) -> IntArray:
    """The artifact's int64(sigmoid((before − after)/1000) · 100), in its float operation order."""
    x = (before - after) / 1000.0
    scores: IntArray = (1.0 / (1.0 + np.exp(-x)) * float(MAX_NODE_SCORE)).astype(np.int64)
    return scores


DEDUPE_ABOVE = 48
"""`score` scores each distinct node state once when given more nodes than this."""


def _distinct_rows(key: IntArray) -> tuple[IntArray, IntArray]:
    """`np.unique(key, axis=0, return_index=True, return_inverse=True)` without the values: the first row of each
    distinct value, and each row's position among those. A stable lexsort and a compare of neighbours, which is several
    times cheaper than `unique`'s sort of rows viewed as opaque bytes (the same groups, in the same order)."""
    order = np.lexsort(key.T[::-1])
    ordered = key[order]
    starts = np.empty(len(order), dtype=np.bool_)
    starts[:1] = True
    np.any(ordered[1:] != ordered[:-1], axis=1, out=starts[1:])
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    first: IntArray = order[starts]
    return first, inverse


class FgdScorer:
    name = "fgd"
    deterministic = True

    def __init__(self, table: FragTable) -> None:
        self.table = table

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray:
        if len(nodes) > DEDUPE_ABOVE:
            # FGD's score depends only on (model, free CPU, multiset of free device milli), subclasses' also on
            # the device count: score each distinct state once. Early on most nodes are empty and alike.
            key = np.column_stack((state.model[nodes], state.gpu_count[nodes], state.cpu_free[nodes],
                                   np.sort(state.gpu_free[nodes], axis=1)))
            first, inverse = _distinct_rows(key)
            return self._scores(state, pod, nodes[first])[inverse]
        return self._scores(state, pod, nodes)

    def _scores(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        if pod.is_fractional:
            best: IntArray = self.device_matrix(state, pod, nodes).max(axis=1)
            return best
        return self._whole_scores(state, pod, nodes)

    def pick_gpus(self, state: ClusterState, pod: PodShape, node: int, rng: RandomSource) -> tuple[int, ...]:
        if pod.is_fractional:
            return (int(np.argmax(self.device_matrix(state, pod, np.array([node], dtype=np.int64))[0])),)
        return state.lowest_free_gpus(node, pod.gpu_count)

    def device_matrix(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        """(nodes × devices) for a fractional pod: a node scores its row's maximum and takes the device of the row's
        first maximum. Each row depends on its node's state only, so a caller that scored candidates this way
        has the chosen node's pick already."""
        return self.device_scores(state, pod, nodes)

    def device_scores(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        """(nodes × devices) scores of a fractional pod on each device; −1 where the device cannot take it."""
        free = state.gpu_free[nodes]
        before, row, dev, _, after = self.landing_frag(state.cpu_free[nodes], free, state.gpu_left[nodes],
                                                       state.model[nodes], pod)
        scores = np.full(free.shape, -1, dtype=np.int64)
        scores[row, dev] = frag_score(before[row], after)
        return scores

    def device_frag(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> tuple[FloatArray, FloatArray]:
        """F of each node now (nodes) and after a fractional pod lands on each device (nodes × devices).

        Values for devices that cannot take the pod are meaningless (they equal `before`, so ΔF = 0); mask them
        with `gpu_free >= gpu_milli`.
        """
        free = state.gpu_free[nodes]
        before, row, dev, _, landed = self.landing_frag(state.cpu_free[nodes], free, state.gpu_left[nodes],
                                                        state.model[nodes], pod)
        after = np.repeat(before[:, None], free.shape[1], axis=1)
        after[row, dev] = landed
        return before, after

    def landing_frag(self, cpu: IntArray, free: IntArray, idle: IntArray, model: IntArray,
                     pod: PodShape) -> tuple[FloatArray, IntArray, IntArray, IntArray, FloatArray]:
        """F of nodes (free CPU, free milli per device, idle milli, model index) now, and after a fractional pod
        lands on each device that can take it: (before, row, device, milli left on it, after), the last four one
        entry per such device. Only those devices are evaluated: the matrix is as wide as the widest node, so most
        of its cells are devices a node does not have.

        Each class's "devices that fit" count and "milli on devices too small" sum are adjusted for the one device
        that changes, rather than recounted."""
        t = self.table
        n = len(cpu)
        if free.shape[1] == 1:  # one device per node (the twin's T4 nodes): a landing is a node state of its own
            g = free[:, 0]
            row = (g >= pod.gpu_milli).nonzero()[0]
            left = g[row] - pod.gpu_milli
            both = t.frag_of_one_device(np.concatenate((cpu, cpu[row] - pod.cpu_milli)), np.concatenate((g, left)),
                                        np.concatenate((model, model[row])) if len(t.access) > 1 else model)
            return both[:n], row, np.zeros(len(row), dtype=np.int64), left, both[n:]
        fits, fit_count, small = t.device_stats(free)
        row, dev = np.nonzero(free >= pod.gpu_milli)
        g = free[row, dev]
        left = g - pod.gpu_milli
        was, now = fits[row, dev], left[:, None] >= t.milli
        fit_after = fit_count[row] - was + now
        small_after = small[row] - np.where(was, 0, g[:, None]) + np.where(now, 0, left[:, None])
        # F of every state is computed on its own (no sum runs across states): nodes now and after, in one call.
        both = t.frag(np.concatenate((cpu, cpu[row] - pod.cpu_milli)),
                      np.concatenate((idle, idle[row] - pod.gpu_milli)),
                      np.concatenate((model, model[row])) if len(t.access) > 1 else model,
                      np.concatenate((fit_count, fit_after)), np.concatenate((small, small_after)))
        return both[:n], row, dev, left, both[n:]

    def whole_frag(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> tuple[FloatArray, FloatArray]:
        """F of each node now and after a whole-GPU or CPU-only pod lands on it (lowest-index free devices).

        The devices taken go from completely free to empty: for each GPU class they stop fitting and add nothing
        to the milli too small for it (a CPU-only class "fits" every device, empty ones too), so the node after is
        its counts with `taken` fewer fitting devices per GPU class, `taken` × 1000 less idle, the same small milli.
        """
        t = self.table
        free, cpu, idle, model = state.gpu_free[nodes], state.cpu_free[nodes], state.gpu_left[nodes], state.model[nodes]
        if free.shape[1] == 1:  # one device per node: the node after is a node state of its own
            g = free[:, 0]
            after = g - np.minimum(state.full_free[nodes], pod.gpu_count) * MILLI if pod.uses_gpu else g
            both = t.frag_of_one_device(np.concatenate((cpu, cpu - pod.cpu_milli)), np.concatenate((g, after)),
                                        np.concatenate((model, model)) if len(t.access) > 1 else model)
            return both[:len(cpu)], both[len(cpu):]
        fit_count, small = t.stats(free)
        if pod.uses_gpu:  # whole GPUs (fractions go through `landing_frag`)
            taken = np.minimum(state.full_free[nodes], pod.gpu_count)
            fit_after, idle_after = fit_count - taken[:, None] * t.gpu_class, idle - taken * MILLI
        else:
            fit_after, idle_after = fit_count, idle
        n = len(cpu)  # each state on its own, in one call
        both = t.frag(np.concatenate((cpu, cpu - pod.cpu_milli)), np.concatenate((idle, idle_after)),
                      np.concatenate((model, model)) if len(t.access) > 1 else model,
                      np.concatenate((fit_count, fit_after)), np.concatenate((small, small)))
        return both[:n], both[n:]

    def _whole_scores(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        return frag_score(*self.whole_frag(state, pod, nodes))

    def one_device_scores(self, cpu: IntArray, gpu: IntArray, count: IntArray, pod: PodShape) -> IntArray:
        """`score` of nodes of one device at most (free CPU, the device's free milli, devices: 1, or 0 for a node
        without), one model, as arrays: the same values as a view of them scored, with the view, its indexing and
        the (nodes × 1) device matrix left out (the twin's T4 nodes, ≈ 20 candidates per choice). Past
        `DEDUPE_ABOVE` nodes, each distinct state is scored once, as `score` does."""
        n = len(cpu)
        if n > DEDUPE_ABOVE:
            first, inverse = _distinct_rows(np.column_stack((count, cpu, gpu)))
            if len(first) < n:  # all distinct: scored as they are (scoring them "once each" again would not end)
                scores: IntArray = self.one_device_scores(cpu[first], gpu[first], count[first], pod)[inverse]
                return scores
        t = self.table
        if pod.is_fractional:
            fit = gpu >= pod.gpu_milli
            every = np.count_nonzero(fit) == len(fit)
            row = None if every else fit.nonzero()[0]
            left = gpu - pod.gpu_milli if every else gpu[row] - pod.gpu_milli
            cpu_after = cpu - pod.cpu_milli if every else cpu[row] - pod.cpu_milli
        else:
            row = None
            left = gpu - np.minimum(gpu == MILLI, pod.gpu_count) * MILLI if pod.uses_gpu else gpu
            cpu_after = cpu - pod.cpu_milli
        states = np.concatenate((cpu, cpu_after))
        both = t.frag_of_one_device(states, np.concatenate((gpu, left)),  # the model is read with several only
                                    np.zeros(len(states), dtype=np.int64) if len(t.access) > 1 else states)
        before, after = both[:n], both[n:]
        if not pod.is_fractional:
            return self._one_device_whole(frag_score(before, after), gpu, pod)
        if row is None:
            return self._one_device_landed(frag_score(before, after), left, count * MILLI - gpu)
        scores = np.full(n, self._UNFIT, dtype=np.int64)
        scores[row] = self._one_device_landed(frag_score(before[row], after), left, count[row] * MILLI - gpu[row])
        return scores

    _UNFIT = -1
    """`one_device_scores` of a node whose device cannot take a fractional pod (the device matrix's fill)."""

    def _one_device_landed(self, score: IntArray, left: IntArray, used: IntArray) -> IntArray:
        """A fractional pod's score where it lands, from FGD's (`left`: milli left on the device, `used`: the node's
        GPU milli in use before)."""
        return score

    def _one_device_whole(self, score: IntArray, gpu: IntArray, pod: PodShape) -> IntArray:
        """A whole-GPU or CPU-only pod's score from FGD's (`gpu`: the device's free milli)."""
        return score
