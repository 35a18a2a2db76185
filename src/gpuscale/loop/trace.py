"""What a tick decided, per pod, for phase tracing: shared by the twin's metrics and the controller's tracer.

Both worlds read the same `TickReport`, so both agree on when a pod's scale-up was decided (its pool's scale-up went
through this tick) and when it was blocked (every pool that could host it is backed off, at a limit, or its gang does
not fit) — the `decision` and `blocked` phases of `lifecycle/phases.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuscale.engine.plan import Plan
from gpuscale.engine.reasons import ReasonCode
from gpuscale.loop.report import TickReport

BLOCKING = frozenset({ReasonCode.POOL_BACKOFF, ReasonCode.LIMIT_REACHED, ReasonCode.GANG_DOES_NOT_FIT})
"""Reasons that make a pod's wait `blocked` rather than `decision`."""


def decided_pods(report: TickReport) -> Iterator[tuple[str, str]]:
    """(pod key, pool) for every pod whose scale-up the provider accepted this tick."""
    if report.plan is None:
        return
    done = {s.pool for s in report.scaled_up}
    for item in report.plan.scale_up:
        if item.pool in done:
            for key in item.pods:
                yield key, item.pool


def blocked_pods(plan: Plan) -> Iterator[tuple[str, str]]:
    """(pod key, reason) for every unplaceable pod held back by backoff, limits or an unfitting gang; the reason is
    the first blocking one, as `Code: message`."""
    for verdict in plan.unplaceable:
        reason = next((r for r in verdict.reasons if r.code in BLOCKING), None)
        if reason is not None:
            yield verdict.pod, f"{reason.code}: {reason.message}"
