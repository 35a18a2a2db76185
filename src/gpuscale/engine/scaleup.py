"""Scale-up: which pools to grow, by how many nodes, for which pending pods — or why not.

Steps, each a function below:
1. `select_candidates`: pods the scheduler marked Unschedulable, minus scheduling-gated and expendable ones; gangs are
   gathered into one unit (all pending members, all-or-nothing) and held back until all members exist; nothing
   happens until the oldest candidate is `new_pod_delay_s` old (`new_gpu_pod_delay_s` if a GPU pod waits and it is set;
   engine/options.py), to batch.
2. `place_on_existing`: units that fit free capacity on usable nodes, or on upcoming ones (requested, registered but
   not Ready, Ready with GPUs not yet registered — counted as their pool's template), are covered: no new node.
3. `estimate`: for each pool not backed off and under its limits, pack the remaining units first-fit-decreasing (by
   dominant share, GPUs included) onto new template nodes appended to the what-if table, so gangs may combine free
   capacity with new nodes. Fractional GPUs are packed per GPU, and with `Policy.gpu_placement` single GPU pods go to
   the template node where fragmentation grows least instead of the first that fits (docs/gpu-sharing.md).
4. the expander chain picks one option; its pods are removed and the loop repeats with the other pools, so mixed
   demand (CPU pods and GPU pods) is served in one decision.
5. whatever is left is unplaceable, with each pool's reason.
Identical pods form equivalence classes: once one pod of a class fails to fit somewhere, the rest of the class is not
tried again there (capacity only shrinks during a decision), and the rows a class fits are found once per placement
pass, then kept up to date by the rows placed on. What depends only on inputs that rarely change — which pools host
which pod, the share normalizer, why units no pool takes wait, the units gathered from the pending pods and their
order — is carried from one decision to the next by a `ScaleUpCache`, which never changes a result. Pods that no pool
hosts and that ask more than any row has free ("dead") are set apart with their verdicts while the table leaves them
so (each such request kept with the column that shows it): placement and estimation walk only the others, so a
decision whose waiting pods did not change costs what the changed ones cost, not what every waiting pod does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import compress, count
from operator import attrgetter, is_, is_not, itemgetter
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from gpuscale.engine.balance import balance, similar
from gpuscale.engine.dra.allocate import AllocationFailure
from gpuscale.engine.expanders import Option, choose, waste
from gpuscale.engine.fit import POOL_FITS, pool_verdict
from gpuscale.engine.limits import Headroom, Totals, headroom
from gpuscale.engine.options import new_pod_delay_s
from gpuscale.engine.placement.devices import GpuNeed, gpu_need
from gpuscale.engine.plan import PodVerdict, ScaleUp, earliest
from gpuscale.engine.policy import ExpanderName, Limits, Policy
from gpuscale.engine.protection import parse_go_duration
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.scheduling import is_plugin_error
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.filters import dra_failure
from gpuscale.engine.whatif.model import NodeEdits, WhatIf, node_group_key
from gpuscale.engine.whatif.volumes import VolumeState, without_claims
from gpuscale.model.cluster import Cluster, PodGroupSpec, PodIndex
from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, SchedulingConstraints, depends_on_placed
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import PODS, Resources, asks_gpu

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")


@quick_init
@dataclass(frozen=True, slots=True)
class Unit:
    """A single pod, or all pending pods of one gang, to be placed all-or-nothing."""

    pods: tuple[Pod, ...]
    group: str | None = None

    @property
    def key(self) -> str:
        return self.group or self.pods[0].key


@dataclass(slots=True)
class Candidates:
    units: list[Unit] = field(default_factory=list)
    waiting: list[PodVerdict] = field(default_factory=list)
    next_at_s: float | None = None
    """When a pod waited on for its age (`pod-scale-up-delay`, the batching delay) is old enough (None: none is)."""


POD_SCALE_UP_DELAY = "cluster-autoscaler.kubernetes.io/pod-scale-up-delay"


def _verdict(pod: Pod, code: ReasonCode, message: str, **numbers: float) -> PodVerdict:
    return PodVerdict(pod=pod.key, reasons=(Reason(code, message, numbers),))


def select_candidates(cluster: Cluster, policy: Policy, now: float, index: PodIndex | None = None) -> Candidates:
    """Step 1: the pods scale-up works for, grouped into units, and the ones it waits on (with why). `index` is
    `cluster.index()` if the caller has it already."""
    index = index or cluster.index()
    return _batched(_gather(cluster, policy.expendable_priority_cutoff, index), policy, now)


@dataclass(slots=True)
class _Gathered:
    """Step 1 up to the batching delay: what it reads of the snapshot (the pending pods, the declared gangs and their
    members) and of the policy (the expendable cutoff) gives the units and the pods waited on; only the batching check
    reads the clock."""

    units: list[Unit]
    waiting: list[PodVerdict]
    oldest: float | None
    """The earliest creation time of a unit's pod (None: none has one)."""
    gpu: bool | None = None
    """Whether some unit's pod requests GPUs: worked out when the batching check first needs it."""
    delayed: dict[str, float] = field(default_factory=dict)
    """Unit key → the latest time (Unix s) a pod of it waits until, per its `pod-scale-up-delay` annotation."""


def _gather(cluster: Cluster, cutoff: int, index: PodIndex) -> _Gathered:
    waiting: list[PodVerdict] = []
    wanted: list[Pod] = []
    for pod in sorted(index.pending, key=lambda p: p.key):
        if pod.scheduling_gated:
            waiting.append(_verdict(pod, ReasonCode.SCHEDULING_GATED, "pod has scheduling gates"))
        elif pod.priority < cutoff:
            waiting.append(_verdict(
                pod, ReasonCode.EXPENDABLE, f"priority {pod.priority} is below the expendable cutoff {cutoff}"))
        elif pod.unschedulable or pod.group is not None:
            wanted.append(pod)
    gang_pods: dict[str, list[Pod]] = {}
    singles: list[Pod] = []
    for pod in wanted:
        if pod.group is not None:
            gang_pods.setdefault(pod.group.key, []).append(pod)
        elif pod.unschedulable:
            singles.append(pod)
    units = [Unit((p,)) for p in singles]
    declared = {g.key: g.min_member for g in cluster.pod_groups}
    members = index.group_members
    for key, pods in sorted(gang_pods.items()):
        if not any(p.unschedulable for p in pods):
            continue  # the scheduler has not tried this gang yet
        expected = declared.get(key) or max((p.group.min_member or 0) for p in pods if p.group)
        if expected and members.get(key, 0) < expected:
            for pod in pods:
                waiting.append(_verdict(
                    pod, ReasonCode.GANG_INCOMPLETE,
                    f"gang {key}: {members.get(key, 0)} of {expected} pods exist; waiting for the rest",
                    existing=members.get(key, 0), expected=expected))
            continue
        units.append(Unit(tuple(pods), key))
    oldest = min((p.created_s for u in units for p in u.pods if p.created_s is not None), default=None)
    return _Gathered(units, waiting, oldest, delayed=_delays(units))


def _delays(units: Sequence[Unit]) -> dict[str, float]:
    """CA's `cluster-autoscaler.kubernetes.io/pod-scale-up-delay` (a Go duration): a pod triggers no scale-up until
    it is that old. A value that does not parse is ignored, as CA ignores it."""
    out: dict[str, float] = {}
    for unit in units:
        for pod in unit.pods:
            text = pod.annotations.get(POD_SCALE_UP_DELAY) if pod.annotations else None
            delay = parse_go_duration(text) if text is not None else None
            if delay is not None and delay > 0 and pod.created_s is not None:
                out[unit.key] = max(out.get(unit.key, 0.0), pod.created_s + delay)
    return out


def _delayed(gathered: _Gathered, now: float) -> tuple[list[Unit], list[PodVerdict]]:
    """The units whose pods are all past their `pod-scale-up-delay`, and the waiting verdicts of the others."""
    waiting: list[PodVerdict] = []
    units: list[Unit] = []
    for unit in gathered.units:
        until = gathered.delayed.get(unit.key)
        if until is None or now >= until:
            units.append(unit)
            continue
        why = f"{POD_SCALE_UP_DELAY}: waiting until it is old enough ({until - now:.0f}s to go)"
        waiting += [_verdict(pod, ReasonCode.WAITING_BATCH, why, remaining_s=until - now) for pod in unit.pods]
    return units, waiting


def _batched(gathered: _Gathered, policy: Policy, now: float) -> Candidates:
    """Step 1's batching delay: nothing happens until the oldest candidate is old enough."""
    units, oldest = gathered.units, gathered.oldest
    ends: float | None = None
    if gathered.delayed:
        units, held = _delayed(gathered, now)
        if held:
            ends = min(until for until in gathered.delayed.values() if now < until)
            gathered = _Gathered(units, [*gathered.waiting, *held], min(
                (p.created_s for u in units for p in u.pods if p.created_s is not None), default=None))
            oldest = gathered.oldest
    if units and oldest is not None and now - oldest < max(new_pod_delay_s(policy, gpu=True),
                                                           new_pod_delay_s(policy, gpu=False)):
        if gathered.gpu is None:  # only then: the oldest is older than both
            gathered.gpu = any(asks_gpu(p.requests) for u in units for p in u.pods)
        delay = new_pod_delay_s(policy, gpu=gathered.gpu)
        if now - oldest < delay:
            return Candidates(waiting=[*gathered.waiting, *(_verdict(
                pod, ReasonCode.WAITING_BATCH,
                f"batching: oldest pending pod is {now - oldest:.1f}s old, waiting until {delay:g}s",
                age_s=now - oldest, delay_s=delay) for unit in units for pod in unit.pods)],
                next_at_s=earliest(ends, oldest + delay))
    if policy.batch_idle_s > 0 and units:
        units, held, closes = _windowed(units, policy.batch_idle_s, policy.batch_max_s, now)
        if held:
            return Candidates(units=units, waiting=[*gathered.waiting, *held], next_at_s=earliest(ends, closes))
    return Candidates(units=list(units), waiting=list(gathered.waiting), next_at_s=ends)


