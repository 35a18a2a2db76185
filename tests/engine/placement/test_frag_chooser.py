"""The twin's per-placement fragmentation machinery equals the plain construction to the bit.

`TypicalTables` (tables for a changing workload, built from columns kept per class) must give what
`FragTable(typical_classes_of(counts))` gives, and `FragChooser.choose` (which reads a fractional pod's device off
the matrix that scored the rows, and asks for ranks only on ties) what scoring, ranking and `pick` give.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import FragChooser, GpuDevices
from gpuscale.engine.placement.frag import ClassKey, FragTable, TypicalTables, typical_classes_of
from gpuscale.engine.placement.shapes import MILLI, PodShape

KEYS: list[ClassKey] = [(cpu, milli, count if milli == MILLI else 1, model)
                        for cpu in (1000, 4000, 12000) for milli in (250, 500, 810, 1000) for count in (1, 2)
                        for model in ("", "T4")]
counts_st = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 60), min_size=1, max_size=20)


def reference_classes(counts: dict[ClassKey, int], pct: int, step: int) -> list[tuple[ClassKey, int, float]]:
    """The artifact's `GetTypicalPods` loop, written out plainly."""
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = float(sum(counts.values()))
    expected = float(pct) * total / 100.0
    taken, cum, shares = 0, 0.0, []
    while cum < expected and taken < len(ranked):
        for _ in range(step):
            if taken == len(ranked):
                break
            cum += float(ranked[taken][1])
            shares.append(float(ranked[taken][1]) / total)
            taken += 1
    if taken < len(ranked):
        shares = [s / (cum / total) for s in shares]
    return [(k, n, w) for (k, n), w in zip(ranked[:taken], shares, strict=True)]


@given(st.dictionaries(st.sampled_from(KEYS), st.integers(1, 60), min_size=1, max_size=20), st.integers(0, 120),
       st.integers(1, 4))
@settings(max_examples=300, deadline=None)
def test_typical_classes_equal_the_artifacts_loop(counts: dict[ClassKey, int], pct: int, step: int) -> None:
    got = [((c.cpu_milli, c.gpu_milli, c.gpu_count, c.model_key), c.pods, c.weight)
           for c in typical_classes_of(counts, pct, step)]
    assert got == reference_classes(counts, pct, step)


def _table_fields(t: FragTable) -> tuple[object, ...]:
    return (t.cpu.tolist(), t.milli.tolist(), t.count.tolist(), t.weight.tolist(), t.gpu_class.tolist(),
            t.access.tolist(), t._class_bits.tolist(), t.weight_sum, t.classes)


@given(st.lists(counts_st, min_size=1, max_size=8), st.lists(st.integers(0, 1000), min_size=6, max_size=6))
@settings(max_examples=150, deadline=None)
def test_tables_of_a_changing_workload_equal_tables_built_afresh(workloads: list[dict[ClassKey, int]],
                                                                   milli: list[int]) -> None:
    models = ("", "T4", "V100")
    tables = TypicalTables(models)
    free = np.array([milli[:3], milli[3:], [MILLI, MILLI, 0]], dtype=np.int64)
    cpu = np.array([500, 8000, 64000], dtype=np.int64)
    model = np.array([0, 1, 2], dtype=np.int64)
    again = [{k: n * 2 for k, n in w.items()} for w in workloads]
    again += [{k: n + 1 for k, n in w.items()} for w in workloads]
    for counts in workloads + again + workloads:  # class lists met before: their tables are reweighed
        got = tables.table(counts)
        live = {k: n for k, n in counts.items() if n > 0}
        if not live:
            assert got is None
            continue
        expected = FragTable(typical_classes_of(live), models)
        assert got is not None
        assert _table_fields(got) == _table_fields(expected)
        assert got.frag_of_nodes(cpu, free, model).tolist() == expected.frag_of_nodes(cpu, free, model).tolist()


