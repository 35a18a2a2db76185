"""FGD on the autoscaler's and the twin's views (`ClusterState.view`: many nodes at once, one device or several)
equals the reference F (`node_frag`) of every node before and after, to the bit.

The vectorised paths adjust per-class counts for the devices a pod changes instead of recounting them, skip the
device reduction when nodes have one device, and sum categories with `bincount`; this checks all of them against the
plain per-node construction."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement import FgdScorer, FragTable, GpuscaleScorer, TypicalClass, node_frag
from gpuscale.engine.placement.shapes import MILLI, PodShape
from gpuscale.engine.placement.state import ClusterState

classes_st = st.lists(st.builds(
    lambda cpu, milli, count, weight: TypicalClass(
        cpu_milli=cpu, gpu_milli=milli, gpu_count=count if milli else 0, model_key="", pods=1, weight=weight),
    st.integers(0, 20_000), st.sampled_from([0, 100, 250, 470, 500, 810, 1000]), st.integers(1, 3),
    st.floats(0.001, 1.0)), min_size=1, max_size=12)
nodes_st = st.integers(1, 3).flatmap(lambda width: st.lists(st.tuples(
    st.integers(0, 24_000), st.lists(st.sampled_from([0, 100, 190, 500, 530, 810, 1000]), min_size=0, max_size=width)),
    min_size=1, max_size=8).map(lambda nodes: (width, nodes)))


def _view(width: int, nodes: list[tuple[int, list[int]]]) -> ClusterState:
    free = np.zeros((len(nodes), width), dtype=np.int64)
    for i, (_, devices) in enumerate(nodes):
        free[i, :len(devices)] = devices
    return ClusterState.view(np.array([cpu for cpu, _ in nodes], dtype=np.int64), free,
                             np.array([len(devices) for _, devices in nodes], dtype=np.int64))


@given(classes_st, nodes_st, st.integers(0, 4000), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_whole_gpu_and_cpu_pods_frag_equals_the_reference(classes: list[TypicalClass],
                                                          nodes: tuple[int, list[tuple[int, list[int]]]],
                                                          cpu: int, gpus: int) -> None:
    width, states = nodes
    view = _view(width, states)
    pod = PodShape(cpu_milli=cpu, gpu_milli=MILLI if gpus else 0, gpu_count=gpus)
    before, after = FgdScorer(FragTable(classes, ("",))).whole_frag(view, pod, np.arange(len(states)))
    assert view.full_free.tolist() == [sum(1 for g in devices if g == MILLI) for _, devices in states]
    assert view.gpu_left.tolist() == [sum(devices) for _, devices in states]
    for i, (cpu_free, devices) in enumerate(states):
        assert before[i] == node_frag(cpu_free, devices, "", classes)
        left, taken = list(devices), 0
        for d, g in enumerate(devices):  # the lowest-index completely free devices
            if g == MILLI and taken < gpus:
                left[d], taken = 0, taken + 1
        assert after[i] == node_frag(cpu_free - cpu, left, "", classes)


@given(classes_st, nodes_st, st.integers(0, 4000), st.sampled_from([100, 190, 470, 500, 810, 999]))
@settings(max_examples=300, deadline=None)
def test_fractional_frag_and_keys_equal_the_reference(classes: list[TypicalClass],
                                                      nodes: tuple[int, list[tuple[int, list[int]]]],
                                                      cpu: int, milli: int) -> None:
    width, states = nodes
    view = _view(width, states)
    pod = PodShape(cpu_milli=cpu, gpu_milli=milli, gpu_count=1)
    table = FragTable(classes, ("",))
    rows = np.arange(len(states))
    before, after = FgdScorer(table).device_frag(view, pod, rows)
    scores = FgdScorer(table).device_scores(view, pod, rows)
    keys = GpuscaleScorer(table).device_keys(view, pod, rows)
    for i, (cpu_free, devices) in enumerate(states):
        assert before[i] == node_frag(cpu_free, devices, "", classes)
        for d in range(width):
            g = devices[d] if d < len(devices) else 0
            if g < milli:
                assert scores[i, d] == -1
                assert keys[i, d] == np.iinfo(np.int64).min
                continue
            expected = node_frag(cpu_free - cpu, [*devices[:d], g - milli, *devices[d + 1:]], "", classes)
            assert after[i, d] == expected
            assert keys[i, d] >> 40 == scores[i, d]  # gpuscale's keys lead with FGD's score


MODELS = ("G2", "T4", "P100")
model_classes_st = st.lists(st.builds(
    lambda cpu, milli, count, model, weight: TypicalClass(
        cpu_milli=cpu, gpu_milli=milli, gpu_count=count if milli else 0, model_key=model, pods=1, weight=weight),
    st.integers(0, 20_000), st.sampled_from([0, 100, 250, 470, 500, 810, 1000]), st.integers(1, 3),
    st.sampled_from(["", "G2", "T4|G2", "T4"]), st.floats(0.001, 1.0)), min_size=1, max_size=12)


@given(model_classes_st, st.lists(st.tuples(st.integers(0, 24_000), st.sampled_from([0, 100, 190, 500, 530, 810, 1000]),
                                            st.integers(0, len(MODELS) - 1)), min_size=1, max_size=8),
       st.booleans())
@settings(max_examples=300, deadline=None)
def test_one_device_frag_equals_the_reference(classes: list[TypicalClass], states: list[tuple[int, int, int]],
                                              one_model: bool) -> None:
    """`frag_of_one_device` (the shortcut the one-device views take) is F of the node with that one device (a node
    without devices has 0 free there, which is F of no device), on one model or several."""
    models = MODELS[:1] if one_model else MODELS
    table = FragTable(classes, models)
    cpu = np.array([c for c, _, _ in states], dtype=np.int64)
    free = np.array([g for _, g, _ in states], dtype=np.int64)
    model = np.array([m % len(models) for _, _, m in states], dtype=np.int64)
    got = table.frag_of_one_device(cpu, free, model)
    assert got.tolist() == table.frag_of_nodes(cpu, free[:, None], model).tolist()
    for i, (cpu_free, g, m) in enumerate(states):
        assert got[i] == node_frag(cpu_free, [g], models[m % len(models)], classes)


def test_a_typical_class_asks_for_devices_exactly_when_it_asks_for_gpu_milli() -> None:
    """What the one-device shortcut relies on (a class's fit on one device is decided by its milli and count)."""
    for milli, count in ((500, 0), (0, 1)):
        with pytest.raises(ValueError, match="gpu_count"):
            TypicalClass(cpu_milli=0, gpu_milli=milli, gpu_count=count, model_key="", pods=1, weight=1.0)


@given(classes_st, st.lists(st.tuples(st.one_of(st.integers(0, 24_000), st.sampled_from([4000, 8000])),
                                      st.lists(st.sampled_from([0, 100, 190, 500, 530, 810, 1000]), max_size=1)),
                            min_size=1, max_size=8),
       st.integers(1, 80), st.lists(st.integers(0, 7), min_size=80, max_size=80),
       st.integers(0, 4000), st.sampled_from([(0, 0), (100, 1), (500, 1), (810, 1), (1000, 1), (1000, 2)]),
       st.sampled_from([FgdScorer, GpuscaleScorer]), st.sampled_from([("",), ("", "T4")]))
@settings(max_examples=300, deadline=None)
def test_one_device_scores_equal_the_scores_of_a_view(classes: list[TypicalClass], states: list[tuple[int, list[int]]],
                                                      n: int, of_row: list[int], cpu: int, gpu: tuple[int, int],
                                                      scorer_type: type[FgdScorer], models: tuple[str, ...]) -> None:
    """`one_device_scores` (arrays in, no view) gives what `score` gives on a view of nodes of one device at most:
    fractional, whole-GPU and CPU-only pods, devices that cannot take the pod, nodes without a device; past
    `DEDUPE_ABOVE` nodes (many alike), each distinct state scored once on both sides."""
    scorer = scorer_type(FragTable(classes, models))
    nodes = [states[i % len(states)] for i in of_row[:n]]  # up to eight states, repeated: up to 80 nodes
    view = _view(1, nodes)
    pod = PodShape(cpu_milli=cpu, memory_mib=0, gpu_milli=gpu[0], gpu_count=gpu[1])
    expected = scorer.score(view, pod, np.arange(len(nodes), dtype=np.int64), None)  # type: ignore[arg-type]
    got = scorer.one_device_scores(view.cpu_free.copy(), view.gpu_free[:, 0].copy(), view.gpu_count.copy(), pod)
    assert got.dtype == expected.dtype
    assert got.tolist() == expected.tolist()