def _windowed(units: Sequence[Unit], idle_s: float, max_s: float,
              now: float) -> tuple[list[Unit], list[PodVerdict], float | None]:
    """Karpenter's batch window over the units' arrival times (a unit arrives with its newest pod): a batch opens at
    its first unit, takes every unit arriving before it closes, and closes `idle_s` after its last unit or `max_s`
    after its first, whichever comes first; the next unit opens the next batch. The units of a batch still open at
    `now` wait (with when it closes); the others go on. Read from the pending pods alone, so a restart or a skipped
    loop sees the same batches (D39). O(units log units)."""
    arrivals = sorted((max(p.created_s for p in u.pods if p.created_s is not None), i)
                      for i, u in enumerate(units) if any(p.created_s is not None for p in u.pods))
    if not arrivals:
        return list(units), [], None
    start = last = arrivals[0][0]
    first = 0
    for k, (t, _) in enumerate(arrivals[1:], 1):
        if t >= min(last + idle_s, start + max_s):
            start, first = t, k
        last = t
    closes = min(last + idle_s, start + max_s)
    if now >= closes:
        return list(units), [], None
    open_ = {i for _, i in arrivals[first:]}
    why = (f"batching: batch open since {now - start:.1f}s, closes in {closes - now:.1f}s "
           f"(idle {idle_s:g}s, max {max_s:g}s)")
    held = [_verdict(pod, ReasonCode.WAITING_BATCH, why, age_s=now - start, remaining_s=closes - now)
            for i in sorted(open_) for pod in units[i].pods]
    return [u for i, u in enumerate(units) if i not in open_], held, closes


def order_units(units: Sequence[Unit], normalizer: Resources,
                shares: dict[Resources, float] | None = None) -> list[Unit]:
    """First-fit-decreasing order: priority, then dominant share (GPUs included; a gang's shares add up), then key.
    `shares`: dominant shares per pod requests already worked out against this very `normalizer` (filled in)."""
    norm = dict(normalizer.items)
    known: dict[Resources, float] = {} if shares is None else shares

    def share(pod: Pod) -> float:
        value = known.get(pod.requests)
        if value is None:
            value = known[pod.requests] = max((a / norm[n] for n, a in pod.requests.items if norm.get(n)),
                                              default=0.0)
        return value

    def order(u: Unit) -> tuple[int, float, str]:
        if len(u.pods) == 1:  # most units: the same key without two generators
            return -u.pods[0].priority, -share(u.pods[0]), u.key
        return -max(p.priority for p in u.pods), -sum(share(p) for p in u.pods), u.key

    return sorted(units, key=order)


def _class_key(pod: Pod, with_labels: bool, volumes: VolumeState | None, shared: frozenset[str]) -> tuple[object, ...]:
    """The pod's equivalence class in a `place_units` pass: its requests and constraints, a pod with claims by what
    the volume filters read of them (`VolumeState.placement_key`: pods each with its own claim of one kind are alike),
    and with a topology its namespace and labels (placed pods' selectors read them)."""
    constraints = pod.constraints
    key: tuple[object, ...]
    if constraints.claims and volumes is not None:
        key = (pod.requests, without_claims(constraints), volumes.placement_key(pod, shared))
    else:
        key = (pod.requests, constraints)
    return (*key, pod.namespace, tuple(sorted(pod.labels.items()))) if with_labels else key


def _shared_claims(table: WhatIf, units: Sequence[Unit]) -> frozenset[str]:
    """The claims more than one pod of `units` uses (none without volume state). O(pods with claims)."""
    if table.volumes is None:
        return frozenset()
    seen: set[str] = set()
    shared: set[str] = set()
    for unit in units:
        for pod in unit.pods:
            for key in dict.fromkeys(c.key for c in pod.constraints.claims):
                (shared if key in seen else seen).add(key)
    return frozenset(shared)


@dataclass(slots=True)
class Placement:
    """Units placed on a table: which rows each unit's pods went to."""

    table: WhatIf
    placed: list[Unit] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    leftover: list[Unit] = field(default_factory=list)


def place_units(table: WhatIf, units: Sequence[Unit], single_rows: BoolArray | None = None,
                aware: bool = False, ceiling: tuple[IntArray, int] | None = None) -> Placement:
    """Place units first-fit on `table` (mutated for singles; gangs go through a fork committed only when whole).

    `single_rows` restricts single pods to those rows (new template rows during estimation); gangs may use any row.
    `aware`: single GPU pods go where fragmentation grows least (the table's placement policy) instead of first fit.
    Estimation on new template rows uses it — how a pool's nodes pack the pods decides how many are needed — while
    covering pods with existing capacity does not: the scheduler decides where they go, and scoring every existing
    node for every pending pod would double a decision's cost for no change in what is ordered.
    `ceiling`: `_ceiling(table)` if the caller has it: the first pod of a class asking more than it is set aside
    without a feasibility pass. Without it, that pass finds no row, which is all the ceiling would have said: it is not
    worked out here (almost every class placed fits under it, so it would cost a pass over every row for nothing).
    """
    result = Placement(table)
    topology = table.topology
    with_labels = topology is not None
    classes: dict[tuple[object, ...], _Class | None] = {}
    """Per class of single pods met so far: its kept mask (`_ClassMasks`; `_NO_MASK` without one), or None once no row
    takes it (capacity only shrinks during the pass: no later pod of the class fits either)."""
    masks = _ClassMasks(single_rows)
    # With a topology, a pod that does not depend on placed pods keeps the shortcut while no placed pod has
    # anti-affinity (InterPodAffinity then reads nothing of it); once one has, every kept mask is dropped.
    relevant = topology is not None and topology.relevant
    shared = _shared_claims(table, units)
    for unit in units:
        topology = result.table.topology  # (a gang placed commits a fork, topology and all)
        if topology is not None and not relevant and topology.relevant:
            relevant, classes, masks = True, {k: v for k, v in classes.items() if v is None}, _ClassMasks(single_rows)
        if unit.group is None:
            pod = unit.pods[0]
            shortcut = _keeps_class_mask(result.table, pod, relevant, shared)
            key = _class_key(pod, with_labels, result.table.volumes, shared)
            if key in classes:
                entry = classes[key]
                if entry is None:
                    result.leftover.append(unit)
                    continue
            else:  # the first pod of its class: more than any row has free (nor will have) fits nowhere
                if ceiling is not None and not _below(result.table.request_vector(pod.requests), ceiling):
                    classes[key] = None
                    result.leftover.append(unit)
                    continue
                entry = classes[key] = masks.new(result.table, pod) if shortcut else _NO_MASK
            if shortcut:
                assert entry is not None
                mask = masks.feasible(result.table, entry, pod)
            else:
                mask = result.table.feasible(pod)
                if single_rows is not None:
                    mask &= single_rows
            if aware:
                if not np.count_nonzero(mask):
                    classes[key] = None
                    result.leftover.append(unit)
                    continue
                row, gpus = result.table.choose(pod, mask, aware=True)
            else:  # `choose` without `aware`: the first row of the mask (a table without rows has none)
                row, gpus = int(mask.argmax()) if len(mask) else -1, None
                if row < 0 or not mask[row]:
                    classes[key] = None
                    result.leftover.append(unit)
                    continue
            result.table.place(row, pod, gpus)
            result.rows[pod.key] = row
            result.placed.append(unit)
            masks.placed(row)
            continue
        _place_gang(result, unit, masks)
    return result


def _keeps_class_mask(table: WhatIf, pod: Pod, relevant: bool, shared: frozenset[str]) -> bool:
    """Whether the pod's class may keep its mask (`_ClassMasks`) across placements: placements change only the rows
    placed on for it — not with inter-pod affinity or spread read from placed pods, nor with claims whose verdicts
    placements change elsewhere (`VolumeState.reads_placed`: a ReadWriteOncePod or unbound claim another pod may use,
    an unbound claim of a class with PVs to bind)."""
    topology = table.topology
    if topology is not None and (relevant or depends_on_placed(pod)):
        return False
    if pod.constraints.resource_claims and table.dra is not None:
        return False  # devices taken on one row, a shared claim pinning its other users: other rows' verdicts move
    return not (pod.constraints.claims and table.volumes is not None and table.volumes.reads_placed(pod, shared))


def _place_gang(result: Placement, unit: Unit, masks: _ClassMasks) -> None:
    """A gang, all or nothing: its pods first-fit on a fork, committed (the fork becomes the table) only when every
    pod has a row."""
    trial = result.table.fork()
    rows: dict[str, int] = {}
    for pod in unit.pods:
        found = trial.first_fit(pod)
        if found is None:
            break
        trial.place(found, pod)
        rows[pod.key] = found
    if len(rows) == len(unit.pods):
        result.table = trial
        result.rows.update(rows)
        result.placed.append(unit)
        for row in rows.values():
            masks.placed(row)
    else:
        result.leftover.append(unit)


