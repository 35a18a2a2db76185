"""The discrete-event core: a virtual clock and an event heap ordered by (time, priority, sequence).

Ties in time break by priority (lower first), then by the order events were scheduled, so a run is reproducible to the
byte. Cancelling is lazy: a cancelled event stays in the heap and is skipped when it comes up (O(1) cancel).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable
from enum import IntEnum
from typing import Any, TypeVar

_T = TypeVar("_T")
_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str]] | None] = {}
_SET = object.__setattr__


def replaced(obj: _T, **changes: Any) -> _T:
    """`dataclasses.replace` for the frozen model objects the twin updates per event (pods bound, marked, started;
    nodes tainted): the same object, built by copying the fields instead of through `__init__`, at half the cost.
    Classes with a `__post_init__` or fields outside `__init__` go through `dataclasses.replace`."""
    cls = type(obj)
    if cls not in _FIELDS:
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        _FIELDS[cls] = (None if hasattr(cls, "__post_init__") or not all(f.init for f in fields)
                        else (tuple(f.name for f in fields), frozenset(f.name for f in fields)))
    known = _FIELDS[cls]
    if known is None or not known[1].issuperset(changes):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new = object.__new__(cls)
    for name in known[0]:
        _SET(new, name, getattr(obj, name))
    for name, value in changes.items():
        _SET(new, name, value)
    return new


class Priority(IntEnum):
    """Who goes first among events at the same instant: the cloud changes the world, workloads react, the scheduler
    binds, and the autoscaler observes the result."""

    CLOUD = 0
    WORKLOAD = 1
    SCHEDULER = 2
    AUTOSCALER = 3
    SAMPLE = 4


# A heap entry is a plain list [time, priority, seq, action] (the action is None once cancelled): the heap compares
# lists in C, and `seq` is unique, so a comparison never reaches the action.


class Handle:
    """Returned by `at`/`after`; `cancel()` stops the event from running."""

    __slots__ = ("_entry",)

    def __init__(self, entry: list[Any]) -> None:
        self._entry = entry

    def cancel(self) -> None:
        self._entry[3] = None

    @property
    def time(self) -> float:
        t: float = self._entry[0]
        return t


class Simulation:
    def __init__(self, start_s: float = 0.0) -> None:
        self.now = start_s
        self._heap: list[list[Any]] = []
        self._seq = 0
        self.events_run = 0

    def at(self, time: float, priority: Priority, action: Callable[[], None]) -> Handle:
        if time < self.now:
            time = self.now
        self._seq += 1
        entry = [time, int(priority), self._seq, action]
        heapq.heappush(self._heap, entry)
        return Handle(entry)

    def after(self, delay_s: float, priority: Priority, action: Callable[[], None]) -> Handle:
        return self.at(self.now + max(delay_s, 0.0), priority, action)

    def run(self, until_s: float) -> None:
        """Run every event with time ≤ `until_s`, in order; the clock ends at `until_s`."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= until_s:
            time, _, _, action = pop(heap)
            if action is None:
                continue
            self.now = time
            self.events_run += 1
            action()
        self.now = max(self.now, until_s)


class VirtualClock:
    """The `Clock` port over simulated time."""

    def __init__(self, sim: Simulation, epoch_s: float = 0.0) -> None:
        self._sim = sim
        self._epoch = epoch_s

    def now(self) -> float:
        return self._epoch + self._sim.now
