"""Placement scorers: the FGD paper's five baselines, as its artifact computes them (`pkg/simulator/plugin/*.go`).

A scorer answers two questions, exactly like a kube-scheduler score plugin plus Open-Gpu-Share's Reserve:
`score(state, pod, nodes, rng)` gives each candidate node an integer in [0, 100] (higher is better; the caller
breaks ties by node rank), and `pick_gpus(state, pod, node, rng)` chooses the devices on the chosen node.
Scores are vectorised over the candidate nodes and reproduce Go's float operations and integer truncation,
because the truncation creates the ties that the rank order then decides. Deterministic scorers depend only on
the node's state and the pod's shape, which lets the packing loop cache their scores.

GPU pick rules: `best` (fractional pods take the device with the least free milli that fits, lowest index on
ties; whole-GPU pods the lowest-index free devices) for all but Random, which picks a fitting device uniformly
by reservoir sampling. FGD (`fgd.py`) picks by its own score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpuscale.engine.placement.shapes import MAX_SPEC_CPU_MILLI, MAX_SPEC_GPU_MILLI, MILLI, NodeState, PodShape
from gpuscale.engine.placement.state import ClusterState, IntArray

MAX_NODE_SCORE = 100


class RandomSource(Protocol):
    """Where Random draws from: `GoRand` reproduces the artifact's stream; anything with Go's `Intn` contract works."""

    def intn(self, n: int) -> int: ...


class Scorer(Protocol):
    name: str
    deterministic: bool
    """True when scores depend only on node state and pod shape (no draws), so they may be cached."""

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray: ...

    def pick_gpus(self, state: ClusterState, pod: PodShape, node: int, rng: RandomSource) -> tuple[int, ...]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeScore:
    score: int
    gpus: tuple[int, ...]


def score_node(scorer: Scorer, node: NodeState, pod: PodShape, rng: RandomSource) -> NodeScore | None:
    """Score one node as it stands (None when the pod does not fit): the entry point for the twin and the tests."""
    state = ClusterState.from_states([node])
    nodes = np.zeros(1, dtype=np.int64)
    if not state.feasible(pod, nodes)[0]:
        return None
    score = int(scorer.score(state, pod, nodes, rng)[0])
    return NodeScore(score=score, gpus=scorer.pick_gpus(state, pod, 0, rng) if pod.uses_gpu else ())


def best_fit_gpus(state: ClusterState, pod: PodShape, node: int) -> tuple[int, ...]:
    """Open-Gpu-Share's `best` pick."""
    if not pod.uses_gpu:
        return ()
    if not pod.is_fractional:
        return state.lowest_free_gpus(node, pod.gpu_count)
    free = state.gpu_free[node]
    fitting = np.flatnonzero(free >= pod.gpu_milli)
    return (int(fitting[np.argmin(free[fitting])]),)


def _zeros(nodes: IntArray) -> IntArray:
    return np.zeros(len(nodes), dtype=np.int64)


class RandomScorer:
    """PreScore picks one candidate uniformly (it scores 100, the rest 0); fractional pods get a random device."""

    name = "random"
    deterministic = False

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray:
        out = _zeros(nodes)
        out[rng.intn(len(nodes))] = MAX_NODE_SCORE
        return out

    def pick_gpus(self, state: ClusterState, pod: PodShape, node: int, rng: RandomSource) -> tuple[int, ...]:
        if not pod.is_fractional:
            return best_fit_gpus(state, pod, node)
        chosen, seen = -1, 0
        for gpu in range(int(state.gpu_count[node])):  # reservoir sampling over fitting devices, free ones included
            if state.gpu_free[node, gpu] >= pod.gpu_milli:
                seen += 1
                if rng.intn(seen) == 0:
                    chosen = gpu
        return (chosen,)


class _BestPick:
    deterministic = True

    def pick_gpus(self, state: ClusterState, pod: PodShape, node: int, rng: RandomSource) -> tuple[int, ...]:
        return best_fit_gpus(state, pod, node)