@dataclass(slots=True)
class _Class:
    """One class of single pods in a `place_units` pass: where it fits (`_ClassMasks`)."""

    mask: BoolArray
    seen: int
    """How many of `_ClassMasks._touched` the mask has seen."""
    pairs: list[tuple[int, int]]
    """The request's nonzero (column, amount) pairs."""
    need: GpuNeed | None
    """The request's GPU device need."""
    pod: Pod | None = None
    """A pod of the class when it asks host ports (a placement may take them on a row), else None."""
    attach: bool = False
    """Whether its pods attach counted volumes on a table with attach limits (a placement fills a row's slots)."""


_NO_MASK = _Class(np.zeros(0, dtype=bool), 0, [], None)
"""The entry of a class on a table with a topology (no kept mask: `feasible` per pod)."""


class _ClassMasks:
    """The rows where each class of single pods fits, for one `place_units` call: `WhatIf.feasible` once per class,
    then brought up to date by the rows placed on since. Placing only lowers a row's free capacity, free pod slots and
    free devices and adds host ports in use and volumes attached there, and nothing else `feasible` reads changes (no
    topology: affinity to placed pods is left out, so tables with a topology are not used with it; nor claims whose
    verdicts placements change elsewhere, `VolumeState.reads_placed`), so a row outside a class's mask stays outside
    and a row inside needs only its capacity (and, for a class asking host ports, its ports; for one attaching volumes
    where rows have attach limits, its attach slots) checked again — what `feasible` does on that row. Most pods
    placed in a decision share a class with others (about five each in the twin's first day), and each would
    otherwise cost a pass over every row. A row placed on is read (its free capacity as a list, its free pod slots)
    once until it is placed on again, not once per class that checks it: in a ramp, each placement fills a row that
    most classes then check."""

    __slots__ = ("_left", "_single_rows", "_touched")

    def __init__(self, single_rows: BoolArray | None) -> None:
        self._single_rows = single_rows
        self._touched: list[int] = []
        """Rows placed on, in order (repeats allowed)."""
        self._left: dict[int, tuple[list[int], int]] = {}
        """Per row placed on: its free capacity (a list) and free pod slots, read since its last placement."""

    def new(self, table: WhatIf, pod: Pod) -> _Class:
        """The entry of the class of `pod`, its mask `table.feasible(pod)` restricted to the single rows."""
        mask = table.feasible(pod)
        if self._single_rows is not None:
            mask &= self._single_rows
        vector = table.request_vector(pod.requests)
        pairs = [] if vector is None else [(c, int(vector[c])) for c in vector.nonzero()[0].tolist()]
        volumes = table.volumes
        attach = bool(pod.constraints.claims and volumes is not None and volumes.has_limits
                      and volumes.volumes_of(pod).attach)
        return _Class(mask, len(self._touched), pairs, gpu_need(pod.requests),
                      pod if pod.constraints.host_ports else None, attach)

    def feasible(self, table: WhatIf, entry: _Class, pod: Pod) -> BoolArray:
        """`table.feasible(pod)` (restricted to the single rows), for `pod` of the class of `entry` (kept: do not
        modify). A row placed on since is checked again for its capacity, its ports and its attach slots (each pod of
        the class with its own volumes: `VolumeState.placement_key`)."""
        mask = entry.mask
        touched = self._touched
        if entry.seen < len(touched):
            rows = touched[entry.seen:]
            left_of, pairs, need = self._left, entry.pairs, entry.need
            devices = table.devices if need is not None else None
            for row in rows if len(rows) == 1 else dict.fromkeys(rows):
                if not mask[row]:
                    continue
                known = left_of.get(row)
                if known is None:
                    known = left_of[row] = (table.free[row].tolist(), int(table.free_pods[row]))
                left, slots = known
                if slots < 1:
                    mask[row] = False
                    continue
                for column, amount in pairs:
                    if left[column] < amount:
                        mask[row] = False
                        break
                else:
                    if (need is not None and devices is not None and not devices.can_take(row, need)) or (
                            entry.pod is not None and table.ports
                            and table.ports.conflicts(entry.pod, table.nodes[row].name)) or (
                            entry.attach and not _attaches(table, pod, row)):
                        mask[row] = False
            entry.seen = len(touched)
        return mask

    def placed(self, row: int) -> None:
        self._touched.append(row)
        self._left.pop(row, None)


def _attaches(table: WhatIf, pod: Pod, row: int) -> bool:
    """NodeVolumeLimits on one row: the pod's new volumes fit the row's attach slots."""
    volumes = table.volumes
    return volumes is None or volumes.within_limits(volumes.volumes_of(pod), row)


def _ceiling(table: WhatIf) -> tuple[IntArray, int]:
    """The most any row has free of each column, and of pod slots: placing pods only lowers free capacity, so these
    bound every row of the table, and of its forks, for as long as it is placed on. The columns' maxima are taken on a
    transposed copy: NumPy reduces a (rows, few columns) array along its rows a few columns at a time, ≈ 2.3x slower
    at 770 rows than copying it and reducing each column as one contiguous run (the same integers either way)."""
    return np.ascontiguousarray(table.free.T).max(axis=1, initial=0), int(table.free_pods.max(initial=0))


def _below(request: IntArray | None, ceiling: tuple[IntArray, int]) -> bool:
    """Whether a request (`WhatIf.request_vector`) may fit some row under `ceiling`; False means no row can take
    it — what `WhatIf.feasible` would find, for far less than a pass over every row."""
    return request is not None and ceiling[1] >= 1 and not bool((request > ceiling[0]).any())


Verdicts = dict[tuple[str, Resources, SchedulingConstraints], str]
"""`pool_verdict` per (pool name, pod requests, pod constraints): one decision's, or the decision memo's, kept for
as long as the pools are the same."""


def verdict_of(pod: Pod, pool: NodePool, verdicts: Verdicts) -> str:
    """`pool_verdict(pod, pool)`, once per pool and pod shape in a decision: pods that wait loop after loop, and the
    members of a gang, share few shapes."""
    constraints = pod.constraints
    if constraints.claims or constraints.resource_claims:  # a pool's verdict reads no claims (the volume and
        # device filters judge the rows): one per shape
        constraints = _without_any_claims(constraints)
    key = (pool.key, pod.requests, constraints)
    verdict = verdicts.get(key)
    if verdict is None:
        verdict = verdicts[key] = pool_verdict(pod, pool)
    return verdict


@lru_cache(maxsize=4096)
def _without_any_claims(constraints: SchedulingConstraints) -> SchedulingConstraints:
    """Without volume claims nor ResourceClaims: what a pool's verdict reads."""
    return replace(without_claims(constraints), resource_claims=())


_NO_SLOT = -1
"""`ScaleUpCache._hopeless_of`'s column of a request found hopeless because no row had a pod slot."""
_NO_COLUMN = -2
"""`ScaleUpCache._hopeless_of`'s column of a request that names a resource no row offers."""
KEPT = 10_000
"""Bound on each cache a `ScaleUpCache` keeps: past it the cache starts over (it only ever costs recomputation)."""
_RECOUNT = 64
"""Past this many allocatables counted out and in, `ScaleUpCache` counts them by object first (`_net`)."""


def _net(came: list[Resources], gone: list[Resources]) -> tuple[list[tuple[Resources, int]],
                                                                list[tuple[Resources, int]]]:
    """How many more of each allocatable object `came` holds than `gone` (the first list), and of each `gone` holds
    more of (the second): the objects on both sides cancel out. Nodes of a pool share one allocatable object, so when
    nodes shift position (one came near the head, one went near the tail) most of the allocatables read out and in are
    the same few objects: they are counted by identity (in C), and only the few objects left over are looked up by
    value."""
    delta = Counter(map(id, came))
    delta.subtract(Counter(map(id, gone)))
    objects = dict(zip(map(id, gone), gone, strict=True))
    objects.update(zip(map(id, came), came, strict=True))
    return ([(objects[i], n) for i, n in delta.items() if n > 0],
            [(objects[i], -n) for i, n in delta.items() if n < 0])


class _ByPod(Generic[T]):
    """Values per pod *object*, kept from one decision to the next: the snapshot's arrangement hands back the very
    pod object while a pod is unchanged, and a pod (frozen) is all these values read. Asking by identity skips
    hashing and comparing the pod's requests and constraints, which `__hash__`/`__eq__` in Python make costly for the
    few dozen pods that wait every decision. Each entry holds its pod, so no other object can reuse its id."""

    __slots__ = ("_of",)

    def __init__(self) -> None:
        self._of: dict[int, tuple[Pod, T]] = {}

    def get(self, pod: Pod) -> T | None:
        entry = self._of.get(id(pod))
        return entry[1] if entry is not None and entry[0] is pod else None

    def put(self, pod: Pod, value: T) -> T:
        if len(self._of) >= KEPT:
            self._of = {}
        self._of[id(pod)] = (pod, value)
        return value


