"""Prometheus metrics and the `/metrics` + `/healthz` HTTP endpoint of `gpuscale run`.

`Metrics` owns its own `CollectorRegistry` (never the process-global one, so tests and several controllers in one
process do not collide); `Metrics.registry` is public so other collectors (pod-phase histograms, …) register on the
same registry, or use `register(collector)`. `observe_tick` turns a `TickReport` and the snapshot it read into the
gauges and counters; it only reads values. `serve` starts a threaded HTTP server (127.0.0.1 by default) in a daemon
thread — the only side effect here besides the metric values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

from gpuscale.engine.nodes import pool_of
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.state import EngineState
from gpuscale.kube.status import ReportedState, node_states
from gpuscale.loop.report import TickReport
from gpuscale.model.errors import ConfigError
from gpuscale.model.pool import NodePool

log = logging.getLogger(__name__)

TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every `gpuscale_*` metric of the controller (the table is in docs/controller.md, "Metrics")."""

    def __init__(self, pools: Sequence[NodePool], registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._pools = {p.name: p for p in pools}
        r = self.registry
        self.tick_duration = Histogram("gpuscale_tick_duration_seconds", "Wall time of one tick (observe, decide, act)",
                                       buckets=TICK_BUCKETS_S, registry=r)
        self.last_tick = Gauge("gpuscale_last_successful_tick_timestamp_seconds",
                               "Unix time of the last tick that read a synced view and acted on it", registry=r)
        self.synced = Gauge("gpuscale_cache_synced", "1 when the last tick read a complete (synced) view", registry=r)
        self.nodes = Gauge("gpuscale_nodes",
                           "Nodes per pool by state (ready, upcoming, unready-gpu, deleting, degraded)",
                           ["pool", "state"], registry=r)
        self.pending = Gauge("gpuscale_unschedulable_pods",
                             "Unschedulable pods of the last decision by verdict "
                             "(scale-up, covered, waiting, unplaceable)", ["verdict"], registry=r)
        self.scaled_up = Counter("gpuscale_scaled_up_nodes", "Nodes requested by scale-ups", ["pool"], registry=r)
        self.scaled_down = Counter("gpuscale_scaled_down_nodes", "Nodes deleted by scale-down", ["pool"], registry=r)
        self.evictions = Counter("gpuscale_evictions", "Eviction API calls by pool and outcome",
                                 ["pool", "outcome"], registry=r)
        self.errors = Counter("gpuscale_errors", "Failed actions by pool (empty when none applies) and action",
                              ["pool", "action"], registry=r)
        self.backoff = Gauge("gpuscale_pool_backoff_seconds",
                             "Seconds of scale-up backoff left per pool (zone empty) and per zone of it (0: none)",
                             ["pool", "zone"], registry=r)
        self.leader = Gauge("gpuscale_leader", "1 while this replica holds the leader Lease", registry=r)
        self.status_writes = Counter("gpuscale_status_writes", "Status ConfigMap writes by result",
                                     ["result"], registry=r)
        for pool in self._pools:
            self._zero(pool)

    def _zero(self, pool: str) -> None:
        for zone in _zones(self._pools[pool]):
            self.backoff.labels(pool=pool, zone=zone).set(0)
        for state in ReportedState:
            self.nodes.labels(pool=pool, state=str(state)).set(0)

    def use_pools(self, pools: Sequence[NodePool]) -> None:
        """The pools changed (node groups discovered again): a new pool's gauges start at 0, a gone pool's gauges
        are removed (not left at their last value); counters keep every pool they counted."""
        fresh = {p.name: p for p in pools}
        for pool in self._pools.keys() - fresh.keys():
            for zone in _zones(self._pools[pool]):
                self.backoff.remove(pool, zone)
            for state in ReportedState:
                self.nodes.remove(pool, str(state))
        for pool in fresh.keys() & self._pools.keys():  # a pool's zones may change with its template
            for zone in set(_zones(self._pools[pool])) - set(_zones(fresh[pool])):
                self.backoff.remove(pool, zone)
        old, self._pools = self._pools, fresh
        for pool in fresh:
            if pool not in old or _zones(old[pool]) != _zones(fresh[pool]):
                self._zero(pool)

    def register(self, collector: Collector) -> None:
        """Add another collector to the same registry (served on the same /metrics)."""
        self.registry.register(collector)

    def observe_tick(self, report: TickReport, snapshot: Snapshot | None, state: EngineState,
                     duration_s: float) -> None:
        self.tick_duration.observe(duration_s)
        self.synced.set(1 if report.synced else 0)
        node_pool: Mapping[str, str | None] = {}
        if snapshot is not None:
            node_pool = {n.name: pool_of(n, snapshot.node_pools) for n in snapshot.cluster.nodes}
        if report.synced and snapshot is not None:
            self.last_tick.set(report.now_s)
            degraded = frozenset(v.node for v in report.plan.degraded) if report.plan is not None else frozenset()
            for pool, counts in node_states(snapshot, self._pools, degraded).items():
                for s in ReportedState:
                    self.nodes.labels(pool=pool, state=str(s)).set(counts[s])
        if report.plan is not None:
            plan = report.plan
            for verdict, count in (("scale-up", sum(len(s.pods) for s in plan.scale_up)),
                                   ("covered", len(plan.covered)), ("waiting", len(plan.waiting)),
                                   ("unplaceable", len(plan.unplaceable))):
                self.pending.labels(verdict=verdict).set(count)
        for done in report.scaled_up:
            self.scaled_up.labels(pool=done.pool).inc(done.nodes)
        for node in report.deleted:
            self.scaled_down.labels(pool=node_pool.get(node) or "").inc()
        for ev in report.evictions:
            self.evictions.labels(pool=node_pool.get(ev.node) or "", outcome=str(ev.outcome)).inc()
        for err in report.errors:
            pool = err.target if err.target in self._pools else node_pool.get(err.target) or ""
            self.errors.labels(pool=pool, action=str(err.action)).inc()
        for name, template in self._pools.items():
            for zone in _zones(template):  # a zone's backoff is the engine state's `pool/zone` entry (`NodePool.key`)
                entry = state.in_backoff(f"{name}/{zone}" if zone else name, report.now_s)
                self.backoff.labels(pool=name, zone=zone).set(entry.until_s - report.now_s if entry else 0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _zones(pool: NodePool) -> tuple[str, ...]:
    """The backoff gauge's zone labels of a pool: "" (the whole pool), then each zone a scale-up may name."""
    return ("", *pool.zones)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`127.0.0.1:8085`, `[::1]:8085`, `:8085` = 127.0.0.1); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError("--metrics-address", f"expected HOST:PORT (e.g. 127.0.0.1:8085), got {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


Health = Callable[[], tuple[bool, str]]
Route = Callable[[Mapping[str, list[str]]], tuple[bytes, str]]
"""An extra GET endpoint: the query's parameters in, (body, content type) out."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    metrics: Metrics | None = None
    health: Health | None = None
    routes: Mapping[str, Route] = {}


class MetricsServer:
    """`/metrics` (Prometheus text format) and `/healthz` (200 or 500 with a one-line reason) on one port.

    The port is bound at construction — so `gpuscale run` can fail on a port in use before it connects to anything —
    and served from `serve(metrics, health)` on."""

    def __init__(self, address: str = "127.0.0.1:8085") -> None:
        host, port = parse_address(address)
        try:
            self._server = _Server((host, port), _Handler)
        except OSError as err:
            raise ConfigError("--metrics-address", f"cannot listen on {address}: {err.strerror or err}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="gpuscale-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def serve(self, metrics: Metrics, health: Health, routes: Mapping[str, Route] | None = None) -> MetricsServer:
        """Start serving; `routes` adds endpoints on the same port (the tracer's `/traces`)."""
        self._server.metrics, self._server.health = metrics, health
        self._server.routes = dict(routes or {})
        self._thread.start()
        log.info("serving %s on %s:%d", " ".join(["/metrics", "/healthz", *self._server.routes]), self.host,
                 self.port)
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        metrics, health = self.server.metrics, self.server.health
        path, _, query = self.path.partition("?")
        if path in self.server.routes:
            self._send(200, *self.server.routes[path](parse_qs(query)))
        elif path == "/metrics" and metrics is not None:
            self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/livez", "/readyz") and health is not None:
            ok, why = health()
            self._send(200 if ok else 500, (why + "\n").encode(), "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return
