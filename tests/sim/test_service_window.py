"""A service's scale-down stabilisation (`WindowMax`): the highest recommendation within the window, kept as the
entries that can still be the highest, must equal what the HPA-like sync computed before — drop the history entries
out of the window, append this sync's, take the max — after every push, for any sequence of syncs (equal times, the
window's edge hit exactly, spans of zero) and values (ties, falls, rises)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.workloads import WindowMax

Entry = tuple[float, int]


def history_max(history: list[Entry], now: float, span_s: float, want: int) -> tuple[list[Entry], int]:
    """The straightforward computation: the whole window as a list, and its max."""
    history = [(t, n) for t, n in history if t > now - span_s] + [(now, want)]
    return history, max(n for _, n in history)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([300.0, 0.0, 15.0, 0.1]),
       st.lists(st.tuples(st.sampled_from([0.0, 15.0, 15.0, 15.0, 0.1, 300.0, 285.0, 1e-9]), st.integers(0, 6)),
                max_size=80))
def test_window_max_equals_the_max_over_the_window(span_s: float, syncs: list[tuple[float, int]]) -> None:
    window = WindowMax(span_s)
    history: list[tuple[float, int]] = []
    now = 1_000.0
    for step, want in syncs:
        now += step
        history, expected = history_max(history, now, span_s, want)
        assert window.push(now, want) == expected


def test_a_high_recommendation_holds_for_the_window_then_falls_to_the_next() -> None:
    window = WindowMax(300.0)
    assert [window.push(t, n) for t, n in ((0.0, 5), (15.0, 2), (30.0, 3), (299.0, 1), (300.0, 1), (315.0, 1),
                                           (330.0, 1))] == [5, 5, 5, 5, 3, 3, 1]
