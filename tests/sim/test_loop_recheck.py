"""The twin's quiet-tick skip (`sim/run.py`, `_Loop._needed`) decides again when the time the last tick said it next
matters has come (`TickReport.next_at_s`: a protection, backoff, deadline or recheck ends), even if nothing else in
the cluster changed — and reads nothing else of the engine to know it."""

from __future__ import annotations

from types import SimpleNamespace

from gpuscale.sim import run


def _quiet_loop(now: float, next_at_s: float | None, drains: int = 0) -> run._Loop:
    loop = object.__new__(run._Loop)
    loop.sim = SimpleNamespace(now=now)  # type: ignore[assignment]
    loop.cluster = SimpleNamespace(version=7)  # type: ignore[assignment]
    loop.autoscaler = SimpleNamespace(drains=range(drains))  # type: ignore[assignment]
    loop.last_version, loop.last_tick, loop.next_at_s = 7, now - 30, next_at_s
    return loop


def test_a_quiet_cluster_skips_until_the_time_it_next_matters_then_decides() -> None:
    assert not _quiet_loop(1000.0, None)._needed()
    assert not _quiet_loop(1000.0, 1010.0)._needed()
    assert _quiet_loop(1010.0, 1010.0)._needed()
    assert _quiet_loop(1020.0, 1010.0)._needed()


def test_a_change_a_drain_or_the_heartbeat_decides_whatever_the_time() -> None:
    changed = _quiet_loop(1000.0, None)
    changed.last_version = 6
    assert changed._needed()
    assert _quiet_loop(1000.0, None, drains=1)._needed()
    stale = _quiet_loop(1000.0, None)
    stale.last_tick = 1000.0 - run.HEARTBEAT_S
    assert stale._needed()