class PoolFits:
    """Which pools' new nodes host each unit: `verdict_of` for every pod of the unit in every pool, once per pod shape
    (requests and constraints, all a verdict reads) for these very pools. Estimation asks it for every unit, every
    pool and every round; a `ScaleUpCache` keeps it from one decision to the next while the pools are equal, so pods
    that wait decision after decision (many fit no pool at all) are judged once."""

    __slots__ = ("_of_pod", "_of_shape", "_refused", "pools", "verdicts")

    def __init__(self, pools: Sequence[NodePool], verdicts: Verdicts) -> None:
        self.pools = tuple(pools)
        self.verdicts = verdicts
        self._of_shape: dict[tuple[Resources, SchedulingConstraints], frozenset[str]] = {}
        self._of_pod: _ByPod[frozenset[str]] = _ByPod()
        self._refused: _ByPod[PodVerdict] = _ByPod()

    def hosts(self, unit: Unit) -> frozenset[str]:
        """Keys of the offers (`NodePool.key`) one of whose new nodes hosts each pod of `unit` (`pool_verdict` says it
        fits)."""
        names: frozenset[str] | None = None
        for pod in unit.pods:
            fit = self._of_pod.get(pod)
            if fit is None:
                shape = (pod.requests, pod.constraints)
                fit = self._of_shape.get(shape)
                if fit is None:
                    if len(self._of_shape) >= KEPT:
                        self._of_shape = {}
                    fit = self._of_shape[shape] = frozenset(
                        p.key for p in self.pools if verdict_of(pod, p, self.verdicts) == POOL_FITS)
                self._of_pod.put(pod, fit)
            names = fit if names is None else names & fit
        return frozenset() if names is None else names

    def refused(self, pod: Pod, totals: Totals, policy: Policy) -> PodVerdict:
        """The verdict of a single pod no pool hosts (`hosts` is empty): why it is not scaled up, which reads only the
        pod and the pools (`_why_unplaceable` finds a refusing verdict in every pool, so it never reaches backoff or
        limits: `totals` and `policy` are never read), kept per pod."""
        verdict = self._refused.get(pod)
        if verdict is None:
            unit = Unit((pod,))
            verdict = self._refused.put(pod, _Why(*_why_unplaceable(unit, self.pools, {}, totals, policy,
                                                                    self.verdicts)).of(pod))
        return verdict


@dataclass(frozen=True, slots=True)
class _Why:
    """Why units of one shape are not scaled up, and the verdicts of the pods that got it so far (by pod name)."""

    code: ReasonCode
    message: str
    verdicts: dict[str, PodVerdict] = field(default_factory=dict)

    def of(self, pod: Pod) -> PodVerdict:
        verdict = self.verdicts.get(pod.key)
        if verdict is None:
            if len(self.verdicts) >= KEPT:
                self.verdicts.clear()
            verdict = self.verdicts[pod.key] = PodVerdict(pod=pod.key, reasons=(Reason(self.code, self.message),))
        return verdict


UnitShape = tuple[object, ...]
"""A unit's gang name, size and pod shapes: all `_why_unplaceable` reads of a unit."""


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """Why units no pool takes are not scaled up, for one set of inputs (see `ScaleUpCache.why`): per unit shape, and
    the verdict of each single pod that got one (by pod object)."""

    shapes: dict[UnitShape, _Why] = field(default_factory=dict)
    singles: _ByPod[PodVerdict] = field(default_factory=_ByPod)


@dataclass(frozen=True, slots=True)
class _Split:
    """The ordered units of one `_Order` split by what this decision's table and pools leave them: `dead` are single
    pods that ask more than any row of the table has free (so no existing or upcoming node takes them, nor will once
    others are placed: capacity only shrinks) and that no pool's new node hosts; `live` are the others, in order.
    A dead pod changes nothing for the others (placing skips its class at once) and is unplaceable, with a reason that
    reads only the pod and the pools (every pool refuses it: backoff and limits are never reached)."""

    fits: PoolFits
    hopeless: frozenset[Resources]
    """The requests of the single pods no pool hosts that ask more than any row has free (the split reads no other)."""
    live: list[Unit]
    dead: list[tuple[int, tuple[PodVerdict]]]
    """Each dead pod's position in the order and its verdict."""
    verdicts: tuple[PodVerdict, ...]
    """The dead pods' verdicts, in order."""


@dataclass(slots=True)
class _Order:
    """The units of one `_Gathered` in first-fit-decreasing order (`order_units`) against one normalizer, each unit's
    position in it (by identity: the units are held); with the distinct requests of its single pods that no pool
    hosts, and the last split of them (kept while the table leaves the same requests hopeless and the pools are the
    same)."""

    gathered: _Gathered
    normalizer: Resources
    units: list[Unit]
    position: dict[int, int]
    split: _Split | None = None
    unhosted: tuple[PoolFits, list[Resources]] | None = None

    def unhosted_requests(self, fits: PoolFits) -> list[Resources]:
        """The distinct requests of the single pods no pool of `fits` hosts (only those may be dead)."""
        kept = self.unhosted
        if kept is None or kept[0] is not fits:
            kept = self.unhosted = (fits, list(dict.fromkeys(
                u.pods[0].requests for u in self.units if u.group is None and len(u.pods) == 1 and not fits.hosts(u))))
        return kept[1]


WhyInputs = tuple[tuple[NodePool, ...], tuple[str | None, ...], tuple[tuple[bool, str], ...]]
"""What `_why_unplaceable` reads besides the unit: the pools (their verdicts follow), each pool's backoff message (None:
not backed off), and whether each pool's headroom leaves a node and which limit binds it."""


VERDICTS_KEPT = 10_000
"""Pool verdicts per pod shape a `ScaleUpCache` keeps at most."""


