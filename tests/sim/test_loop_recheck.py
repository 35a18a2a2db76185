"""The twin's quiet-tick skip (`sim/run.py`, `_Loop._needed`) decides again when a time-limited protection that kept
a node ends (`Plan.recheck_at_s`), even if nothing else in the cluster changed."""

from __future__ import annotations

from types import SimpleNamespace

from gpuscale.engine.state import EngineState
from gpuscale.sim import run


def _quiet_loop(now: float, recheck_at_s: float | None) -> run._Loop:
    loop = object.__new__(run._Loop)
    loop.sim = SimpleNamespace(now=now)  # type: ignore[assignment]
    loop.cluster = SimpleNamespace(version=7, pending=False, nodes={})  # type: ignore[assignment]
    loop.cloud = SimpleNamespace(upcoming=lambda: ())  # type: ignore[assignment]
    loop.autoscaler = SimpleNamespace(state=EngineState(), drains=())  # type: ignore[assignment]
    loop.last_version, loop.last_tick, loop.recheck_at_s = 7, now - 30, recheck_at_s
    return loop


def test_a_quiet_cluster_skips_until_a_protection_ends_then_decides() -> None:
    assert not _quiet_loop(1000.0, None)._needed()
    assert not _quiet_loop(1000.0, 1010.0)._needed()
    assert _quiet_loop(1010.0, 1010.0)._needed()
