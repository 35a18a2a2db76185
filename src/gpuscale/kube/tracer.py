"""Per-pod phase tracing on a real cluster: pending → running split into the phases of `lifecycle/phases.py`.

Fed from three places, all cheap and non-blocking:
- the `WatchCache`'s listener (`on_object`): Pods (created; `PodScheduled=False/Unschedulable`; `spec.nodeName` set;
  `Ready=True`), Nodes (created; `Ready=True`; a GPU resource appearing in allocatable) and ResourceSlices (the first
  slice naming a node in `spec.nodeName`: its DRA drivers published its devices, `SLICES_PUBLISHED`);
- its Event watch (`on_object` with kind Event): FailedScheduling, Scheduled, Pulling, Pulled, Started, and
  gpuscale's own TriggeredScaleUp;
- the loop (`on_tick`): which pods a scale-up was decided for and which are blocked (backoff, stockout, limits), and
  which node names the provider returned for each request.

Timestamps: a milestone seen live from a watch takes the receipt time (sub-second); one seen in a (re)list — after a
restart or a broken watch — or seen more than `LATE_S` after the object's own timestamp takes the object's timestamp
(`creationTimestamp`, a condition's `lastTransitionTime`, an Event's time; one-second resolution). So a restarted
controller re-derives the traces of pods still pending from the objects. Pods already Ready when first seen are not
traced (they finished before this process could see them).

Memory is bounded: open traces live until their pod is Ready or deleted; finished traces go to a ring buffer of
`retention` traces and, if `sink` is set, are appended to a JSON-lines file as they finish. Side effects: the sink
file and the Prometheus collectors (`register_metrics`); nothing here calls the API.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuscale.engine.state import FailureKind
from gpuscale.lifecycle.phases import Milestone, with_node
from gpuscale.lifecycle.trace import PodTrace, build_trace
from gpuscale.loop.report import Action, TickReport
from gpuscale.loop.trace import blocked_pods, decided_pods
from gpuscale.model.gpu import GPU_COUNT_LABEL
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.resources import is_gpu_resource

LATE_S = 2.0
"""A milestone first seen this long after the object's own timestamp was missed live: use the object's time."""
EVENT_GRACE_S = 2.0
"""A pod seen Ready waits this long for Events still in flight (Pulled travels on its own watch and can arrive after
the pod's Ready update) before its trace is closed."""
GPU_EXPECTED_LABELS = (GPU_COUNT_LABEL, "gpuscale.io/gpu-count")
"""A node carrying one of these expects GPUs in allocatable (GPU feature discovery's label; kwok's fake plugin's)."""


def parse_time(value: Any) -> float | None:
    """RFC 3339 (`2026-11-29T19:20:00Z`, with or without fractional seconds) → Unix seconds; None if absent/bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _pod_milestones(obj: Mapping[str, Any]) -> dict[Milestone, float | None]:
    """Milestones an object shows, each with the object's own timestamp for it (None when it has none)."""
    found: dict[Milestone, float | None] = {}
    scheduled = _condition(obj, "PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        found[Milestone.UNSCHEDULABLE] = parse_time(scheduled.get("lastTransitionTime"))
    if (obj.get("spec") or {}).get("nodeName"):
        found[Milestone.BOUND] = parse_time(scheduled.get("lastTransitionTime")) if scheduled and scheduled.get(
            "status") == "True" else None
    ready = _condition(obj, "Ready")
    if ready and ready.get("status") == "True":
        found[Milestone.STARTED] = parse_time(ready.get("lastTransitionTime"))
    return found


EVENT_MILESTONES = {"FailedScheduling": Milestone.UNSCHEDULABLE, "TriggeredScaleUp": Milestone.DECIDED,
                    "Scheduled": Milestone.BOUND, "Pulled": Milestone.PULLED}
"""Pod Events that mark a milestone. `Pulling` and `Started` are kept as notes only: the image-pull phase runs from
binding to Pulled (sandbox creation included) and the pod's start ends at Ready."""


@dataclass(slots=True)
class _OpenPod:
    key: str
    times: dict[Milestone, float]
    node: str | None = None
    pool: str | None = None
    blocked_since: float | None = None
    blocked_s: float = 0.0
    reason: str | None = None


@dataclass(slots=True)
class _NodeTimes:
    pool: str | None
    expects_gpu: bool
    times: dict[Milestone, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Counters:
    stockouts: dict[str, int] = field(default_factory=dict)
    backoffs: dict[str, int] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)


class Tracer:
    """Builds `PodTrace`s from the watch stream and the loop's decisions. Thread-safe (watch threads and the loop)."""

    def __init__(self, *, clock: Callable[[], float] = time.time, retention: int = 10_000,
                 sink: Path | None = None) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, _OpenPod] = {}
        self._done: OrderedDict[str, None] = OrderedDict()
        """Keys of pods already traced (bounded), so later updates of a running pod are ignored."""
        self._nodes: dict[str, _NodeTimes] = {}
        self._requested: dict[str, tuple[str, float]] = {}
        """Request id (kwok: the node's name) → (pool, accepted at)."""
        self.finished: deque[PodTrace] = deque(maxlen=retention)
        self.counters = _Counters()
        self._sink = sink
        self._observers: list[Callable[[PodTrace], None]] = []
        self._retention = retention
        self._slices_seen: dict[str, float] = {}
        """Node name → when its first ResourceSlice was seen, for nodes not seen yet (the watches are separate)."""
        self._ready_seen: dict[str, float] = {}
        """Pods seen Ready whose trace waits for late Events: key → when Ready was seen."""

    def add_observer(self, observer: Callable[[PodTrace], None]) -> None:
        """Called with each finished trace (the Prometheus histograms)."""
        self._observers.append(observer)

    # --- feeds

    def on_object(self, kind: str, event_type: str, obj: Mapping[str, Any], listed: bool) -> None:
        """A `WatchCache` listener."""
        now = self._clock()
        with self._lock:
            if kind == "Pod":
                self._pod(event_type, obj, listed, now)
            elif kind == "Node":
                self._node(event_type, obj, listed, now)
            elif kind == "Event":
                self._event(obj, listed, now)
            elif kind == "ResourceSlice":
                self._slice(event_type, obj, listed, now)
            finished = self._close_ready(now)
        for trace in finished:
            self._publish(trace)

    def on_tick(self, report: TickReport) -> None:
        """The loop's hook, called after every tick: decisions, blocked pods, accepted requests, failures."""
        now = self._clock()
        with self._lock:
            for key, pool in decided_pods(report):
                pod = self._open.get(key)
                # The tick's own time wins over its TriggeredScaleUp Event, which the Event watch may deliver first.
                if pod is not None and pod.times.get(Milestone.DECIDED, math.inf) > report.now_s:
                    pod.times[Milestone.DECIDED] = report.now_s
                    pod.pool = pool
                    self._unblock(pod, report.now_s)
            for done in report.scaled_up:
                for request_id in done.request_ids:
                    self._requested[request_id] = (done.pool, now)
                    node = self._nodes.get(request_id)
                    if node is not None:
                        node.times[Milestone.REQUESTED] = min(now, node.times.get(Milestone.REQUESTED, now))
            if report.plan is not None:
                for key, reason in blocked_pods(report.plan):
                    pod = self._open.get(key)
                    if pod is not None and pod.blocked_since is None and Milestone.DECIDED not in pod.times:
                        pod.blocked_since, pod.reason = report.now_s, reason
                for timed_out in report.plan.timed_out:
                    self._count(self.counters.timeouts, timed_out.pool)
                    self._count(self.counters.backoffs, timed_out.pool)
            for error in report.errors:
                if error.action is Action.SCALE_UP:
                    self._count(self.counters.backoffs, error.target)
                    if error.error == FailureKind.STOCKOUT.value:
                        self._count(self.counters.stockouts, error.target)
            if len(self._requested) > self._retention:
                for request_id in list(self._requested)[: len(self._requested) - self._retention]:
                    del self._requested[request_id]
            finished = self._close_ready(now)
        for trace in finished:
            self._publish(trace)

    def flush(self) -> None:
        """Close every trace waiting for late Events now (tests, shutdown)."""
        with self._lock:
            finished = self._close_ready(self._clock(), force=True)
        for trace in finished:
            self._publish(trace)

    # --- reads

    def traces(self, include_open: bool = False) -> list[PodTrace]:
        with self._lock:
            out = list(self.finished)
            if include_open:
                out += [self._trace(pod) for pod in self._open.values()]
        return out

    def node_gauges(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per pool: upcoming nodes (requested, or registered without `GPU_REGISTERED` yet: not Ready, or GPUs not
        in allocatable; start-up taints are not watched) and GPU nodes whose GPUs are not in allocatable yet."""
        upcoming: dict[str, int] = {}
        unready_gpu: dict[str, int] = {}
        with self._lock:
            for name, (pool, _at) in self._requested.items():
                if name not in self._nodes:
                    self._count(upcoming, pool)
            for node in self._nodes.values():
                pool = node.pool or "unknown"
                if Milestone.GPU_REGISTERED not in node.times:
                    self._count(upcoming, pool)
                    if node.expects_gpu:
                        self._count(unready_gpu, pool)
        return upcoming, unready_gpu

    # --- internals (called with the lock held)

    @staticmethod
    def _count(counter: dict[str, int], key: str) -> None:
        counter[key] = counter.get(key, 0) + 1

    def _when(self, object_time: float | None, listed: bool, now: float) -> float:
        if object_time is not None and (listed or now - object_time > LATE_S):
            return object_time
        return now

    def _pod(self, event_type: str, obj: Mapping[str, Any], listed: bool, now: float) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if event_type == "DELETED":
            self._open.pop(key, None)
            self._ready_seen.pop(key, None)
            return
        if key in self._done:
            return
        seen = _pod_milestones(obj)
        pod = self._open.get(key)
        if pod is None:
            if Milestone.STARTED in seen or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                self._remember_done(key)  # ran before we could see it
                return
            created = parse_time(meta.get("creationTimestamp"))
            pod = self._open[key] = _OpenPod(key, {Milestone.CREATED: self._when(created, listed, now)})
        for milestone, at in seen.items():
            if milestone not in pod.times:
                pod.times[milestone] = self._when(at, listed, now)
        pod.node = (obj.get("spec") or {}).get("nodeName") or pod.node
        if Milestone.STARTED in pod.times:
            self._ready_seen.setdefault(key, now)

    def _node(self, event_type: str, obj: Mapping[str, Any], listed: bool, now: float) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        if event_type == "DELETED":
            self._nodes.pop(name, None)
            self._requested.pop(name, None)
            self._slices_seen.pop(name, None)
            return
        labels = meta.get("labels") or {}
        allocatable = (obj.get("status") or {}).get("allocatable") or {}
        has_gpu = any(is_gpu_resource(r) and str(v) not in ("0", "") for r, v in allocatable.items())
        node = self._nodes.get(name)
        if node is None:
            created = parse_time(meta.get("creationTimestamp"))
            node = self._nodes[name] = _NodeTimes(pool=labels.get(POOL_LABEL),
                                                  expects_gpu=has_gpu or any(labels.get(k) for k in
                                                                             GPU_EXPECTED_LABELS))
            registered = self._when(created, listed, now)
            requested = self._requested.get(name)
            node.times[Milestone.REGISTERED] = registered
            node.times[Milestone.REQUESTED] = min(requested[1], registered) if requested else registered
            if name in self._slices_seen:
                node.times[Milestone.SLICES_PUBLISHED] = self._slices_seen.pop(name)
        ready = _condition(obj, "Ready")
        if ready and ready.get("status") == "True" and Milestone.READY not in node.times:
            node.times[Milestone.READY] = self._when(parse_time(ready.get("lastTransitionTime")), listed, now)
        if Milestone.READY in node.times and Milestone.GPU_REGISTERED not in node.times and (
                has_gpu or not node.expects_gpu):
            # Allocatable changes carry no timestamp of their own: a relisted node's GPUs date from its Ready; a node
            # that expects none has nothing to wait for after Ready.
            registered_gpus = listed or not node.expects_gpu
            node.times[Milestone.GPU_REGISTERED] = node.times[Milestone.READY] if registered_gpus else now

    def _slice(self, event_type: str, obj: Mapping[str, Any], listed: bool, now: float) -> None:
        """The first ResourceSlice of a node (`spec.nodeName`) marks when its drivers published their devices; a
        relisted slice dates from its `creationTimestamp`. Slices for many nodes (a selector, all nodes) mark none."""
        node_name = (obj.get("spec") or {}).get("nodeName")
        if event_type == "DELETED" or not node_name:
            return
        at = self._when(parse_time((obj.get("metadata") or {}).get("creationTimestamp")), listed, now)
        node = self._nodes.get(node_name)
        if node is None:
            self._slices_seen[node_name] = min(at, self._slices_seen.get(node_name, at))
        elif Milestone.SLICES_PUBLISHED not in node.times:
            node.times[Milestone.SLICES_PUBLISHED] = at

    def _event(self, obj: Mapping[str, Any], listed: bool, now: float) -> None:
        involved = obj.get("involvedObject") or {}
        milestone = EVENT_MILESTONES.get(str(obj.get("reason")))
        if involved.get("kind") != "Pod" or milestone is None:
            return
        pod = self._open.get(f"{involved.get('namespace')}/{involved.get('name')}")
        if pod is None or milestone in pod.times:
            return
        at = parse_time(obj.get("eventTime")) or parse_time(obj.get("firstTimestamp"))
        # An Event that arrives after the pod was seen Ready still happened before it.
        pod.times[milestone] = min(self._when(at, listed, now), pod.times.get(Milestone.STARTED, math.inf))

    def _close_ready(self, now: float, force: bool = False) -> list[PodTrace]:
        """Close the traces of Ready pods that have their Pulled Event or waited `EVENT_GRACE_S` for it."""
        finished = []
        for key, seen in list(self._ready_seen.items()):
            pod = self._open.get(key)
            if pod is None:
                del self._ready_seen[key]
            elif force or Milestone.PULLED in pod.times or now - seen >= EVENT_GRACE_S:
                del self._ready_seen[key]
                finished.append(self._finish(pod, now))
        return finished

    def _unblock(self, pod: _OpenPod, now: float) -> None:
        if pod.blocked_since is not None:
            pod.blocked_s += max(now - pod.blocked_since, 0.0)
            pod.blocked_since = None

    def _trace(self, pod: _OpenPod) -> PodTrace:
        node = self._nodes.get(pod.node) if pod.node else None
        times, new_node = (with_node(pod.times, node.times if node else None) if Milestone.STARTED in pod.times
                           else (dict(pod.times), False))
        pool = (node.pool if node else None) or pod.pool
        blocked = pod.blocked_s + (self._clock() - pod.blocked_since if pod.blocked_since is not None else 0.0)
        return build_trace(pod=pod.key, source="controller", times=times, new_node=new_node, pool=pool,
                           node=pod.node, blocked_s=blocked, reason=pod.reason if blocked > 0 else None)

    def _finish(self, pod: _OpenPod, now: float) -> PodTrace:
        self._unblock(pod, now)
        trace = self._trace(pod)
        del self._open[pod.key]
        self._remember_done(pod.key)
        self.finished.append(trace)
        return trace

    def _remember_done(self, key: str) -> None:
        self._done[key] = None
        while len(self._done) > 4 * self._retention:
            self._done.popitem(last=False)

    def _publish(self, trace: PodTrace) -> None:
        """Outside the lock: the sink file and the observers."""
        if self._sink is not None:
            with self._sink.open("a", encoding="utf-8") as out:
                out.write(json.dumps(trace.to_json(), sort_keys=True) + "\n")
        for observer in self._observers:
            observer(trace)