class ScaleUpCache:
    """What scale-up derives from inputs that rarely change, carried from one decision to the next by the what-if's
    store (`WhatIf.kept`): the pool verdicts per unit (`PoolFits`), the dominant-share normalizer and the shares
    worked out against it, why each unit shape no pool takes is not scaled up, the units gathered from the pending
    pods (`_Gathered`), their order (`_Order`) and its split into live units and dead pods (`_Split`). Each is kept
    with everything it was computed from and dropped when any of that differs, so a decision with a kept cache equals
    one with a fresh cache (tests/engine/test_store_property.py); with 20 to 25 pods that no pool can take waiting
    every decision of the twin's week, most of scale-up's work was judging, ordering and placing them again."""

    __slots__ = ("_allocatables", "_counts", "_fits", "_gather_inputs", "_gathered", "_nodes", "_nodes_table",
                 "_normalizer", "_offers", "_order", "_pending", "_shares", "_why", "_why_inputs", "_why_raw",
                 "_witness", "_witness_columns")

    def __init__(self) -> None:
        self._fits: PoolFits | None = None
        self._offers: tuple[tuple[NodePool, ...], tuple[NodePool, ...]] | None = None
        """The pools `offers` was last asked for and their offers."""
        self._allocatables: list[Resources] = []
        """The table's node allocatables the normalizer was made from."""
        self._nodes: list[Node] = []
        """The table's nodes `_allocatables` were read from (held: compared by identity)."""
        self._nodes_table = -1
        """The number of the table `_nodes` are those of (`WhatIf.rows_changed`; -1: not known)."""
        self._normalizer: tuple[tuple[Resources, ...], Resources] | None = None
        self._counts: dict[Resources, int] = {}
        """How many of `_allocatables` have each value."""
        self._shares: dict[Resources, float] = {}
        self._why_raw: tuple[tuple[NodePool, ...], tuple[str | None, ...], Totals, Limits, int] | None = None
        self._why_inputs: WhyInputs | None = None
        self._why = Unplaceable()
        self._pending: tuple[Pod, ...] = ()
        """The pending pods `_gathered` was made from (held: compared by identity)."""
        self._gather_inputs: tuple[int, tuple[PodGroupSpec, ...], dict[str, int]] | None = None
        """The rest of what `_gathered` read: the expendable cutoff, the declared gangs, their members (a copy)."""
        self._gathered: _Gathered | None = None
        self._order: _Order | None = None
        self._witness: dict[Resources, tuple[int, int]] = {}
        """Per request found hopeless: a column it asks more of than any row had free, and its amount there
        (`_hopeless_of`)."""
        self._witness_columns: list[str] = []
        """The table columns `_witness` refers to."""

    def gathered(self, cluster: Cluster, policy: Policy, index: PodIndex) -> _Gathered:
        """Step 1 up to the batching delay (`_gather`): the last one while the pending pods are the very same objects
        in the same order and the expendable cutoff, the declared gangs and their member counts are equal."""
        pending, last = index.pending, self._pending
        inputs = (policy.expendable_priority_cutoff, cluster.pod_groups, index.group_members)
        if (self._gathered is None or len(pending) != len(last) or not all(map(is_, pending, last))
                or inputs != self._gather_inputs):
            self._pending = pending
            self._gather_inputs = (inputs[0], inputs[1], dict(inputs[2]))
            self._gathered = _gather(cluster, inputs[0], index)
        return self._gathered

    def order(self, gathered: _Gathered, normalizer: Resources, shares: dict[Resources, float]) -> _Order:
        """The gathered units in order (`order_units`): the last order while the units and the normalizer are."""
        order = self._order
        if order is None or order.gathered is not gathered or order.normalizer != normalizer:
            units = order_units(gathered.units, normalizer, shares)
            order = self._order = _Order(gathered, normalizer, units, {id(u): i for i, u in enumerate(units)})
        return order

    def split(self, order: _Order, table: WhatIf, fits: PoolFits, totals: Totals,
              policy: Policy) -> tuple[_Split, tuple[IntArray, int] | None]:
        """The order split into live and dead units for this table and these pools (`_Split`): the last split while
        the same requests are hopeless and the pools are the same; with `_ceiling(table)` if it was worked out (some
        single pod no pool hosts was not known hopeless for the same reason as at the last decision)."""
        hopeless, ceiling = self._hopeless_of(order.unhosted_requests(fits), table)
        split = order.split
        if split is None or split.fits is not fits or split.hopeless != hopeless:
            live: list[Unit] = []
            dead: list[tuple[int, tuple[PodVerdict]]] = []
            for i, unit in enumerate(order.units):
                if (unit.group is None and len(unit.pods) == 1 and unit.pods[0].requests in hopeless
                        and not fits.hosts(unit)):
                    dead.append((i, (fits.refused(unit.pods[0], totals, policy),)))
                else:
                    live.append(unit)
            split = order.split = _Split(fits, hopeless, live, dead, tuple(v for _, (v,) in dead))
        return split, ceiling

    def _hopeless_of(self, asked: list[Resources],
                     table: WhatIf) -> tuple[frozenset[Resources], tuple[IntArray, int] | None]:
        """Which of `asked` ask more than any row of `table` has free (not `_below` its `_ceiling`), and the ceiling if
        it was worked out (None: not needed). A request found so is kept with a column it asks more of than any row
        had free and its amount there (`_NO_SLOT`: no row had a pod slot; `_NO_COLUMN`: it names a resource no row
        offers): while the table's columns are the same and no row has that much free now — one column's maximum,
        not the whole ceiling — it is still found so. Late in the week the requests of the ~26 pods no pool hosts stay
        hopeless decision after decision for the same reason (GPUs no node has)."""
        if not asked:
            return frozenset(), None
        if self._witness_columns != table.columns or len(self._witness) >= KEPT:
            self._witness, self._witness_columns = {}, list(table.columns)
        witness = self._witness
        peaks: dict[int, int] = {}
        ceiling: tuple[IntArray, int] | None = None
        hopeless: list[Resources] = []
        for requests in asked:
            kept = witness.get(requests)
            if kept is not None:
                column, amount = kept
                if column == _NO_COLUMN:  # the columns decide it alone
                    hopeless.append(requests)
                    continue
                peak = peaks.get(column)
                if peak is None:
                    free = table.free_pods if column == _NO_SLOT else table.free[:, column]
                    peak = peaks[column] = max(int(free[free.argmax()]), 0) if len(free) else 0
                if peak < 1 if column == _NO_SLOT else amount > peak:
                    hopeless.append(requests)
                    continue
            vector = table.request_vector(requests)
            if vector is None:  # a resource no row offers
                hopeless.append(requests)
                witness[requests] = (_NO_COLUMN, 0)
                continue
            if ceiling is None:
                ceiling = _ceiling(table)
            if not _below(vector, ceiling):
                hopeless.append(requests)
                column = _NO_SLOT if ceiling[1] < 1 else int(np.flatnonzero(vector > ceiling[0])[0])
                witness[requests] = (column, 0 if column == _NO_SLOT else int(vector[column]))
        return frozenset(hopeless), ceiling

    def offers(self, pools: Sequence[NodePool]) -> tuple[NodePool, ...]:
        """What a scale-up may add: each pool's offers (`NodePool.in_zones`: one per zone of a pool listing several),
        in pool order; the very same objects while the pools are equal. O(pools)."""
        last = self._offers
        if last is None or last[0] != tuple(pools):
            last = self._offers = (tuple(pools), tuple(o for p in pools for o in p.in_zones()))
        return last[1]

    def fits(self, pools: Sequence[NodePool]) -> PoolFits:
        """The pool verdicts per unit for `pools`: the last ones while the pools are equal. Their verdicts per pod
        shape (`verdict_of`) are kept too, so pods that wait for no pool at all are judged once, not every loop;
        bounded: cleared past `VERDICTS_KEPT` entries."""
        fits = self._fits
        if fits is None or fits.pools != tuple(pools):
            fits = self._fits = PoolFits(pools, {})
        elif len(fits.verdicts) > VERDICTS_KEPT:
            fits.verdicts.clear()
        return fits

    def normalizer(self, pools: Sequence[NodePool], table: WhatIf) -> tuple[Resources, dict[Resources, float]]:
        """What dominant shares divide by — the elementwise max of the pools' and the table's node allocatables, pods
        left out — and the shares already worked out against it (`order_units` fills them in)."""
        changed = self._allocatables_changed(table.nodes, table.rows_changed())
        key = tuple(p.allocatable for p in pools)
        last = self._normalizer
        if last is None or last[0] != key or changed:
            normalizer = Resources()
            for allocatable in dict.fromkeys((*key, *self._counts)):
                normalizer = normalizer.max(allocatable)
            normalizer -= Resources.of({PODS: normalizer.get(PODS)})
            if last is None or last[1] != normalizer:
                self._shares = {}
            self._normalizer = last = (key, normalizer)
        if len(self._shares) >= KEPT:
            self._shares = {}
        return last[1], self._shares

    def _allocatables_changed(self, nodes: list[Node], edits: NodeEdits | None = None) -> bool:
        """Whether the distinct values of the nodes' allocatables differ from the last ones; the allocatables are kept
        with how many nodes have each value (`_counts`). Many nodes, each keeping its object while it is unchanged and
        its allocatable object while that is: the nodes are compared with the last ones position by position by
        identity (in C), and only the allocatables at the positions that differ are counted out and in. When nodes
        came or went, the allocatables are read again (in C) and only the run between the longest common head and tail
        (by identity) is counted out and in: a node or two, mostly; past `_RECOUNT`, the same objects read out and in
        cancel first (`_net`). `edits`: what the table's builder said of its nodes (`NodeEdits`); when it speaks of the
        table `_nodes` are those of and knows the rows that may differ, only those are looked at."""
        last_nodes, allocatables, told = self._nodes, self._allocatables, self._nodes_table
        self._nodes, self._nodes_table = list(nodes), edits[1] if edits is not None else -1
        changed: list[int] | None = None
        if edits is not None and edits[0] == told >= 0 and edits[2] is not None and len(nodes) == len(last_nodes):
            changed = [i for i in edits[2] if nodes[i].allocatable is not allocatables[i]]
        elif nodes and last_nodes and nodes[-1] is last_nodes[-1] and nodes == last_nodes:
            return False  # the usual late-week decision: the same nodes (one pass in C; equal nodes read the same)
        elif len(nodes) == len(last_nodes):
            changed = [i for i in compress(range(len(nodes)), map(is_not, nodes, last_nodes))
                       if nodes[i].allocatable is not allocatables[i]]
        if changed is not None:
            if not changed:
                return False
            fresh = list(allocatables)
            for i in changed:
                fresh[i] = nodes[i].allocatable
            gone, came = [allocatables[i] for i in changed], [fresh[i] for i in changed]
        else:
            fresh = list(map(attrgetter("allocatable"), nodes))
            common = min(len(fresh), len(allocatables))
            head = next(compress(count(), map(is_not, fresh, allocatables)), common)
            tail = min(next(compress(count(), map(is_not, reversed(fresh), reversed(allocatables))), common),
                       common - head)
            gone, came = allocatables[head:len(allocatables) - tail], fresh[head:len(fresh) - tail]
        self._allocatables = fresh
        return _recount(self._counts, came, gone)

    def why(self, pools: Sequence[NodePool], blocked: Mapping[str, Reason], totals: Totals,
            policy: Policy) -> Unplaceable:
        """The reasons for units no pool takes (`_unplaceable`): the last ones while every input of `_why_unplaceable`
        but the unit is the same (the pools, backoff messages, and each pool's headroom: whether it leaves a node and
        which limit binds; the headroom is not worked out again while the totals and limits are the same)."""
        messages = tuple(blocked[p.key].message if p.key in blocked else None for p in pools)
        raw = (tuple(pools), messages, totals, policy.limits, policy.max_nodes_per_scale_up)
        if raw != self._why_raw or self._why_inputs is None:
            self._why_raw = raw
            inputs: WhyInputs = (raw[0], messages, tuple(
                (room.nodes > 0, room.binding) for room in
                (headroom(p, totals, policy.limits, policy.max_nodes_per_scale_up) for p in pools)))
            if inputs != self._why_inputs:
                self._why_inputs, self._why = inputs, Unplaceable()
        if len(self._why.shapes) >= KEPT:
            self._why = Unplaceable()
        return self._why


def _recount(counts: dict[Resources, int], came: list[Resources], gone: list[Resources]) -> bool:
    """Counts the allocatables that came in and those that went out of `counts` (in place; past `_RECOUNT` of them,
    the same objects in both cancel first, `_net`). Whether the distinct values changed: one came that was not
    counted, or one's count fell to zero."""
    if len(gone) + len(came) > _RECOUNT:
        came_n, gone_n = _net(came, gone)
    else:
        came_n, gone_n = [(a, 1) for a in came], [(a, 1) for a in gone]
    distinct = False
    for allocatable, number in came_n:
        had = counts.get(allocatable, 0)
        counts[allocatable] = had + number
        distinct |= not had
    for allocatable, number in gone_n:
        left = counts[allocatable] - number
        if left:
            counts[allocatable] = left
        else:
            del counts[allocatable]
            distinct = True
    return distinct


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    option: Option
    table: WhatIf
    placed: tuple[Unit, ...]
    unused: tuple[int, ...] = ()
    """New template rows of `table` that no pod took and that are not ordered (the option orders only the rows its
    pods use, except in a zero-or-max pool, which takes every row)."""


