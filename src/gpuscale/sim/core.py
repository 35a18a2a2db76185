"""The discrete-event core: a virtual clock and an event queue ordered by (time, priority, sequence).

Ties in time break by priority (lower first), then by the order events were scheduled, so a run is reproducible to the
byte. Cancelling is lazy: a cancelled event stays in the heap and is skipped when it comes up (O(1) cancel).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable
from enum import IntEnum
from types import MemberDescriptorType
from typing import Any, TypeVar

_T = TypeVar("_T")
_COPIERS: dict[type, tuple[Callable[[Any], Any], frozenset[str]] | None] = {}
_SET = object.__setattr__


def _copier(cls: type) -> tuple[Callable[[Any], Any], frozenset[str]] | None:
    """A function copying every field of a `cls` object into a new one without `__init__` (one line per field, no
    loop or `getattr`), with the field names; None for classes `replaced` leaves to `dataclasses.replace`."""
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or not all(f.init and f.name.isidentifier() for f in fields):
        return None
    scope: dict[str, Any] = {"new_": object.__new__, "cls": cls, "set_": _SET}
    lines = ["def copy(obj):", "    new = new_(cls)"]
    for i, f in enumerate(fields):
        slot = cls.__dict__.get(f.name)
        if isinstance(slot, MemberDescriptorType):  # a slot: its descriptor sets it with the least work
            scope[f"slot{i}"] = slot.__set__
            lines.append(f"    slot{i}(new, obj.{f.name})")
        else:
            lines.append(f"    set_(new, {f.name!r}, obj.{f.name})")
    lines.append("    return new")
    exec("\n".join(lines), scope)  # the source is built from the class's own field names only
    return scope["copy"], frozenset(f.name for f in fields)


def replaced(obj: _T, **changes: Any) -> _T:
    """`dataclasses.replace` for the frozen model objects the twin updates per event (pods bound, marked, started;
    nodes tainted): the same object, built by copying the fields instead of through `__init__`, at a third of the
    cost. Classes with a `__post_init__` or fields outside `__init__` go through `dataclasses.replace`."""
    cls = type(obj)
    try:
        known = _COPIERS[cls]
    except KeyError:
        known = _COPIERS[cls] = _copier(cls)
    if known is None or not known[1].issuperset(changes):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new: _T = known[0](obj)
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


class Handle(list[Any]):
    """A queue entry, `[time, priority, seq, action]` (the action is None once cancelled), returned by `at`/`after`:
    `cancel()` stops the event from running. The heap compares entries as lists, in C (`seq` is unique, so a
    comparison never reaches the action); the entry being its own handle spares an object per event."""

    __slots__ = ()

    def cancel(self) -> None:
        self[3] = None

    @property
    def time(self) -> float:
        t: float = self[0]
        return t


class Simulation:
    """The event queue is two sorted stores: a heap, and a run of entries each scheduled after (in queue order) the
    last one in it, which a deque keeps sorted by appending. The next event is the smaller of their heads, so the
    order is the one heap alone would give; the run takes what comes in order — a scenario's thousands of job
    submissions, scheduled up front by submission time — and keeps the heap small for what comes out of order."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now = start_s
        self._heap: list[Handle] = []
        self._run: deque[Handle] = deque()
        self._seq = 0
        self.events_run = 0

    def at(self, time: float, priority: Priority, action: Callable[[], None]) -> Handle:
        if time < self.now:
            time = self.now
        self._seq += 1
        entry = Handle((time, int(priority), self._seq, action))
        run = self._run
        if not run or entry > run[-1]:
            run.append(entry)
        else:
            heapq.heappush(self._heap, entry)
        return entry

    def after(self, delay_s: float, priority: Priority, action: Callable[[], None]) -> Handle:
        return self.at(self.now + max(delay_s, 0.0), priority, action)

    def run(self, until_s: float) -> None:
        """Run every event with time ≤ `until_s`, in order; the clock ends at `until_s`."""
        heap, run = self._heap, self._run
        pop, popleft = heapq.heappop, run.popleft
        while True:
            if run and (not heap or run[0] < heap[0]):
                if run[0][0] > until_s:
                    break
                time, _, _, action = popleft()
            elif heap and heap[0][0] <= until_s:
                time, _, _, action = pop(heap)
            else:
                break
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