@given(st.lists(st.tuples(counts_st, st.booleans()), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_tables_ranked_by_moved_classes_equal_tables_built_afresh(
        steps: list[tuple[dict[ClassKey, int], bool]]) -> None:
    """A caller that names the classes whose counts moved since its last call (`table(counts, moved)`) gets what a
    fresh table gives; calls that name none (every class looked at) may come in between."""
    tables = TypicalTables()
    last: dict[ClassKey, int] = {}
    for counts, named in steps:
        moved = [k for k in {*last, *counts} if last.get(k, 0) != counts.get(k, 0)]
        got = tables.table(counts, moved if named else None)
        last = counts
        live = {k: n for k, n in counts.items() if n > 0}
        if not live:
            assert got is None
            continue
        assert got is not None
        assert _table_fields(got) == _table_fields(FragTable(typical_classes_of(live), ("",)))


def _reference_choice(chooser: FragChooser, shape: PodShape, cpu: np.ndarray, devices: GpuDevices,
                      rows: np.ndarray, rank: np.ndarray) -> tuple[int, tuple[int, ...]]:
    scores = chooser.scores(shape, cpu, devices, rows)
    assert scores is not None
    best = np.flatnonzero(scores == scores.max())
    row = int(rows[best[np.argmin(rank[best])]])
    return row, chooser.pick(shape, cpu, devices, row)


def _chooser(policy: str, counts: dict[ClassKey, int]) -> FragChooser:
    return FragChooser(policy, Counter({PodShape(cpu_milli=k[0], memory_mib=0, gpu_milli=k[1], gpu_count=k[2]): n
                                        for k, n in counts.items() if not k[3]}))


def _rows(nodes: list[tuple[int, list[int]]], width: int, need: tuple[int, int],
          rnd: object) -> tuple[np.ndarray, GpuDevices, PodShape, np.ndarray, np.ndarray]:
    """Free CPU and devices of rows (CPU, free milli per device), the pod shape asked and a random rank of the rows."""
    devices = GpuDevices(np.array([len(d) for _, d in nodes], dtype=np.int64),
                         np.array([d + [0] * (width - len(d)) for _, d in nodes], dtype=np.int64).reshape(-1, width))
    cpu = np.array([c for c, _ in nodes], dtype=np.int64)
    shape = PodShape(cpu_milli=1000, memory_mib=0, gpu_milli=need[0], gpu_count=need[1])
    rank = np.array(rnd.sample(range(len(nodes)), len(nodes)), dtype=np.int64)  # type: ignore[attr-defined]
    return cpu, devices, shape, np.arange(len(nodes), dtype=np.int64), rank


@given(st.sampled_from(["fgd", "gpuscale"]), counts_st,
       st.lists(st.tuples(st.integers(0, 16000), st.lists(st.sampled_from([0, 190, 250, 500, 750, 1000]),
                                                          min_size=0, max_size=4)), min_size=1, max_size=60),
       st.sampled_from([(250, 1), (500, 1), (810, 1), (1000, 1), (1000, 2)]), st.randoms(use_true_random=False),
       st.sampled_from([1, 4]))
@settings(max_examples=300, deadline=None)
def test_choose_equals_scoring_ranking_and_picking(policy: str, counts: dict[ClassKey, int],
                                                   nodes: list[tuple[int, list[int]]], need: tuple[int, int],
                                                   rnd: object, width: int) -> None:
    """On rows of up to four devices or of one (the twin's nodes), one row or many."""
    chooser = _chooser(policy, counts)
    cpu, devices, shape, rows, rank = _rows([(c, d[:width]) for c, d in nodes], width, need, rnd)
    asked: list[int] = []

    def ranks(tied: np.ndarray) -> np.ndarray:
        asked.append(len(tied))
        return rank[tied]

    got = chooser.choose(shape, cpu, devices, rows, ranks)
    if chooser.scorer is None:
        assert got is None
        return
    assert got == _reference_choice(chooser, shape, cpu, devices, rows, rank)
    assert all(n > 1 for n in asked)


@given(st.sampled_from(["fgd", "gpuscale"]), counts_st,
       st.lists(st.tuples(st.sampled_from([2000, 8000]), st.lists(st.sampled_from([0, 250, 500, 1000]), min_size=0,
                                                                  max_size=2)), min_size=1, max_size=3),
       st.lists(st.integers(0, 2), min_size=1, max_size=60), st.sampled_from([(250, 1), (500, 1), (1000, 1),
                                                                              (1000, 2)]),
       st.randoms(use_true_random=False), st.sampled_from([1, 2]))
@settings(max_examples=300, deadline=None)
@example("gpuscale", {KEYS[0]: 3}, [(2000, [500]), (2000, [250])], [0, 1, 0], (250, 1), random.Random(0), 1)
@example("fgd", {KEYS[0]: 3}, [(2000, [1000]), (2000, [])], [0, 1, 1], (1000, 1), random.Random(1), 1)
@example("gpuscale", {KEYS[0]: 3}, [(2000, [1000, 1000]), (2000, [1000])], [0, 1], (1000, 1), random.Random(0), 2)
def test_choices_scores_do_not_decide_are_the_scored_choices(
        policy: str, counts: dict[ClassKey, int], states: list[tuple[int, list[int]]], of_row: list[int],
        need: tuple[int, int], rnd: object, width: int) -> None:
    """`FragChooser.unscored` (asked before a chooser is built) answers on one row or on rows all alike, and then
    as scoring, ranking and picking do; rows repeat a few states, as the twin's empty and equally used nodes do."""
    chooser = _chooser(policy, counts)
    nodes = [(c, d[:width]) for c, d in (states[i % len(states)] for i in of_row)]
    cpu, devices, shape, rows, rank = _rows(nodes, width, need, rnd)
    got = FragChooser.unscored(shape, cpu, devices, rows, lambda tied: rank[tied])
    alike = len(set(map(repr, nodes))) == 1
    if chooser.scorer is None:
        assert chooser.choose(shape, cpu, devices, rows, lambda tied: rank[tied]) is None
        return
    reference = _reference_choice(chooser, shape, cpu, devices, rows, rank)
    if shape.is_fractional and width > 1:
        assert got is None
    else:
        assert (got is not None) == alike
    if got is not None:
        assert got == reference
    assert chooser.choose(shape, cpu, devices, rows, lambda tied: rank[tied]) == reference
    assert chooser.choose_by_scores(shape, cpu, devices, rows, lambda tied: rank[tied]) == reference
