"""The real controller's composition: what `gpuscale run` wires together, and the wall-clock loop around `tick()`.

`build_controller(api_client, config, …)` returns a `Controller` holding the same `Autoscaler` the digital twin runs,
with the Kubernetes adapters: `WatchCache` (reader), `KubeWriter`, `KubeEvents`, and a `NodeProvider` (kwok for now).
With `dry_run` the writer, events and the provider's scale-up/delete are replaced by recorders that log what they
would have done; reads (the cache, the provider's node → pool map) stay real. Tests build the controller the same way
and call `autoscaler.tick()` themselves.

Around that: optional Lease leader election (`kube/lease.py`; every write port is fenced by it, `kube/fence.py`), the
status ConfigMap (`kube/status.py`) and Prometheus metrics with `/healthz` (`kube/metrics.py`). `Controller.tick()`
is one tick plus that bookkeeping; `run_loop` ticks every `scan_interval` while this replica leads — and, with a batch
window (D39), as soon as the watch sees a pod turn Unschedulable and when the last plan said it next matters.

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
from gpuscale.engine.plan import Plan, UpcomingNode
from gpuscale.kube.cache import WatchCache
from gpuscale.kube.events import KubeEvents
from gpuscale.kube.fence import (
    FencedEvents,
    FencedProvider,
    FencedRequests,
    FencedWriter,
    ObservedReader,
    last_snapshot,
)
from gpuscale.kube.lease import LeaderElector, LeaseSettings, default_identity
from gpuscale.kube.metrics import Metrics, MetricsServer
from gpuscale.kube.provreq import RequestCache
from gpuscale.kube.status import STATUS_NAME, History, StatusPublisher, build_status
from gpuscale.kube.trace_metrics import register_metrics, traces_route
from gpuscale.kube.tracer import Tracer
from gpuscale.kube.writer import KubeWriter
from gpuscale.loop import events as ev
from gpuscale.loop.ports import ClusterWriter, EventSink, EventType, EvictionOutcome, NodeProvider
from gpuscale.loop.provreq import DryRunRequests, ProvisioningRequests, SkipSyntheticPods
from gpuscale.loop.report import TickReport
from gpuscale.loop.tick import Autoscaler, DecideFn, LoopSettings
from gpuscale.model.pool import NodePool
from gpuscale.providers.clusterapi import AutoDiscovery, ClusterAPIProvider
from gpuscale.providers.kwok import KwokProvider, KwokSettings
from gpuscale.report.plan import plan_items

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

    def nominate(self, pod_key: str, node: str) -> bool:
        self._record("nominate", pod_key, node)
        return True

    def clear_nomination(self, pod_key: str, node: str) -> bool:
        self._record("clear_nomination", pod_key, node)
        return True


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

    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        self.calls.append(("increase", pool, count) if zone is None else ("increase", pool, count, zone))
        log.info(json.dumps({"msg": "dry-run: would scale up", "pool": pool, "nodes": count,
                             **({"zone": zone} if zone else {})}))
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """Knobs of the controller process (not of the loop or the engine)."""

    namespace: str = "kube-system"
    """Where the status ConfigMap and (by default) the Lease live: the controller's own namespace."""
    leader_elect: bool = False
    lease: LeaseSettings | None = None
    """Defaults to `LeaseSettings(namespace=namespace)`."""
    identity: str | None = None
    """Lease holder identity; default `<POD_NAME or hostname>_<random>`."""
    status_name: str | None = STATUS_NAME
    """None: no status ConfigMap."""
    status_refresh_s: float = 60.0
    """Rewrite the status at least this often even when nothing but its timestamps changed."""
    pool_refresh_s: float = 60.0
    """Discover the provider's node groups again at most this often (Cluster API; 0: every tick)."""