def estimate(pool: NodePool, hostable: Sequence[Unit], table: WhatIf, room: Headroom,
             name_prefix: str, fillers: Sequence[Unit] = ()) -> Estimate | None:
    """Step 3: how many new nodes of `pool` host which of `hostable` (units a new node of the pool hosts: see
    `PoolFits`), bounded by the limits' headroom; a zero-or-max pool (`NodePool.zero_or_max`) orders its whole room,
    the step to its max size. `fillers` (single pods a smaller pool would take: `_RightSized`) go only on the new
    nodes `hostable` needs, never on one of their own."""
    if room.nodes <= 0 or not hostable:
        return None
    upper = room.nodes if pool.zero_or_max else min(room.nodes, sum(len(u.pods) for u in hostable))
    templates = [pool.template(f"{name_prefix}{pool.key}-{k}") for k in range(upper)]
    start = len(table)
    # templates differ only in name and hostname label, which the node-group key leaves out: one key for all
    keys = [node_group_key(templates[0])] * upper if templates else None
    extended = table.extend(templates, [pool.allocatable] * upper, keys)
    new_rows = np.zeros(len(extended), dtype=bool)
    new_rows[start:] = True
    placement = place_units(extended, hostable, single_rows=new_rows, aware=True)
    if not placement.placed:
        return None
    used = {row for row in placement.rows.values() if row >= start}
    if not used:
        return None
    if fillers:
        taken = np.zeros(len(placement.table), dtype=bool)
        taken[sorted(used)] = True
        topped = place_units(placement.table, fillers, single_rows=taken, aware=True)
        placement.placed.extend(topped.placed)
        placement.rows.update(topped.rows)
        placement.table = topped.table
    pods = tuple(p for u in placement.placed for p in u.pods)
    if pool.zero_or_max:
        return Estimate(option=Option(pool=pool, nodes=upper, pods=pods), table=placement.table,
                        placed=tuple(placement.placed))
    capped = room.binding if placement.leftover and len(used) >= room.nodes else None
    return Estimate(option=Option(pool=pool, nodes=len(used), pods=pods, capped_by=capped),
                    table=placement.table, placed=tuple(placement.placed),
                    unused=tuple(row for row in range(start, start + upper) if row not in used))


@dataclass(frozen=True, slots=True, kw_only=True)
class Spill:
    scale_ups: list[ScaleUp]
    leftover: list[Unit]
    table: WhatIf
    totals: Totals


def spill_gangs(units: Sequence[Unit], table: WhatIf, pools: Sequence[NodePool], totals: Totals,
                policy: Policy, fits: PoolFits) -> Spill:
    """Step 4b: a gang no single pool can host (each pool's limit leaves too few nodes, or some of its nodes are
    partly taken) may span pools — every pool that can host all of its pods, up to each pool's headroom, in pool
    order. Cluster Autoscaler, which does not know gangs, spreads such pods over node groups anyway; waiting instead
    for one pool to drain kept 64-GPU gangs pending for 40 minutes in the twin (docs/twin.md). The gang stays
    all-or-nothing: either every pod has a row (existing, upcoming or new) or no node is ordered for it. Limits hold:
    each pool's room is computed after reserving the whole room of the pools before it."""
    gangs = [u for u in units if u.group]
    singles = [u for u in units if not u.group]
    extended, new_pool = _span_rows(gangs, table, pools, totals, policy, fits)
    if len({pool.key for _, pool in new_pool}) < 2:
        return Spill(scale_ups=[], leftover=list(units), table=table, totals=totals)
    placement = place_units(extended, gangs, single_rows=np.zeros(len(extended), dtype=bool))
    used_rows = set(placement.rows.values())
    scale_ups, totals = _span_scale_ups(pools, new_pool, placement, used_rows, totals)
    if not scale_ups:
        return Spill(scale_ups=[], leftover=list(units), table=table, totals=totals)
    for row, _ in new_pool:
        if row not in used_rows:
            placement.table.disable(row)  # reserved for the what-if, not ordered
    return Spill(scale_ups=scale_ups, leftover=singles + placement.leftover, table=placement.table, totals=totals)


def _span_rows(gangs: Sequence[Unit], table: WhatIf, pools: Sequence[NodePool], totals: Totals, policy: Policy,
               fits: PoolFits) -> tuple[WhatIf, list[tuple[int, NodePool]]]:
    """The rows a spanning gang may use: for each pool (in order) that hosts all of some gang's pods, template rows
    up to its headroom after reserving the rows of the pools before it (a zero-or-max pool: its whole room; else at
    most the largest gang's pod count). Returns the extended table and each new row with its pool."""
    extended, reserved = table, totals
    new_pool: list[tuple[int, NodePool]] = []
    for pool in pools:
        if not any(pool.key in fits.hosts(u) for u in gangs):
            continue
        room = headroom(pool, reserved, policy.limits, policy.max_nodes_per_scale_up)
        count = room.nodes if pool.zero_or_max else min(room.nodes, max(len(u.pods) for u in gangs))
        if count <= 0:
            continue
        start = len(extended)
        extended = extended.extend([pool.template(f"span-{pool.key}-{k}") for k in range(count)],
                                   [pool.allocatable] * count)
        new_pool += [(start + k, pool) for k in range(count)]
        reserved = reserved.add(pool, count)
    return extended, new_pool


def _span_scale_ups(pools: Sequence[NodePool], new_pool: Sequence[tuple[int, NodePool]], placement: Placement,
                    used_rows: set[int], totals: Totals) -> tuple[list[ScaleUp], Totals]:
    """The scale-ups of a spanning placement: per pool (in order) whose new rows took pods, the rows taken (a
    zero-or-max pool: every row of its step, which join `used_rows` in place), with the totals grown by them."""
    scale_ups: list[ScaleUp] = []
    for pool in pools:
        rows = {row for row, p in new_pool if p is pool and row in used_rows}
        if not rows:
            continue
        pods = tuple(sorted(key for key, row in placement.rows.items() if row in rows))
        if pool.zero_or_max:  # every row of its step is ordered
            rows = {row for row, p in new_pool if p is pool}
            used_rows |= rows
        scale_ups.append(ScaleUp(pool=pool.name, zone=pool.zone, nodes=len(rows), pods=pods, reasons=(Reason(
            ReasonCode.SCALE_UP, f"{len(rows)} node(s) of {pool.key} for {len(pods)} pod(s) of a gang no single "
                                 f"pool can host: the gang spans pools", {"nodes": len(rows), "pods": len(pods)}),)))
        totals = totals.add(pool, len(rows))
    return scale_ups, totals


_COVERED = {
    False: (Reason(ReasonCode.FITS_EXISTING, "fits on existing free capacity; the scheduler will bind it"),),
    True: (Reason(ReasonCode.FITS_UPCOMING, "fits on upcoming capacity (a node still starting)"),),
}
"""The reasons of a pod covered by existing (False) or upcoming (True) capacity: the same for every such pod."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUpResult:
    scale_ups: tuple[ScaleUp, ...]
    covered: tuple[PodVerdict, ...]
    waiting: tuple[PodVerdict, ...]
    unplaceable: tuple[PodVerdict, ...]
    table: WhatIf
    """The what-if table with covered pods placed and chosen new nodes appended (their pods placed)."""
    totals: Totals
    upcoming_homes: tuple[tuple[Pod, str], ...] = ()
    """Covered pods placed on an upcoming row, with that row's node name (a registered node's, or a template's)."""
    next_at_s: float | None = None
    """When this result next matters with no change to its inputs but the clock: a waited-on pod is old enough, or
    a pool's backoff ends (None: neither)."""


def plan_scale_up(*, cluster: Cluster, table: WhatIf, upcoming_rows: BoolArray, pools: Sequence[NodePool],
                  totals: Totals, state: EngineState, policy: Policy, now: float,
                  pods: PodIndex | None = None) -> ScaleUpResult:
    """`pods`: `cluster.index()`, if the caller has it. What scale-up derives from inputs that rarely change is kept
    by the what-if's store (`WhatIf.kept`, `ScaleUpCache`): the result is the same without."""
    memo = table.kept(ScaleUpCache)
    gathered = memo.gathered(cluster, policy, pods or cluster.index())
    candidates = _batched(gathered, policy, now)
    pools = memo.offers(pools)
    fits = memo.fits(pools)
    blocked_pools, next_at = _backoffs(pools, state, now, candidates.next_at_s)
    if len(candidates.units) != len(gathered.units):  # some wait (an open batch, a pod's delay): order the rest
        gathered = _Gathered(candidates.units, [], None)  # not the memo's: ordered afresh while they wait
    order = memo.order(gathered, *memo.normalizer(pools, table)) if candidates.units else None
    split, ceiling = memo.split(order, table, fits, totals, policy) if order is not None else (None, None)
    live = split.live if split is not None else []
    existing = place_units(table, live, ceiling=ceiling) if live else Placement(table)  # most late-week decisions
    covered = [PodVerdict(pod=p.key, reasons=_COVERED[bool(upcoming_rows[existing.rows[p.key]])])
               for u in existing.placed for p in u.pods]
    homes = tuple((p, existing.table.nodes[row].name) for u in existing.placed for p in u.pods
                  if upcoming_rows[row := existing.rows[p.key]])
    table = existing.table
    remaining = list(existing.leftover)
    scale_ups, remaining, table, totals = _scale_up_rounds(remaining, table, pools, blocked_pools, totals, policy,
                                                           now, fits)
    dead = split.dead if split is not None else []
    ordered, position = (order.units, order.position) if order is not None else ([], {})
    if any(u.group for u in remaining):
        if dead:  # the gangs' spill reorders what is left: the dead pods go back among the singles it keeps
            remaining = _in_order(remaining, dead, ordered, position)
            dead = []
        spill = spill_gangs(remaining, table, [p for p in pools if p.key not in blocked_pools], totals, policy,
                            fits)
        scale_ups += spill.scale_ups
        remaining, table, totals = spill.leftover, spill.table, spill.totals
    why = memo.why(pools, blocked_pools, totals, policy) if remaining else Unplaceable()
    unplaceable = _unplaceable_verdicts(remaining, dead, split, position, pools, blocked_pools, totals, policy,
                                        fits, why, _TemplateDevices(table.dra))
    return ScaleUpResult(scale_ups=tuple(scale_ups), covered=tuple(covered), waiting=tuple(candidates.waiting),
                         unplaceable=unplaceable, table=table, totals=totals, upcoming_homes=homes,
                         next_at_s=next_at)


