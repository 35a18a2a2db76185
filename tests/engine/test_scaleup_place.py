"""Scale-up placement (`place_units`) against the plain rule it shortcuts: every pod, in order, goes where
`WhatIf.feasible` and `WhatIf.choose` put it on the table as it stands, a gang on a fork committed only when
whole. `place_units` asks `feasible` once per class of pods and brings the mask up to date by the rows placed on since
(and sets aside classes larger than any row's free capacity); the placements, leftovers and the final table must be
those of the plain rule for any table (overcommitted rows, per-GPU devices, taints, cordons, a fragmentation-aware
placement policy, new template rows) and any pods (repeated classes interleaved, fractional and whole GPUs, gangs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.scaleup import Unit, place_units
from gpuscale.engine.whatif.model import BoolArray, WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodGroupRef, PodPhase
from gpuscale.model.resources import GPU_MILLI
from tests.builders import make_node, make_pod, taint, toleration

GPU_TAINT = taint("nvidia.com/gpu", "present")
GPU_TOL = toleration("nvidia.com/gpu", "Exists")

NODE_SHAPES = (
    {"cpu": "4", "memory": "16Gi", "pods": 4},
    {"cpu": "16", "memory": "64Gi", "pods": 6, "gpus": 2, "extra": {GPU_MILLI: 2000}, "taints": (GPU_TAINT,)},
    {"cpu": "8", "memory": "32Gi", "pods": 3, "gpus": 1, "extra": {GPU_MILLI: 1000}},
    {"cpu": "32", "memory": "128Gi", "pods": 8, "gpus": 4, "labels": {"accel": "a100"}},
    {"cpu": "2", "memory": "8Gi", "pods": 2, "unschedulable": True},
)
POD_SHAPES = (
    {"cpu": "1", "memory": "1Gi"},
    {"cpu": "3", "memory": "2Gi"},
    {"cpu": "500m", "memory": "20Gi"},
    {"cpu": "1", "memory": "1Gi", "extra": {GPU_MILLI: 300}, "tolerations": (GPU_TOL,)},
    {"cpu": "1", "memory": "1Gi", "extra": {GPU_MILLI: 700}, "tolerations": (GPU_TOL,)},
    {"cpu": "2", "memory": "4Gi", "gpus": 1, "tolerations": (GPU_TOL,)},
    {"cpu": "2", "memory": "4Gi", "gpus": 2, "tolerations": (GPU_TOL,)},
    {"cpu": "1", "memory": "1Gi", "gpus": 1, "node_selector": {"accel": "a100"}},
    {"cpu": "40", "memory": "1Gi"},  # more than any row has
    {"cpu": "1", "memory": "1Gi", "unsupported": ("volumes",)},
    {"cpu": "1", "memory": "1Gi", "extra": {"example.com/fpga": 1}},  # a resource no node offers
    {"cpu": 0, "memory": "2Gi"},  # fits a row whose CPU is overcommitted
    {"cpu": 0, "memory": 0, "extra": {GPU_MILLI: 500}, "tolerations": (GPU_TOL,)},
)


def pod(name: str, shape: int, node: str | None = None, group: PodGroupRef | None = None) -> Pod:
    p = make_pod(name, node=node, phase=PodPhase.RUNNING if node else PodPhase.PENDING,
                 **POD_SHAPES[shape % len(POD_SHAPES)])  # type: ignore[arg-type]
    return replace(p, group=group, unschedulable=node is None)


def node(name: str, shape: int) -> Node:
    return make_node(name, **NODE_SHAPES[shape % len(NODE_SHAPES)])  # type: ignore[arg-type]


def plain(table: WhatIf, units: Sequence[Unit], single_rows: BoolArray | None,
          aware: bool) -> tuple[WhatIf, list[Unit], dict[str, int], list[Unit]]:
    """The rule `place_units` must follow, pod by pod (a gang alone, through `place_units` itself: nothing is kept
    across units there)."""
    placed: list[Unit] = []
    leftover: list[Unit] = []
    rows: dict[str, int] = {}
    for unit in units:
        if unit.group is not None:
            alone = place_units(table, [unit], single_rows=single_rows, aware=aware)
            table = alone.table
            rows.update(alone.rows)
            placed += alone.placed
            leftover += alone.leftover
            continue
        p = unit.pods[0]
        mask = table.feasible(p)
        if single_rows is not None:
            mask &= single_rows
        if not mask.any():
            leftover.append(unit)
            continue
        row, gpus = table.choose(p, mask, aware=aware)
        table.place(row, p, gpus)
        rows[p.key] = row
        placed.append(unit)
    return table, placed, rows, leftover


nodes_st = st.lists(st.tuples(st.integers(0, 9), st.lists(st.integers(0, 20), max_size=5)), min_size=1, max_size=10)
units_st = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(nodes_st, units_st, st.sampled_from([None, "fgd", "gpuscale"]), st.booleans(), st.integers(0, 3),
       st.integers(0, 2**16))
# Pods of two classes interleaved on one row: each class's kept mask must see the other's placements.
@example([(0, [])], [(0, 0), (1, 0), (0, 0), (1, 0), (0, 0), (1, 0)], None, False, 0, 0)
# A row whose CPU is overcommitted still takes pods that ask no CPU, the second one too.
@example([(3, [8])], [(11, 0), (11, 0)], None, False, 0, 0)
# A fraction on one device, then two whole-GPU pods: the second finds the column's GPU free but no whole device.
@example([(1, [])], [(3, 0), (5, 0), (5, 0)], None, False, 0, 0)
# A gang takes the last pod slots of the row a class of single pods went to: the next pod of the class goes nowhere.
@example([(2, [])], [(1, 0), (1, 2), (1, 0)], None, False, 0, 0)
# A class's second pod finds a row another class left with exactly what it asks (kept), and a row with no pod slot.
@example([(0, []), (0, [])], [(1, 0), (0, 0), (0, 0), (1, 0)], None, False, 0, 0)
@example([(2, [])], [(1, 0), (0, 0), (0, 0), (1, 0)], None, False, 0, 0)
def test_place_units_places_each_pod_where_a_fresh_feasibility_pass_would(
        node_specs: list[tuple[int, list[int]]], unit_specs: list[tuple[int, int]], placement: str | None,
        aware: bool, templates: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = [node(f"n{i}", shape) for i, (shape, _) in enumerate(node_specs)]
    # Bound pods, some more than the node holds (an overcommitted row has negative free capacity).
    bound = [pod(f"b{i}-{k}", shape, node=f"n{i}") for i, (_, shapes) in enumerate(node_specs)
             for k, shape in enumerate(shapes)]
    units: list[Unit] = []
    for k, (shape, size) in enumerate(unit_specs):
        if size < 2:
            units.append(Unit((pod(f"p{k}", shape),)))
        else:  # a gang of `size` pods of two neighbouring shapes
            ref = PodGroupRef(key=f"default/g{k}", source="kueue", min_member=size)
            units.append(Unit(tuple(pod(f"g{k}-{m}", shape + m % 2, group=ref) for m in range(size)), ref.key))
    pending = [p for u in units for p in u.pods]
    extra = {r for p in pending for r in p.requests.names()}

    def build() -> tuple[WhatIf, BoolArray | None]:
        table = whatif_of(nodes, [n.allocatable for n in nodes], bound, extra, placement=placement,
                                workload=pending)
        if not templates:
            return table, None
        start = len(table)
        new = [node(f"t{k}", int(rng_shapes[k])) for k in range(templates)]
        table = table.extend(new, [n.allocatable for n in new])
        rows = np.zeros(len(table), dtype=bool)
        rows[start:] = True
        return table, rows

    rng_shapes = rng.integers(0, len(NODE_SHAPES), size=templates)
    table, single_rows = build()
    fresh, fresh_rows = build()
    result = place_units(table, units, single_rows=single_rows, aware=aware)
    expected, placed, rows, leftover = plain(fresh, units, fresh_rows, aware)
    assert [u.key for u in result.placed] == [u.key for u in placed]
    assert [u.key for u in result.leftover] == [u.key for u in leftover]
    assert result.rows == rows
    assert np.array_equal(result.table.free, expected.free)
    assert np.array_equal(result.table.free_pods, expected.free_pods)
    assert (result.table.devices is None) == (expected.devices is None)
    if expected.devices is not None:
        assert result.table.devices is not None
        assert np.array_equal(result.table.devices.free, expected.devices.free)