@dataclass
class Controller:
    """The composed controller. `writer`, `provider` and `events` are the adapters themselves (recorders in a dry
    run); the autoscaler talks to them through the leader fence (`fenced_provider` and friends)."""

    cache: WatchCache
    writer: ClusterWriter
    provider: NodeProvider
    events: EventSink
    autoscaler: Autoscaler
    settings: LoopSettings
    config: Config | None = None
    tracer: Tracer | None = None
    reader: ObservedReader | None = None
    fenced_provider: FencedProvider | None = None
    metrics: Metrics | None = None
    elector: LeaderElector | None = None
    status: StatusPublisher | None = None
    history: History = field(default_factory=History)
    identity: str = ""
    new_autoscaler: Callable[[], Autoscaler] | None = None
    last_report: TickReport | None = None
    started_s: float = field(default_factory=time.monotonic)
    last_tick_s: float | None = None
    """Monotonic time of the last synced tick (for /healthz)."""
    requests: RequestCache | None = None
    """ProvisioningRequests and PodTemplates (None when `provisioning_requests=False`)."""
    discovery: ClusterAPIProvider | None = None
    """The provider whose node groups are the pools, discovered again every `pool_refresh_s` (None: fixed pools)."""
    pool_refresh_s: float = 60.0
    refreshed_s: float | None = None
    """Monotonic time of the last discovery (None: only the one at start-up)."""
    wake: threading.Event = field(default_factory=threading.Event)
    """Set by the watch when a pod turns Unschedulable: the loop decides at once instead of at the next scan (D39)."""
    reacts: bool = False
    """Whether the loop wakes on `wake` and at the plan's `next_at_s` (a batch window is configured, D39)."""

    def wait_synced(self, timeout_s: float) -> bool:
        """Block until every cache has listed (start-up and tests); False on timeout."""
        return self.cache.wait_synced(timeout_s) and (self.requests is None or self.requests.wait_synced(timeout_s))

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector is not None else True

    def tick(self) -> TickReport:
        """One `Autoscaler.tick()`, then metrics, status and history from what it read and did."""
        started = time.monotonic()
        self.refresh_pools(started)
        report = self.autoscaler.tick()
        self.last_report = report
        if self.tracer is not None:
            self.tracer.on_tick(report)
        if report.synced:
            self.last_tick_s = time.monotonic()
        snapshot = last_snapshot(self.reader, self.fenced_provider) if self.reader and self.fenced_provider else None
        snapshot = snapshot if report.synced else None
        self.history.observe(report, snapshot)
        if self.metrics is not None:
            self.metrics.observe_tick(report, snapshot, self.autoscaler.state, time.monotonic() - started)
        if self.status is not None and self.config is not None:
            self.status.publish(build_status(report=report, snapshot=snapshot, pools=self.autoscaler.pools,
                                             limits=self.config.policy.limits, state=self.autoscaler.state,
                                             history=self.history, leader=self.identity or None))
        return report

    def refresh_pools(self, now: float) -> bool:
        """Discover the node groups again when `pool_refresh_s` passed since the last time (at start-up the provider
        did), and run with the pools found from this tick on; True if they changed. A failed discovery keeps the
        pools (`ClusterAPIProvider.refresh`)."""
        if self.discovery is None:
            return False
        last = self.refreshed_s if self.refreshed_s is not None else self.started_s
        if now - last < self.pool_refresh_s:
            return False
        self.refreshed_s = now
        if not self.discovery.refresh():
            return False
        pools = self.discovery.pools
        self.autoscaler.use_pools(pools)
        if self.metrics is not None:
            self.metrics.use_pools(pools)
        log.info(json.dumps({"msg": "pools changed", "pools": [p.name for p in pools]}))
        return True

    def restart_autoscaler(self) -> None:
        """Forget everything in memory (drains, backoff, event limits), as a process restart would: used when this
        replica leads again after losing the lease, since another leader may have acted meanwhile."""
        if self.new_autoscaler is not None:
            self.autoscaler = self.new_autoscaler()

    def health_window_s(self) -> float:
        lease = self.elector.settings.lease_duration_s if self.elector is not None else 0
        return 3 * self.settings.scan_interval_s + lease

    def health(self) -> tuple[bool, str]:
        """/healthz: the leader (or a controller without election) must have ticked on a synced view recently; a
        standby must have reached the API server for the lease recently."""
        now, window = time.monotonic(), self.health_window_s()
        if self.elector is not None and not self.elector.is_leader():
            last = self.elector.last_attempt_s
            if last is None:
                last = self.started_s
            ok = now - last <= window
            return ok, f"{'ok' if ok else 'unhealthy'}: standby, last lease attempt {now - last:.1f}s ago " \
                       f"(limit {window:g}s)"
        last = self.last_tick_s if self.last_tick_s is not None else self.started_s
        ok = now - last <= window
        return ok, f"{'ok' if ok else 'unhealthy'}: leader, last synced tick {now - last:.1f}s ago (limit {window:g}s)"

    def close(self) -> None:
        """Stop acting first (release the lease only after the last write), then the publishers and watches."""
        if self.elector is not None:
            self.elector.stop(release=True)
        if self.status is not None:
            self.status.close()
        self.cache.close()
        if self.tracer is not None:
            self.tracer.flush()
        if self.requests is not None:
            self.requests.close()


