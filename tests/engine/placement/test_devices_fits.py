"""`GpuDevices.fits` (the twin scheduler's device filter) on rows of one device, where it reads the device's column
instead of reducing over devices, equals the rule written out: one device with the milli free for a single device,
k completely free devices for k GPUs, and rows without devices pass."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import GpuDevices, GpuNeed
from gpuscale.engine.placement.shapes import MILLI


@given(st.integers(1, 3).flatmap(lambda width: st.lists(
           st.lists(st.sampled_from([0, 200, 500, 999, MILLI]), min_size=0, max_size=width), min_size=1, max_size=8)
           .map(lambda rows: (width, rows))),
       st.sampled_from([GpuNeed(200, 1), GpuNeed(500, 1), GpuNeed(MILLI, 1), GpuNeed(MILLI, 2)]))
@settings(max_examples=200, deadline=None)
def test_fits_follows_the_rule(nodes: tuple[int, list[list[int]]], need: GpuNeed) -> None:
    width, rows = nodes
    free = np.zeros((len(rows), width), dtype=np.int64)
    for i, devices in enumerate(rows):
        free[i, :len(devices)] = devices
    count = np.array([len(devices) for devices in rows], dtype=np.int64)
    at = np.arange(len(rows), dtype=np.int64)[::-1].copy()  # any order of rows
    got = GpuDevices(count, free).fits(need, at).tolist()
    expected = []
    for i in at.tolist():
        devices = rows[i]
        if need.count == 1:
            ok = any(g >= need.milli for g in devices)
        else:
            ok = sum(1 for g in devices if g == MILLI) >= need.count
        expected.append(ok or not devices)
    assert got == expected
