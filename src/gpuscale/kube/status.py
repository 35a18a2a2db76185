"""The status ConfigMap (`gpuscale-status`), like Cluster Autoscaler's `cluster-autoscaler-status`: what the autoscaler
believes about each pool, readable with `kubectl get cm gpuscale-status -o yaml` when something looks stuck.

`build_status` is a pure function of the last tick (report, the snapshot it read, engine state) → a dict;
`data["status"]` is that dict as YAML. `StatusPublisher` writes it from a background thread so a slow or failing API
server never holds up the loop: it keeps only the newest document, writes it only while `may_write()` (the leader
fence) says so, only when something other than the timestamps changed or `refresh_s` has passed, and counts failures
(logged; the caller's metric hook gets each outcome).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.engine.nodes import NodePhase, phase_in, pool_of
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Limits
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.loop.report import TickReport
from gpuscale.model.pool import NodePool

log = logging.getLogger(__name__)

STATUS_NAME = "gpuscale-status"
_TIME_KEYS = frozenset({"time", "lastProbeTime"})


class ReportedState(StrEnum):
    """How a pool's node counts, as the status and the `gpuscale_nodes` metric report it: an external format with
    Cluster Autoscaler's words (its status ConfigMap's `ready` is a node it can use), mapped from `NodePhase` by
    `reported_state` alone (docs/decisions.md, D35)."""

    USABLE = "ready"
    """Usable (`NodePhase.USABLE`: Ready, GPUs registered, no start-up taint left) and not degraded."""
    UPCOMING = "upcoming"
    """Requested from the provider, or registered but not Ready yet (`NodePhase.REGISTERED`)."""
    UNREADY_GPU = "unready-gpu"
    """Ready, but not usable yet (`NodePhase.READY`): the device plugin has registered none of its GPUs, or a
    start-up taint is left."""
    DELETING = "deleting"
    """Being removed (ToBeDeleted taint or deletionTimestamp)."""
    DEGRADED = "degraded"
    """Has been usable, but lacks GPUs of its template or went NotReady under its pods (engine.health)."""


_BY_PHASE = {NodePhase.USABLE: ReportedState.USABLE, NodePhase.REGISTERED: ReportedState.UPCOMING,
             NodePhase.READY: ReportedState.UNREADY_GPU, NodePhase.DELETING: ReportedState.DELETING}


def reported_state(current: NodePhase, degraded: bool) -> ReportedState:
    """The state a Node object is reported in; `degraded`: the last plan called it degraded (it counts as such
    unless being deleted). A provider request with no Node object yet is `UPCOMING`."""
    if degraded and current is not NodePhase.DELETING:
        return ReportedState.DEGRADED
    return _BY_PHASE[current]


def node_states(snapshot: Snapshot, pools: Mapping[str, NodePool],
                degraded: frozenset[str] = frozenset()) -> dict[str, Counter[ReportedState]]:
    """Per configured pool, its nodes by `ReportedState` (nodes of no configured pool are left out); `degraded`: the
    nodes the last plan called degraded."""
    counts: dict[str, Counter[ReportedState]] = {name: Counter() for name in pools}
    for node in snapshot.cluster.nodes:
        pool = pool_of(node, snapshot.node_pools)
        if pool in counts:
            counts[pool][reported_state(phase_in(node, pools[pool], snapshot.cluster.dra), node.name in degraded)] += 1
    for upcoming in snapshot.upcoming:
        if upcoming.pool in counts:
            counts[upcoming.pool][ReportedState.UPCOMING] += 1
    return counts


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class History:
    """Per-pool times of the last scale-up and scale-down, kept across ticks (the engine keeps only cluster-wide
    scale-down times)."""

    def __init__(self) -> None:
        self.last_scale_up: dict[str, float] = {}
        self.last_scale_down: dict[str, float] = {}

    def observe(self, report: TickReport, snapshot: Snapshot | None) -> None:
        for done in report.scaled_up:
            self.last_scale_up[done.pool] = report.now_s
        pools = {n.name: pool_of(n, snapshot.node_pools) for n in snapshot.cluster.nodes} if snapshot else {}
        for node in report.deleted:
            pool = pools.get(node)
            if pool is not None:
                self.last_scale_down[pool] = report.now_s


def _limits(limits: Limits) -> dict[str, Any]:
    out: dict[str, Any] = {"maxNodesTotal": limits.max_nodes_total, "maxCoresTotal": limits.max_cores_total,
                           "maxMemoryBytesTotal": limits.max_memory_bytes_total,
                           "maxGpusByModel": dict(limits.max_gpus_by_model) or None,
                           "maxGpusTotal": limits.max_gpus_total,
                           "maxUsdPerHour": limits.max_usd_per_hour}
    return {k: v for k, v in out.items() if v is not None}


def _health(report: TickReport) -> str:
    if not report.synced:
        return "NotSynced"
    verdicts = (report.plan.blocked + report.plan.unneeded) if report.plan else ()
    if any(r.code is ReasonCode.TOO_MANY_UNREADY for v in verdicts for r in v.reasons):
        return "Unhealthy"
    return "Healthy"


def _pool_status(pool: NodePool, counts: Counter[ReportedState], state: EngineState, history: History,
                 now: float) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": pool.name,
        "target": sum(counts.values()) - counts[ReportedState.DELETING],
        **{_camel(s): counts[s] for s in ReportedState},
        "minSize": pool.min_size, "maxSize": pool.max_size,
    }
    backoff = state.in_backoff(pool.name, now)
    if backoff is not None:
        entry["scaleUp"] = {"status": "Backoff", "backoff": {
            "until": iso(backoff.until_s), "reason": str(backoff.kind), "failures": backoff.failures,
            "message": backoff.message[:300]}}
    elif counts[ReportedState.UPCOMING] or counts[ReportedState.UNREADY_GPU]:
        entry["scaleUp"] = {"status": "InProgress"}
    else:
        entry["scaleUp"] = {"status": "NoActivity"}
    for key, times in (("lastScaleUpTime", history.last_scale_up), ("lastScaleDownTime", history.last_scale_down)):
        if pool.name in times:
            entry[key] = iso(times[pool.name])
    return entry


def _camel(state: ReportedState) -> str:
    head, *rest = state.value.split("-")
    return head + "".join(p.capitalize() for p in rest)


def build_status(*, report: TickReport, snapshot: Snapshot | None, pools: Sequence[NodePool], limits: Limits,
                 state: EngineState, history: History, leader: str | None) -> dict[str, Any]:
    """The status document for one tick. `snapshot` is what that tick read (None when it could not read)."""
    by_name = {p.name: p for p in pools}
    plan = report.plan
    degraded = frozenset(v.node for v in plan.degraded) if plan is not None else frozenset()
    counts = node_states(snapshot, by_name, degraded) if snapshot is not None else {p: Counter() for p in by_name}
    total: Counter[ReportedState] = Counter()
    for c in counts.values():
        total.update(c)
    cluster: dict[str, Any] = {
        "health": {"status": _health(report), "nodeCounts": {_camel(s): total[s] for s in ReportedState}},
        "unschedulablePods": {
            "scaleUp": sum(len(s.pods) for s in plan.scale_up) if plan else 0,
            "covered": len(plan.covered) if plan else 0, "waiting": len(plan.waiting) if plan else 0,
            "unplaceable": len(plan.unplaceable) if plan else 0},
        "scaleDown": {"candidates": len(plan.unneeded) if plan else 0,
                      "draining": sorted(report.drains_started)},
        "limits": _limits(limits),
        "lastScaleUpTime": iso(state.last_scale_up_s), "lastScaleDownTime": iso(state.last_scale_down_s),
    }
    if report.errors:
        cluster["lastTickErrors"] = [str(e)[:300] for e in report.errors[:5]]
    if plan is not None and plan.unplaceable:
        cluster["unplaceable"] = [{"pod": v.pod, "reasons": [r.message for r in v.reasons][:3]}
                                  for v in plan.unplaceable[:10]]
    if plan is not None and plan.degraded:
        cluster["degraded"] = [{"node": v.node, "reasons": [r.message for r in v.reasons][:3]}
                               for v in plan.degraded[:20]]
    return {
        "time": iso(report.now_s), "autoscalerStatus": "Running" if report.synced else "NotSynced",
        "leader": leader,
        "clusterWide": {k: v for k, v in cluster.items() if v is not None},
        "nodeGroups": [_pool_status(p, counts[p.name], state, history, report.now_s) for p in pools],
    }


def render(doc: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False, width=1_000_000)  # no folding


def _without_times(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _without_times(v) for k, v in doc.items() if k not in _TIME_KEYS}
    if isinstance(doc, list):
        return [_without_times(v) for v in doc]
    return doc


class StatusPublisher:
    """Writes the newest status document to the ConfigMap from its own thread (see the module docstring)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, *, name: str = STATUS_NAME,
                 may_write: Callable[[], bool] = lambda: True, refresh_s: float = 60.0,
                 on_result: Callable[[bool], None] | None = None, timeout_s: float = 5.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self.namespace, self.name = namespace, name
        self._may_write = may_write
        self._refresh_s = refresh_s
        self._on_result = on_result
        self._timeout_s = timeout_s
        self._cond = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._written: Any = None
        self._written_at = float("-inf")
        self._stop = False
        self._thread: threading.Thread | None = None
        self.writes = 0
        self.failures = 0

    def publish(self, doc: dict[str, Any]) -> None:
        """Hand over the newest document; never blocks on the API server."""
        with self._cond:
            self._pending = doc
            self._cond.notify()

    def start(self) -> StatusPublisher:
        self._thread = threading.Thread(target=self._run, name="gpuscale-status", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                doc, self._pending = self._pending, None
            if doc is not None:
                self.write_now(doc)

    def write_now(self, doc: dict[str, Any]) -> bool | None:
        """Write if allowed and due: True written, False failed, None skipped (not leader, or nothing changed)."""
        if not self._may_write():
            return None
        key = _without_times(doc)
        if key == self._written and time.monotonic() - self._written_at < self._refresh_s:
            return None
        try:
            self._put(render(doc))
        except Exception as err:  # outermost layer of the publisher: logged and counted, never raised to the loop
            self.failures += 1
            log.warning(json.dumps({"msg": "status ConfigMap write failed", "configmap": f"{self.namespace}/"
                                    f"{self.name}", "error": f"{type(err).__name__}: {err}"[:300]}))
            self._result(False)
            return False
        self._written, self._written_at = key, time.monotonic()
        self.writes += 1
        self._result(True)
        return True

    def _result(self, ok: bool) -> None:
        if self._on_result is not None:
            self._on_result(ok)

    def _put(self, text: str) -> None:
        body = {"metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/name": "gpuscale"}},
                "data": {"status": text}}
        try:
            self._core.patch_namespaced_config_map(self.name, self.namespace, {"data": body["data"]},
                                                   _request_timeout=self._timeout_s)
        except ApiException as err:
            if err.status != 404:
                raise
            create: Callable[..., Any] = self._core.create_namespaced_config_map  # a raw dict body, sent as is
            create(self.namespace, body, _request_timeout=self._timeout_s)