def build_controller(api_client: client.ApiClient, config: Config, *, dry_run: bool = False,
                     kwok: KwokSettings | None = None, settings: LoopSettings | None = None,
                     start_cache: bool = True, decide: DecideFn | None = None,
                     options: RunOptions | None = None, tracer: Tracer | None = None,
                     provider_name: str = "kwok", provisioning_requests: bool = True,
                     booking_s: float = 600.0, auto_discovery: Sequence[AutoDiscovery] = ()) -> Controller:
    """Wire the adapters around an `Autoscaler`. The cache's threads start here unless `start_cache=False`; the
    leader elector and the status publisher start here too when `options` asks for them. A `tracer` listens to
    the cache (plus an Event watch outside the synced gate) and to every tick. `provider_name="clusterapi"`: the pools
    are the Cluster API node groups it discovers (providers/clusterapi.py), those `auto_discovery` allows if given.

    ProvisioningRequests are handled unless `provisioning_requests` is False (while the CRD is not installed there are
    simply none); their capacity is booked for `booking_s` after Provisioned (docs/kueue.md)."""
    options = options or RunOptions(status_name=None)
    identity = options.identity or default_identity()
    cache = WatchCache(api_client, watch_events=tracer is not None)
    if tracer is not None:
        cache.add_listener(tracer.on_object)
    wake = threading.Event()
    reacts = config.policy.batch_idle_s > 0
    if reacts:
        cache.add_listener(unschedulable_trigger(wake, nominations=config.policy.nominate_pods))
    real_provider: NodeProvider
    capi: ClusterAPIProvider | None = None
    if provider_name == "clusterapi":
        real_provider = capi = ClusterAPIProvider(api_client, config.pools, registered=cache.in_last_snapshot,
                                                  discovery=auto_discovery)
    else:
        real_provider = KwokProvider(api_client, config.pools, kwok, registered=cache.in_last_snapshot)

    def pools() -> tuple[NodePool, ...]:
        """The pools now: the node groups discovered last (Cluster API), else the configured ones."""
        return capi.pools if capi is not None else config.pools
    inner_writer: ClusterWriter
    inner_events: EventSink
    inner_provider: NodeProvider
    if dry_run:
        inner_writer, inner_events, inner_provider = RecordingWriter(), RecordingEvents(), \
            RecordingProvider(real_provider)
    else:
        inner_writer, inner_events, inner_provider = KubeWriter(api_client), \
            KubeEvents(api_client, instance=identity), real_provider
    elector = None
    if options.leader_elect:
        lease = options.lease or LeaseSettings(namespace=options.namespace)
        elector = LeaderElector(api_client, lease, identity=identity)
    allowed = elector.is_leader if elector is not None else (lambda: True)
    status_key = f"{options.namespace}/{options.status_name or STATUS_NAME}"
    writer = FencedWriter(inner_writer, allowed)
    events = FencedEvents(inner_events, allowed, redirect={(ev.STATUS_KIND, ev.STATUS_KEY): status_key})
    provider = FencedProvider(inner_provider, allowed)
    reader = ObservedReader(cache)
    loop_settings = settings or LoopSettings.from_config(config)
    requests = RequestCache(api_client) if provisioning_requests else None

    def new_autoscaler() -> Autoscaler:
        extension = None if requests is None else ProvisioningRequests(
            DryRunRequests(requests) if dry_run else FencedRequests(requests, allowed), booking_s)
        return Autoscaler(reader=reader, writer=writer, provider=provider,
                          events=SkipSyntheticPods(events) if extension else events, clock=WallClock(),
                          pools=pools(), policy=config.policy, settings=loop_settings, extension=extension,
                          **({"decide": decide} if decide is not None else {}))

    metrics = Metrics(pools())
    if tracer is not None:
        register_metrics(tracer, metrics.registry)
    controller = Controller(cache=cache, writer=inner_writer, provider=inner_provider, events=inner_events,
                            autoscaler=new_autoscaler(), settings=loop_settings, config=config, reader=reader,
                            fenced_provider=provider, metrics=metrics, elector=elector, identity=identity,
                            new_autoscaler=new_autoscaler, tracer=tracer, requests=requests, discovery=capi,
                            pool_refresh_s=options.pool_refresh_s, wake=wake, reacts=reacts)
    metrics.leader.set_function(lambda: 1.0 if controller.is_leader() else 0.0)  # read at scrape time
    if options.status_name is not None and not dry_run:
        controller.status = StatusPublisher(
            api_client, options.namespace, name=options.status_name, may_write=controller.is_leader,
            refresh_s=options.status_refresh_s,
            on_result=lambda ok: metrics.status_writes.labels(result="ok" if ok else "error").inc()).start()
    if start_cache:
        cache.start()
        if requests is not None:
            requests.start()
    if elector is not None:
        elector.start()
    return controller


