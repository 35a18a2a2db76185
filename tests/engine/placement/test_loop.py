"""The packing loop: tie-break by rank, one-feasible-node shortcut, failures, samples, and that its caches
(per-shape scores, FGD's state dedupe, per-node fragment amounts) change nothing against a naive loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement import (
    POLICIES,
    ClusterState,
    FragTable,
    PodShape,
    Scorer,
    TypicalClass,
    make_scorer,
    node_frag,
    pack,
)
from tests.engine.placement.helpers import NO_DRAWS, FixedDraws, pod, spec

CLASSES = (
    TypicalClass(cpu_milli=4000, gpu_milli=500, gpu_count=1, model_key="", pods=2, weight=0.5),
    TypicalClass(cpu_milli=8000, gpu_milli=1000, gpu_count=1, model_key="", pods=1, weight=0.3),
    TypicalClass(cpu_milli=6000, gpu_milli=0, gpu_count=0, model_key="", pods=1, weight=0.2),
)


def table_for(nodes: list) -> FragTable:  # type: ignore[type-arg]
    return FragTable(CLASSES, ClusterState.of(nodes).models)


def test_ties_go_to_the_lowest_rank() -> None:
    nodes = [spec(name="a"), spec(name="b"), spec(name="c")]
    trace = pack(nodes, [2, 0, 1], [pod(milli=500)], make_scorer("bestfit", table_for(nodes)), table_for(nodes),
                 NO_DRAWS)
    assert trace.node.tolist() == [1]


def test_single_feasible_node_is_taken_without_scoring() -> None:
    nodes = [spec(gpus=0, model="", name="cpu"), spec(name="gpu")]
    draws = FixedDraws([0] * 8)
    trace = pack(nodes, [0, 1], [pod(milli=500)], make_scorer("random", table_for(nodes)), table_for(nodes), draws)
    assert trace.node.tolist() == [1]
    assert draws.bounds == [1, 2, 3, 4, 5, 6, 7, 8]  # only the device reservoir draws: no Intn(1) for the node


def test_failed_pods_still_arrive_and_every_pod_is_a_sample() -> None:
    nodes = [spec(gpus=2, cpu=16_000)]
    pods = [pod(milli=1000, gpus=2), pod(milli=500), pod(cpu=1000)]
    trace = pack(nodes, [0], pods, make_scorer("fgd", table_for(nodes)), table_for(nodes), NO_DRAWS)
    assert trace.node.tolist() == [0, -1, 0]
    assert trace.failed == 1
    assert trace.arrived_milli.tolist() == [2000, 2500, 2500]
    assert trace.allocated_milli.tolist() == [2000, 2000, 2000]
    assert trace.total_gpu_milli == 2000


def naive_pack(nodes: list, ranks: list[int], pods: list[PodShape], scorer: Scorer) -> list[int]:  # type: ignore[type-arg]
    """Score every feasible node for every pod: no cache, no dedupe."""
    state = ClusterState.of(nodes, ranks)
    out = []
    everyone = np.arange(state.n)
    for p in pods:
        feasible = everyone[state.feasible(p, everyone)]
        if feasible.size == 0:
            out.append(-1)
            continue
        if feasible.size == 1:
            chosen = int(feasible[0])
        else:
            scores = scorer.score(state, p, feasible, NO_DRAWS)
            best = feasible[scores == scores.max()]
            chosen = int(best[np.argmin(state.rank[best])])
        state.place(chosen, p, scorer.pick_gpus(state, p, chosen, NO_DRAWS) if p.uses_gpu else ())
        out.append(chosen)
    return out


node_st = st.builds(lambda g, cpu, model: spec(gpus=g, cpu=cpu, model=model if g else ""),
                    st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from([8000, 16_000, 64_000, 96_000]),
                    st.sampled_from(["G2", "T4"]))
pod_st = st.one_of(
    st.builds(lambda c: pod(cpu=c), st.sampled_from([1000, 6000, 12_000])),
    st.builds(lambda c, m: pod(cpu=c, milli=m), st.sampled_from([2000, 4000]), st.sampled_from([200, 470, 500, 810])),
    st.builds(lambda c, k, models: pod(cpu=c, milli=1000, gpus=k, models=models), st.sampled_from([4000, 8000]),
              st.sampled_from([1, 2, 4]), st.sampled_from([(), ("T4",)])))


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "random"])
@given(st.lists(node_st, min_size=1, max_size=60), st.lists(pod_st, min_size=1, max_size=60), st.randoms())
@settings(max_examples=25, deadline=None)
def test_cached_loop_equals_naive_loop(policy: str, nodes: list, pods: list[PodShape], rnd) -> None:  # type: ignore[no-untyped-def, type-arg]
    ranks = list(range(len(nodes)))
    rnd.shuffle(ranks)
    table = table_for(nodes)
    trace = pack(nodes, ranks, pods, make_scorer(policy, table), table, NO_DRAWS)
    assert trace.node.tolist() == naive_pack(nodes, ranks, pods, make_scorer(policy, table))
    # the running fragment total is the sum of each final node's reference F
    state = ClusterState.of(nodes, ranks)
    for p, n in zip(pods, trace.node.tolist(), strict=True):
        if n >= 0:
            state.place(n, p, make_scorer(policy, table).pick_gpus(state, p, n, NO_DRAWS) if p.uses_gpu else ())
    expected = sum(node_frag(int(state.cpu_free[i]), state.gpu_free[i].tolist(), state.specs[i].gpu_model, CLASSES)
                   for i in range(state.n))
    assert trace.frag_milli[-1] == pytest.approx(expected)
