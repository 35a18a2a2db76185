"""Our policy: FGD's score, with packing-aware tie-breaks where FGD leaves ties to a random node order.

FGD floors 100·σ(ΔF/1000), so one score point spans ≈ 40 milli of fragmentation change and most decisions are
ties, which the artifact settles by a fixed random node rank (first fit along a random order). That coarseness is
useful — ranking by the exact ΔF is a full point worse — but the order inside a tie can be smarter:

- fractional pods: the device left with the least free milli (online best-fit bin packing in the GPU dimension:
  slivers, not whole GPUs, are what stays idle when the cluster fills), then the node with the most GPU milli
  already allocated (fill started nodes first), then rank;
- CPU-only pods: the node with the least idle GPU milli (CPU next to busy GPUs is CPU no GPU pod needs), then rank;
- whole-GPU pods: rank, as FGD (consolidating them measured no better).

Scores are lexicographic keys packed into int64 — FGD's score in the high bits — not values in [0, 100].
Numbers (openb default trace, seeds 42–51) are in docs/fgd.md.
"""

from __future__ import annotations

import numpy as np

from gpuscale.engine.placement.fgd import FgdScorer, frag_score
from gpuscale.engine.placement.shapes import MILLI, PodShape
from gpuscale.engine.placement.state import ClusterState, IntArray

_PRIMARY = 1 << 40
_SECONDARY = 1 << 20
"""Tie-break fields hold < 2²⁰ (milli of one device, milli of one node's GPUs), so the FGD score dominates."""
_NOT_FIT = np.iinfo(np.int64).min
"""Key of a device that cannot take the pod."""


class GpuscaleScorer(FgdScorer):
    name = "gpuscale"

    def device_keys(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        """(nodes × devices) keys of a fractional pod: FGD score, then tightest device, then node usage."""
        free, idle = state.gpu_free[nodes], state.gpu_left[nodes]
        before, row, dev, left, after = self.landing_frag(state.cpu_free[nodes], free, idle, state.model[nodes], pod)
        used = state.gpu_count[nodes][row] * MILLI - idle[row]
        keys = np.full(free.shape, _NOT_FIT, dtype=np.int64)
        keys[row, dev] = frag_score(before[row], after) * _PRIMARY + (MILLI - left) * _SECONDARY + used
        return keys

    def device_matrix(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        return self.device_keys(state, pod, nodes)

    _UNFIT = _NOT_FIT

    def _one_device_landed(self, score: IntArray, left: IntArray, used: IntArray) -> IntArray:
        keys: IntArray = score * _PRIMARY + (MILLI - left) * _SECONDARY + used  # as `device_keys`
        return keys

    def _one_device_whole(self, score: IntArray, gpu: IntArray, pod: PodShape) -> IntArray:
        primary: IntArray = score * _PRIMARY  # as `_whole_scores`, whose `gpu_left` is the one device's free milli
        if pod.uses_gpu:
            return primary
        keys: IntArray = primary + (_SECONDARY - 1 - gpu)
        return keys

    def _whole_scores(self, state: ClusterState, pod: PodShape, nodes: IntArray) -> IntArray:
        primary: IntArray = super()._whole_scores(state, pod, nodes) * _PRIMARY
        if pod.uses_gpu:
            return primary
        keys: IntArray = primary + (_SECONDARY - 1 - state.gpu_left[nodes])
        return keys
