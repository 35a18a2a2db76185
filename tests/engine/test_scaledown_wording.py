"""Scale-down's per-decision shortcuts written out the plain way: the waiting reason's message, worded from the
candidate's clock-free parts (`_Candidate.wait_text`) plus the seconds waited, reads as the rule says for ready and
unready nodes and any policy times and clocks; and the usable nodes' totals (`_column_sums`, a transposed gather) equal
NumPy's row-selected sum along axis 0, empty selections and wrapping int64 sums included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaledown import _column_sums
from tests.engine.test_scaledown import NOW, busy, node, run

_SECONDS = st.floats(min_value=0.0, max_value=5_000.0, allow_nan=False).map(lambda s: round(s, 3))


@settings(max_examples=150, deadline=None)
@given(ready=st.booleans(), waited=_SECONDS, unneeded=_SECONDS, unready=_SECONDS, future=st.booleans())
def test_wait_message_reads_as_the_rule(ready: bool, waited: float, unneeded: float, unready: float,
                                        future: bool) -> None:
    policy = Policy(scale_down_unneeded_time_s=unneeded, scale_down_unready_time_s=unready)
    since = NOW + waited if future else NOW - waited  # a clock ahead of now counts as 0 s waited
    result = run([node("a", ready=ready), node("b")], [busy("z", "b")], policy=policy, unneeded_since={"a": since})
    required = unneeded if ready else unready
    shown = max(NOW - since, 0.0)
    if shown >= required:
        assert [r.node for r in result.removals] == ["a"]
        return
    (verdict,) = result.unneeded
    reason = verdict.reasons[0]
    what = "unneeded" if ready else "unready and unneeded"
    assert reason.code is ReasonCode.UNNEEDED_TOO_SHORT
    assert reason.message == f"node a {what} for {shown:g}s of {required:g}s"
    assert reason.numbers == {"unneeded_s": shown, "required_s": required, "remaining_s": required - shown}


def test_wait_message_examples() -> None:
    ready = run([node("a"), node("b")], [busy("z", "b")], unneeded_since={"a": NOW - 12.5})
    assert ready.unneeded[0].reasons[0].message == "node a unneeded for 12.5s of 600s"
    sick = run([node("a", ready=False), node("b")], [busy("z", "b")], unneeded_since={"a": NOW - 700})
    assert sick.unneeded[0].reasons[0].message == "node a unready and unneeded for 700s of 1200s"


@settings(max_examples=200, deadline=None)
@given(data=st.data(), rows=st.integers(0, 40), columns=st.integers(1, 6))
def test_column_sums_equal_numpy_axis_0(data: st.DataObject, rows: int, columns: int) -> None:
    array = data.draw(hnp.arrays(np.int64, (rows, columns)))
    chosen = data.draw(hnp.arrays(np.bool_, rows))
    expected = array[chosen].sum(axis=0)
    got = _column_sums(array, chosen)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tolist() == expected.tolist()