class DotProductScorer(_BestPick):
    """Tetris-style alignment: floor(100·(1 − ⟨node free, pod request⟩/2)), both vectors (cpu, total GPU) / max spec.

    Lower free resources along the pod's request score higher; the narrow score band leaves many rank ties.
    """

    name = "dotprod"

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray:
        cpu = state.cpu_free[nodes].astype(np.float64) / float(MAX_SPEC_CPU_MILLI)
        gpu = state.gpu_left[nodes].astype(np.float64) / float(MAX_SPEC_GPU_MILLI)
        request_cpu = pod.cpu_milli / float(MAX_SPEC_CPU_MILLI)
        request_gpu = pod.total_gpu_milli / float(MAX_SPEC_GPU_MILLI)
        dot = cpu * request_cpu + gpu * request_gpu
        scores: IntArray = (float(MAX_NODE_SCORE) * (1.0 - dot / 2.0)).astype(np.int64)
        return scores


def _go_div(a: IntArray, b: int) -> IntArray:
    """Go's integer division (truncates toward zero) for a positive divisor."""
    return np.where(a >= 0, a // b, -((-a) // b))


class ClusteringScorer(_BestPick):
    """Keep GPU pods of one kind together: base floor(25·(8000 − idle)/8000) plus 75 (node holds only this pod's
    tag), 50 (this tag among others), 25 (no GPU pods yet) or 0. CPU-only pods score 0 everywhere."""

    name = "clustering"

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray:
        if not pod.uses_gpu:
            return _zeros(nodes)
        base = _go_div(25 * (MAX_SPEC_GPU_MILLI - state.gpu_left[nodes]), MAX_SPEC_GPU_MILLI)
        tags = state.tags[nodes]
        has = tags[:, pod.gpu_tag] > 0
        kinds = (tags > 0).sum(axis=1)
        return base + np.where(has, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))


class PackingScorer(_BestPick):
    """Prefer shared devices, then free devices on used nodes, then empty nodes (small ones first).

    Walk devices by ascending free milli and take the first `gpu_count` that fit: if all fitted devices are
    partly used, 100 − floor(Σ floor(free·100/1000)/10) (≥ 50); if f of them are free, max(50 − f, 33); if every
    device of the node is free, max(33 − G, G). CPU-only pods score 0 everywhere.
    """

    name = "packing"

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray:
        if not pod.uses_gpu:
            return _zeros(nodes)
        free = np.sort(state.gpu_free[nodes], axis=1, kind="stable")
        fits = free >= pod.gpu_milli
        chosen = fits & (np.cumsum(fits, axis=1) <= pod.gpu_count)
        fresh = (chosen & (free == MILLI)).sum(axis=1)
        shared = np.where(chosen, free * 100 // MILLI, 0).sum(axis=1)
        gpus = state.gpu_count[nodes]
        return np.where(state.full_free[nodes] == gpus, np.maximum(33 - gpus, gpus),
                        np.where(fresh > 0, np.maximum(50 - fresh, 33), np.maximum(100 - shared // 10, 50)))


class BestFitScorer(_BestPick):
    """floor(100·(1 − s)), s = ½·(free cpu − cpu)/128000 + ½·(idle − GPU request)/8000: least leftover wins.

    The artifact min-max normalises these integers afterwards; with a raw range ≤ 100 that map is strictly
    increasing, so it changes no choice and is skipped.
    """

    name = "bestfit"

    def score(self, state: ClusterState, pod: PodShape, nodes: IntArray, rng: RandomSource) -> IntArray:
        cpu_left = state.cpu_free[nodes].astype(np.float64) - float(pod.cpu_milli)
        gpu_left = state.gpu_left[nodes].astype(np.float64) - float(pod.total_gpu_milli)
        s = cpu_left / float(MAX_SPEC_CPU_MILLI) * 0.5
        s = s + gpu_left / float(MAX_SPEC_GPU_MILLI) * 0.5
        scores: IntArray = ((1.0 - s) * float(MAX_NODE_SCORE)).astype(np.int64)
        return scores
