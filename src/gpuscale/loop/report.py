"""What one tick did: the plan it acted on, each action's result, and every failure as data (what, on what, why).

A tick never raises for trouble outside gpuscale (provider, API server): it reports it here and carries on. Callers
(the twin's metrics, the controller's status ConfigMap and logs) read the report; nothing here has side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuscale.engine.plan import Plan
from gpuscale.loop.ports import EvictionOutcome


class Action(StrEnum):
    OBSERVE = "observe"
    CANCEL_REQUEST = "cancel-request"
    DELETE_NODE = "delete-node"
    SCALE_UP = "scale-up"
    SET_DELETION_CANDIDATE = "set-deletion-candidate"
    CLEAR_DELETION_CANDIDATE = "clear-deletion-candidate"
    MARK_TO_BE_DELETED = "mark-to-be-deleted"
    UNMARK_TO_BE_DELETED = "unmark-to-be-deleted"
    EVICT = "evict"
    EMIT_EVENT = "emit-event"
    NOMINATE = "nominate"
    CLEAR_NOMINATION = "clear-nomination"
    UPDATE_PROVISIONING_REQUEST = "update-provisioning-request"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionError:
    """One action that failed: `target` is the pool, node, pod or request id it was for."""

    action: Action
    target: str
    error: str
    """The exception's type name, or the failure kind a port reported (`capacity-unavailable`, `Failed`, …)."""
    message: str

    def __str__(self) -> str:
        return f"{self.action} {self.target}: {self.error}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUpDone:
    pool: str
    nodes: int
    request_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Eviction:
    pod: str
    node: str
    outcome: EvictionOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class TickReport:
    now_s: float
    synced: bool
    """False when the view could not be fully read: nothing was decided or done this tick."""
    plan: Plan | None = None
    scaled_up: tuple[ScaleUpDone, ...] = ()
    timed_out: tuple[str, ...] = ()
    """Nodes deleted and requests cancelled because they missed their deadline."""
    marked_unneeded: tuple[str, ...] = ()
    cleared_unneeded: tuple[str, ...] = ()
    drains_started: tuple[str, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    deleted: tuple[str, ...] = ()
    """Nodes handed to the provider for deletion by scale-down (empty, or drained)."""
    abandoned: tuple[str, ...] = ()
    """Scale-downs given up (drain past the graceful-termination bound, or provider refused): node unmarked, kept."""
    unmarked_orphans: tuple[str, ...] = ()
    """`ToBeDeleted` taints left by an earlier process (first tick only), removed."""
    nominated: tuple[tuple[str, str], ...] = ()
    """(pod, node): `status.nominatedNodeName` written this tick (`Plan.nominate`)."""
    errors: tuple[ActionError, ...] = ()
    next_at_s: float | None = None
    """When the next tick next matters with no change to the cluster (Unix s): the plan's `next_at_s`, or `now_s`
    when this tick acted or changed the engine state after the plan (the next decision reads that), or could not
    read the cluster. None: only a change of the cluster can make the next tick act differently."""

    @property
    def ok(self) -> bool:
        return self.synced and not self.errors

    @property
    def wake_at_s(self) -> float | None:
        """When a runner that decides on events should wake for this tick's sake if nothing else happens: the plan's
        time (a batch window closes, a backoff or delay ends) still ahead — also after a tick that acted, whose
        `next_at_s` is now (the runner's next tick reads what it did, but must not lose the plan's time)."""
        for at in (self.next_at_s, self.plan.next_at_s if self.plan is not None else None):
            if at is not None and at > self.now_s:
                return at
        return None
