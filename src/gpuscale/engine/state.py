"""What one decision hands to the next: pool backoff, the times of the last scale events, the nodes recently found
unremovable and the work lost by moving checkpointed jobs within the last hour.

Everything here is small and rebuilt cheaply after a restart: backoff and the unremovable nodes restart empty (as in
CA), and the clocks that matter across restarts — how long a node has been unneeded, when a node was requested — are
read from the cluster (the `DeletionCandidateOfClusterAutoscaler` taint's value, node creation times), not from this
state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpuscale.engine.checkpoint import WINDOW_S, LostWork
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import Reason


class FailureKind(StrEnum):
    STOCKOUT = "capacity-unavailable"
    QUOTA = "quota-exceeded"
    PROVISION_TIMEOUT = "provision-timeout"
    GPU_INIT_TIMEOUT = "gpu-init-timeout"
    OTHER = "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolBackoff:
    failures: int
    until_s: float
    last_failure_s: float
    kind: FailureKind
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unremovable:
    """A node whose removal simulation failed (a pod that may not be evicted, or no place for its pods): scale-down
    does not look at it again before `until_s` (CA's `--unremovable-node-recheck-timeout`, `RecentlyUnremovable`)."""

    failed_s: float
    until_s: float
    reason: Reason
    """Why the simulation failed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineState:
    backoff: Mapping[str, PoolBackoff] = field(default_factory=dict)
    last_scale_up_s: float | None = None
    last_scale_up_by_pool: Mapping[str, float] = field(default_factory=dict)
    last_scale_down_s: float | None = None
    last_scale_down_failure_s: float | None = None
    unremovable: Mapping[str, Unremovable] = field(default_factory=dict)
    """Node → its last failed removal simulation, while the recheck timeout runs (nodes still in the cluster only)."""
    lost_work: tuple[LostWork, ...] = ()
    """The work lost by moving checkpointed GPU jobs within the last hour, oldest first: what each pool's lost-work
    budget has spent (engine/checkpoint.py). Restarts empty, like backoff."""

    def in_backoff(self, pool: str, now: float) -> PoolBackoff | None:
        entry = self.backoff.get(pool)
        return entry if entry is not None and now < entry.until_s else None


def record_failure(state: EngineState, pool: str, kind: FailureKind, now: float, policy: Policy,
                   message: str = "") -> EngineState:
    """Back the pool off: `backoff_initial_s` doubling per consecutive failure up to `backoff_max_s`; a pool quiet for
    `backoff_reset_s` since its last failure starts again from the initial duration (CA's exponential backoff)."""
    previous = state.backoff.get(pool)
    failures = 1
    if previous is not None and now - previous.last_failure_s < policy.backoff_reset_s:
        failures = previous.failures + 1
    duration = min(policy.backoff_initial_s * 2 ** (failures - 1), policy.backoff_max_s)
    entry = PoolBackoff(failures=failures, until_s=now + duration, last_failure_s=now, kind=kind, message=message)
    return replace(state, backoff={**state.backoff, pool: entry})


def record_scale_up(state: EngineState, now: float, pool: str | None = None) -> EngineState:
    by_pool = {**state.last_scale_up_by_pool, pool: now} if pool is not None else state.last_scale_up_by_pool
    return replace(state, last_scale_up_s=now, last_scale_up_by_pool=by_pool)


def record_scale_down(state: EngineState, now: float, failed: bool = False) -> EngineState:
    if failed:
        return replace(state, last_scale_down_failure_s=now)
    return replace(state, last_scale_down_s=now)


def charge_lost_work(state: EngineState, entries: Sequence[LostWork], now: float) -> EngineState:
    """The state with this decision's lost-work `entries` added and those that left the budget's hour dropped; the
    very state when neither happens (so an idle decision does not count as a change)."""
    kept = state.lost_work
    if kept and kept[0].at_s <= now - WINDOW_S:
        kept = tuple(e for e in kept if e.at_s > now - WINDOW_S)
    if not entries and kept is state.lost_work:
        return state
    return replace(state, lost_work=(*kept, *entries))