def _scale_up_rounds(remaining: list[Unit], table: WhatIf, pools: Sequence[NodePool], blocked: Mapping[str, Reason],
                     totals: Totals, policy: Policy, now: float,
                     fits: PoolFits) -> tuple[list[ScaleUp], list[Unit], WhatIf, Totals]:
    """Step 4a: round after round, each pool not in backoff and not yet used estimates the units left
    (`_round_estimates`), the expanders choose one option (`choose`), which is ordered; its unused template rows
    are disabled. Stops when nothing is left or no pool takes any. Returns the scale-ups, the units left, the table
    with the ordered nodes and their pods, and the totals with those nodes."""
    scale_ups: list[ScaleUp] = []
    used_pools: set[str] = set()
    round_no = 0
    hosts = {id(u): fits.hosts(u) for u in remaining}  # the units live as long as this call
    while remaining:
        estimates = _round_estimates(pools, remaining, hosts, blocked, used_pools, table, totals, policy,
                                     f"new{round_no}-")
        if not estimates:
            break
        best_option = choose([e.option for e in estimates], policy, now)
        best = next(e for e in estimates if e.option is best_option)
        zone = _zone_needed(best, pools, hosts)
        ordered = ScaleUp(pool=best_option.pool.name, zone=zone, nodes=best_option.nodes,
                          pods=tuple(sorted(p.key for p in best_option.pods)),
                          reasons=_scale_up_reasons(best, estimates, hosts, policy, zone))
        split = _balanced(best, ordered, pools, hosts, blocked, used_pools, totals, policy)
        scale_ups += [up for _, up in split]
        totals = totals.add_all((pool, up.nodes) for pool, up in split)
        used_pools.update(pool.key for pool, _ in split)
        placed_keys = {u.key for u in best.placed}
        remaining = [u for u in remaining if u.key not in placed_keys]
        table = best.table
        for row in best.unused:  # not ordered: no later gang may count on them, no warm buffer as idle
            table.disable(row)
        # an offer is used once; a pool whose zone was left to the provider, with every zone offer of it
        used_pools.update(o.key for o in pools
                          if o.name == best_option.pool.name and (zone is None or o is best_option.pool))
        round_no += 1
    return scale_ups, remaining, table, totals


def _backoffs(pools: Sequence[NodePool], state: EngineState, now: float,
              next_at: float | None) -> tuple[dict[str, Reason], float | None]:
    """The offers in backoff (by `NodePool.key`), each with its reason, and `next_at` moved to the first backoff's
    end. A pool backs off whole, one zone of a pool listing several after a scale-up in that zone failed (the tick
    records it under the offer's key): the other zones still take pods."""
    blocked: dict[str, Reason] = {}
    for pool in pools:
        backoff = state.in_backoff(pool.name, now)
        if backoff is None and pool.zone is not None:
            backoff = state.in_backoff(pool.key, now)
        if backoff is not None:
            next_at = earliest(next_at, backoff.until_s)
            blocked[pool.key] = Reason(
                ReasonCode.POOL_BACKOFF,
                f"{pool.key}: backed off for {backoff.until_s - now:.0f}s after {backoff.kind}"
                + (f" ({backoff.message})" if backoff.message else ""),
                {"until_s": backoff.until_s, "failures": backoff.failures})
    return blocked, next_at


def _round_estimates(pools: Sequence[NodePool], remaining: Sequence[Unit], hosts: Mapping[int, frozenset[str]],
                     blocked: Mapping[str, Reason], used_pools: set[str], table: WhatIf, totals: Totals,
                     policy: Policy, name_prefix: str) -> list[Estimate]:
    """One scale-up round's options: for each pool not in backoff and not yet used, in pool order, the estimate of
    the remaining units its new nodes host (`estimate`), within its headroom; pools that host none are skipped."""
    rooms = {pool.key: headroom(pool, totals, policy.limits, policy.max_nodes_per_scale_up)
             for pool in pools if pool.key not in blocked and pool.key not in used_pools}
    sized = _RightSized([p for p in pools if p.key in rooms and rooms[p.key].nodes > 0],
                        enabled=policy.least_waste_counts_gpus and ExpanderName.LEAST_WASTE in policy.expander_chain())
    estimates = []
    for pool in pools:
        if pool.key not in rooms:
            continue
        hostable = [u for u in remaining if pool.key in hosts[id(u)]]
        own = [u for u in hostable if pool.key in sized.hosts(u, hosts[id(u)])]
        if not own:
            continue
        fillers = [u for u in hostable if pool.key not in sized.hosts(u, hosts[id(u)])]
        found = estimate(pool, own, table, rooms[pool.key], name_prefix, fillers)
        if found is not None:
            estimates.append(found)
    return estimates


class _RightSized:
    """Least-waste counting GPUs, before any option is scored: a single GPU pod is offered only to the open offers
    (not backed off, not used this decision, under their limits) with the fewest GPUs per node, per GPU model, among
    those that host it — a 1-GPU pod opens an a2-highgpu-1g node, not an 8-GPU one, while a 1-GPU pool can take it;
    when that pool is backed off or at its limit, the next size up can. It may still fill GPUs left free on the big
    nodes other pods open (`estimate`'s fillers). Gangs keep every offer (their pods may share one big node). Off
    with `least_waste_counts_gpus` off (Cluster Autoscaler's GPU-blind least-waste, #2215) or without the least-waste
    expander. O(distinct host sets × offers) per round."""

    __slots__ = ("_by_key", "_kept", "enabled")

    def __init__(self, open_pools: Sequence[NodePool], *, enabled: bool) -> None:
        self.enabled = enabled
        self._by_key = {p.key: p for p in open_pools if p.gpu_model and p.gpus_per_node}
        self._kept: dict[frozenset[str], frozenset[str]] = {}

    def hosts(self, unit: Unit, keys: frozenset[str]) -> frozenset[str]:
        if not self.enabled or len(unit.pods) != 1 or not asks_gpu(unit.pods[0].requests):
            return keys
        kept = self._kept.get(keys)
        if kept is None:
            smallest: dict[str, int] = {}
            for key in keys:
                if (pool := self._by_key.get(key)) is not None:
                    smallest[pool.gpu_model or ""] = min(smallest.get(pool.gpu_model or "", pool.gpus_per_node),
                                                         pool.gpus_per_node)
            kept = self._kept[keys] = frozenset(
                k for k in keys if (p := self._by_key.get(k)) is None or p.gpus_per_node <= smallest[p.gpu_model or ""])
        return kept


def _balanced(best: Estimate, ordered: ScaleUp, offers: Sequence[NodePool], hosts: Mapping[int, frozenset[str]],
              blocked: Mapping[str, Reason], used: set[str], totals: Totals,
              policy: Policy) -> list[tuple[NodePool, ScaleUp]]:
    """`ordered` (the chosen estimate's scale-up), or with `balance_similar_node_groups` its nodes split over the
    pools similar to the chosen one (`engine.balance`) that host every pod it is for and are not in backoff or used
    this decision, smallest first within each one's limits (`balance`). The pods go with the first pool that gets
    nodes; each scale-up's reasons say how the nodes were split. A pool listing several zones, or scaling
    zero-or-max, is not balanced (its zones are its own). O(offers × units + nodes × pools)."""
    pool = best.option.pool
    if not policy.balance_similar_node_groups or pool.zone is not None or pool.zero_or_max:
        return [(pool, ordered)]
    group = [pool, *(o for o in offers if o.name != pool.name and o.zone is None and not o.zero_or_max
                     and o.key not in blocked and o.key not in used and similar(o, pool)
                     and all(o.key in hosts[id(u)] for u in best.placed))]
    if len(group) == 1:
        return [(pool, ordered)]
    split = balance(group, ordered.nodes, totals, policy.limits, policy.max_nodes_per_scale_up)
    words = ", ".join(f"{g.name} +{n}" for g, n in split)
    note = Reason(ReasonCode.SCALE_UP, f"balance_similar_node_groups: {ordered.nodes} node(s) split over "
                                       f"{len(group)} similar pools: {words}",
                  {"pools": len(group), "nodes": ordered.nodes})
    return [(g, ScaleUp(pool=g.name, nodes=n, pods=ordered.pods if k == 0 else (),
                        reasons=(*ordered.reasons, note) if k == 0 else (note,)))
            for k, (g, n) in enumerate(split)]


