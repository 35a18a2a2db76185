"""The control loop's step: observe → decide → act. The digital twin and the real controller both run this code.

Side effects happen only through the ports (`loop/ports.py`). One tick:
1. observe — the cluster (`ClusterReader`), the provider's upcoming nodes and node→pool map. A partial view
   (`NotSynced`, or any observe failure) ends the tick: nothing is decided or done on what could not be read;
2. decide — the pure engine, with the state the previous tick left; its `plan.state` becomes the new state;
3. act, in this order: (a) give back upcoming nodes that timed out; (b) scale up, backing a pool off when the
   provider refuses (the *next* decision then falls back to another pool); (c) NotTriggerScaleUp events, rate-limited
   per pod, and NodeDegraded events, rate-limited per node; (d) write and clear deletion-candidate taints; (e) advance
   drains started on earlier ticks, then start this plan's removals;
4. say when the next tick next matters (`TickReport.next_at_s`): the plan's time, or at once when this tick acted or
   changed the engine state — a runner that skips quiet ticks (the twin) ticks then, or when the cluster changed.
A tick never raises for provider or API trouble: each action is attempted on its own, and every failure lands in the
`TickReport` as data. This module is the loop's outermost layer, the only place that catches broadly. An exception
from `decide` is a bug in gpuscale, not trouble outside it: it propagates.
An optional `TickExtension` (ProvisioningRequests: `loop/provreq.py`) reads its inputs with the cluster (a partial
view ends the tick the same way), may add to the snapshot before `decide`, and sees the finished report after act (its
own writes' errors join the report).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol, Self

from gpuscale.config import Config
from gpuscale.engine.decide import decide as engine_decide
from gpuscale.engine.nodes import with_policy_taints
from gpuscale.engine.plan import TO_BE_DELETED_TAINT, Plan, Removal, ScaleUp, Snapshot, TimedOut
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState, FailureKind, record_failure, record_scale_down, record_scale_up
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.loop import events as ev
from gpuscale.loop.drain import DrainTracker
from gpuscale.loop.ports import (
    Clock,
    ClusterReader,
    ClusterWriter,
    EventSink,
    EventType,
    EvictionOutcome,
    NodeProvider,
    NotSynced,
    ProviderError,
)
from gpuscale.loop.report import Action, ActionError, Eviction, ScaleUpDone, TickReport
from gpuscale.model.pool import NodePool

DecideFn = Callable[[Snapshot, Sequence[NodePool], EngineState, Policy, float], Plan]
NODE, POD = "Node", "Pod"


class TickExtension(Protocol):
    def read(self) -> None:
        """Read the extension's own inputs with the cluster; raises `NotSynced` when its view is partial."""
        ...

    def observe(self, snapshot: Snapshot, pools: Mapping[str, NodePool], now: float) -> Snapshot:
        """The snapshot `decide` should see (pure: an exception here is a bug and propagates, like one in `decide`)."""
        ...

    def act(self, report: TickReport, now: float) -> list[ActionError]:
        """After the tick's actions: the extension's own writes; returns their failures."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    """Knobs of the loop itself (the engine's are in `Policy`)."""

    scan_interval_s: float = 10.0
    """How often the runner (twin or controller) calls `tick`; the tick itself does not schedule."""
    max_graceful_termination_s: float = 600.0
    """A drain still unfinished this long after it started is given up (CA `--max-graceful-termination-sec`)."""
    not_triggered_event_interval_s: float = 300.0
    """At most one NotTriggerScaleUp event per pod per this many seconds."""
    clean_orphaned_taints: bool = True
    """On the first synced tick, remove `ToBeDeleted` taints no drain of this process owns (as CA does at start)."""

    @classmethod
    def from_config(cls, config: Config) -> Self:
        return cls(scan_interval_s=config.scan_interval_s, max_graceful_termination_s=config.max_graceful_termination_s)


@dataclass(slots=True)
class _Acts:
    """What this tick did so far; frozen into a `TickReport` at the end."""

    scaled_up: list[ScaleUpDone] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    marked_unneeded: list[str] = field(default_factory=list)
    cleared_unneeded: list[str] = field(default_factory=list)
    drains_started: list[str] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    unmarked_orphans: list[str] = field(default_factory=list)
    nominated: list[tuple[str, str]] = field(default_factory=list)
    errors: list[ActionError] = field(default_factory=list)

    def acted(self) -> bool:
        """Whether some action went through: the cluster or the provider changed under the next decision."""
        return bool(self.scaled_up or self.timed_out or self.marked_unneeded or self.cleared_unneeded
                    or self.drains_started or self.evictions or self.deleted or self.abandoned or self.unmarked_orphans)

    def report(self, now: float, plan: Plan, next_at_s: float | None) -> TickReport:
        return TickReport(now_s=now, synced=True, plan=plan, next_at_s=next_at_s, scaled_up=tuple(self.scaled_up),
                          timed_out=tuple(self.timed_out), marked_unneeded=tuple(self.marked_unneeded),
                          cleared_unneeded=tuple(self.cleared_unneeded), drains_started=tuple(self.drains_started),
                          evictions=tuple(self.evictions), deleted=tuple(self.deleted), abandoned=tuple(self.abandoned),
                          unmarked_orphans=tuple(self.unmarked_orphans), nominated=tuple(self.nominated),
                          errors=tuple(self.errors))


class Autoscaler:
    """One autoscaler: the ports, the pools and policy, and what persists between ticks (engine state, drains)."""

    def __init__(self, *, reader: ClusterReader, writer: ClusterWriter, provider: NodeProvider, events: EventSink,
                 clock: Clock, pools: Sequence[NodePool], policy: Policy,
                 settings: LoopSettings | None = None, decide: DecideFn = engine_decide,
                 extension: TickExtension | None = None) -> None:
        self.reader, self.writer, self.provider, self.events, self.clock = reader, writer, provider, events, clock
        self.pools = with_policy_taints(pools, policy.startup_taints)
        self.policy = policy
        self.settings = settings or LoopSettings()
        self.state = EngineState()
        self.drains = DrainTracker()
        # The engine's own decide gets an incremental store carried from tick to tick (same plans, less work).
        self._decide: DecideFn = partial(engine_decide, store=IncrementalStore()) if decide is engine_decide else decide
        self.extension = extension
        self._pools = {p.name: p for p in self.pools}
        self._not_triggered = ev.EventLimiter(self.settings.not_triggered_event_interval_s)
        self._degraded = ev.EventLimiter(self.settings.not_triggered_event_interval_s)
        self._any_degraded = False
        self._malformed = ev.EventLimiter(self.settings.not_triggered_event_interval_s)
        self._synced_once = False
        self._nominated: dict[str, str] = {}
        """Pod → node: the nominations this process wrote and has not seen end (bound, gone, changed, cleared)."""

    def use_pools(self, pools: Sequence[NodePool]) -> None:
        """Decide with these pools from the next tick on (the provider discovered its node groups again). What the
        engine state holds of a pool that left (backoff, last scale-up) is kept: it only matters if the pool comes
        back, and then as it was."""
        self.pools = with_policy_taints(pools, self.policy.startup_taints)
        self._pools = {p.name: p for p in self.pools}

    def tick(self) -> TickReport:
        now = self.clock.now()
        try:
            snapshot = Snapshot(cluster=self.reader.snapshot(), upcoming=tuple(self.provider.upcoming()),
                                node_pools=self.provider.node_pools())
            if self.extension is not None:
                self.extension.read()
        except Exception as err:  # outermost layer: a view we could not fully read is never acted on
            what = "NotSynced" if isinstance(err, NotSynced) else type(err).__name__
            return TickReport(now_s=now, synced=False, next_at_s=now,
                              errors=(ActionError(action=Action.OBSERVE, target="cluster", error=what,
                                                  message=str(err)),))
        if self.extension is not None:
            snapshot = self.extension.observe(snapshot, self._pools, now)
        plan = self._decide(snapshot, self.pools, self.state, self.policy, now)
        self.state = plan.state
        acts = _Acts()
        if not self._synced_once and self.settings.clean_orphaned_taints:
            self._unmark_orphans(snapshot, acts)
        self._synced_once = True
        # Most ticks have nothing to time out, scale up, mark or clear: those steps are not entered then (the
        # NotTriggerScaleUp limiter returns at once by itself when no pod waits and none is remembered).
        if plan.timed_out:
            self._time_out(plan.timed_out, now, acts)
        if plan.scale_up:
            self._scale_up(plan.scale_up, snapshot, now, acts)
        self._report_unplaceable(plan, now, acts)
        if plan.degraded or self._any_degraded:
            self._report_degraded(plan, now, acts)
        if plan.malformed:
            self._report_malformed(plan, now, acts)
        if plan.mark_unneeded or plan.clear_unneeded:
            self._write_unneeded(plan, acts)
        if len(self.drains):
            self._progress_drains(snapshot, now, acts)
        for removal in plan.scale_down:
            self._remove(removal, now, acts)
        if plan.nominate or self._nominated:
            self._nominate(plan, snapshot, acts)
        # what the next decision reads changed here (provider, engine state): it may act at once
        changed = self.state is not plan.state or acts.acted()
        report = acts.report(now, plan, now if changed else plan.next_at_s)
        if self.extension is not None:
            more = self.extension.act(report, now)
            if more:
                report = replace(report, errors=report.errors + tuple(more))
        return report

    # --- act helpers: each attempt is isolated, a failure is recorded and the tick goes on

    def _attempt(self, acts: _Acts, action: Action, target: str, call: Callable[[], object]) -> bool:
        try:
            call()
        except Exception as err:  # outermost layer: provider/API trouble becomes data in the report
            acts.errors.append(ActionError(action=action, target=target, error=type(err).__name__, message=str(err)))
            return False
        return True

    def _wrote(self, acts: _Acts, action: Action, target: str, call: Callable[[], bool]) -> bool:
        """`call()`'s answer (whether it wrote); False after recording its error, as `_attempt` does."""
        answer = False

        def run() -> None:
            nonlocal answer
            answer = call()

        return self._attempt(acts, action, target, run) and answer

    def _emit(self, acts: _Acts, kind: str, key: str, event_type: EventType, reason: str, message: str) -> None:
        self._attempt(acts, Action.EMIT_EVENT, f"{kind} {key}",
                      partial(self.events.emit, kind, key, event_type, reason, message))

    def _unmark_orphans(self, snapshot: Snapshot, acts: _Acts) -> None:
        for node in snapshot.cluster.nodes:
            if node.name in self.drains or node.deleting:
                continue
            if any(t.key == TO_BE_DELETED_TAINT for t in node.taints) and self._attempt(
                    acts, Action.UNMARK_TO_BE_DELETED, node.name, partial(self.writer.unmark_to_be_deleted, node.name)):
                acts.unmarked_orphans.append(node.name)

    def _time_out(self, items: Sequence[TimedOut], now: float, acts: _Acts) -> None:
        backed_off: set[str] = set()
        for item in items:
            message = "; ".join(r.message for r in item.reasons) or "did not become usable in time"
            if item.node is not None:
                done = self._attempt(acts, Action.DELETE_NODE, item.node, partial(self.provider.delete, [item.node]))
                target, kind, key = item.node, NODE, item.node
            elif item.request_id is not None:
                done = self._attempt(acts, Action.CANCEL_REQUEST, item.request_id,
                                     partial(self.provider.cancel, [item.request_id]))
                target, kind, key = item.request_id, ev.STATUS_KIND, ev.STATUS_KEY
            else:
                continue
            if done:
                acts.timed_out.append(target)
            self._emit(acts, kind, key, EventType.WARNING, ev.SCALE_UP_TIMED_OUT,
                       f"{target} of pool {item.pool} timed out: {message}")
            if item.pool not in backed_off:
                backed_off.add(item.pool)
                self._back_off_timed_out(item, message, now)

    def _back_off_timed_out(self, item: TimedOut, message: str, now: float) -> None:
        """Back the pool off unless the engine already did in this decision (its entry then carries `now`)."""
        entry = self.state.backoff.get(item.pool)
        if entry is not None and entry.last_failure_s == now:
            return
        gpu = any(r.code is ReasonCode.GPU_INIT_TIMEOUT for r in item.reasons)
        kind = FailureKind.GPU_INIT_TIMEOUT if gpu else FailureKind.PROVISION_TIMEOUT
        self.state = record_failure(self.state, item.pool, kind, now, self.policy, message)

    def _nominate(self, plan: Plan, snapshot: Snapshot, acts: _Acts) -> None:
        """KEP-5278: write the plan's nominations (moving this process's own where the plan moves them), and clear
        its own once their node is going (removed, timed out, deleted). A nomination that ended otherwise (the pod
        bound or gone, another component's node on it now) is forgotten without a write. Each write reads the pod
        afresh (`ClusterWriter.nominate`): one that kube-scheduler cleared after a failed attempt is written again,
        one the watch has not shown yet is not."""
        pods = {p.key: p for p in snapshot.cluster.pods if p.key in self._nominated} if self._nominated else {}
        if self._nominated:
            going = {r.node for r in plan.scale_down} | {t.node for t in plan.timed_out if t.node is not None}
            live = {n.name for n in snapshot.cluster.nodes if not n.deleting} - going
            for key, node in list(self._nominated.items()):
                pod = pods.get(key)
                if pod is None or pod.node_name is not None or pod.nominated_node not in (None, node):
                    del self._nominated[key]
                elif node not in live:
                    del self._nominated[key]
                    self._attempt(acts, Action.CLEAR_NOMINATION, key,
                                  partial(self.writer.clear_nomination, key, node))
        for key, node in plan.nominate:  # again after kube-scheduler cleared it (a failed attempt)
            if (mine := self._nominated.pop(key, node)) != node and pods[key].nominated_node == mine:
                self._attempt(acts, Action.CLEAR_NOMINATION, key,  # the plan moved the pod: its old place goes first
                              partial(self.writer.clear_nomination, key, mine))
            if self._wrote(acts, Action.NOMINATE, key, partial(self.writer.nominate, key, node)):
                self._nominated[key] = node
                acts.nominated.append((key, node))

    def _scale_up(self, items: Sequence[ScaleUp], snapshot: Snapshot, now: float, acts: _Acts) -> None:
        sizes: dict[str, int] | None = None  # counted at the first scale-up: most ticks have none
        for item in items:
            try:
                request_ids = tuple(self.provider.increase(item.pool, item.nodes, item.zone) if item.zone
                                    else self.provider.increase(item.pool, item.nodes))
            except ProviderError as err:
                self._scale_up_failed(item, err.kind, str(err.kind), err.message, now, acts)
                continue
            except Exception as err:  # outermost layer: an unexpected provider failure backs the pool off too
                self._scale_up_failed(item, FailureKind.OTHER, type(err).__name__, str(err), now, acts)
                continue
            self.state = record_scale_up(self.state, now, item.pool)
            acts.scaled_up.append(ScaleUpDone(pool=item.pool, nodes=item.nodes, request_ids=request_ids))
            pool = self._pools.get(item.pool)
            if sizes is None:
                sizes = ev.pool_sizes(snapshot)
            before = sizes.get(item.pool, 0)
            sizes[item.pool] = before + item.nodes
            change = ev.GroupChange(pool=item.pool, before=before, after=before + item.nodes,
                                    max_size=pool.max_size if pool else before + item.nodes)
            self._emit(acts, ev.STATUS_KIND, ev.STATUS_KEY, EventType.NORMAL, ev.SCALED_UP_GROUP,
                       ev.scaled_up_group(change))
            for pod in item.pods:
                self._emit(acts, POD, pod, EventType.NORMAL, ev.TRIGGERED_SCALE_UP, ev.triggered_scale_up(change))

    def _scale_up_failed(self, item: ScaleUp, kind: FailureKind, error: str, message: str, now: float,
                         acts: _Acts) -> None:
        # a scale-up that named a zone backs off that zone of the pool (`pool/zone`, `NodePool.key`): its other zones
        # still take pods, as a per-zone node group's would
        key = f"{item.pool}/{item.zone}" if item.zone else item.pool
        self.state = record_failure(self.state, key, kind, now, self.policy, message)
        entry = self.state.backoff[key]
        acts.errors.append(ActionError(action=Action.SCALE_UP, target=item.pool, error=error, message=message))
        self._emit(acts, ev.STATUS_KIND, ev.STATUS_KEY, EventType.WARNING, ev.SCALE_UP_FAILED,
                   f"Scale-up of {item.pool}{f' in zone {item.zone}' if item.zone else ''} by {item.nodes} node(s) "
                   f"failed ({kind}): {message}; {'zone' if item.zone else 'pool'} backs off for "
                   f"{entry.until_s - now:.0f}s")

    def _report_unplaceable(self, plan: Plan, now: float, acts: _Acts) -> None:
        verdicts = plan.unplaceable
        for i in self._not_triggered.due([v.pod for v in verdicts], now):
            verdict = verdicts[i]
            self._emit(acts, POD, verdict.pod, EventType.NORMAL, ev.NOT_TRIGGER_SCALE_UP,
                       ev.not_triggered(verdict.reasons))

    def _report_degraded(self, plan: Plan, now: float, acts: _Acts) -> None:
        """A Warning event per degraded node, at most once per interval; the pool is not backed off for it."""
        verdicts = plan.degraded
        self._any_degraded = bool(verdicts)
        for i in self._degraded.due([v.node for v in verdicts], now):
            verdict = verdicts[i]
            self._emit(acts, NODE, verdict.node, EventType.WARNING, ev.NODE_DEGRADED,
                       "node degraded: " + "; ".join(r.message for r in verdict.reasons))

    def _report_malformed(self, plan: Plan, now: float, acts: _Acts) -> None:
        """A Warning event on each object whose protection annotation does not parse, at most once per interval."""
        for verdict in plan.malformed:
            if not self._malformed.allow(verdict.pod, now):
                continue
            kind, key = (NODE, verdict.pod.removeprefix("node/")) if verdict.pod.startswith("node/") else (POD,
                                                                                                          verdict.pod)
            self._emit(acts, kind, key, EventType.WARNING, ev.MALFORMED_ANNOTATION,
                       "; ".join(r.message for r in verdict.reasons))

    def _write_unneeded(self, plan: Plan, acts: _Acts) -> None:
        for node, since in sorted(plan.mark_unneeded.items()):
            if self._attempt(acts, Action.SET_DELETION_CANDIDATE, node,
                             partial(self.writer.set_deletion_candidate, node, since)):
                acts.marked_unneeded.append(node)
        for node in plan.clear_unneeded:
            if self._attempt(acts, Action.CLEAR_DELETION_CANDIDATE, node,
                             partial(self.writer.clear_deletion_candidate, node)):
                acts.cleared_unneeded.append(node)

    # --- scale-down: empty nodes go at once; others are drained over several ticks

    def _remove(self, removal: Removal, now: float, acts: _Acts) -> None:
        node = removal.node
        if node in self.drains or not self._attempt(acts, Action.MARK_TO_BE_DELETED, node,
                                                    partial(self.writer.mark_to_be_deleted, node, now)):
            return
        if not removal.evict:
            if not self._delete(node, "empty", now, acts):
                self._abandon(node, "the provider did not delete it", now, acts)
            return
        unevicted = self._evict(node, removal.evict, acts)
        self.drains.start(node, removal.pool, now, removal.evict, unevicted)
        acts.drains_started.append(node)
        moved = "".join(f"; {r.message}" for r in removal.reasons if r.code is ReasonCode.CHECKPOINTED_MOVE)
        self._emit(acts, NODE, node, EventType.NORMAL, ev.SCALE_DOWN,
                   f"marked the node as toBeDeleted/unschedulable; draining {len(removal.evict)} pod(s){moved}")

    def _evict(self, node: str, pods: Sequence[str], acts: _Acts) -> list[str]:
        """Evict each pod once; returns those whose eviction was not accepted (retried next tick, never forced)."""
        unevicted = []
        for pod in pods:
            try:
                outcome = self.writer.evict(pod)
            except Exception as err:  # outermost layer: an API error is a failed eviction, retried next tick
                acts.errors.append(ActionError(action=Action.EVICT, target=pod, error=type(err).__name__,
                                               message=str(err)))
                outcome = EvictionOutcome.FAILED
            else:
                if outcome is EvictionOutcome.FAILED:
                    acts.errors.append(ActionError(action=Action.EVICT, target=pod, error=str(outcome),
                                                   message=f"eviction from {node} failed; retried next tick"))
            acts.evictions.append(Eviction(pod=pod, node=node, outcome=outcome))
            if outcome is EvictionOutcome.EVICTED:
                self._emit(acts, POD, pod, EventType.NORMAL, ev.SCALE_DOWN, "deleting pod for node scale down")
            elif outcome in (EvictionOutcome.BLOCKED_BY_PDB, EvictionOutcome.FAILED):
                unevicted.append(pod)
        return unevicted

    def _progress_drains(self, snapshot: Snapshot, now: float, acts: _Acts) -> None:
        if not len(self.drains):
            return
        present = {n.name for n in snapshot.cluster.nodes}
        for drain in self.drains:
            if drain.node not in present:  # deleted already (by an earlier call that reported failure, or by hand)
                self.drains.finish(drain.node)
                self.state = record_scale_down(self.state, now)
                continue
            remaining = drain.remaining(snapshot.cluster)
            if not remaining and self._delete(drain.node, "drained", now, acts):
                self.drains.finish(drain.node)
                continue
            if now - drain.started_s >= self.settings.max_graceful_termination_s:
                self.drains.finish(drain.node)
                why = (f"{len(remaining)} pod(s) still on the node after {now - drain.started_s:.0f}s"
                       if remaining else "the provider did not delete it")
                self._abandon(drain.node, why, now, acts)
                continue
            retry = sorted(drain.unevicted & remaining)
            if retry:
                self.drains.set_unevicted(drain.node, self._evict(drain.node, retry, acts))

    def _delete(self, node: str, why: str, now: float, acts: _Acts) -> bool:
        if not self._attempt(acts, Action.DELETE_NODE, node, partial(self.provider.delete, [node])):
            return False
        self.state = record_scale_down(self.state, now)
        acts.deleted.append(node)
        self._emit(acts, NODE, node, EventType.NORMAL, ev.SCALE_DOWN, f"node removed by gpuscale ({why})")
        return True

    def _abandon(self, node: str, why: str, now: float, acts: _Acts) -> None:
        self._attempt(acts, Action.UNMARK_TO_BE_DELETED, node, partial(self.writer.unmark_to_be_deleted, node))
        self.state = record_scale_down(self.state, now, failed=True)
        acts.abandoned.append(node)
        self._emit(acts, NODE, node, EventType.WARNING, ev.SCALE_DOWN_FAILED,
                   f"failed to remove the node: {why}; aborting scale-down")