def unschedulable_trigger(wake: threading.Event, *, nominations: bool = False
                          ) -> Callable[[str, str, Mapping[str, Any], bool], None]:
    """A cache listener that sets `wake` when a pod turns `PodScheduled=False/Unschedulable` (kube-scheduler's
    verdict, the condition the engine reads): once per pod while it stays so, not on its other updates. With
    `nominations` (`Policy.nominate_pods`), also when an unbound pod's `status.nominatedNodeName` is cleared:
    kube-scheduler 1.37 clears it after every failed attempt in which preemption finds no victims, which happens while
    the nominated node starts (Ready before its GPUs register), so the loop writes it again before the node is
    usable. The keys kept are the pods Unschedulable and the unbound pods nominated now (O(1) per event)."""
    marked: set[str] = set()
    nominated: set[str] = set()

    def listener(kind: str, event_type: str, obj: Mapping[str, Any], listed: bool) -> None:
        if kind != "Pod":
            return
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        status = obj.get("status") or {}
        pending = event_type != "DELETED" and not (obj.get("spec") or {}).get("nodeName")
        now_marked = pending and any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
            for c in status.get("conditions") or ())
        if not now_marked:
            marked.discard(key)
        elif key not in marked:
            marked.add(key)
            if not listed:
                wake.set()
        if nominations:
            if pending and status.get("nominatedNodeName"):
                nominated.add(key)
            elif key in nominated:
                nominated.discard(key)
                if pending and not listed:
                    wake.set()

    return listener


# --- the loop