def _zone_needed(best: Estimate, offers: Sequence[NodePool], hosts: Mapping[int, frozenset[str]]) -> str | None:
    """The zone the chosen offer's nodes must be created in: its zone when some of its pods are hosted by only some
    of its pool's zone offers (node affinity on the zone, say) or their placement depends on the pods placed
    (`depends_on_placed`: topology spread, inter-pod affinity — the estimate counted them in this zone) or on their
    claims (a zonal PV, a class's allowed zones: the volume filters judged this zone's template rows); None when
    every zone of the pool hosts them all alike (or the pool lists one zone), so the provider places the nodes as it
    does. O(offers × units + pods)."""
    zone = best.option.pool.zone
    if zone is None:
        return None
    if any(depends_on_placed(p) or p.constraints.claims or p.constraints.resource_claims
           for u in best.placed for p in u.pods):
        return zone  # (claims: the volume filters judged this zone's rows; the pool verdicts read no claims)
    siblings = [o.key for o in offers if o.name == best.option.pool.name]
    if all(key in hosts[id(u)] for u in best.placed for key in siblings):
        return None
    return zone


def _scale_up_reasons(best: Estimate, estimates: Sequence[Estimate], hosts: Mapping[int, frozenset[str]],
                      policy: Policy, zone: str | None = None) -> tuple[Reason, ...]:
    """The reasons of the chosen scale-up: what it orders for how many pods (with its waste and price) and in which
    zone when its pods need one, the pools the expanders passed over (another zone of the same pool is no rival
    unless the zone is named), and the limit that capped it, if any."""
    best_option = best.option
    where = f"{best_option.pool.name} in zone {zone}" if zone is not None else best_option.pool.name
    reasons = [Reason(ReasonCode.SCALE_UP,
                      f"{best_option.nodes} node(s) of {where} for {len(best_option.pods)} pod(s)",
                      {"nodes": best_option.nodes, "pods": len(best_option.pods),
                       "waste": waste(best_option, policy.least_waste_counts_gpus),
                       "usd_per_hour": best_option.nodes * best_option.pool.usd_per_hour})]
    if len(estimates) > 1:
        # only the options that could host every pod this scale-up names: another pool's estimate may be for
        # other pods (a MIG pool for a MIG pod) and was no alternative for these
        rivals = sorted({e.option.pool.key if zone is not None else e.option.pool.name for e in estimates
                        if e is not best and (zone is not None or e.option.pool.name != best_option.pool.name)
                        and all(e.option.pool.key in hosts[id(u)] for u in best.placed)})
        if rivals:
            reasons.append(Reason(ReasonCode.EXPANDER, f"expanders {'/'.join(policy.expander_chain())} chose "
                                                       f"{best_option.pool.key if zone else best_option.pool.name} "
                                                       f"over {', '.join(rivals)}"))
    if best_option.capped_by:
        reasons.append(Reason(ReasonCode.LIMIT_REACHED, f"capped by {best_option.capped_by}"))
    return tuple(reasons)


def _in_order(remaining: Sequence[Unit], dead: Sequence[tuple[int, tuple[PodVerdict]]], ordered: Sequence[Unit],
              position: Mapping[int, int]) -> list[Unit]:
    """The units left over and the dead units (by position in `ordered`) merged back in the candidates' order."""
    return [u for _, u in sorted([*((position[id(u)], u) for u in remaining),
                                  *((i, ordered[i]) for i, _ in dead)], key=itemgetter(0))]


def _unplaceable_verdicts(remaining: Sequence[Unit], dead: Sequence[tuple[int, tuple[PodVerdict]]],
                          split: _Split | None, position: Mapping[int, int], pools: Sequence[NodePool],
                          blocked: Mapping[str, Reason], totals: Totals, policy: Policy, fits: PoolFits,
                          why: Unplaceable, devices: _TemplateDevices) -> tuple[PodVerdict, ...]:
    """The verdicts of the pods no scale-up takes, in the candidates' order: the units left over (`_unplaceable`)
    and the dead pods whose verdicts the split already holds, merged by position."""
    if not dead:
        return tuple(v for u in remaining
                     for v in _unplaceable(u, pools, blocked, totals, policy, fits.verdicts, why, devices))
    if not remaining:
        return split.verdicts if split is not None else ()
    return tuple(v for _, verdicts in sorted(
        [*dead, *((position[id(u)], _unplaceable(u, pools, blocked, totals, policy, fits.verdicts, why, devices))
                  for u in remaining)], key=itemgetter(0)) for v in verdicts)


@dataclass(slots=True)
class _TemplateDevices:
    """DynamicResources on one new node of each offer, for the pods no scale-up takes (`_why_unplaceable`): a pool's
    verdict (`verdict_of`) reads no claims, so a pool whose declared slices cannot satisfy a pod's claims would
    otherwise be worded as out of room. `DraState.on_template` on the decision's table; kept per offer and claim
    specs for claims not allocated yet (an error names its claim and is not kept)."""

    dra: DraState | None
    kept: dict[tuple[str, tuple[str, ...]], str | None] = field(default_factory=dict)

    def failure(self, pod: Pod, pool: NodePool) -> str | None:
        """kube-scheduler's words for why a new node of `pool` rejects the pod's claims, or None (it takes them)."""
        dra = self.dra
        if dra is None or not pod.constraints.resource_claims:
            return None
        devices = dra.devices_of(pod)
        if devices.prefilter is not None:
            return devices.prefilter
        key = (pool.key, devices.specs)
        pinned = any(dra.allocation_of(c) is not None for c in devices.claims)
        if not pinned and key in self.kept:
            return self.kept[key]
        outcome = dra.on_template(devices, pool)
        message = dra_failure(outcome).message if isinstance(outcome, AllocationFailure) else None
        if not pinned and (message is None or not is_plugin_error(message)):
            self.kept[key] = message
        return message


def _unplaceable(unit: Unit, pools: Sequence[NodePool], blocked: Mapping[str, Reason], totals: Totals,
                 policy: Policy, verdicts: Verdicts, why: Unplaceable, devices: _TemplateDevices) -> list[PodVerdict]:
    """Why no pool takes this unit: backoff, a limit, the gang as a whole, or no pool's node can host it. `why`
    keeps the answer per unit shape (gang, pod requests and constraints) for these inputs (`ScaleUpCache.why`): units
    of one shape get the same one, and many pods that wait loop after loop share a few shapes. Not for units with
    ResourceClaims on a table with devices: their answer reads the claims (`devices`), which the shape leaves out."""
    if devices.dra is not None and any(p.constraints.resource_claims for p in unit.pods):
        return [_Why(*_why_unplaceable(unit, pools, blocked, totals, policy, verdicts, devices)).of(p)
                for p in unit.pods]
    single = unit.pods[0] if unit.group is None and len(unit.pods) == 1 else None
    if single is not None and (verdict := why.singles.get(single)) is not None:
        return [verdict]
    shape: UnitShape = (unit.group, len(unit.pods), *((p.requests, p.constraints) for p in unit.pods))
    known = why.shapes.get(shape)
    if known is None:
        known = why.shapes[shape] = _Why(*_why_unplaceable(unit, pools, blocked, totals, policy, verdicts))
    if single is not None:
        return [why.singles.put(single, known.of(single))]
    return [known.of(p) for p in unit.pods]


def _why_unplaceable(unit: Unit, pools: Sequence[NodePool], blocked: Mapping[str, Reason], totals: Totals,
                     policy: Policy, verdicts: Verdicts,
                     devices: _TemplateDevices | None = None) -> tuple[ReasonCode, str]:
    """Per pool, the first of: its new node rejects a pod (the filters' words: the pool's verdict, then its claims
    on the pool's declared devices), its backoff, its limits."""
    parts: list[str] = []
    code = ReasonCode.NO_POOL_FITS
    for pool in pools:
        failed = {verdict_of(p, pool, verdicts) for p in unit.pods} - {POOL_FITS}
        if not failed and devices is not None:
            failed = {m for p in unit.pods if (m := devices.failure(p, pool)) is not None}
        if failed:
            parts.append(f"{pool.key}: {'; '.join(sorted(failed))}")
            continue
        if pool.key in blocked:
            parts.append(blocked[pool.key].message)
            code = ReasonCode.POOL_BACKOFF
            continue
        room = headroom(pool, totals, policy.limits, policy.max_nodes_per_scale_up)
        if room.nodes <= 0:
            parts.append(f"{pool.key}: its zero-or-max step of {room.refused_step} node(s) exceeds limit "
                         f"{room.binding}" if room.refused_step else f"{pool.key}: limit {room.binding} reached")
            if code is not ReasonCode.POOL_BACKOFF:
                code = ReasonCode.LIMIT_REACHED
        else:
            parts.append(f"{pool.key}: the whole gang does not fit within limit {room.binding}"
                         if unit.group else f"{pool.key}: not enough room within limit {room.binding}")
            if code is ReasonCode.NO_POOL_FITS:
                code = ReasonCode.GANG_DOES_NOT_FIT if unit.group else ReasonCode.LIMIT_REACHED
    if not pools:
        parts.append("no pools configured")
    prefix = f"gang {unit.group} ({len(unit.pods)} pending pods) not scaled up: " if unit.group else \
        "no scale-up: "
    return code, prefix + " | ".join(parts)
