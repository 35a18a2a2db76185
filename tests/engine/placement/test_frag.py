"""Typical pods and the fragment amount F (artifact: pkg/utils/frag.go)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement import ClusterState, FragTable, TypicalClass, node_frag, typical_classes
from gpuscale.engine.placement.frag import _FRAG_BUCKETS, _SKIPPED, _sum_by_category, _summed
from gpuscale.sim.openb import bundled, read_nodes, read_pods
from gpuscale.sim.pack import node_spec, pod_shape
from tests.engine.placement.helpers import pod

SHARE = TypicalClass(cpu_milli=4000, gpu_milli=500, gpu_count=1, model_key="", pods=2, weight=0.5)
CPU_ONLY = TypicalClass(cpu_milli=8000, gpu_milli=0, gpu_count=0, model_key="", pods=1, weight=0.25)
WHOLE = TypicalClass(cpu_milli=2000, gpu_milli=1000, gpu_count=1, model_key="", pods=1, weight=0.25)
CLASSES = (SHARE, CPU_ONLY, WHOLE)


def test_fitting_class_counts_only_devices_too_small_cpu_class_counts_everything() -> None:
    # idle 2000: SHARE fits (Q3) and loses the 300 + 0 below 500; CPU_ONLY lacks CPU (XR) and loses all 2000;
    # WHOLE fits and loses 300 + 700.
    assert node_frag(6000, (1000, 300, 0, 700), "G2", CLASSES) == pytest.approx(0.5 * 300 + 0.25 * 2000 + 0.25 * 1000)


def test_class_lacking_cpu_loses_all_idle_gpu() -> None:
    # SHARE fits on the devices but lacks CPU (Q4): all 2000 count.
    assert node_frag(3000, (1000, 300, 0, 700), "G2", CLASSES) == pytest.approx(0.5 * 2000 + 0.25 * 2000 + 0.25 * 1000)


def test_class_that_does_not_fit_loses_all_idle_gpu() -> None:
    assert node_frag(6000, (300, 0), "G2", CLASSES) == pytest.approx(300.0)  # Q2, XR, Q2
    assert node_frag(1000, (300, 0), "G2", CLASSES) == pytest.approx(300.0)  # Q1, XR, Q1


def test_cpu_only_class_with_enough_cpu_still_counts_idle_gpu_as_fragment() -> None:
    only_cpu = (TypicalClass(cpu_milli=1000, gpu_milli=0, gpu_count=0, model_key="", pods=1, weight=1.0),)
    assert node_frag(96_000, (1000,) * 8, "G2", only_cpu) == 8000.0


def test_class_constrained_to_another_model_counts_everything() -> None:
    t4_only = (TypicalClass(cpu_milli=1000, gpu_milli=500, gpu_count=1, model_key="T4", pods=1, weight=1.0),)
    assert node_frag(96_000, (1000, 1000), "G2", t4_only) == 2000.0
    assert node_frag(96_000, (1000, 1000), "T4", t4_only) == 0.0


def test_multi_gpu_class_needs_enough_devices() -> None:
    two = (TypicalClass(cpu_milli=1000, gpu_milli=1000, gpu_count=2, model_key="", pods=1, weight=1.0),)
    assert node_frag(96_000, (1000, 1000, 400), "G2", two) == 400.0
    assert node_frag(96_000, (1000, 900, 400), "G2", two) == 2300.0


def test_typical_pods_of_the_default_trace() -> None:
    pods = [pod_shape(p) for p in sorted(read_pods(bundled("openb_pod_list_default.csv")), key=lambda p: p.name)]
    classes = typical_classes(pods)
    assert len(classes) == 35
    assert sum(c.pods for c in classes) == 7766
    assert [(c.cpu_milli, c.gpu_milli, c.pods) for c in classes[:6]] == [
        (3152, 810, 1047), (11300, 1000, 874), (11400, 1000, 599), (3152, 1000, 470), (11908, 470, 388),
        (12500, 0, 366)]
    assert sum(c.weight for c in classes) == pytest.approx(1.0)
    assert classes[0].weight == 1047 / 8152 / (7766 / 8152)
    assert all(c.gpu_count <= 1 for c in classes)  # no multi-GPU class is popular enough
    share = sum(c.weight for c in classes if 0 < c.gpu_milli < 1000)
    assert share == pytest.approx(0.373, abs=0.001)


def test_equal_counts_order_by_descending_class() -> None:
    pods = [pod(cpu=1000, milli=500), pod(cpu=2000, milli=500), pod(cpu=2000, milli=300), pod(cpu=2000, milli=300)]
    classes = typical_classes(pods, popularity_pct=100)
    assert [(c.cpu_milli, c.gpu_milli) for c in classes] == [(2000, 300), (2000, 500), (1000, 500)]
    assert classes[0].weight == 0.5  # everything taken: shares are count / total, no renormalisation


def test_popularity_cut_renormalises() -> None:
    pods = [pod(cpu=1000)] * 6 + [pod(cpu=2000)] * 3 + [pod(cpu=3000)]
    classes = typical_classes(pods, popularity_pct=90)
    assert [c.cpu_milli for c in classes] == [1000, 2000]
    assert [c.weight for c in classes] == [0.6 / 0.9, 0.3 / 0.9]


def test_empty_openb_cluster_is_13_94_percent_fragmented() -> None:
    pods = [pod_shape(p) for p in sorted(read_pods(bundled("openb_pod_list_default.csv")), key=lambda p: p.name)]
    nodes = [node_spec(n) for n in read_nodes(bundled("openb_node_list_gpu_node.csv"))]
    state = ClusterState.of(nodes)
    table = FragTable(typical_classes(pods), state.models)
    frag = table.frag_of_nodes(state.cpu_free, state.gpu_free, state.model)
    assert frag.sum() == pytest.approx(866_232.55, abs=0.01)
    assert round(100 * frag.sum() / 1000 / 6212, 2) == 13.94


classes_st = st.lists(st.builds(
    lambda cpu, milli, count, model, weight: TypicalClass(
        cpu_milli=cpu, gpu_milli=milli, gpu_count=count if milli else 0, model_key=model, pods=1, weight=weight),
    st.integers(0, 20_000), st.sampled_from([0, 100, 250, 470, 500, 810, 1000]), st.integers(1, 3),
    st.sampled_from(["", "G2", "T4|G2", "T4"]), st.floats(0.001, 1.0)), min_size=1, max_size=12)
state_st = st.tuples(st.integers(0, 24_000), st.lists(st.integers(0, 1000), min_size=0, max_size=8),
                     st.sampled_from(["G2", "T4", "P100"]))


@given(classes_st, st.lists(state_st, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_vectorised_frag_equals_reference_to_the_bit(classes: list[TypicalClass],
                                                      states: list[tuple[int, list[int], str]]) -> None:
    models = ("G2", "P100", "T4")
    table = FragTable(classes, models)
    free = np.zeros((len(states), 8), dtype=np.int64)
    for i, (_, devices, _) in enumerate(states):
        free[i, : len(devices)] = devices
    cpu = np.array([s[0] for s in states], dtype=np.int64)
    model = np.array([models.index(s[2]) for s in states], dtype=np.int64)
    got = table.frag_of_nodes(cpu, free, model)
    for i, (c, devices, m) in enumerate(states):
        assert got[i] == node_frag(c, devices, m, classes)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_sum_by_category_adds_in_gos_order(classes: int, states: int, seed: int) -> None:
    """F's order to the bit: per state, each category's terms in class order from 0.0, then the categories in order
    from 0.0 (Go's two loops). Magnitudes spread over 10⁻⁶..10⁶ so a different order shows in the last bits."""
    rng = np.random.default_rng(seed)
    terms = rng.random((states, classes)) * 10.0 ** rng.integers(-6, 7, (states, classes))
    column = rng.integers(0, len(_FRAG_BUCKETS), (states, classes))
    expected = []
    for s in range(states):
        data = [0.0] * len(_FRAG_BUCKETS)
        for c in range(classes):
            data[column[s, c]] += float(terms[s, c])
        out = 0.0
        for value in data:
            out += value
        expected.append(out)
    got = _sum_by_category(column, terms)
    assert got.dtype == np.float64
    assert got.tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_summed_past_the_categories_leaves_the_skipped_terms_out(classes: int, states: int, seed: int) -> None:
    """The one-device F books the terms of classes that fit entirely (0 in Go's sum, any value here) to a bin past the
    categories: the sums equal Go's order over the other terms alone, with the skipped terms wherever they fall."""
    rng = np.random.default_rng(seed)
    terms = rng.random((states, classes)) * 10.0 ** rng.integers(-6, 7, (states, classes))
    column = rng.integers(0, _SKIPPED + 1, (states, classes))
    expected = []
    for s in range(states):
        data = [0.0] * len(_FRAG_BUCKETS)
        for c in range(classes):
            if column[s, c] != _SKIPPED:
                data[column[s, c]] += float(terms[s, c])
        out = 0.0
        for value in data:
            out += value
        expected.append(out)
    got = _summed(column, terms, _SKIPPED + 1)
    assert got.dtype == np.float64
    assert got.tolist() == expected
    kept = np.where(column == _SKIPPED, 0.0, terms)  # as Go adds them: a 0 into a category
    assert _sum_by_category(np.where(column == _SKIPPED, 1, column), kept).tolist() == expected
