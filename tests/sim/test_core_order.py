"""The event queue (a heap plus an in-order run) runs events in exactly the order one heap of (time, priority,
sequence) gives: ties broken by priority and then by the order they were scheduled, cancelled ones skipped, runs
split at any `until`. Compared with a plain-heap reference on random programs whose events schedule and cancel more."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.core import Priority, Simulation

TIMES = (0.0, 0.0, 5.0, 10.0, 10.0, 12.5, 30.0, 100.0)


class HeapOnly:
    """The reference: the queue as one heap of [time, priority, seq, action] lists."""

    def __init__(self) -> None:
        self.now, self._heap, self._seq, self.events_run = 0.0, [], 0, 0

    def at(self, time: float, priority: Priority, action: Callable[[], None]) -> list[Any]:
        self._seq += 1
        entry = [max(time, self.now), int(priority), self._seq, action]
        heapq.heappush(self._heap, entry)
        return entry

    def run(self, until_s: float) -> None:
        while self._heap and self._heap[0][0] <= until_s:
            time, _, _, action = heapq.heappop(self._heap)
            if action is not None:
                self.now = time
                self.events_run += 1
                action()
        self.now = max(self.now, until_s)


def play(sim: Any, upfront: list[tuple[float, int]], table: list[list[tuple[int, float, int, int]]],
         stops: list[float]) -> tuple[list[tuple[int, float]], int]:
    """Schedule `upfront` (times in order, as a scenario schedules its jobs) and run to each stop; event n, when it
    runs, schedules the children `table[n % len(table)]` says (absolute or relative time, priority) and cancels the
    handle it names. Returns (label, time) in run order and the events run."""
    log: list[tuple[int, float]] = []
    handles: list[Any] = []
    count = [0]

    def cancel(handle: Any) -> None:
        if isinstance(handle, list):
            handle[3] = None
        else:
            handle.cancel()

    def schedule(time: float, priority: int) -> None:
        label = count[0]
        count[0] += 1
        if label < 400:
            handles.append(sim.at(time, Priority(priority), lambda: fire(label)))

    def fire(label: int) -> None:
        log.append((label, sim.now))
        for mode, t, priority, victim in table[label % len(table)]:
            schedule(sim.now + t if mode else t, priority)
            if victim < len(handles) and victim % 3 == 0:
                cancel(handles[victim])

    for t, priority in upfront:
        schedule(t, priority)
    for stop in stops:
        sim.run(stop)
        schedule(sim.now + 1.0, 4)
    return log, sim.events_run


child = st.tuples(st.booleans(), st.sampled_from(TIMES), st.integers(0, 4), st.integers(0, 60))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TIMES), st.integers(0, 4)), max_size=30).map(sorted),
       st.lists(st.lists(child, max_size=3), min_size=1, max_size=8),
       st.lists(st.sampled_from(TIMES), min_size=1, max_size=3).map(sorted))
def test_events_run_in_the_order_of_one_heap(upfront: list[tuple[float, int]],
                                              table: list[list[tuple[int, float, int, int]]],
                                              stops: list[float]) -> None:
    stops = [*stops, 1000.0]
    assert play(Simulation(), upfront, table, stops) == play(HeapOnly(), upfront, table, stops)
