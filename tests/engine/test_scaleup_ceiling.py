"""Scale-up's ceiling (`_ceiling`: the most any row has free of each column, and of pod slots, never below zero) is
taken on a transposed copy of the free capacity for speed; it must be the plain column maximum with `initial=0` for
any table: empty, one row, many rows, overcommitted rows (negative free capacity), and columns where every row is
negative."""

from __future__ import annotations

from typing import cast

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.scaleup import _ceiling
from gpuscale.engine.whatif.model import WhatIf


class _Rows:
    """The two arrays `_ceiling` reads of a table."""

    def __init__(self, free: np.ndarray, free_pods: np.ndarray) -> None:
        self.free, self.free_pods = free, free_pods


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 9), st.integers(0, 2**32 - 1))
@example(0, 5, 0)  # an empty table: zeros
@example(1, 3, 1)
def test_ceiling_is_the_plain_column_maximum_from_zero(rows: int, columns: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    free = rng.integers(-10**9, 10**12, size=(rows, columns), dtype=np.int64)
    if rows and columns > 1:
        free[:, rng.integers(0, columns)] = -rng.integers(1, 100, size=rows)  # a column negative on every row
    pods = rng.integers(-3, 110, size=rows, dtype=np.int64)
    ceiling, slots = _ceiling(cast(WhatIf, _Rows(free, pods)))
    expected = free.max(axis=0, initial=0)
    assert ceiling.dtype == expected.dtype and ceiling.shape == expected.shape
    assert np.array_equal(ceiling, expected)
    assert slots == int(pods.max(initial=0)) and isinstance(slots, int)
