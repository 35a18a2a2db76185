"""The real controller's composition: what `gpuscale run` wires together, and the wall-clock loop around `tick()`.

`build_controller(api_client, config, …)` returns a `Controller` holding the same `Autoscaler` the digital twin runs,
with the Kubernetes adapters: `WatchCache` (reader), `KubeWriter`, `KubeEvents`, and a `NodeProvider` (kwok for now).
With `dry_run` the writer, events and the provider's scale-up/delete are replaced by recorders that log what they
would have done; reads (the cache, the provider's node → pool map) stay real. Tests build the controller the same way
and call `autoscaler.tick()` themselves.

This module sits above the adapter layer (it imports `kube` and `providers`), next to `cli`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from gpuscale.config import Config
from gpuscale.engine.plan import UpcomingNode
from gpuscale.kube.cache import WatchCache
from gpuscale.kube.events import KubeEvents
from gpuscale.kube.provreq import RequestCache
from gpuscale.kube.writer import KubeWriter
from gpuscale.loop.ports import ClusterWriter, EventSink, EventType, EvictionOutcome, NodeProvider
from gpuscale.loop.provreq import DryRunRequests, ProvisioningRequests, SkipSyntheticPods
from gpuscale.loop.report import TickReport
from gpuscale.loop.tick import Autoscaler, DecideFn, LoopSettings
from gpuscale.providers.kwok import KwokProvider, KwokSettings

log = logging.getLogger("gpuscale.controller")


class WallClock:
    def now(self) -> float:
        return time.time()


# --- dry run: decide and log, act on nothing


@dataclass
class RecordingWriter:
    """A `ClusterWriter` that records and logs each write instead of making it."""

    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        log.info(json.dumps({"msg": "dry-run: would write", "call": [str(c) for c in call]}))

    def set_deletion_candidate(self, node: str, since_s: float) -> None:
        self._record("set_deletion_candidate", node, since_s)

    def clear_deletion_candidate(self, node: str) -> None:
        self._record("clear_deletion_candidate", node)

    def mark_to_be_deleted(self, node: str, now_s: float) -> None:
        self._record("mark_to_be_deleted", node, now_s)

    def unmark_to_be_deleted(self, node: str) -> None:
        self._record("unmark_to_be_deleted", node)

    def evict(self, pod_key: str) -> EvictionOutcome:
        self._record("evict", pod_key)
        return EvictionOutcome.BLOCKED_BY_PDB  # "not evicted": a dry-run drain never completes


@dataclass
class RecordingEvents:
    events: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        self.events.append((obj_kind, obj_key, str(event_type), reason, message))
        log.info(json.dumps({"msg": "dry-run: would emit event", "object": f"{obj_kind} {obj_key}",
                             "type": str(event_type), "reason": reason, "message": message}))


class RecordingProvider:
    """Wraps a real provider: reads pass through, scale-ups and deletions are recorded and logged only."""

    def __init__(self, inner: NodeProvider) -> None:
        self.inner = inner
        self.calls: list[tuple[Any, ...]] = []
        self._serial = 0

    def increase(self, pool: str, count: int) -> tuple[str, ...]:
        self.calls.append(("increase", pool, count))
        log.info(json.dumps({"msg": "dry-run: would scale up", "pool": pool, "nodes": count}))
        ids = []
        for _ in range(count):
            self._serial += 1
            ids.append(f"dry-run-{pool}-{self._serial}")
        return tuple(ids)

    def delete(self, nodes: Sequence[str]) -> None:
        self.calls.append(("delete", tuple(nodes)))
        log.info(json.dumps({"msg": "dry-run: would delete nodes", "nodes": list(nodes)}))

    def cancel(self, request_ids: Sequence[str]) -> None:
        self.calls.append(("cancel", tuple(request_ids)))

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        return tuple(self.inner.upcoming())

    def node_pools(self) -> Mapping[str, str]:
        return self.inner.node_pools()


# --- composition


@dataclass
class Controller:
    cache: WatchCache
    writer: ClusterWriter
    provider: NodeProvider
    events: EventSink
    autoscaler: Autoscaler
    settings: LoopSettings
    requests: RequestCache | None = None
    """ProvisioningRequests and PodTemplates (None when `provisioning_requests=False`)."""

    def wait_synced(self, timeout_s: float) -> bool:
        """Block until every cache has listed (start-up and tests); False on timeout."""
        return self.cache.wait_synced(timeout_s) and (self.requests is None or self.requests.wait_synced(timeout_s))

    def close(self) -> None:
        self.cache.close()
        if self.requests is not None:
            self.requests.close()


def build_controller(api_client: client.ApiClient, config: Config, *, dry_run: bool = False,
                     kwok: KwokSettings | None = None, settings: LoopSettings | None = None,
                     start_cache: bool = True, decide: DecideFn | None = None,
                     provisioning_requests: bool = True, booking_s: float = 600.0) -> Controller:
    """Wire the adapters around an `Autoscaler`. The cache's threads start here unless `start_cache=False`.

    ProvisioningRequests are handled unless `provisioning_requests` is False (while the CRD is not installed there are
    simply none); their capacity is booked for `booking_s` after Provisioned (docs/kueue.md)."""
    cache = WatchCache(api_client)
    real_provider = KwokProvider(api_client, config.pools, kwok, registered=cache.in_last_snapshot)
    writer: ClusterWriter
    events: EventSink
    provider: NodeProvider
    if dry_run:
        writer, events, provider = RecordingWriter(), RecordingEvents(), RecordingProvider(real_provider)
    else:
        writer, events, provider = KubeWriter(api_client), KubeEvents(api_client), real_provider
    loop_settings = settings or LoopSettings.from_config(config)
    requests = RequestCache(api_client) if provisioning_requests else None
    extension = None if requests is None else ProvisioningRequests(
        DryRunRequests(requests) if dry_run else requests, booking_s)
    autoscaler = Autoscaler(reader=cache, writer=writer, provider=provider,
                            events=SkipSyntheticPods(events) if extension else events, clock=WallClock(),
                            pools=config.pools, policy=config.policy, settings=loop_settings, extension=extension,
                            **({"decide": decide} if decide is not None else {}))
    if start_cache:
        cache.start()
        if requests is not None:
            requests.start()
    return Controller(cache=cache, writer=writer, provider=provider, events=events, autoscaler=autoscaler,
                      settings=loop_settings, requests=requests)


# --- the loop


def report_fields(report: TickReport) -> dict[str, Any]:
    """One tick as a flat JSON-able dict, for the structured log line."""
    fields: dict[str, Any] = {"msg": "tick", "now": round(report.now_s, 3), "synced": report.synced}
    plan = report.plan
    if plan is not None:
        fields |= {"scale_up": [{"pool": s.pool, "nodes": s.nodes, "pods": len(s.pods)} for s in plan.scale_up],
                   "scale_down": [r.node for r in plan.scale_down], "unplaceable": len(plan.unplaceable),
                   "covered": len(plan.covered), "waiting": len(plan.waiting)}
    for name in ("timed_out", "marked_unneeded", "cleared_unneeded", "drains_started", "deleted", "abandoned",
                 "unmarked_orphans"):
        value = getattr(report, name)
        if value:
            fields[name] = list(value)
    if report.scaled_up:
        fields["scaled_up"] = [{"pool": s.pool, "nodes": s.nodes, "ids": list(s.request_ids)}
                               for s in report.scaled_up]
    if report.evictions:
        fields["evictions"] = [{"pod": e.pod, "outcome": str(e.outcome)} for e in report.evictions]
    if report.errors:
        fields["errors"] = [str(e) for e in report.errors]
    return fields


def run_loop(controller: Controller, *, once: bool = False, sync_timeout_s: float = 60.0,
             stop: threading.Event | None = None, emit: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Tick every `scan_interval_s` until `stop` is set. With `once`: wait for the cache to sync, tick once, return
    0 if that tick was synced and error-free, 1 otherwise."""
    stop = stop or threading.Event()
    emit = emit or (lambda fields: log.info(json.dumps(fields, sort_keys=True)))
    if not controller.wait_synced(sync_timeout_s):
        emit({"msg": "cache not synced", "timeout_s": sync_timeout_s, "status": controller.cache.status()})
        if once:
            return 1
    while True:
        started = time.monotonic()
        report = controller.autoscaler.tick()
        emit(report_fields(report))
        if once:
            return 0 if report.ok else 1
        if stop.wait(max(0.0, controller.settings.scan_interval_s - (time.monotonic() - started))):
            return 0
