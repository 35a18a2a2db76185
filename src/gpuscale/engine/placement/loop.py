"""The packing experiment's inner loop: submit pods one at a time, place each or record it as failed.

Per pod: the feasible nodes (kube fit + GPU filter); one feasible node is taken without scoring; otherwise the
scorer's highest score wins and ties go to the lowest rank (the artifact's fork of kube's `selectHost`, a fixed
random node order). Then the scorer picks devices, the node is updated and one sample is recorded: arrived GPU
milli (failed pods count), allocated milli, fragment amount and idle milli.

Speed: feasibility and deterministic scores depend only on a node's state and the pod's shape, and a placement
changes one node. So both are cached per pod shape and recomputed only for nodes whose version moved since; the
per-node fragment amount is cached the same way. Traces have < 400 distinct shapes, so most pods rescore a
handful of nodes. Pure: the caller passes the nodes, the pod order, the ranks and the random source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.frag import FragTable
from gpuscale.engine.placement.scorers import RandomSource, Scorer
from gpuscale.engine.placement.shapes import NodeSpec, PodShape
from gpuscale.engine.placement.state import ClusterState, IntArray

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class PackTrace:
    """One sample per submitted pod, taken after its attempt. Milli values are cluster totals."""

    node: IntArray
    """Index (in the node list given) of the node each pod went to; −1 if it failed."""
    arrived_milli: IntArray
    allocated_milli: IntArray
    frag_milli: FloatArray
    idle_milli: FloatArray
    """Σ over nodes and typical classes of weight × idle milli (the denominator of the artifact's frag ratio)."""
    total_gpu_milli: int

    @property
    def failed(self) -> int:
        return int((self.node < 0).sum())


class _ShapeCache:
    __slots__ = ("feasible", "score", "stamp")

    def __init__(self, n: int) -> None:
        self.feasible = np.zeros(n, dtype=np.bool_)
        self.score = np.zeros(n, dtype=np.int64)
        self.stamp = np.full(n, -1, dtype=np.int64)


def choose_node(state: ClusterState, scorer: Scorer, pod: PodShape, cache: _ShapeCache, rng: RandomSource) -> int:
    """Refresh the shape's cache for changed nodes, then return the chosen node (−1: none feasible)."""
    stale = np.flatnonzero(state.version != cache.stamp)
    if stale.size:
        feasible = state.feasible(pod, stale)
        cache.feasible[stale] = feasible
        cache.stamp[stale] = state.version[stale]
        fresh = stale[feasible]
        if scorer.deterministic and fresh.size:
            cache.score[fresh] = scorer.score(state, pod, fresh, rng)
    candidates = np.flatnonzero(cache.feasible)
    if candidates.size <= 1:
        return int(candidates[0]) if candidates.size else -1
    scores = cache.score[candidates] if scorer.deterministic else scorer.score(state, pod, candidates, rng)
    best = candidates[scores == scores.max()]
    return int(best[np.argmin(state.rank[best])]) if best.size > 1 else int(best[0])


def pack(nodes: Sequence[NodeSpec], ranks: Sequence[int], pods: Sequence[PodShape], scorer: Scorer,
         table: FragTable, rng: RandomSource) -> PackTrace:
    """Submit `pods` in order to empty `nodes`; ties go to the lowest of `ranks`."""
    state = ClusterState.of(nodes, ranks)
    if table.access.shape[0] != len(state.models):
        raise ValueError("the fragment table must be built for the cluster's models (ClusterState.models)")
    caches: dict[PodShape, _ShapeCache] = {}
    frag = table.frag_of_nodes(state.cpu_free, state.gpu_free, state.model)
    total = int(state.gpu_left.sum())
    count = len(pods)
    placed = np.full(count, -1, dtype=np.int64)
    arrived = np.zeros(count, dtype=np.int64)
    allocated = np.zeros(count, dtype=np.int64)
    frag_milli = np.zeros(count, dtype=np.float64)
    idle_milli = np.zeros(count, dtype=np.float64)
    arrived_sum, idle = 0, total
    for i, pod in enumerate(pods):
        arrived_sum += pod.total_gpu_milli
        cache = caches.get(pod)
        if cache is None:
            cache = caches[pod] = _ShapeCache(state.n)
        node = choose_node(state, scorer, pod, cache, rng)
        if node >= 0:
            gpus = scorer.pick_gpus(state, pod, node, rng) if pod.uses_gpu else ()
            state.place(node, pod, gpus)
            idle -= pod.total_gpu_milli
            one = np.array([node], dtype=np.int64)
            frag[node] = table.frag_of_nodes(state.cpu_free[one], state.gpu_free[one], state.model[one])[0]
            placed[i] = node
        arrived[i] = arrived_sum
        allocated[i] = total - idle
        frag_milli[i] = frag.sum()
        idle_milli[i] = idle * table.weight_sum
    return PackTrace(node=placed, arrived_milli=arrived, allocated_milli=allocated, frag_milli=frag_milli,
                     idle_milli=idle_milli, total_gpu_milli=total)