def report_fields(report: TickReport) -> dict[str, Any]:
    """One tick as a flat JSON-able dict, for the structured log line. `next_at`: when the next tick next matters
    with no change to the cluster (`TickReport.next_at_s`, Unix s; absent: only a change can)."""
    fields: dict[str, Any] = {"msg": "tick", "now": round(report.now_s, 3), "synced": report.synced}
    if report.next_at_s is not None:
        fields["next_at"] = round(report.next_at_s, 3)
    plan = report.plan
    if plan is not None:
        fields |= {"scale_up": [{"pool": s.pool, "nodes": s.nodes, **({"zone": s.zone} if s.zone else {}),
                                 "pods": len(s.pods)} for s in plan.scale_up],
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
    if report.nominated:
        fields["nominated"] = [{"pod": pod, "node": node} for pod, node in report.nominated]
    if report.evictions:
        fields["evictions"] = [{"pod": e.pod, "outcome": str(e.outcome)} for e in report.evictions]
    if report.errors:
        fields["errors"] = [str(e) for e in report.errors]
    return fields


_ACTIONS = frozenset({"scale_up", "scale_down", "timed_out"})


class PlanItemLog:
    """The plan items worth a log line (`{"msg": "plan item", "now", "kind", pool/node/pod, "reasons", "codes"}`):
    every action, and a verdict (unplaceable, blocked, unneeded, waiting, covered, degraded) when it is new or its
    reason codes changed since the previous tick, so a pod pending for an hour is one line, not 360."""

    def __init__(self) -> None:
        self._verdicts: frozenset[tuple[str, str, tuple[str, ...]]] = frozenset()

    def lines(self, plan: Plan, now_s: float) -> list[dict[str, Any]]:
        out, verdicts = [], set()
        for item in plan_items(plan):
            if item["kind"] not in _ACTIONS:
                key = (item["kind"], str(item.get("pod") or item.get("node")), tuple(item["codes"]))
                verdicts.add(key)
                if key in self._verdicts:
                    continue
            out.append({"msg": "plan item", "now": round(now_s, 3), **item})
        self._verdicts = frozenset(verdicts)
        return out


def run_loop(controller: Controller, *, once: bool = False, sync_timeout_s: float = 60.0,
             stop: threading.Event | None = None, emit: Callable[[dict[str, Any]], None] | None = None,
             server: MetricsServer | None = None) -> int:
    """Tick every `scan_interval_s` until `stop` is set, only while this replica leads (always without election).
    With `once`: wait for the cache to sync, tick once, return 0 if that tick was synced and error-free, 1 otherwise.
    `server` (already bound) serves `/metrics` and `/healthz` meanwhile and is closed on return."""
    stop = stop or threading.Event()
    emit = emit or (lambda fields: log.info(json.dumps(fields, sort_keys=True)))
    try:
        if server is not None and controller.metrics is not None:
            routes = {"/traces": traces_route(controller.tracer)} if controller.tracer is not None else None
            server.serve(controller.metrics, controller.health, routes)
        return _loop(controller, once=once, sync_timeout_s=sync_timeout_s, stop=stop, emit=emit)
    finally:
        if server is not None:
            server.close()


def _loop(controller: Controller, *, once: bool, sync_timeout_s: float, stop: threading.Event,
          emit: Callable[[dict[str, Any]], None]) -> int:
    if not controller.wait_synced(sync_timeout_s):
        emit({"msg": "cache not synced", "timeout_s": sync_timeout_s, "status": controller.cache.status()})
        if once:
            return 1
    led: bool | None = None
    items = PlanItemLog()
    idle_s = controller.settings.scan_interval_s
    if controller.elector is not None:
        idle_s = min(idle_s, controller.elector.settings.retry_period_s / 4)
    while True:
        started = time.monotonic()
        controller.wake.clear()  # what it announced, this tick reads
        leading = controller.is_leader()
        if leading != led:
            emit({"msg": "leading" if leading else "standby", "identity": controller.identity})
            if leading and led is False and controller.last_report is not None:
                controller.restart_autoscaler()
            led = leading
        if leading:
            report = controller.tick()
            emit(report_fields(report))
            for line in items.lines(report.plan, report.now_s) if report.plan is not None else ():
                emit(line)
            if once:
                return 0 if report.ok else 1
            wait = controller.settings.scan_interval_s - (time.monotonic() - started)
            if controller.reacts and (wake := report.wake_at_s) is not None:
                wait = min(wait, wake - time.time())  # a batch closes, a delay ends (not: it acted)
        else:
            wait = idle_s
        if _sleep(controller, stop, max(0.0, wait), woken=leading and controller.reacts):
            return 0


def _sleep(controller: Controller, stop: threading.Event, wait_s: float, *, woken: bool) -> bool:
    """Wait `wait_s`, or less when `woken` and the watch saw a pod turn Unschedulable; True when `stop` is set.
    The stop flag is looked at every 0.2 s while woken, at once otherwise."""
    if not woken:
        return stop.wait(wait_s)
    deadline = time.monotonic() + wait_s
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or controller.wake.wait(min(left, 0.2)):
            return False
    return True
