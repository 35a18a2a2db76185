"""Prometheus collectors for the tracer, and its `/traces` endpoint on the controller's metrics server.

`register_metrics(tracer, registry)` puts on a given `CollectorRegistry` (so the controller's own metrics server can
serve them next to its other metrics): the pending→running and per-phase histograms, fed as traces finish; the
stockout / backoff / timeout counters and the upcoming / unready-GPU node gauges, read from the tracer at scrape
time. Names, labels and buckets are in docs/metrics.md. `traces_route` is the `GET /traces` endpoint (JSON lines;
`?open=1` adds pods still waiting) that `gpuscale run` adds to its `/metrics` + `/healthz` server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuscale.kube.tracer import Tracer
from gpuscale.lifecycle.trace import PodTrace, dump_lines

PENDING_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800, 3600)
PHASE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 180, 300, 600, 1200, 1800)


class _TracerCollector:
    """Counters and gauges read from the tracer at scrape time (no second copy of the counts)."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def collect(self) -> Iterator[Metric]:
        counters = self._tracer.counters
        for name, doc, values in (
                ("gpuscale_scale_up_stockouts", "Scale-ups refused for lack of capacity (stockout), per pool.",
                 counters.stockouts),
                ("gpuscale_pool_backoffs", "Times a pool was backed off after a failed or timed-out scale-up.",
                 counters.backoffs),
                ("gpuscale_node_provision_timeouts", "Requested nodes that missed their provision or GPU deadline.",
                 counters.timeouts)):
            family = CounterMetricFamily(name, doc, labels=["pool"])
            for pool, count in sorted(dict(values).items()):
                family.add_metric([pool], count)
            yield family
        upcoming, unready = self._tracer.node_gauges()
        for name, doc, values in (
                ("gpuscale_upcoming_nodes", "Nodes requested or registered that cannot take pods yet, per pool.",
                 upcoming),
                ("gpuscale_unready_gpu_nodes", "GPU nodes whose GPUs are not in allocatable yet, per pool.",
                 unready)):
            gauge = GaugeMetricFamily(name, doc, labels=["pool"])
            for pool, count in sorted(values.items()):
                gauge.add_metric([pool], count)
            yield gauge


def register_metrics(tracer: Tracer, registry: CollectorRegistry) -> None:
    """Register the tracer's metrics on `registry`; histograms are fed by every trace that finishes from now on."""
    pending = Histogram("gpuscale_pod_pending_to_running_seconds",
                        "Pod creation to Ready, per pool of the node it ran on and path (new-node / existing-node).",
                        ["pool", "path"], buckets=PENDING_BUCKETS, registry=registry)
    phase = Histogram("gpuscale_pod_phase_seconds", "Seconds a pod spent in each phase of its pending→running wait.",
                      ["phase", "pool"], buckets=PHASE_BUCKETS, registry=registry)

    def observe(trace: PodTrace) -> None:
        pool = trace.pool or "none"
        if trace.pending_to_running_s is not None:
            pending.labels(pool, "new-node" if trace.new_node else "existing-node").observe(
                trace.pending_to_running_s)
        for name, seconds in trace.phases.items():
            phase.labels(name, pool).observe(seconds)

    tracer.add_observer(observe)
    registry.register(_TracerCollector(tracer))


def traces_route(tracer: Tracer) -> Callable[[Mapping[str, list[str]]], tuple[bytes, str]]:
    """`GET /traces` on the controller's metrics server (`kube.metrics.MetricsServer`): JSON lines of the finished
    traces; `?open=1` adds the pods still waiting."""

    def traces(query: Mapping[str, list[str]]) -> tuple[bytes, str]:
        include_open = query.get("open", ["0"])[0] in ("1", "true")
        return dump_lines(tracer.traces(include_open)).encode(), "application/x-ndjson"

    return traces
