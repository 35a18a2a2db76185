"""ProvisioningRequests in the control loop: a tick extension around `decide` (the decisions are in
`engine/provreq.py`; this module only sequences them and talks to ports).

`read` runs with the snapshot, inside the tick's synced gate: a source that is not synced raises `NotSynced`, so the
tick acts on nothing. `observe` then books capacity, answers check-capacity requests and adds the synthetic gangs.
`act` runs after the tick's actions and writes the conditions, knowing which scale-ups the provider refused.
`SkipSyntheticPods` keeps pod events for synthetic pods (which exist only in the snapshot) away from the API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from gpuscale.engine.plan import Snapshot
from gpuscale.engine.provreq import (
    DEFAULT_BOOKING_S,
    Condition,
    Outcome,
    Prepared,
    ProvisioningRequest,
    conditions_after,
    is_synthetic,
    prepare,
)
from gpuscale.loop.ports import EventSink, EventType
from gpuscale.loop.report import Action, ActionError, TickReport
from gpuscale.model.pool import NodePool


class RequestSource(Protocol):
    def requests(self) -> tuple[ProvisioningRequest, ...]:
        """Every ProvisioningRequest with its pod templates resolved. Raises `NotSynced` on a partial view."""
        ...

    def write_conditions(self, request: str, conditions: Sequence[Condition], now_s: float) -> None:
        """Set these conditions in the request's status (`namespace/name`), keeping the others."""
        ...


class ProvisioningRequests:
    """The tick extension: `read()` and `observe(snapshot, pools, now)` before the decision, `act(report, now)`
    after."""

    def __init__(self, source: RequestSource, booking_s: float = DEFAULT_BOOKING_S) -> None:
        self.source = source
        self.booking_s = booking_s
        self._requests: tuple[ProvisioningRequest, ...] = ()
        self._prepared: Prepared | None = None

    def read(self) -> None:
        self._requests = self.source.requests()
        self._prepared = None

    def observe(self, snapshot: Snapshot, pools: Mapping[str, NodePool], now: float) -> Snapshot:
        self._prepared = prepare(snapshot.cluster, self._requests, pools, snapshot.node_pools, now, self.booking_s)
        return replace(snapshot, cluster=self._prepared.cluster)

    def act(self, report: TickReport, now: float) -> list[ActionError]:
        if self._prepared is None or report.plan is None:
            return []
        failed = {e.target: f"{e.error}: {e.message}" for e in report.errors if e.action is Action.SCALE_UP}
        updates = conditions_after(self._requests, self._prepared, report.plan, Outcome(failed_pools=failed), now,
                                   self.booking_s)
        errors = []
        for update in updates:
            try:
                self.source.write_conditions(update.request, update.conditions, now)
            except Exception as err:  # outermost layer: a failed write is retried next tick
                errors.append(ActionError(action=Action.UPDATE_PROVISIONING_REQUEST, target=update.request,
                                          error=type(err).__name__, message=str(err)))
        self._prepared = None
        return errors


class SkipSyntheticPods:
    """An `EventSink` that drops pod events about synthetic pods: they are not API objects."""

    def __init__(self, inner: EventSink) -> None:
        self.inner = inner

    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        if obj_kind == "Pod" and is_synthetic(obj_key):
            return
        self.inner.emit(obj_kind, obj_key, event_type, reason, message)


class DryRunRequests:
    """A `RequestSource` for `--dry-run`: reads pass through, condition writes are only recorded."""

    def __init__(self, inner: RequestSource) -> None:
        self.inner = inner
        self.writes: list[tuple[str, tuple[Condition, ...]]] = []

    def requests(self) -> tuple[ProvisioningRequest, ...]:
        return self.inner.requests()

    def write_conditions(self, request: str, conditions: Sequence[Condition], now_s: float) -> None:
        self.writes.append((request, tuple(conditions)))
