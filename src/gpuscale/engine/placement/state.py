"""The cluster as arrays, one row per node: what the vectorised scorers read and the packing loop updates.

`ClusterState` is the one mutable object of the package. It belongs to a single packing run (or to one
`score_node` call) and changes only through `place`; each change bumps the node's `version`, which is how the
loop knows which cached scores are stale. Arrays: free CPU/memory/pod slots, a (nodes × devices) matrix of free
GPU milli (devices a node does not have are 0, so they never fit a GPU pod and never count as idle), each node's
GpuClustering tag counts, its model index and its tie-break rank (lower wins).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.shapes import MAX_GPUS_PER_NODE, MILLI, NodeSpec, NodeState, PodShape, model_allows

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class ClusterState:
    """Free resources of every node. Build with `of(specs, ranks)` (empty nodes) or `from_states(states)`."""

    def __init__(self, states: Sequence[NodeState], ranks: Sequence[int]) -> None:
        if len(states) != len(ranks):
            raise ValueError("one rank per node")
        self.specs = tuple(s.spec for s in states)
        self.n = len(states)
        self.width = max([MAX_GPUS_PER_NODE, *(s.spec.gpu_count for s in states)])
        self.models: tuple[str, ...] = tuple(sorted({s.spec.gpu_model for s in states}))
        self.model = np.array([self.models.index(s.spec.gpu_model) for s in states], dtype=np.int64)
        self.rank = np.array(ranks, dtype=np.int64)
        self.gpu_count = np.array([s.spec.gpu_count for s in states], dtype=np.int64)
        self.cpu_free = np.array([s.cpu_free_milli for s in states], dtype=np.int64)
        self.mem_free = np.array([s.memory_free_mib for s in states], dtype=np.int64)
        self.pods_free = np.array([s.pods_free for s in states], dtype=np.int64)
        self.gpu_free = np.zeros((self.n, self.width), dtype=np.int64)
        for i, s in enumerate(states):
            self.gpu_free[i, : len(s.gpu_free_milli)] = s.gpu_free_milli
        self.gpu_left = self.gpu_free.sum(axis=1)
        self.full_free = (self.gpu_free == MILLI).sum(axis=1)
        self.tags = np.zeros((self.n, self.width + 1), dtype=np.int64)
        for i, s in enumerate(states):
            self.tags[i, : len(s.gpu_tags)] = s.gpu_tags
        self.version = np.zeros(self.n, dtype=np.int64)
        self._model_masks: dict[tuple[str, ...], BoolArray] = {}

    @classmethod
    def of(cls, specs: Sequence[NodeSpec], ranks: Sequence[int] | None = None) -> ClusterState:
        """Empty nodes; ties go to the lowest rank (default: list order)."""
        return cls([NodeState.empty(s) for s in specs], range(len(specs)) if ranks is None else ranks)

    @classmethod
    def from_states(cls, states: Sequence[NodeState], ranks: Sequence[int] | None = None) -> ClusterState:
        return cls(states, range(len(states)) if ranks is None else ranks)

    @classmethod
    def view(cls, cpu_free: IntArray, gpu_free: IntArray, gpu_count: IntArray) -> ClusterState:
        """Nodes given as arrays (free milli-CPU, free milli per device, devices), one GPU model, ranks in order,
        no GpuClustering tags: what the autoscaler's tables hand the FGD-style scorers (they read nothing else)."""
        state = cls.__new__(cls)
        n, width = gpu_free.shape
        state.specs = ()
        state.n = n
        state.width = width
        state.models = ("",)
        state.model, state.rank, state.mem_free, state.pods_free, state.tags, state.version = _view_constants(n, width)
        state.gpu_count = gpu_count
        state.cpu_free = cpu_free
        state.gpu_free = gpu_free
        if width == 1:  # one device per node (the twin's T4 nodes): its column, no reductions
            state.gpu_left = gpu_free[:, 0].copy()
            state.full_free = (state.gpu_left == MILLI).astype(np.int64)
        else:
            state.gpu_left = gpu_free.sum(axis=1)
            state.full_free = (gpu_free == MILLI).sum(axis=1)
        state._model_masks = {}
        return state

    def model_mask(self, models: tuple[str, ...]) -> BoolArray:
        """Nodes whose GPU model a pod with this model list may use (cached per list)."""
        mask = self._model_masks.get(models)
        if mask is None:
            allowed = np.array([model_allows(models, m) for m in self.models], dtype=np.bool_)
            mask = allowed[self.model]
            self._model_masks[models] = mask
        return mask

    def feasible(self, pod: PodShape, nodes: IntArray) -> BoolArray:
        """Which of `nodes` can host `pod`: kube's NodeResourcesFit (CPU, memory, pod slots) plus the GPU filter.

        A GPU pod needs a node of an allowed model with one device of ≥ `gpu_milli` free (count 1; a whole-GPU pod
        thus needs a completely free device) or `gpu_count` completely free devices. CPU-only pods fit any node.
        """
        ok = (self.cpu_free[nodes] >= pod.cpu_milli) & (self.mem_free[nodes] >= pod.memory_mib)
        ok &= self.pods_free[nodes] >= 1
        if pod.uses_gpu:
            ok &= self.model_mask(pod.gpu_models)[nodes]
            if pod.gpu_count == 1:
                ok &= (self.gpu_free[nodes] >= pod.gpu_milli).any(axis=1)
            else:
                ok &= self.full_free[nodes] >= pod.gpu_count
        return ok

    def place(self, node: int, pod: PodShape, gpus: Sequence[int]) -> None:
        """Bind `pod` to `node`, taking `gpu_milli` from each device in `gpus` (the caller checked feasibility)."""
        self.cpu_free[node] -= pod.cpu_milli
        self.mem_free[node] -= pod.memory_mib
        self.pods_free[node] -= 1
        if pod.uses_gpu:
            if len(gpus) != pod.gpu_count:
                raise ValueError(f"{pod.gpu_count} devices needed, {len(gpus)} given")
            for g in gpus:
                if self.gpu_free[node, g] < pod.gpu_milli:
                    raise ValueError(f"device {g} of node {node} has {self.gpu_free[node, g]} milli free")
                if self.gpu_free[node, g] == MILLI:
                    self.full_free[node] -= 1
                self.gpu_free[node, g] -= pod.gpu_milli
            self.gpu_left[node] -= pod.total_gpu_milli
            self.tags[node, pod.gpu_tag] += 1
        self.version[node] += 1

    def node_state(self, node: int) -> NodeState:
        """The node as a value (for reports and the one-node API)."""
        spec = self.specs[node]
        return NodeState(spec=spec, cpu_free_milli=int(self.cpu_free[node]), memory_free_mib=int(self.mem_free[node]),
                         pods_free=int(self.pods_free[node]),
                         gpu_free_milli=tuple(int(g) for g in self.gpu_free[node, : spec.gpu_count]),
                         gpu_tags=tuple(int(t) for t in self.tags[node]))

    def lowest_free_gpus(self, node: int, count: int) -> tuple[int, ...]:
        """The `count` lowest-index completely free devices (the artifact's `AllocateExclusiveGpuId`)."""
        free = np.flatnonzero(self.gpu_free[node] == MILLI)
        return tuple(int(g) for g in free[:count])


_VIEWS: dict[tuple[int, int], tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]] = {}
_INT_MAX = np.iinfo(np.int64).max


def _view_constants(n: int, width: int) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]:
    """A view's arrays that do not depend on the nodes' state (model, rank, unbounded memory and pod slots, no tags,
    versions), per shape: read-only and shared between views, which are built per placement and never placed into
    (a write would raise)."""
    known = _VIEWS.get((n, width))
    if known is None:
        if len(_VIEWS) >= 1024:
            _VIEWS.clear()
        arrays = (np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64), np.full(n, _INT_MAX, dtype=np.int64),
                  np.full(n, _INT_MAX, dtype=np.int64), np.zeros((n, width + 1), dtype=np.int64),
                  np.zeros(n, dtype=np.int64))
        for a in arrays:
            a.setflags(write=False)
        known = _VIEWS[n, width] = arrays
    return known
