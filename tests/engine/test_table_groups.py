"""The what-if table's node groups and per-capacity devices found in C (`_group_rows`, `_distinct`) equal the plain
Python pass (`_add_to_groups`, `GpuDevices.of`), whichever keys are one object and whichever are equal values."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import GpuDevices
from gpuscale.engine.table import GroupKey, RowMemo, _add_to_groups, _distinct, _group_rows
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources

# (value, copy): rows name a value and whether they hold its shared object or a fresh, equal one
ROWS = st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_groups_found_by_identity_equal_the_python_pass(rows: list[tuple[int, bool]]) -> None:
    shared = [GroupKey((("pool", str(v)),)) for v in range(5)]
    keys = [GroupKey((("pool", str(v)),)) if fresh else shared[v] for v, fresh in rows]
    group_of: list[int] = []
    members: list[list[int]] = []
    _add_to_groups(keys, 0, {}, group_of, members)
    assert _group_rows(keys) == (group_of, members)


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_devices_of_the_distinct_capacities_equal_every_rows(rows: list[tuple[int, bool]]) -> None:
    def capacity(v: int) -> Resources:
        return Resources.of({"cpu": 1000 * (v + 1), NVIDIA_GPU: v, GPU_MILLI: 1000 * v})

    shared = [capacity(v) for v in range(5)]
    caps = [capacity(v) if fresh else shared[v] for v, fresh in rows]
    distinct, at = _distinct(caps)
    assert [distinct[i] for i in at.tolist()] == caps
    assert [id(distinct[i]) for i in at.tolist()] == [id(c) for c in caps]
    expected = GpuDevices.of(caps)
    _, devices, _ = RowMemo()._capacity_of(caps)
    assert devices.count.tolist() == expected.count.tolist()
    assert devices.free.tolist() == expected.free.tolist()
    assert devices.free.shape == expected.free.shape
