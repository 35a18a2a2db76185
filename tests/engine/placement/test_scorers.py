"""Scorer formulas on hand-made nodes (artifact: pkg/simulator/plugin/*.go), GPU picks and feasibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement import (
    BestFitScorer,
    ClusteringScorer,
    DotProductScorer,
    FgdScorer,
    FragTable,
    GpuscaleScorer,
    PackingScorer,
    RandomScorer,
    TypicalClass,
    node_frag,
    score_node,
)
from gpuscale.engine.placement.fgd import _distinct_rows
from gpuscale.engine.placement.state import ClusterState
from tests.engine.placement.helpers import NO_DRAWS, FixedDraws, node, pod

SHARE_500 = (TypicalClass(cpu_milli=1000, gpu_milli=500, gpu_count=1, model_key="", pods=1, weight=1.0),)


def fgd(classes: tuple[TypicalClass, ...] = SHARE_500) -> FgdScorer:
    return FgdScorer(FragTable(classes, ("G2",)))


def score(scorer: object, n: object, p: object) -> tuple[int, tuple[int, ...]]:
    result = score_node(scorer, n, p, NO_DRAWS)  # type: ignore[arg-type]
    assert result is not None
    return result.score, result.gpus


# ------------------------------------------------------------------------------------------------ feasibility


@pytest.mark.parametrize(("n", "p"), [
    (node(memory_free=1000), pod(memory=1024)),              # memory is checked although no score uses it
    (node(pods_free=0), pod()),                             # the 1001-pod cap
    (node(cpu_free=3999), pod(cpu=4000)),
    (node(free=(999, 999)), pod(milli=1000)),               # a whole GPU needs a completely free device
    (node(free=(1000, 999)), pod(milli=1000, gpus=2)),       # k whole GPUs need k free devices
    (node(free=(400, 300)), pod(milli=500)),                # a fractional pod never spans devices
    (node(model="G2"), pod(milli=500, models=("T4", "V100M16"))),
])
def test_infeasible(n: object, p: object) -> None:
    assert score_node(BestFitScorer(), n, p, NO_DRAWS) is None  # type: ignore[arg-type]


def test_cpu_only_pods_fit_on_gpu_nodes_and_model_lists_match_exactly() -> None:
    assert score_node(BestFitScorer(), node(free=(0, 0)), pod(), NO_DRAWS) is not None
    assert score_node(BestFitScorer(), node(model="T4"), pod(milli=500, models=("V100M16", "T4")), NO_DRAWS)


# ------------------------------------------------------------------------------------------------- baselines


def test_dotprod_floors_the_alignment_score() -> None:
    # dot = 48000/128000·4000/128000 + 8000/8000·500/8000 = 0.07421875; 100·(1 − dot/2) = 96.289 → 96
    assert score(DotProductScorer(), node(cpu_free=48_000), pod(cpu=4000, milli=500)) == (96, (0,))
    # a CPU-only pod as big as the node on a node without idle GPU: exactly 50
    assert score(DotProductScorer(), node(free=(0,) * 8, cpu=128_000), pod(cpu=128_000))[0] == 50


def test_bestfit_prefers_little_leftover_and_sees_gpu_for_cpu_pods() -> None:
    # s = ½·44000/128000 + ½·7500/8000 = 0.640625 → floor(35.9375) = 35
    assert score(BestFitScorer(), node(cpu_free=48_000), pod(cpu=4000, milli=500))[0] == 35
    busy = score(BestFitScorer(), node(free=(0,) * 8, cpu_free=48_000), pod(cpu=4000))[0]
    idle = score(BestFitScorer(), node(cpu_free=48_000), pod(cpu=4000))[0]
    assert busy > idle


def test_clustering_tags_and_base() -> None:
    share, whole = pod(milli=500), pod(milli=1000)
    assert score(ClusteringScorer(), node(), share)[0] == 0 + 25                      # no GPU pods yet
    one_tag = node(free=(500,) + (1000,) * 7, tags=(1,) + (0,) * 8)
    assert score(ClusteringScorer(), one_tag, share)[0] == 25 * 500 // 8000 + 75       # only this pod's tag
    assert score(ClusteringScorer(), one_tag, whole)[0] == 25 * 500 // 8000            # other tags only
    two_tags = node(free=(500, 0) + (1000,) * 6, tags=(1, 1) + (0,) * 7)
    assert score(ClusteringScorer(), two_tags, share)[0] == 25 * 1500 // 8000 + 50     # this tag among others
    assert score(ClusteringScorer(), node(free=(1000, 1000)), share)[0] == 25 * 6000 // 8000 + 25  # /8000 always
    assert score(ClusteringScorer(), node(), pod())[0] == 0                            # CPU-only pods: 0


def test_packing_cases() -> None:
    p = PackingScorer()
    assert score(p, node(), pod(milli=500))[0] == 25                                   # empty 8-GPU node
    assert score(p, node(free=(1000, 1000)), pod(milli=500))[0] == 31                  # empty small node wins
    assert score(p, node(free=(1000,)), pod(milli=500))[0] == 32
    used = node(free=(500, 1000, 1000, 0))
    assert score(p, used, pod(milli=600))[0] == 49                                     # one free device needed
    assert score(p, used, pod(milli=1000, gpus=2))[0] == 48
    assert score(p, used, pod(milli=300))[0] == 100 - (500 * 100 // 1000) // 10       # shared device: 95
    assert score(p, node(free=(450, 1000)), pod(milli=400))[0] == 96                   # floor(45/10) = 4
    assert score(p, used, pod())[0] == 0


def test_best_gpu_pick() -> None:
    n = node(free=(500, 1000, 300, 300))
    assert score(BestFitScorer(), n, pod(milli=250))[1] == (2,)          # tightest fit, lowest index on ties
    assert score(BestFitScorer(), n, pod(milli=600))[1] == (1,)          # a free device only if nothing else fits
    assert score(BestFitScorer(), node(free=(1000, 500, 1000, 1000)), pod(milli=1000, gpus=2))[1] == (0, 2)


def test_random_picks_a_candidate_and_a_fitting_device_uniformly() -> None:
    state = ClusterState.from_states([node(), node(), node()])
    draws = FixedDraws([2])
    assert RandomScorer().score(state, pod(), np.arange(3), draws).tolist() == [0, 0, 100]
    assert draws.bounds == [3]
    state = ClusterState.from_states([node(free=(500, 1000, 300, 100))])
    draws = FixedDraws([0, 0, 1])  # reservoir over devices 0, 1, 2 (free ones included): keep 0, take 1, keep 1
    assert RandomScorer().pick_gpus(state, pod(milli=250), 0, draws) == (1,)
    assert draws.bounds == [1, 2, 3]


# ------------------------------------------------------------------------------------------------------ FGD


def test_fgd_scores_fragmentation_change_and_picks_first_best_device() -> None:
    # one typical class, 500 milli: on (1000, 600) a 500 pod on device 0 leaves (500, 600): F stays 0 → 50;
    # on device 1 it leaves (1000, 100): 100 milli become fragment → floor(100·σ(−0.1)) = 47.
    assert score(fgd(), node(free=(1000, 600)), pod(milli=500)) == (50, (0,))
    assert score(fgd(), node(free=(1000, 1000)), pod(milli=500)) == (50, (0,))        # ties: lowest index
    assert score(fgd(), node(free=(600, 1000)), pod(milli=500)) == (50, (1,))
    state = ClusterState.from_states([node(free=(1000, 700, 400))])
    per_device = fgd().device_scores(state, pod(milli=500), np.zeros(1, dtype=np.int64))[0]
    assert per_device.tolist()[:3] == [50, math.floor(100 / (1 + math.exp(0.2))), -1]  # 200 milli stranded: 45


def test_fgd_whole_gpu_and_cpu_pods() -> None:
    # a whole GPU on (1000, 1000): the other device still hosts the class → ΔF = 0 → 50
    assert score(fgd(), node(free=(1000, 1000)), pod(milli=1000)) == (50, (0,))
    # taking the node's last CPU makes the 1000 idle milli unusable: ΔF = −1000 → floor(100·σ(−1)) = 26
    assert score(fgd(), node(free=(1000,), cpu=2000), pod(cpu=1500))[0] == 26


device_st = st.lists(st.integers(0, 1000), min_size=1, max_size=8)


@given(device_st, st.integers(500, 20_000), st.integers(1, 999), st.integers(0, 4000))
@settings(max_examples=200, deadline=None)
def test_fgd_device_scores_equal_the_reference_frag_on_each_hypothetical_node(
        free: list[int], cpu_free: int, milli: int, cpu: int) -> None:
    classes = (
        TypicalClass(cpu_milli=3152, gpu_milli=810, gpu_count=1, model_key="", pods=3, weight=0.3),
        TypicalClass(cpu_milli=11300, gpu_milli=1000, gpu_count=1, model_key="", pods=3, weight=0.3),
        TypicalClass(cpu_milli=12500, gpu_milli=0, gpu_count=0, model_key="", pods=2, weight=0.2),
        TypicalClass(cpu_milli=2000, gpu_milli=470, gpu_count=1, model_key="", pods=2, weight=0.2),
    )
    scorer = fgd(classes)
    state = ClusterState.from_states([node(free=free, cpu_free=cpu_free)])
    got = scorer.device_scores(state, pod(cpu=cpu, milli=milli), np.zeros(1, dtype=np.int64))[0]
    before = node_frag(cpu_free, free, "G2", classes)
    for i, g in enumerate(free):
        if g < milli:
            assert got[i] == -1
            continue
        after = node_frag(cpu_free - cpu, [*free[:i], g - milli, *free[i + 1:]], "G2", classes)
        assert got[i] == int(1.0 / (1.0 + math.exp(-((before - after) / 1000.0))) * 100.0)


# ------------------------------------------------------------------------------------------------- gpuscale


def test_gpuscale_keeps_fgd_order_and_breaks_its_ties_by_packing() -> None:
    scorer = GpuscaleScorer(FragTable(SHARE_500, ("G2",)))
    nodes = np.arange(2, dtype=np.int64)
    # fractional: FGD scores 50 on both nodes; the tighter device (600 → 500 left) wins, and is the one picked
    state = ClusterState.from_states([node(free=(1000, 1000)), node(free=(1000, 600))])
    keys = scorer.score(state, pod(milli=100), nodes, NO_DRAWS)
    assert keys[1] > keys[0]
    assert scorer.pick_gpus(state, pod(milli=100), 1, NO_DRAWS) == (1,)
    # CPU-only: FGD ties; the node with less idle GPU wins
    state = ClusterState.from_states([node(free=(1000, 1000)), node(free=(0, 1000))])
    keys = scorer.score(state, pod(cpu=1000), nodes, NO_DRAWS)
    assert keys[1] > keys[0]
    # whole GPU: FGD ties stay ties (the rank decides)
    keys = scorer.score(state, pod(milli=1000), nodes, NO_DRAWS)
    assert keys[0] == keys[1]
    # FGD's score sits in the high bits: a better FGD score wins over any tie-break. A 500 pod on (1000, 700):
    # device 0 keeps F at 0 (50) but device 1 is tighter and strands 200 milli (45): the node scores 50.
    state = ClusterState.from_states([node(free=(1000, 700))])
    key = scorer.score(state, pod(milli=500), np.zeros(1, dtype=np.int64), NO_DRAWS)[0]
    assert key >> 40 == 50
    assert scorer.pick_gpus(state, pod(milli=500), 0, NO_DRAWS) == (0,)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.integers(0, 3), st.sampled_from([0, 500, 1000, 2**40]),
                          st.sampled_from([0, 250, 1000])), min_size=1, max_size=60))
def test_fgd_distinct_rows_group_as_numpy_unique(rows: list[tuple[int, int, int, int]]) -> None:
    """FGD scores each distinct node state once: the groups (and their first rows) are `np.unique`'s."""
    key = np.array(rows, dtype=np.int64)
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    got_first, got_inverse = _distinct_rows(key)
    assert got_first.tolist() == first.tolist()
    assert got_inverse.tolist() == inverse.reshape(-1).tolist()
