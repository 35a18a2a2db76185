"""Scale-down: which nodes to remove now, which are unneeded but still waiting, and which cannot go — with reasons.

Cluster Autoscaler's rules and defaults (all knobs in `Policy`), pure: `now` is a parameter, the unneeded clocks come
in as `unneeded_since` (read back from the `DeletionCandidateOfClusterAutoscaler` taint by
`unneeded_since_from_taints`, so a restart keeps them — CA's in-memory timers reset) and go out as
`mark_unneeded` / `clear_unneeded`.

Steps, in this order:
1. **Gate.** Scale-down disabled: nothing. Cooldown (after a scale-up, a failed or a successful scale-down) or too many
   unready nodes (> max(`ok_total_unready_count`, `max_total_unready_percentage` % of nodes); unready nodes younger
   than their pool's startup time (`max_node_startup_time_s`, else `max_node_provision_time_s`, each the pool's own
   first: engine/options.py) are still starting and not counted): removals are withheld, but unneeded nodes are
   still computed and their clocks kept, as CA does.
2. **Candidates.** Nodes not being deleted and not waiting for their GPUs to register (the GPU-initialisation timeout
   handles those) nor still starting (not Ready and younger than that startup time: the provisioning timeout handles
   those). Ready nodes wait `scale_down_unneeded_time_s`; not-Ready nodes `scale_down_unready_time_s` (CA's
   unready rule). Utilization is requests / allocatable: GPU nodes (GPU pool, or GPUs in allocatable) by GPU requests
   only (`gpuscale.io/gpu-milli` counts as thousandths of a GPU), other nodes max(cpu, memory); DaemonSet and mirror
   pods count unless `ignore_daemonsets_utilization` leaves DaemonSet pods out (CA's `--ignore-daemonsets-utilization`,
   off by default). Strictly below the threshold → candidate. A pool's own options (CA's per-node-group ones: its
   thresholds, times, DaemonSets) win over the policy's for its nodes.
   This is one vectorised pass over the table's `free` matrix (the table must hold, for usable nodes, allocatable
   minus the requests of what runs there — plus any pending pods the caller expects to land, so their future home is
   not removed); not-Ready nodes are summed from their pods.
3. **Drainability** (engine/drain.py) of candidates, each against the full PDB budget (as CA's unneeded check); a
   node of no known pool or with a blocking pod is `blocked`. **Recheck timeout** (CA's
   `--unremovable-node-recheck-timeout`, off in the `gpuscale` preset): a node whose removal failed here (a blocking
   pod other than one that must run to completion) or in step 4 (no place for a pod) is remembered in the engine
   state, and until `unremovable_node_recheck_timeout_s` has passed it is listed `RecentlyUnremovable` with that
   failure's reason, without being judged or simulated.
4. **Removal simulation, cumulative** (CA's unneeded-node search), candidates in removal order: empty first, then least
   utilization, fewer pods to move, node name; with `Policy.scale_down_replace_with_cheaper` (D48) the pools' node
   prices come before that order, dearest first, so the pods of a dear node may keep an empty node of a cheaper pool
   (which then has pods to move and stays) rather than that node being removed first. On a fork of the running
   what-if table: disable the node, place each
   pod that must move (largest dominant share first, then key) on the first feasible node in *name* order, preferring
   nodes that are not candidates themselves (a GPU pod, with `Policy.gpu_placement`, on the node where fragmentation
   grows least, in that order on ties; fractions must fit one GPU, see engine/placement/devices.py); earlier accepted
   nodes stay disabled and their pods keep consuming capacity, and pods that landed on a later candidate move again
   with it — so the pods of any subset of the unneeded nodes fit on the rest together. Destinations are Ready,
   usable, not-deleting nodes only (never upcoming nodes).
   Placement never depends on input order.
5. **Unneeded clock.** New unneeded nodes are marked with `now`; marked nodes no longer unneeded are cleared.
6. **Selection**, in the order of step 4: a node unneeded long enough is removed unless the gate withholds it, its pool
   would drop below `min_size` (non-deleting nodes minus removals already planned), the PDB budget left after the
   removals already planned cannot cover its evictions (it stays unneeded and waits: a running budget, so two drains
   never spend the same disruption), moving its checkpointed GPU jobs would lose more work than its pool's lost-work
   budget has left this hour (the same running way, from `EngineState.lost_work`: engine/checkpoint.py, D38; the
   removal then carries the loss and the idle GPU-hours saved in a `CheckpointedJobMoved` reason), or the parallelism
   limits (`max_empty_bulk_delete` empty nodes,
   `max_drain_parallelism` drains) are used up.

Cost at 5,000 nodes × 150,000 pods: step 2 is O(nodes × resources) NumPy over per-node columns (`NodeSet`: built by
C-level passes, no Python loop per node); steps 3–4 touch only candidates' pods; each simulated candidate costs one
fork (O(nodes × resources)) plus one vectorised feasibility pass per pod. **Carried between decisions**
(`ScaleDownCache`, part of the engine's decision memo; never changes a result): the node set while the node records are
the very same objects (updated, not rebuilt, when some change: only records it does not hold are derived) with its
table rows while the table's index is the same and what step 2 reads of its usable nodes alone (allocatable, ratio
denominators, GPU-node flags); and each underutilized node's verdict — its reason and drainability —
while its record, utilization numbers and pod objects are the same and the policy and PDBs are equal, so a node
blocked by the same pod tick after tick is not re-checked. Verdicts are held by position and follow their records from
one node set to the next; the numbers are compared in one vectorised pass, and the pods not at all for nodes the
arrangement says no pod moved on (`engine.arrange.Arranged.moved`), so a decision touches only what changed.

**Simulation cap** (like CA's `--scale-down-candidates-pool-ratio` / `--scale-down-candidates-pool-min-count`): nodes
already unneeded are always re-simulated (their clocks must not reset for lack of time); at most
max(`pool_min_count`, ⌈`pool_ratio` × nodes⌉) other non-empty candidates are simulated per decision, the rest wait for
a later one.

With inter-pod affinity or topology spread in the table, a node accepted as unneeded leaves the table's topology
with its pods (`WhatIf.remove`), as Cluster Autoscaler removes it from its snapshot: its pods count only where they
are placed again, and its domains only if other nodes hold them.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from gpuscale.engine.checkpoint import WINDOW_S, LostWork, lost_gpu_minutes, next_checkpoint_s, spent, window
from gpuscale.engine.drain import SCALE_DOWN_DISABLED, NodeDrain, PdbBudget, drain_node
from gpuscale.engine.nodes import NodePhase, phase
from gpuscale.engine.nowhere import nowhere
from gpuscale.engine.options import (
    ignores_daemonsets,
    lost_work_budget,
    startup_time_s,
    unneeded_time_s,
    unready_time_s,
    utilization_threshold,
)
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, NodeVerdict, Removal
from gpuscale.engine.policy import CooldownScope, Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.state import EngineState, Unremovable
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, Resources, is_gpu_resource

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_FAR = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleDownResult:
    removals: tuple[Removal, ...] = ()
    """Nodes to remove now, in removal order (empty nodes first)."""
    blocked: tuple[NodeVerdict, ...] = ()
    """Underutilized nodes that cannot be removed, and why (by node name)."""
    unneeded: tuple[NodeVerdict, ...] = ()
    """Unneeded nodes not removed now: not unneeded long enough, cooldown, or no parallelism slot (by node name)."""
    mark_unneeded: Mapping[str, float] = field(default_factory=dict)
    clear_unneeded: tuple[str, ...] = ()
    unremovable: Mapping[str, Unremovable] = field(default_factory=dict)
    """The engine state's recently unremovable nodes after this decision: those whose recheck timeout still runs and
    those whose removal simulation failed now."""
    next_at_s: float | None = None
    """When this result next matters with no change to its inputs but the clock (`_next_at`; None: never)."""
    lost_work: tuple[LostWork, ...] = ()
    """The work the removals lose by moving checkpointed GPU jobs, one entry per removal that loses any: what the
    engine state's lost-work budgets spend now."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationCap:
    """How many candidates not already unneeded get the move simulation per decision (see the module docstring)."""

    pool_ratio: float = 0.1
    pool_min_count: int = 50

    def limit(self, nodes: int) -> int:
        return max(self.pool_min_count, math.ceil(self.pool_ratio * nodes))


_DEFAULT_CAP = SimulationCap()


def _unneeded_since(node: Node) -> float | None:
    """The node's unneeded clock from its taint (the last well-formed one), or `None`."""
    since: float | None = None
    for taint in node.taints:
        if taint.key != DELETION_CANDIDATE_TAINT:
            continue
        try:
            value = float(taint.value)
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            since = value
    return since


def unneeded_since_from_taints(nodes: Iterable[Node]) -> dict[str, float]:
    """Node → Unix seconds since which it is unneeded, from the `DeletionCandidateOfClusterAutoscaler` taint's value
    (a decimal string, as CA writes it). Taints with a missing or malformed value are skipped."""
    since: dict[str, float] = {}
    for node in nodes:
        value = _unneeded_since(node)
        if value is not None:
            since[node.name] = value
    return since


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    name: str
    """The node's (all a candidate reads of the node once judged: a verdict carried to a replaced record stays)."""
    pool: NodePool
    pool_name: str
    ready: bool
    utilization: float
    reason: Reason
    """EMPTY, or UNDERUTILIZED with the pods to move."""
    drain: NodeDrain
    required_s: float
    """How long the node must stay unneeded before it goes (the policy's time for its readiness and kind)."""
    order: tuple[bool, float, int, str]
    """Its place in removal order: empty first, then least utilization, fewer pods to move, node name."""
    wait_text: tuple[str, str]
    """The message of its `UNNEEDED_TOO_SHORT` reason before and after the seconds waited (`_wait_reason`): what does
    not depend on the clock, worded once per verdict rather than at every decision it waits."""


# ------------------------------------------------------------------------------------------------------------ nodes
class NodeRecord(Protocol):
    """What scale-down needs of one node besides the node itself (`engine.whatif.store.NodeFacts` is one)."""

    @property
    def node(self) -> Node: ...
    @property
    def pool_name(self) -> str | None: ...
    @property
    def pool(self) -> NodePool | None: ...
    @property
    def phase(self) -> NodePhase: ...
    @property
    def amounts(self) -> tuple[int, int, int, int]:
        """cpu, memory, whole GPUs and GPU milli of the node's allocatable (`allocatable_amounts`)."""
        ...


@dataclass(frozen=True, slots=True)
class _Record:
    node: Node
    pool_name: str | None
    pool: NodePool | None
    phase: NodePhase
    amounts: tuple[int, int, int, int]


_NODE, _NAME, _POOL, _POOL_NAME = attrgetter("node"), attrgetter("name"), attrgetter("pool"), attrgetter("pool_name")
_RECORD_NAME = attrgetter("node.name")
_PHASE_CODE = {p: i for i, p in enumerate(NodePhase)}


ObjectArray = npt.NDArray[np.object_]
_FEW_RECORDS = 16
"""Up to this many records are patched into a node set's columns one by one (`_Columns.patch`)."""


def _objects(items: Iterable[object], n: int) -> ObjectArray:
    return np.fromiter(items, dtype=object, count=n)


@dataclass(slots=True)
class _Columns:
    """Per node, position by position: what scale-down reads of it (see `NodeSet`)."""

    nodes: ObjectArray
    names: ObjectArray
    pools: ObjectArray
    pool_names: ObjectArray
    since: ObjectArray
    """The unneeded clock from the node's taint, or None."""
    phases: npt.NDArray[np.int8]
    alloc: IntArray
    gpu_pool: npt.NDArray[np.bool_]
    tuned: npt.NDArray[np.bool_]
    """The node's pool judges utilization its own way (`NodePool.own_utilization`): a threshold, or DaemonSets."""
    deleting: npt.NDArray[np.bool_]
    ready: npt.NDArray[np.bool_]

    @staticmethod
    def of(records: Sequence[NodeRecord]) -> _Columns:
        """One C-level pass per column, no Python loop per node."""
        n = len(records)
        nodes: list[Node] = list(map(_NODE, records))
        pools: list[NodePool | None] = list(map(_POOL, records))
        distinct = dict(zip(map(id, pools), pools, strict=True))
        gpu_pools = {key: pool is not None and pool.is_gpu_pool() for key, pool in distinct.items()}
        tuned = {key: pool is not None and pool.own_utilization() for key, pool in distinct.items()}
        return _Columns(
            nodes=_objects(nodes, n), names=_objects(map(_NAME, nodes), n), pools=_objects(pools, n),
            pool_names=_objects(map(_POOL_NAME, records), n), since=_objects(map(_unneeded_since, nodes), n),
            phases=np.fromiter(map(_PHASE_CODE.__getitem__, map(attrgetter("phase"), records)), dtype=np.int8,
                               count=n),
            alloc=np.fromiter(chain.from_iterable(map(attrgetter("amounts"), records)), dtype=np.int64,
                              count=4 * n).reshape(n, 4),
            gpu_pool=np.fromiter(map(gpu_pools.__getitem__, map(id, pools)), dtype=bool, count=n),
            tuned=np.fromiter(map(tuned.__getitem__, map(id, pools)), dtype=bool, count=n),
            deleting=np.fromiter(map(attrgetter("deleting"), nodes), dtype=bool, count=n),
            ready=np.fromiter(map(attrgetter("ready"), nodes), dtype=bool, count=n))

    def take(self, source: IntArray) -> _Columns:
        """Position i of the result is position `source[i]` of this one."""
        return _Columns(nodes=self.nodes[source], names=self.names[source], pools=self.pools[source],
                        pool_names=self.pool_names[source], since=self.since[source], phases=self.phases[source],
                        alloc=self.alloc[source], gpu_pool=self.gpu_pool[source], tuned=self.tuned[source],
                        deleting=self.deleting[source], ready=self.ready[source])

    def copy(self) -> _Columns:
        return _Columns(nodes=self.nodes.copy(), names=self.names.copy(), pools=self.pools.copy(),
                        pool_names=self.pool_names.copy(), since=self.since.copy(), phases=self.phases.copy(),
                        alloc=self.alloc.copy(), gpu_pool=self.gpu_pool.copy(), tuned=self.tuned.copy(),
                        deleting=self.deleting.copy(), ready=self.ready.copy())

    def put(self, at: IntArray, new: _Columns) -> None:
        """Positions `at` take `new`'s entries, in order."""
        self.nodes[at], self.names[at], self.pools[at], self.pool_names[at] = (new.nodes, new.names, new.pools,
                                                                                new.pool_names)
        self.since[at], self.phases[at], self.alloc[at] = new.since, new.phases, new.alloc
        self.gpu_pool[at], self.tuned[at] = new.gpu_pool, new.tuned
        self.deleting[at], self.ready[at] = new.deleting, new.ready

    def steady(self, other: _Columns, at: IntArray) -> bool:
        """Whether `other` (these columns with positions `at` patched) has the same phases, allocatable, GPU-pool,
        deleting and Ready flags: all that `NodeSet` derives its usable, unready and live nodes and totals from."""
        if (self.phases is other.phases and self.alloc is other.alloc and self.gpu_pool is other.gpu_pool
                and self.deleting is other.deleting and self.ready is other.ready):  # shared (`patched`)
            return True
        return bool((self.phases[at] == other.phases[at]).all() and (self.alloc[at] == other.alloc[at]).all()
                    and (self.gpu_pool[at] == other.gpu_pool[at]).all()
                    and (self.deleting[at] == other.deleting[at]).all() and (self.ready[at] == other.ready[at]).all())

    def patch(self, at: Sequence[int], records: Sequence[NodeRecord]) -> None:
        """Positions `at` take the entries of `records` (position `at[k]` those of `records[at[k]]`), derived as `of`
        derives them: record by record for a few (`of` costs a dozen C-level passes however few there are), else
        through `of`."""
        if len(at) > _FEW_RECORDS:
            self.put(np.array(at, dtype=np.int64), _Columns.of([records[i] for i in at]))
            return
        for i in at:
            record = records[i]
            node, pool = record.node, record.pool
            self.nodes[i], self.names[i], self.pools[i], self.pool_names[i] = node, node.name, pool, record.pool_name
            self.since[i], self.phases[i] = _unneeded_since(node), _PHASE_CODE[record.phase]
            self.alloc[i], self.gpu_pool[i] = record.amounts, pool is not None and pool.is_gpu_pool()
            self.tuned[i] = pool is not None and pool.own_utilization()
            self.deleting[i], self.ready[i] = node.deleting, node.ready

    def patched(self, at: list[int], records: Sequence[NodeRecord]) -> _Columns:
        """`copy`, then `patch` at `at`, for records of the very names there: the names, and the pools, pool names
        and unneeded clocks while those records' are the same, are shared, not copied (an object column costs a
        reference count per node to copy). Shared or not, a set's columns are never written once it holds them."""
        if len(at) > _FEW_RECORDS:
            columns = self.copy()
            columns.patch(at, records)
            return columns
        new = [records[i] for i in at]
        nodes: list[Node] = list(map(_NODE, new))
        pools, pool_names = list(map(_POOL, new)), list(map(_POOL_NAME, new))
        since = list(map(_unneeded_since, nodes))
        phases = [_PHASE_CODE[record.phase] for record in new]
        alloc = [list(record.amounts) for record in new]
        deleting, ready = [node.deleting for node in nodes], [node.ready for node in nodes]

        def same(column: npt.NDArray[np.generic], values: Sequence[object]) -> bool:
            """Whether `column` holds `values` at `at` (a few entries: one by one, no fancy index)."""
            return all(map(operator.eq, map(column.item, at), values))

        same_pools = all(map(operator.is_, map(self.pools.item, at), pools))  # then the GPU-pool flags are too
        gpu_pool = () if same_pools else [pool is not None and pool.is_gpu_pool() for pool in pools]
        tuned = () if same_pools else [pool is not None and pool.own_utilization() for pool in pools]
        return _Columns(
            nodes=_written(self.nodes, at, nodes, False), names=self.names,
            pools=_written(self.pools, at, pools, same_pools),
            pool_names=_written(self.pool_names, at, pool_names, same(self.pool_names, pool_names)),
            since=_written(self.since, at, since, same(self.since, since)),
            phases=_written(self.phases, at, phases, same(self.phases, phases)),
            alloc=_written(self.alloc, at, alloc,
                           all(self.alloc[i].tolist() == a for i, a in zip(at, alloc, strict=True))),
            gpu_pool=_written(self.gpu_pool, at, gpu_pool, same_pools),
            tuned=_written(self.tuned, at, tuned, same_pools),
            deleting=_written(self.deleting, at, deleting, same(self.deleting, deleting)),
            ready=_written(self.ready, at, ready, same(self.ready, ready)))


_Column = TypeVar("_Column", bound="npt.NDArray[Any]")


def _written(column: _Column, at: Sequence[int], values: Sequence[object], unchanged: bool) -> _Column:
    """`column` itself when it already holds `values` at `at` (`unchanged`: shared, never written), else a copy with
    them written there."""
    if unchanged:
        return column
    copy = column.copy()
    for i, value in zip(at, values, strict=True):
        copy[i] = value
    return copy


def _column_sums(array: IntArray, rows: npt.NDArray[np.bool_]) -> IntArray:
    """`array[rows].sum(axis=0)` for a narrow int64 array: NumPy reduces along axis 0 a few columns at a time (21 vs
    5.6 us at 770 rows x 4 columns), so the rows are gathered into the transposed layout and summed along axis 1."""
    return cast("IntArray", array.T.compress(rows, axis=1).sum(axis=1))


class NodeSet:
    """What scale-down derives from the nodes alone — not from pods, the table or the clock — in name order, as
    arrays built without a Python pass per node. A `ScaleDownCache` keeps one while the records are the very same
    objects, and otherwise derives only the records it does not hold yet (`updated`)."""

    __slots__ = ("_capacities", "_live", "_ranks", "_rows", "_sizes", "_tuned", "_unneeded_since", "_unready",
                 "alloc", "columns", "gpu_pool", "live_count", "names", "nodes", "records", "registered", "usable",
                 "usable_positions", "usable_total")

    def __init__(self, records: Sequence[NodeRecord], columns: _Columns | None = None,
                 steady: NodeSet | None = None) -> None:
        """`columns`: those of `records`, which are then in name order already. `steady`: a set whose columns of
        phases, allocatable, GPU-pool, deleting and Ready flags equal these (`_Columns.steady`): what it derived
        from them is taken as it is."""
        if columns is None:
            names: list[str] = list(map(_NAME, map(_NODE, records)))
            if any(map(operator.ge, names, names[1:])):
                records = [records[i] for i in sorted(range(len(names)), key=names.__getitem__)]
            columns = _Columns.of(records)
        self.records, self.columns = records, columns
        self.nodes, self.names = columns.nodes, columns.names
        self.alloc, self.gpu_pool = columns.alloc, columns.gpu_pool
        self._capacities: _Capacities | None = None
        """`_capacities` of the usable nodes."""
        self.usable: npt.NDArray[np.bool_]
        self.usable_positions: IntArray
        self.registered: list[int]
        """Not Ready: judged (from their pods) once no longer starting."""
        self.usable_total: IntArray
        self.live_count: int
        self._unready: IntArray
        """Positions of the nodes not being deleted and not Ready."""
        if steady is not None:
            self.usable, self.usable_positions, self.registered = (steady.usable, steady.usable_positions,
                                                                   steady.registered)
            self.usable_total, self.live_count, self._unready = steady.usable_total, steady.live_count, steady._unready
            self._capacities = steady._capacities
        else:
            self.usable = columns.phases == _PHASE_CODE[NodePhase.USABLE]
            self.usable_positions = np.flatnonzero(self.usable)
            self.registered = np.flatnonzero(columns.phases == _PHASE_CODE[NodePhase.REGISTERED]).tolist()
            self.usable_total = _column_sums(self.alloc, self.usable)
            self.live_count = len(records) - int(columns.deleting.sum())
            self._unready = np.flatnonzero(~columns.deleting & ~columns.ready)
        self._live: frozenset[str] | None = None
        self._sizes: Counter[str] | None = None
        self._tuned: IntArray | None = None
        self._unneeded_since: dict[str, float] | None = None
        self._rows: tuple[Mapping[str, int], IntArray] | None = None
        """The last `rows` answer and the table index it was read from."""
        self._ranks: tuple[IntArray, IntArray] | None = None
        """The last `ranks` answer and the `rows` answer it was made from."""

    @property
    def unready(self) -> list[Node]:
        """Not being deleted and not Ready (counted as unready unless still starting)."""
        return cast("list[Node]", self.nodes[self._unready].tolist())

    def unready_with_pools(self) -> list[tuple[Node, NodePool | None]]:
        """`unready`, each node with its pool."""
        return list(zip(self.unready, self.columns.pools[self._unready].tolist(), strict=True))

    def updated(self, records: Sequence[NodeRecord]) -> NodeSet:
        """The set of `records`: the columns of records this set holds (the very same objects) are copied, only the
        others are derived. This set is returned as it is if nothing changed."""
        return self.changed(records)[0]

    def changed(self, records: Sequence[NodeRecord]) -> tuple[NodeSet, IntArray | None]:
        """`updated`, and for each of its positions the position in this set of the very same record, -1 for none
        (None: the result was sorted afresh)."""
        if len(records) == len(self.records):
            same = np.fromiter(map(operator.is_, records, self.records), dtype=bool, count=len(records))
            if np.count_nonzero(same) == len(records):
                return self, np.arange(len(records))
            changed = (~same).nonzero()[0]
            at = changed.tolist()
            if all(records[i].node.name == self.names[i] for i in at):  # same names: still in name order
                return self._replaced(records, changed)
        # Held records are alive, so their ids are not another object's.
        where = dict(zip(map(id, self.records), range(len(self.records)), strict=True))
        source = np.fromiter(map(where.get, map(id, records), repeat(-1)), dtype=np.int64, count=len(records))
        return self._moved(records, source)

    def hinted(self, records: Sequence[NodeRecord], came: frozenset[str],
               left: frozenset[str]) -> tuple[NodeSet, IntArray | None]:
        """`changed`, told what changed instead of comparing every record: `records`, in name order, are this set's
        records (the very same objects, as given) but for those named in `came` (new objects, of new or held names)
        and those named in `left` (gone). Only those are looked at; a hint that does not fit falls back to
        `changed`."""
        n, last = len(records), len(self.records)
        if not came and not left:
            return (self, np.arange(n)) if n == last else self.changed(records)
        names = self.names
        fresh: list[int] = []
        for name in came:  # unique names in name order: where each is, found by bisection and checked
            i = bisect_left(records, name, key=_RECORD_NAME)
            if i == n or records[i].node.name != name:
                return self.changed(records)
            fresh.append(i)
        fresh.sort()
        if not left and n == last and all(names.item(i) == records[i].node.name for i in fresh):
            return self._replaced(records, np.array(fresh, dtype=np.int64))  # the usual: the same names replaced
        gone = []
        for name in chain(came, left):
            i = int(names.searchsorted(name)) if last else 0
            if i < last and names[i] == name:
                gone.append(i)
            elif name in left:
                return self.changed(records)
        if n - len(fresh) != last - len(gone):
            return self.changed(records)
        if not left and len(gone) == len(fresh):  # replaced in place: the same names
            return self._replaced(records, np.array(fresh, dtype=np.int64))
        kept = np.ones(last, dtype=bool)
        kept[gone] = False
        source = np.full(n, -1, dtype=np.int64)
        stays = np.ones(n, dtype=bool)
        stays[fresh] = False
        source[stays] = kept.nonzero()[0]
        return self._moved(records, source)

    def _replaced(self, records: Sequence[NodeRecord], changed: IntArray) -> tuple[NodeSet, IntArray]:
        """`changed` where the records at `changed` (the same names) were replaced and the others are held."""
        columns = self.columns.patched(changed.tolist(), records)
        nodes = NodeSet(records, columns, self if self.columns.steady(columns, changed) else None)
        nodes._carry(self, changed)
        source = np.arange(len(records))
        source[changed] = -1
        return nodes, source

    def _moved(self, records: Sequence[NodeRecord], source: IntArray) -> tuple[NodeSet, IntArray | None]:
        """`changed` from `source`: per record, the position of the very same record in this set, -1 for none."""
        fresh = np.flatnonzero(source < 0)
        kept = source[source >= 0]
        if not len(kept) or np.count_nonzero(kept[1:] > kept[:-1]) < len(kept) - 1:
            return NodeSet(records), None  # nothing to copy, or not in name order
        columns = self.columns.take(np.maximum(source, 0))
        if len(fresh):
            columns.patch(fresh.tolist(), records)
            names, last = columns.names, len(records) - 1
            for i in fresh.tolist():  # the kept ones keep their order: only a new neighbour can break it
                if (i > 0 and names[i - 1] >= names[i]) or (i < last and names[i] >= names[i + 1]):
                    return NodeSet(records), None
        return NodeSet(records, columns), source

    def _carry(self, last: NodeSet, changed: IntArray) -> None:
        """Keep what `last` (the same names, records replaced at `changed`) derived that those records leave as it
        was: rows (names only), live nodes and pool sizes (unless one became or stopped being deleted, or changed pool);
        the unneeded clocks are patched where those records' differ."""
        self._rows = last._rows
        if self.usable_positions is last.usable_positions:  # carried (`steady`): so are the ranks
            self._ranks = last._ranks
        old, new = last.columns, self.columns
        if old.deleting is new.deleting or (old.deleting[changed] == new.deleting[changed]).all():
            self._live = last._live
            if (old.pool_names is new.pool_names
                    or old.pool_names[changed].tolist() == new.pool_names[changed].tolist()):
                self._sizes = last._sizes
        if last._unneeded_since is not None and old.since is new.since:
            self._unneeded_since = last._unneeded_since
        elif last._unneeded_since is not None:
            before, after = old.since[changed].tolist(), new.since[changed].tolist()
            since = last._unneeded_since
            if before != after:
                since = dict(since)
                for name, value in zip(self.names[changed].tolist(), after, strict=True):
                    if value is None:
                        since.pop(name, None)
                    else:
                        since[name] = value
            self._unneeded_since = since

    def unneeded_since(self) -> Mapping[str, float]:
        """Node → the unneeded clock its `DeletionCandidateOfClusterAutoscaler` taint carries."""
        if self._unneeded_since is None:
            since = self.columns.since
            marked = np.fromiter(map(operator.is_not, since, repeat(None)), dtype=bool, count=len(since))
            self._unneeded_since = dict(zip(self.names[marked].tolist(), since[marked].tolist(), strict=True))
        return self._unneeded_since

    def tuned_positions(self) -> IntArray:
        """Positions of the nodes whose pool judges utilization its own way (`NodePool.own_utilization`), ascending."""
        if self._tuned is None:
            self._tuned = np.flatnonzero(self.columns.tuned)
        return self._tuned

    def live(self) -> frozenset[str]:
        """Names of the nodes not being deleted."""
        if self._live is None:
            self._live = frozenset(self.names[~self.columns.deleting].tolist())
        return self._live

    def pool_sizes(self) -> Counter[str]:
        """Nodes not being deleted, per pool name (what `min_size` is checked against)."""
        if self._sizes is None:
            sizes = Counter(self.columns.pool_names[~self.columns.deleting].tolist())
            sizes.pop(None, None)
            self._sizes = cast("Counter[str]", sizes)
        return self._sizes

    def ranks(self, rows: IntArray, size: int) -> IntArray:
        """Per row of a table of `size` rows (`rows`: this set's `rows` answer for it), the place among the usable
        nodes in name order of the usable node it holds (a removal's destination), else `_FAR`; read-only, kept
        with that answer."""
        if self._ranks is None or self._ranks[0] is not rows or len(self._ranks[1]) != size:
            usable = rows[self.usable_positions]
            known = usable >= 0
            ranks = np.full(size, _FAR, dtype=np.int64)
            ranks[usable[known]] = np.flatnonzero(known)
            ranks.flags.writeable = False
            self._ranks = (rows, ranks)
        return self._ranks[1]

    def rows(self, table: WhatIf) -> IntArray:
        """Each node's row in `table`, -1 for none (read-only). Kept while the table's index is the very same mapping
        (table indexes are never changed once made; the row memo hands the last one back while the rows are)."""
        index = table.row_index()
        if self._rows is not None and self._rows[0] is index:
            return self._rows[1]
        rows = np.fromiter(map(index.get, self.names, repeat(-1)), dtype=np.int64, count=len(self.names))
        rows.flags.writeable = False
        self._rows = (index, rows)
        return rows


# ------------------------------------------------------------------------------------------------------------- gate
def _starting(node: Node, pool: NodePool | None, policy: Policy, now: float) -> bool:
    """A not-Ready node younger than its pool's startup bound (engine/options.py, as the time-outs read it) is still
    starting (an upcoming node, CA's NotStarted): neither counted as unready nor a scale-down candidate — the
    provisioning timeout owns it."""
    return (not node.ready and node.created_s is not None
            and now - node.created_s < startup_time_s(pool, policy))


def _halt(nodes: NodeSet, policy: Policy, state: EngineState, now: float) -> Reason | None:
    """Why removals are withheld this decision, or `None`."""
    live = nodes.live_count
    unready = sum(1 for n, pool in nodes.unready_with_pools() if not _starting(n, pool, policy, now))
    allowed = max(policy.ok_total_unready_count, policy.max_total_unready_percentage / 100.0 * live)
    if unready > allowed:
        return Reason(ReasonCode.TOO_MANY_UNREADY,
                      f"{unready} of {live} nodes are unready (more than {allowed:g}): scale-down halted",
                      {"unready": unready, "nodes": live, "allowed": allowed})
    after_add = state.last_scale_up_s if policy.scale_down_delay_after_add_scope is CooldownScope.CLUSTER else None
    for last, delay, what in ((after_add, policy.scale_down_delay_after_add_s, "scale-up"),
                              (state.last_scale_down_failure_s, policy.scale_down_delay_after_failure_s,
                               "failed scale-down"),
                              (state.last_scale_down_s, policy.scale_down_delay_after_delete_s, "scale-down")):
        if last is not None and now - last < delay:
            return Reason(ReasonCode.SCALE_DOWN_COOLDOWN,
                          f"scale-down in cooldown for {last + delay - now:g}s after the last {what}",
                          {"remaining_s": last + delay - now, "delay_s": delay})
    return None


# ------------------------------------------------------------------------------------------------------ utilization
def _amounts(res: Resources) -> tuple[int, int, int, int]:
    return res.get(CPU), res.get(MEMORY), res.gpu_count(), res.get(GPU_MILLI)


def allocatable_amounts(node: Node) -> tuple[int, int, int, int]:
    return _amounts(node.allocatable)


def _evaluated(nodes: NodeSet, policy: Policy, now: float) -> IntArray:
    """Positions of the nodes judged: usable ones, and not-Ready ones no longer starting."""
    pools = nodes.columns.pools
    late = [i for i in nodes.registered if not _starting(nodes.nodes[i], pools[i], policy, now)]
    if not late:
        return nodes.usable_positions
    mask = nodes.usable.copy()
    mask[late] = True
    return np.flatnonzero(mask)


_Capacities = tuple[IntArray, IntArray, npt.NDArray[np.bool_], IntArray, IntArray]


def _capacities(nodes: NodeSet, at: IntArray) -> _Capacities:
    """What utilization reads of the nodes alone at positions `at`: their allocatable amounts, the ratios' denominators
    (cpu, memory, milli-GPUs: whole GPUs if any, else GPU milli), whether each is judged as a GPU node (GPUs in
    allocatable, or a GPU pool), the denominators with 1 for 0 and where (flat) those zeros are. Kept by the set for
    its usable positions (the usual `at`), read-only."""
    if at is nodes.usable_positions and nodes._capacities is not None:
        return nodes._capacities
    alloc = nodes.alloc[at]
    total = np.empty((len(at), 3), dtype=np.int64)
    total[:, :2], total[:, 2] = alloc[:, :2], np.where(alloc[:, 2] > 0, 1000 * alloc[:, 2], alloc[:, 3])
    gpu_node = (total[:, 2] > 0) | nodes.gpu_pool[at]
    zeros = np.flatnonzero(total == 0)
    nonzero = total.copy()
    nonzero.flat[zeros] = 1
    capacities = (alloc, total, gpu_node, nonzero, zeros)
    if at is nodes.usable_positions:
        for array in capacities:
            array.flags.writeable = False
        nodes._capacities = capacities
    return capacities


@lru_cache(maxsize=64)
def _table_slots(columns: tuple[str, ...]) -> tuple[list[int], list[int], list[int], list[int] | None]:
    """For a table's columns: the allocatable slots (cpu 0, memory 1, GPU milli 3) it has a column for, those columns,
    the columns of whole GPUs (summed into slot 2), and when each slot has exactly one column, those four in slot
    order (then a row of free amounts is one `take` away from the slots)."""
    slots = [(slot, columns.index(name)) for slot, name in ((0, CPU), (1, MEMORY), (3, GPU_MILLI)) if name in columns]
    gpus = [i for i, c in enumerate(columns) if is_gpu_resource(c)]
    order = [slots[0][1], slots[1][1], gpus[0], slots[2][1]] if len(slots) == 3 and len(gpus) == 1 else None
    return [s for s, _ in slots], [c for _, c in slots], gpus, order


_SHARE_SLOTS = [0, 1, 3]
"""The slots of cpu, memory and GPU milli: the ratios' numerators, with 1000 x the whole GPUs added to the last."""


def _utilizations(nodes: NodeSet, at: IntArray, rows: IntArray, table: WhatIf,
                  pods_by_node: Mapping[str, Sequence[Pod]],
                  policy: Policy) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Of the nodes at positions `at` (table rows `rows`): utilization (GPU nodes by GPU requests, others by max(cpu,
    memory)), threshold, the cpu, memory and GPU ratios (one row each) and whether judged as a GPU node; one
    vectorised pass. Whole blocks are taken, not columns picked by lists: at a thousand nodes NumPy's fixed cost per
    call is most of it, and a fancy index costs ten times a `take`."""
    n = len(at)
    alloc, _, gpu_node, nonzero, zeros = _capacities(nodes, at)
    in_table = (rows >= 0) if at is nodes.usable_positions else nodes.usable[at] & (rows >= 0)
    slots, columns, gpu_columns, order = _table_slots(tuple(table.columns))
    # the usual: every node in the table, every slot one column
    if order is not None and np.count_nonzero(in_table) == n:
        used = alloc - table.free.take(rows, axis=0).take(order, axis=1)
    else:
        used = np.zeros((n, 4), dtype=np.int64)
        from_table = np.flatnonzero(in_table)
        if len(from_table):
            free = table.free.take(rows.take(from_table), axis=0)
            part = alloc.take(from_table, axis=0)
            block = np.zeros((len(from_table), 4), dtype=np.int64)
            block[:, slots] = part[:, slots] - free[:, columns]
            if gpu_columns:
                block[:, 2] = part[:, 2] - free[:, gpu_columns].sum(axis=1)
            used[from_table] = block
        for i in np.flatnonzero(~in_table).tolist():
            pods = pods_by_node.get(nodes.names[at[i]], ())
            used[i] = _amounts(sum((p.requests for p in pods if not p.is_terminal()), Resources()))
    own = _own_pools(nodes, at)
    ignoring = policy.ignore_daemonsets_utilization
    if ignoring or own:  # DaemonSet pods left out where the policy or the node's pool says so
        says = {i: ignores_daemonsets(pool, policy) for i, pool in own}
        for i in range(n) if ignoring else says:
            if says.get(i, ignoring):
                used[i] -= _amounts(sum((p.requests for p in pods_by_node.get(nodes.names[at[i]], ())
                                         if p.of_daemonset() and not p.is_terminal()), Resources()))
    np.maximum(used, 0, out=used)
    share = used.take(_SHARE_SLOTS, axis=1)  # cpu, memory and milli-GPUs requested, over `total`
    share[:, 2] += 1000 * used[:, 2]
    ratios = np.divide(share, nonzero)
    if len(zeros):  # no denominator (no GPUs, say): 1 if any is used, else 0
        np.put(ratios, zeros, share.take(zeros) > 0)
    utilization = np.where(gpu_node, ratios[:, 2], np.maximum(ratios[:, 0], ratios[:, 1]))
    threshold = np.where(gpu_node, policy.scale_down_gpu_utilization_threshold,
                         policy.scale_down_utilization_threshold)
    for i, pool in own:  # nodes of pools with options of their own (none, usually): the per-pool rule
        threshold[i] = utilization_threshold(pool, policy, gpu=bool(gpu_node[i]))
    return utilization, threshold, ratios, gpu_node


def _own_pools(nodes: NodeSet, at: IntArray) -> list[tuple[int, NodePool]]:
    """The nodes at positions `at` (ascending) whose pool judges utilization its own way, as (index in `at`, pool)."""
    tuned = nodes.tuned_positions()
    if not len(tuned):
        return []
    k = at.searchsorted(tuned)  # where each tuned position is in `at`, if it is there
    found = k < len(at)
    k, tuned = k[found], tuned[found]
    pools = nodes.columns.pools
    return [(i, pools[position]) for i, position in zip(k.tolist(), tuned.tolist(), strict=True)
            if at[i] == position]



_Numbers = tuple[float, float, float, float, float, bool]
"""utilization, threshold, cpu, memory and GPU ratios, and whether judged as a GPU node."""


def _judge(record: NodeRecord, numbers: _Numbers, gpu_pool: bool, pods: Sequence[Pod], policy: Policy,
           budget: PdbBudget, now: float = 0.0) -> _Candidate | NodeVerdict:
    """An underutilized node: a drainable candidate, or why it cannot go (no known pool, a pod or PDB keeps it). What
    it reads of the record is what `_reads_the_same` compares: keep the two in step. `gpu_pool`: whether the record's
    pool is a GPU pool (the node set's column)."""
    node = record.node
    value, threshold, cpu, memory, gpu, gpu_node = numbers
    figures = {"utilization": value, "threshold": threshold, **({"gpu": gpu} if gpu_node else
                                                                 {"cpu": cpu, "memory": memory})}
    pool, pool_name = record.pool, record.pool_name
    if pool is not None and pool.scale_down_disabled is not None:
        return NodeVerdict(node=node.name, reasons=(Reason(
            ReasonCode.SCALE_DOWN_DISABLED, f"node {node.name}: pool {pool.name}: {pool.scale_down_disabled}"),))
    drain = (None if pool is None or pool_name is None
             else drain_node(node, pods, policy=policy, budget=budget, now=now))
    if drain is not None and drain.blocked is None and drain.empty:  # the usual candidate: no utilization message
        reason = Reason(ReasonCode.EMPTY, f"node {node.name} is empty: no pod needs to move", figures)
    else:
        what = "GPU requests are" if gpu_node else "max(cpu, memory) requests are"
        underutilized = Reason(ReasonCode.UNDERUTILIZED, f"node {node.name}: {what} {value:.0%} of allocatable, below "
                                                         f"the {threshold:.0%} threshold", figures)
        if drain is None:
            return NodeVerdict(node=node.name, reasons=(Reason(
                ReasonCode.UNKNOWN_POOL, f"node {node.name} belongs to no known pool"), underutilized))
        if drain.blocked is not None:
            return NodeVerdict(node=node.name, reasons=(drain.blocked, underutilized))
        reason = Reason(ReasonCode.UNDERUTILIZED,
                        f"{underutilized.message}; {len(drain.move)} pod(s) to move",
                        {**figures, "pods_to_move": len(drain.move)})
    assert pool is not None and pool_name is not None
    ready = record.phase is NodePhase.USABLE
    required = _required_s(pool, ready, gpu_pool, policy)
    what = "unneeded" if ready else "unready and unneeded"
    return _Candidate(name=node.name, pool=pool, pool_name=pool_name, ready=ready, utilization=value, reason=reason,
                      drain=drain, required_s=required,
                      order=(not drain.empty, value, len(drain.move), node.name),
                      wait_text=(f"node {node.name} {what} for ", f"s of {required:g}s"))


def _fresh(since: Mapping[str, float], ttl_s: float, now: float) -> tuple[Mapping[str, float], tuple[str, ...]]:
    """The unneeded clocks younger than CA's `--node-deletion-candidate-ttl` (0: no TTL, all of them), and the nodes
    whose taint is older: their clock starts again (their taint is written anew, or cleared if no longer unneeded)."""
    if ttl_s <= 0:
        return since, ()
    stale = tuple(n for n, t in since.items() if now - t > ttl_s)
    if not stale:
        return since, ()
    gone = set(stale)
    return {n: t for n, t in since.items() if n not in gone}, stale


def _restarted(since: Mapping[str, float],
               pods_by_node: Mapping[str, Sequence[Pod]]) -> tuple[Mapping[str, float], tuple[str, ...]]:
    """The unneeded clocks no pod started under, and the nodes where a pod that is not a DaemonSet pod started
    (`started_s`) after the clock did: work just arrived there, so its clock starts again, as if the node had been
    needed (a DaemonSet pod comes with every node and says nothing about demand). O(pods on unneeded nodes)."""
    again = tuple(n for n, t in since.items() if any(
        p.started_s is not None and p.started_s > t and not p.of_daemonset() for p in pods_by_node.get(n, ())))
    if not again:
        return since, ()
    gone = set(again)
    return {n: t for n, t in since.items() if n not in gone}, again


def protected_until(verdicts: Sequence[object]) -> float:
    """The earliest end of a time-limited protection (`protected_until_s`) that keeps one of `verdicts`' nodes (inf:
    none does)."""
    ends = [r.numbers["protected_until_s"] for v in verdicts if isinstance(v, NodeVerdict) for r in v.reasons
            if r.code is ReasonCode.DO_NOT_DISRUPT and "protected_until_s" in r.numbers]
    return min(ends, default=math.inf)


def _required_s(pool: NodePool, ready: bool, gpu_pool: bool, policy: Policy) -> float:
    """How long a node of `pool` must stay unneeded: by readiness, the per-pool rule (engine/options.py)."""
    return unneeded_time_s(pool, policy, gpu=gpu_pool) if ready else unready_time_s(pool, policy)


def _reads_the_same(one: NodeRecord, other: NodeRecord) -> bool:
    """Whether `_judge` reads the same from both records (given equal numbers and pods): everything it and `drain_node`
    read of a record — the node's name and `scale-down-disabled` annotation, the pool (object), its name, the phase.
    A node marked or cleared as unneeded (a taint) keeps its verdict this way."""
    return (one.node.name == other.node.name and one.pool is other.pool and one.pool_name == other.pool_name
            and one.phase is other.phase
            and one.node.annotations.get(SCALE_DOWN_DISABLED) == other.node.annotations.get(SCALE_DOWN_DISABLED))


_FEW_STIRRED = 8
"""Stirred nodes (`_Judgements.judge`) up to 1/this of the underutilized ones are found by bisection, one by one; more
are looked up name by name in one C-level pass."""


class _Judgements:
    """The verdicts of the last decision's underutilized nodes, by position in one `NodeSet`, carried to the next
    decision (in a `ScaleDownCache`; a fresh one judges every node). A verdict reads only the node record, its
    utilization numbers, its pods, the policy and the whole PDB budget: it is reused while the record is the very same
    object (positions follow their records from one set to the next), the numbers are equal and the pods the very same
    objects (the owner drops all verdicts when the policy or a PDB changes). Whether the pods are the same is known
    without looking when the arrangement says which nodes' pods may have moved since the last decision
    (`engine.arrange.Arranged.moved`); else each reused verdict's pods are compared."""

    __slots__ = ("_generation", "at", "expires_s", "nodes", "numbers", "pods", "verdicts")

    def __init__(self) -> None:
        self.nodes: NodeSet | None = None
        """The set the positions are of."""
        self.at: IntArray = np.zeros(0, dtype=np.int64)
        """Positions with a verdict, ascending."""
        self.numbers: FloatArray = np.zeros((0, 6))
        """Row by row, the numbers each verdict was made from (`_Numbers`, GPU-ness as 0/1)."""
        self.verdicts: list[_Candidate | NodeVerdict] = []
        self.pods: list[tuple[Pod, ...]] = []
        """The pods each verdict was made from."""
        self._generation = -1
        """The arrangement the pods were those of (-1: unknown)."""
        self.expires_s = math.inf
        """The earliest end of a do-not-disrupt protection a verdict names (inf: none)."""

    def follow(self, nodes: NodeSet, source: IntArray | None) -> None:
        """Positions now refer to `nodes`, whose position i holds the very record at position `source[i]` of the
        last set (-1: none; None: unknown): verdicts follow their records, the others are forgotten."""
        if nodes is self.nodes:
            return
        last = self.nodes
        if source is None or last is None:
            self.at, self.numbers, self.verdicts, self.pods = np.zeros(0, dtype=np.int64), np.zeros((0, 6)), [], []
        else:
            moved_to = np.full(len(last.names), -1, dtype=np.int64)
            kept = (source >= 0).nonzero()[0]
            moved_to[source[kept]] = kept
            replaced = (moved_to[self.at] < 0).nonzero()[0].tolist()
            for k in replaced:  # a record replaced in place by one its verdict reads the same from keeps the verdict
                i = int(self.at[k])
                if (i < len(nodes.names) and nodes.names[i] == last.names[i]
                        and _reads_the_same(last.records[i], nodes.records[i])):
                    moved_to[i] = i
            to = moved_to[self.at]
            if np.count_nonzero(to >= 0) < len(to):
                keep = (to >= 0).nonzero()[0]
                to, self.numbers = to[keep], self.numbers[keep]
                self.verdicts = [self.verdicts[i] for i in keep.tolist()]
                self.pods = [self.pods[i] for i in keep.tolist()]
            self.at = to  # still ascending: kept records keep their order
        self.nodes = nodes

    def forget(self) -> None:
        self.nodes = None

    def judge(self, at: IntArray, numbers: FloatArray, pods_by_node: Mapping[str, Sequence[Pod]], policy: Policy,
              budget: PdbBudget, moved: tuple[int, frozenset[str] | None] | None,
              now: float = 0.0) -> list[_Candidate | NodeVerdict]:
        """The verdicts of the nodes at positions `at` (ascending, of `self.nodes`) with `numbers` (row by row); the
        others' are forgotten. A verdict made before a do-not-disrupt protection it names ran out (`expires_s`) is
        not reused: then every node is judged again (rare: only when such a protection ends)."""
        nodes = self.nodes
        assert nodes is not None
        generation, hint = moved if moved is not None else (-1, None)
        seen, self._generation = self._generation, generation
        held = np.minimum(self.at.searchsorted(at), max(len(self.at) - 1, 0))
        same = ((self.at[held] == at) & (self.numbers[held] == numbers).all(axis=1) if len(self.at)
                and now < self.expires_s else np.zeros(len(at), dtype=bool))
        names = nodes.names[at].tolist()
        # the nodes whose pods may differ from the last decision's (None: any may)
        stirred = hint if hint is not None and generation >= 0 and seen == generation - 1 else None
        old_verdicts, old_pods, records, gpu_pool = self.verdicts, self.pods, nodes.records, nodes.gpu_pool
        if stirred is None:
            for i in same.nonzero()[0].tolist():
                kept, pods = old_pods[held[i]], pods_by_node.get(names[i], ())
                if not (len(kept) == len(pods) and all(map(operator.is_, kept, pods))):
                    same[i] = False
        elif len(stirred) * _FEW_STIRRED > len(names):
            same &= ~np.fromiter(map(stirred.__contains__, names), dtype=bool, count=len(names))
        else:  # a few stirred nodes (the usual): found among the names (in name order) by bisection
            for name in stirred:
                i = bisect_left(names, name)
                if i < len(names) and names[i] == name:
                    same[i] = False
        reused = held.tolist()  # where `same`, the verdict to take; the others are overwritten below
        verdicts = list(map(old_verdicts.__getitem__, reused)) if old_verdicts else \
            cast("list[_Candidate | NodeVerdict]", [None] * len(at))
        pods_of: list[tuple[Pod, ...]] = list(map(old_pods.__getitem__, reused)) if old_pods else [()] * len(at)
        redone = (~same).nonzero()[0].tolist()
        # reused verdicts end no later than the last expiry (conservative: one judging too many at worst)
        expires = self.expires_s if len(redone) < len(at) else math.inf
        for i in redone:
            pods = pods_by_node.get(names[i], ())
            row = numbers[i].tolist()
            position = int(at[i])
            verdicts[i] = _judge(records[position], (*row[:5], bool(row[5])), bool(gpu_pool[position]), pods,
                                 policy, budget, now)
            pods_of[i] = tuple(pods)
        self.at, self.numbers, self.verdicts, self.pods = at, numbers, verdicts, pods_of
        self.expires_s = min(expires, protected_until([verdicts[i] for i in redone]))
        return verdicts


def _underutilized(nodes: NodeSet, rows: IntArray, table: WhatIf, pods_by_node: Mapping[str, Sequence[Pod]],
                   policy: Policy, now: float, budget: PdbBudget, judgements: _Judgements,
                   moved: tuple[int, frozenset[str] | None] | None, recent: Mapping[str, Unremovable],
                   ) -> tuple[list[tuple[_Candidate, int | None]], list[NodeVerdict]]:
    """Drainable candidates (strictly below threshold, known pool) with their table rows, and the underutilized nodes
    that cannot go — the `recent`ly unremovable ones without being judged again."""
    at = _evaluated(nodes, policy, now)
    utilization, threshold, ratios, gpu_node = _utilizations(nodes, at, rows.take(at), table, pods_by_node, policy)
    below = (utilization < threshold).nonzero()[0]
    resting: list[NodeVerdict] = []
    if recent:
        names = nodes.names[at[below]].tolist()
        rest = [i for i, name in enumerate(names) if name in recent]
        if rest:
            resting = [_resting(names[i], recent[names[i]], now) for i in rest]
            below = np.delete(below, rest)
    numbers = np.empty((len(below), 6))  # `_Numbers` row by row, of the underutilized nodes only
    numbers[:, 0], numbers[:, 1], numbers[:, 2:5] = utilization[below], threshold[below], ratios[below]
    numbers[:, 5] = gpu_node[below]
    positions = at[below]
    verdicts = judgements.judge(positions, numbers, pods_by_node, policy, budget, moved, now)
    candidates = [(verdict, row if row >= 0 else None)
                  for verdict, row in zip(verdicts, rows.take(positions).tolist(), strict=True)
                  if verdict.__class__ is _Candidate]
    blocked = [verdict for verdict in verdicts if verdict.__class__ is NodeVerdict]
    return candidates, blocked + resting


def _resting(name: str, entry: Unremovable, now: float) -> NodeVerdict:
    """The verdict of a node whose removal failed less than the recheck timeout ago: that, and the failure's reason."""
    return NodeVerdict(node=name, reasons=(Reason(
        ReasonCode.RECENTLY_UNREMOVABLE, f"node {name}: removal failed {now - entry.failed_s:g}s ago, checked again "
                                         f"in {entry.until_s - now:g}s", {"recheck_in_s": entry.until_s - now}),
        entry.reason))


_NOT_RECHECKED = frozenset({ReasonCode.UNKNOWN_POOL, ReasonCode.ON_COMPLETION, ReasonCode.RECENTLY_UNREMOVABLE})
"""Blocking reasons that are no removal simulation failed at this decision, so the node's entry is not (re)started: no
pool (CA does not consider such a node at all), a pod that must run to completion (CA finds it only once the node is
unneeded, and re-checks it every loop), and a node still resting from an earlier failure (its entry runs on)."""


def _recent(state: EngineState, nodes: NodeSet, policy: Policy, now: float) -> dict[str, Unremovable]:
    """The state's unremovable nodes whose recheck timeout still runs, of those still in the cluster."""
    if not state.unremovable or policy.unremovable_node_recheck_timeout_s <= 0:
        return {}
    live = nodes.live()
    return {name: entry for name, entry in state.unremovable.items() if now < entry.until_s and name in live}


# ------------------------------------------------------------------------------------------------------- simulation
class _Simulation:
    """The running what-if of step 4: destinations and the pods moved so far. The table is forked only once some
    candidate's pods are placed (most decisions' candidates are empty nodes, or their first pod fits nowhere): until
    then feasibility is asked of the table itself and narrowed to the rows enabled in the what-if (`_enabled`)."""

    def __init__(self, table: WhatIf, nodes: NodeSet, rows: IntArray,
                 candidates: Sequence[tuple[_Candidate, int | None]]) -> None:
        self._table, self._nodes = table, nodes
        self._work: WhatIf | None = None
        self._disabled: list[int] = []
        self._enabled: npt.NDArray[np.bool_] | None = None
        """While `_work` is None: the rows it would have enabled (usable destinations, not disabled); made when first
        asked."""
        self._base = nodes.ranks(rows, len(table))
        self._candidates = candidates
        self._rank: IntArray | None = None
        self.received: dict[int, list[Pod]] = {}
        self.accepted: list[str] = []
        """The candidates accepted as unneeded so far, in order (no destination for the later ones)."""
        self._totals: list[tuple[str, int]] | None = None
        self._shares: dict[Resources, float] = {}
        self._masks: dict[tuple[Resources, SchedulingConstraints], npt.NDArray[np.bool_]] = {}
        """Feasibility masks on `_work` (or the table, while there is none) by pod shape (requests, constraints), made
        since `_work` last changed other than by rows disabled (which only narrow them): a shape's mask there is its
        mask here `&` the rows enabled now. (A mask is the rows' own verdicts `&` the rows enabled: the table's
        enabled rows hold the what-if's.)"""

    @property
    def rank(self) -> IntArray:
        """Per row, a destination's preference (`_FAR`: none): usable nodes in name order, candidates after the
        others; made when a pod is first placed (most decisions move none)."""
        if self._rank is None:
            base, rows = self._base, {row for _, row in self._candidates if row is not None}
            self._rank = base.copy()
            if rows:
                at = np.fromiter(rows, dtype=np.int64, count=len(rows))
                self._rank[at[base[at] != _FAR]] += len(self._nodes.usable_positions)
        return self._rank

    @property
    def work(self) -> WhatIf:
        """The table with the candidates accepted so far removed and their pods placed elsewhere."""
        if self._work is None:
            self._work = self._fork()
        return self._work

    def _fork(self) -> WhatIf:
        """A copy of the running table (`work`), made from the table itself while no pod was placed yet."""
        if self._work is not None:
            return self._work.fork()
        fork = self._table.fork()
        fork.enabled &= self._base != _FAR  # destinations: usable nodes only (as in `rank`)
        fork.enabled[self._disabled] = False
        if fork.topology is not None:
            for row in self._disabled:
                fork.remove(row)
        return fork

    def _enabled_rows(self) -> npt.NDArray[np.bool_]:
        """`work.enabled`, without forking while there is no `_work` (read-only to the caller)."""
        if self._work is not None:
            return self._work.enabled
        if self._enabled is None:
            self._enabled = self._table.enabled & (self._base != _FAR)
            self._enabled[self._disabled] = False
        return self._enabled

    def _share(self, requests: Resources) -> float:
        """Dominant share of the cluster's usable cpu, memory and GPU (in milli-GPUs); cached per request."""
        share = self._shares.get(requests)
        if share is None:
            if self._totals is None:
                summed = self._nodes.usable_total
                self._totals = [(name, max(int(summed[slot]), 1))
                                for name, slot in ((CPU, 0), (MEMORY, 1), (GPU_MILLI, 3))]
            requested = (requests.get(CPU), requests.get(MEMORY), 1000 * requests.gpu_count() + requests.get(GPU_MILLI))
            share = self._shares[requests] = max(r / total for r, (_, total) in zip(requested, self._totals,
                                                                                       strict=True))
        return share

    def _feasible(self, pod: Pod) -> npt.NDArray[np.bool_]:
        """`work.feasible(pod)` (a new array), from the mask of an earlier pod of its shape while the running table
        changed only by rows disabled since (candidates in one decision often lead with pods of one shape). Not with
        inter-pod affinity in the table, where feasibility reads more of the pod than its shape."""
        table = self._work if self._work is not None else self._table
        if table.topology is not None or table.keeps_claims_of(pod):
            return self.work.feasible(pod)
        shape = (pod.requests, pod.constraints)
        mask = self._masks.get(shape)
        if mask is None:
            mask = self._masks[shape] = table.feasible(pod)
        return mask & self._enabled_rows()

    def remove_empty(self, rows: list[int]) -> None:
        """Accept candidates with nothing to move (table rows `rows`) before any pod was placed: `try_remove` of
        each, at once."""
        assert self._work is None and not self.received
        for row in rows:
            self._disable(row)

    def _disable(self, row: int) -> None:
        """Row `row` is no destination from now on (its node is accepted as unneeded)."""
        self.accepted.append(self._table.nodes[row].name)
        if self._work is None:
            self._disabled.append(row)
            self._enabled = None  # (empty candidates come first: made after them, if at all)
        else:
            self._work.remove(row)

    def _first(self, pods: Sequence[Pod], row: int | None,
               volumes: bool) -> tuple[WhatIf | None, npt.NDArray[np.bool_]]:
        """Where the first pod to move fits: on the running table without the node's row (no fork: a candidate whose
        first pod fits nowhere, often, costs none), or on the fork the node left (returned too) when placed pods
        matter: with a topology the node's own pods and domains count until it leaves, and pods using claims release
        them there (a ReadWriteOncePod claim is free again, its volumes detach)."""
        with_topology = (self._work if self._work is not None else self._table).topology is not None
        if not with_topology and not volumes:
            feasible = self._feasible(pods[0])
            if row is not None:
                feasible[row] = False
            return None, feasible
        trial = self._fork()
        if row is not None:
            trial.remove(row)
            for pod in pods:
                trial.unplace_volumes(row, pod)
        return trial, trial.feasible(pods[0])

    def try_remove(self, candidate: _Candidate, row: int | None) -> Reason | None:
        """Accept the node (table row `row`) into the unneeded set if its pods fit elsewhere, else say why not."""
        received = self.received.get(row) if row is not None else None
        if not candidate.drain.move and not received:  # nothing to move (most candidates): no fork, no sort
            if row is not None:
                self._disable(row)
            return None
        pods = [*candidate.drain.move, *received] if received else list(candidate.drain.move)
        if len(pods) > 1:  # (one pod, often: no share to work out)
            pods.sort(key=lambda p: (-self._share(p.requests), p.requests.items, p.key, p.uid))
        volumes = any(map(self._table.keeps_claims_of, pods))
        trial, feasible = self._first(pods, row, volumes)
        if not np.count_nonzero(feasible):
            return self._nowhere(candidate, pods[0], len(pods), 0, trial, row)
        shape = (pods[0].requests, pods[0].constraints)
        if trial is None:
            trial = self._fork()
            if row is not None:
                trial.remove(row)
        placed: list[tuple[Pod, int]] = []
        destination = -1
        for pod in pods:
            # Placing a pod changes only its destination's row, so pods of one shape share a feasibility mask and keep
            # their destination while it still fits (not with inter-pod affinity in the table, where a placement
            # changes other nodes' verdicts too).
            if shape != (pod.requests, pod.constraints) or (placed and _reads_placed(trial, pod)):
                feasible, shape, destination = trial.feasible(pod), (pod.requests, pod.constraints), -1
            if destination < 0:
                if not np.count_nonzero(feasible):
                    return self._nowhere(candidate, pod, len(pods), len(placed), trial, row)
                destination, gpus = trial.choose(pod, feasible, self.rank)
            trial.place(destination, pod, gpus)
            placed.append((pod, destination))
            if not trial.fits_row(destination, pod):
                feasible[destination] = False
                destination = -1
            elif gpus is not None:
                destination = -1  # a fragmentation-aware choice is made again for the next pod
        self._work = trial
        self._masks.clear()
        self.accepted.append(candidate.name)
        if row is not None:
            self.received.pop(row, None)
        for pod, destination in placed:
            self.received.setdefault(destination, []).append(pod)
        return None


    def _nowhere(self, candidate: _Candidate, pod: Pod, pods: int, before: int, trial: WhatIf | None,
                 row: int | None) -> Reason:
        """`nowhere` over the rows the candidate's pods could move to (`trial`'s, else the running table's)."""
        if trial is not None:
            return nowhere(candidate.name, pod, pods, before, trial, trial.enabled, self.accepted)
        among = self._enabled_rows().copy()
        if row is not None:
            among[row] = False
        return nowhere(candidate.name, pod, pods, before, self._work or self._table, among, self.accepted)


def _reads_placed(table: WhatIf, pod: Pod) -> bool:
    """Whether the pod's verdicts on other rows change when a pod is placed (inter-pod affinity, claims)."""
    return table.topology is not None or table.keeps_claims_of(pod)


# -------------------------------------------------------------------------------------------------------- selection
def _wait_reason(candidate: _Candidate, since: float, now: float) -> Reason | None:
    """Why an unneeded node waits for its time, or `None` once it waited long enough ("node N [unready and] unneeded
    for W s of R s": only W is worded here, the rest is the candidate's `wait_text`)."""
    required = candidate.required_s
    waited = max(now - since, 0.0)
    if waited >= required:
        return None
    before, after = candidate.wait_text
    return Reason(_TOO_SHORT, f"{before}{waited:g}{after}",
                  {"unneeded_s": waited, "required_s": required, "remaining_s": required - waited})


_TOO_SHORT = ReasonCode.UNNEEDED_TOO_SHORT


def _pool_cooldown(pool: str, state: EngineState, policy: Policy, now: float) -> Reason | None:
    """With the pool-scoped cooldown, a pool that grew recently keeps its nodes for `scale_down_delay_after_add_s`."""
    if policy.scale_down_delay_after_add_scope is not CooldownScope.POOL:
        return None
    last = state.last_scale_up_by_pool.get(pool)
    delay = policy.scale_down_delay_after_add_s
    if last is None or now - last >= delay:
        return None
    return Reason(ReasonCode.SCALE_DOWN_COOLDOWN,
                  f"pool {pool} scaled up {now - last:g}s ago: no removal for {last + delay - now:g}s more",
                  {"remaining_s": last + delay - now, "delay_s": delay})


class _LostBudget:
    """The pools' lost-work budgets within one decision (engine/checkpoint.py): what the last hour spent (engine
    state) plus what the removals picked so far spend, and when a removal that waits for budget could go (`ends`: a
    checkpoint by interval, an entry leaving the window). Cost: one pass over the window's entries, then O(pods
    moved) per checkpointed candidate."""

    def __init__(self, state: EngineState, policy: Policy, now: float) -> None:
        self.policy, self.now = policy, now
        self.window = window(state.lost_work, now)
        self.spent = dict(spent(self.window, now))
        self.entries: list[LostWork] = []
        self.ends: list[float] = []

    def _figures(self, c: _Candidate) -> tuple[float, float, float]:
        budget = lost_work_budget(c.pool, self.policy)
        return lost_gpu_minutes(c.drain.checkpointed, self.now), budget, budget - self.spent.get(c.pool_name, 0.0)

    def shortfall(self, c: _Candidate) -> Reason | None:
        """Why the candidate's checkpointed pods may not move now (None: they may, or it has none)."""
        if not c.drain.checkpointed:
            return None
        lost, budget, left = self._figures(c)
        if lost <= left + 1e-9:
            return None
        ends = [t for t in (next_checkpoint_s(p, self.now) for p in c.drain.checkpointed) if t is not None]
        ends += [e.at_s + WINDOW_S for e in self.window if e.pool == c.pool_name]
        if ends:
            self.ends.append(min(ends))
        return Reason(ReasonCode.LOST_WORK_BUDGET,
                      f"node {c.name} waits: moving its {len(c.drain.checkpointed)} checkpointed GPU job pod(s) loses "
                      f"{lost:.1f} GPU-minutes of work, pool {c.pool_name}'s lost-work budget has {max(left, 0.0):.1f} "
                      f"of {budget:g} GPU-minutes per hour left",
                      {"lost_gpu_minutes": lost, "budget_left_gpu_minutes": max(left, 0.0),
                       "budget_gpu_minutes_per_hour": budget})

    def take(self, c: _Candidate) -> Reason | None:
        """Spend the candidate's loss (after `shortfall` said it fits); the reason its removal carries (None: no
        checkpointed pod)."""
        if not c.drain.checkpointed:
            return None
        lost, budget, left = self._figures(c)
        self.spent[c.pool_name] = self.spent.get(c.pool_name, 0.0) + lost
        self.entries.append(LostWork(at_s=self.now, pool=c.pool_name, gpu_minutes=lost))
        saved = float(c.pool.gpus_per_node)
        return Reason(ReasonCode.CHECKPOINTED_MOVE,
                      f"node {c.name}: moving {len(c.drain.checkpointed)} checkpointed GPU job pod(s) loses "
                      f"{lost:.1f} GPU-minutes of work since their last checkpoint and saves ~{saved:g} idle "
                      f"GPU-hours per hour the node would have stayed; pool {c.pool_name}'s lost-work budget has "
                      f"{left - lost:.1f} of {budget:g} GPU-minutes per hour left",
                      {"lost_gpu_minutes": lost, "idle_gpu_hours_saved_per_hour": saved,
                       "budget_left_gpu_minutes": left - lost, "budget_gpu_minutes_per_hour": budget})


def _select(unneeded: Sequence[_Candidate], nodes: NodeSet, unneeded_since: Mapping[str, float],
            halt: Reason | None, budget: PdbBudget, policy: Policy, state: EngineState,
            now: float, lost: _LostBudget) -> tuple[list[Removal], list[NodeVerdict], list[NodeVerdict]]:
    removed: Counter[str] = Counter()
    empty_slots, drain_slots = policy.max_empty_bulk_delete, policy.max_drain_parallelism
    removals: list[Removal] = []
    blocked: list[NodeVerdict] = []
    waiting: list[NodeVerdict] = []
    if any(c.pool.zero_or_max for c in unneeded):  # whole pools first, as Cluster Autoscaler crops them
        whole = _Whole(nodes, unneeded_since, halt, budget, policy, state, now, empty_slots, drain_slots, lost)
        for members in _by_pool(c for c in unneeded if c.pool.zero_or_max):
            whole.select(members, removals, blocked, waiting)
        budget, empty_slots, drain_slots = whole.budget, whole.empty_slots, whole.drain_slots
        unneeded = [c for c in unneeded if not c.pool.zero_or_max]
    for c in unneeded:
        pool = c.pool_name
        since = unneeded_since.get(c.name, now)
        wait = (_wait_reason(c, since, now) or halt or _pool_cooldown(pool, state, policy, now)
                or budget.shortfall(c.drain.evict) or lost.shortfall(c))
        if wait is not None:
            waiting.append(NodeVerdict(node=c.name, reasons=(wait, c.reason)))
        elif (size := nodes.pool_sizes())[pool] - removed[pool] <= c.pool.min_size:
            blocked.append(NodeVerdict(node=c.name, reasons=(Reason(
                ReasonCode.POOL_AT_MIN, f"pool {pool} at its minimum size {c.pool.min_size} "
                f"({size[pool]} nodes, {removed[pool]} removal(s) already planned)",
                {"min_size": c.pool.min_size, "nodes": size[pool], "planned": removed[pool]}), c.reason)))
        elif (empty_slots if c.drain.empty else drain_slots) <= 0:
            limit = "max_empty_bulk_delete" if c.drain.empty else "max_drain_parallelism"
            waiting.append(NodeVerdict(node=c.name, reasons=(Reason(
                ReasonCode.PARALLELISM, f"node {c.name} waits: {limit} reached this decision"), c.reason)))
        else:
            if c.drain.empty:
                empty_slots -= 1
            else:
                drain_slots -= 1
            removed[pool] += 1
            budget = budget.spend(c.drain.evict)
            reason = Reason(c.reason.code, c.reason.message, {**c.reason.numbers, "unneeded_s": now - since})
            moved = lost.take(c)
            removals.append(Removal(node=c.name, pool=pool, evict=c.drain.evict_keys,
                                    reasons=(reason,) if moved is None else (reason, moved)))
    return removals, blocked, waiting


def _by_pool(candidates: Iterable[_Candidate]) -> list[list[_Candidate]]:
    """Candidates grouped by pool, pools in the order of their first candidate."""
    groups: dict[str, list[_Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.pool_name, []).append(c)
    return list(groups.values())


class _Whole:
    """Step 6 for zero-or-max pools (`NodePool.zero_or_max`, CA's ZeroOrMaxNodeScaling): a pool's nodes go all at
    once or not at all — only when every node of it is unneeded, has waited its time, its evictions fit the PDBs
    together, and the pool may shrink to zero. Such pools are taken before single nodes; the first one taken may
    exceed the decision's empty/drain slots (a pool bigger than them would otherwise never go), later ones may not."""

    def __init__(self, nodes: NodeSet, unneeded_since: Mapping[str, float], halt: Reason | None,
                 budget: PdbBudget, policy: Policy, state: EngineState, now: float, empty_slots: int,
                 drain_slots: int, lost: _LostBudget) -> None:
        self.nodes, self.unneeded_since, self.halt, self.policy, self.state, self.now = (
            nodes, unneeded_since, halt, policy, state, now)
        self.lost = lost
        self.budget, self.empty_slots, self.drain_slots = budget, empty_slots, drain_slots
        self.overflow = True

    def select(self, members: list[_Candidate], removals: list[Removal], blocked: list[NodeVerdict],
               waiting: list[NodeVerdict]) -> None:
        pool, now = members[0].pool, self.now
        name, size = pool.name, self.nodes.pool_sizes()[pool.name]
        if len(members) < size:
            blocked += self._all(members, Reason(
                ReasonCode.ATOMIC_SCALE_DOWN, f"pool {name} scales zero-or-max: {len(members)} of its {size} nodes "
                f"are unneeded, and it goes only as a whole", {"unneeded": len(members), "nodes": size}))
            return
        if pool.min_size > 0:
            blocked += self._all(members, Reason(
                ReasonCode.POOL_AT_MIN, f"pool {name} scales zero-or-max and has min size {pool.min_size}: it does not "
                f"go to zero", {"min_size": pool.min_size, "nodes": size}))
            return
        budget = self.budget
        if any(c.drain.checkpointed for c in members):  # the whole pool's loss, against its budget at once
            lost = sum(lost_gpu_minutes(c.drain.checkpointed, now) for c in members)
            allowed = lost_work_budget(pool, self.policy) - self.lost.spent.get(name, 0.0)
            if lost > allowed + 1e-9:
                waiting += self._all(members, Reason(
                    ReasonCode.LOST_WORK_BUDGET, f"pool {name} scales zero-or-max: moving its checkpointed GPU job "
                    f"pods loses {lost:.1f} GPU-minutes of work, its lost-work budget has {max(allowed, 0.0):.1f} left",
                    {"lost_gpu_minutes": lost, "budget_left_gpu_minutes": max(allowed, 0.0)}))
                return
        for c in members:
            since = self.unneeded_since.get(c.name, now)
            wait = (_wait_reason(c, since, now) or self.halt or _pool_cooldown(name, self.state, self.policy, now)
                    or budget.shortfall(c.drain.evict))
            if wait is not None:
                waiting += [NodeVerdict(node=m.name, reasons=(wait if m is c else Reason(
                    ReasonCode.ZERO_OR_MAX, f"pool {name} scales zero-or-max: node {m.name} waits with node "
                    f"{c.name}: {wait.message}"), m.reason)) for m in members]
                return
            budget = budget.spend(c.drain.evict)
        empties = sum(1 for c in members if c.drain.empty)
        drains = len(members) - empties
        fits = empties <= self.empty_slots and drains <= self.drain_slots
        may_overflow = self.overflow and (not empties or self.empty_slots > 0) and (not drains or self.drain_slots > 0)
        if not fits and not may_overflow:
            waiting += self._all(members, Reason(
                ReasonCode.PARALLELISM, f"pool {name} scales zero-or-max: its {len(members)} nodes wait, "
                f"max_empty_bulk_delete / max_drain_parallelism reached this decision",
                {"empty": empties, "drain": drains}))
            return
        self.budget, self.overflow = budget, False
        self.empty_slots, self.drain_slots = max(self.empty_slots - empties, 0), max(self.drain_slots - drains, 0)
        for c in members:
            reason = Reason(c.reason.code, c.reason.message,
                            {**c.reason.numbers, "unneeded_s": now - self.unneeded_since.get(c.name, now)})
            moved = self.lost.take(c)
            removals.append(Removal(node=c.name, pool=name, evict=c.drain.evict_keys, reasons=(reason, Reason(
                ReasonCode.ZERO_OR_MAX, f"pool {name} scales zero-or-max: all {size} of its nodes go together",
                {"nodes": size}), *((moved,) if moved is not None else ()))))

    @staticmethod
    def _all(members: list[_Candidate], reason: Reason) -> list[NodeVerdict]:
        return [NodeVerdict(node=c.name, reasons=(reason, c.reason)) for c in members]


# ------------------------------------------------------------------------------------------------------------- plan
def _removal_order(drainable: list[tuple[_Candidate, int | None]], policy: Policy) -> None:
    """Sort the candidates into step 4's order: CA's (`_Candidate.order`), after the pools' node prices, dearest
    first, with `scale_down_replace_with_cheaper` (D48: their pods may keep an empty node of a cheaper pool)."""
    if policy.scale_down_replace_with_cheaper:
        drainable.sort(key=lambda candidate: (-candidate[0].pool.usd_per_hour, candidate[0].order))
    else:
        drainable.sort(key=lambda candidate: candidate[0].order)


def _plan(nodes: NodeSet, *, table: WhatIf, pods_by_node: Mapping[str, Sequence[Pod]], policy: Policy,
          state: EngineState, now: float, unneeded_since: Mapping[str, float], cap: SimulationCap | None,
          budget: PdbBudget, judgements: _Judgements,
          moved: tuple[int, frozenset[str] | None] | None = None) -> ScaleDownResult:
    """Steps 1–6 of the module docstring."""
    unneeded_since, stale = _fresh(unneeded_since, policy.node_deletion_candidate_ttl_s, now)
    if policy.unneeded_restarts_on_pod_start:
        unneeded_since, restarted = _restarted(unneeded_since, pods_by_node)
        stale = (*stale, *restarted)
    halt = _halt(nodes, policy, state, now)
    rows = nodes.rows(table)
    recent = _recent(state, nodes, policy, now)
    drainable, blocked = _underutilized(nodes, rows, table, pods_by_node, policy, now, budget, judgements, moved,
                                        recent)
    _removal_order(drainable, policy)
    simulation = _Simulation(table, nodes, rows, drainable)
    new_allowed = (cap or _DEFAULT_CAP).limit(len(nodes.names))
    # The leading empty candidates (all of them in CA's order; those of the dearest pools when ordered by price) have
    # nothing placed before them: each is accepted (`try_remove`) with no cap to spend, so they are taken in one step.
    empties = next((k for k, (c, _) in enumerate(drainable) if c.drain.move), len(drainable))
    unneeded: list[_Candidate] = [c for c, _ in drainable[:empties]]
    simulation.remove_empty([row for _, row in drainable[:empties] if row is not None])
    for c, row in drainable[empties:]:
        is_new = c.name not in unneeded_since
        if is_new and not c.drain.empty:
            if new_allowed <= 0:
                continue
            new_allowed -= 1
        why_not = simulation.try_remove(c, row)
        if why_not is None:
            unneeded.append(c)
        else:
            blocked.append(NodeVerdict(node=c.name, reasons=(why_not, c.reason)))
    names = {c.name for c in unneeded}
    timeout = policy.unremovable_node_recheck_timeout_s
    if timeout > 0:  # the nodes whose removal failed at this decision are left alone until the recheck
        recent.update((v.node, Unremovable(failed_s=now, until_s=now + timeout, reason=v.reasons[0]))
                      for v in blocked if v.reasons[0].code not in _NOT_RECHECKED)
    live = nodes.live()
    lost = _LostBudget(state, policy, now)
    removals, at_min, waiting = _select(unneeded, nodes, unneeded_since, halt, budget, policy, state, now, lost)
    next_at = min((t for t in (_next_at(nodes, unneeded, unneeded_since, blocked, recent, policy, state, now),
                               *lost.ends) if t is not None), default=None)
    return ScaleDownResult(
        removals=tuple(removals),
        blocked=tuple(sorted((*blocked, *at_min), key=_NODE)),
        unneeded=tuple(sorted(waiting, key=_NODE)),
        mark_unneeded={name: now for name in sorted(names) if name not in unneeded_since},
        clear_unneeded=tuple(sorted(n for n in (*unneeded_since, *stale) if n in live and n not in names)),
        unremovable=recent if recent != state.unremovable else state.unremovable,
        next_at_s=next_at,
        lost_work=tuple(lost.entries),
    )


def _next_at(nodes: NodeSet, unneeded: Sequence[_Candidate], unneeded_since: Mapping[str, float],
             blocked: Sequence[NodeVerdict], recent: Mapping[str, Unremovable], policy: Policy, state: EngineState,
             now: float) -> float | None:
    """The earliest time a step above would read the clock differently, with the same nodes, pods and state: a
    not-Ready node stops starting (the gate counts it, step 2 judges it), a deletion-candidate taint outlives its TTL,
    a recheck timeout or a do-not-disrupt protection that is the first reason keeping a node ends — and, only while
    some node is unneeded (nothing else reads them), a node has waited its time or a cooldown ends. Cost: one pass
    over the not-Ready nodes, the taints, the blocked and the unneeded nodes."""
    ends = [n.created_s + startup_time_s(pool, policy) for n, pool in nodes.unready_with_pools()
            if n.created_s is not None and _starting(n, pool, policy, now)]
    ttl = policy.node_deletion_candidate_ttl_s
    if ttl > 0:
        ends += [since + ttl for since in unneeded_since.values()]
    ends += [entry.until_s for entry in recent.values()]
    ends += [v.reasons[0].numbers["protected_until_s"] for v in blocked
             if v.reasons[0].code is ReasonCode.DO_NOT_DISRUPT and "protected_until_s" in v.reasons[0].numbers]
    if unneeded:
        for c in unneeded:
            since = unneeded_since.get(c.name, now)
            if max(now - since, 0.0) < c.required_s:
                ends.append(since + c.required_s)
        after_add = (state.last_scale_up_s if policy.scale_down_delay_after_add_scope is CooldownScope.CLUSTER
                     else None)
        for last, delay in ((after_add, policy.scale_down_delay_after_add_s),
                            (state.last_scale_down_failure_s, policy.scale_down_delay_after_failure_s),
                            (state.last_scale_down_s, policy.scale_down_delay_after_delete_s)):
            if last is not None and now - last < delay:
                ends.append(last + delay)
        if policy.scale_down_delay_after_add_scope is CooldownScope.POOL:
            pools = {c.pool_name for c in unneeded}
            ends += [last + policy.scale_down_delay_after_add_s for pool, last in state.last_scale_up_by_pool.items()
                     if pool in pools and now - last < policy.scale_down_delay_after_add_s]
    return min(ends, default=None)


def plan_scale_down(*, nodes: Sequence[Node], table: WhatIf, pods_by_node: Mapping[str, Sequence[Pod]],
                    pools: Mapping[str, NodePool], pool_of: Mapping[str, str],
                    pdbs: Sequence[PodDisruptionBudget], policy: Policy, state: EngineState, now: float,
                    unneeded_since: Mapping[str, float], cap: SimulationCap | None = None) -> ScaleDownResult:
    """The scale-down part of one decision (steps in the module docstring).

    `nodes`: every observed node; `table`: free capacity with a row per node (see step 2); `pods_by_node`: the pods
    holding capacity per node; `pool_of`: node name → pool name; `unneeded_since`: node → Unix s it has been unneeded
    since. Invariants: every removal's pods fit on the nodes that remain, together with every other removal's; no PDB
    is spent twice; the result does not depend on the order of any input. (`plan_removals` is the same from the
    decision's node facts, with the stage cache of the what-if's store.)
    """
    if not policy.scale_down_enabled:
        return ScaleDownResult()
    records: list[NodeRecord] = []
    for node in nodes:
        pool_name = pool_of.get(node.name)
        pool = pools.get(pool_name if pool_name is not None else "")
        records.append(_Record(node, pool_name, pool, phase(node, pool), allocatable_amounts(node)))
    nodeset, judgements = NodeSet(records), _Judgements()
    judgements.follow(nodeset, None)
    return _plan(nodeset, table=table, pods_by_node=pods_by_node, policy=policy, state=state, now=now,
                 unneeded_since=unneeded_since, cap=cap, budget=PdbBudget(pdbs), judgements=judgements)


class ScaleDownCache:
    """Scale-down's stage cache, kept by the what-if's store from one decision to the next (`WhatIf.kept`): the node
    set (kept while every record is the very same object, patched where some are not) and the verdicts of
    underutilized nodes (see `_Judgements`; all dropped when the policy or a PDB changes). A fresh cache computes
    everything: `plan` gives the same result with or without history."""

    __slots__ = ("_context", "_judgements", "_listed", "_nodes", "_seen")

    def __init__(self) -> None:
        self._listed: tuple[Mapping[str, NodeRecord], list[NodeRecord]] | None = None
        """The last mapping `records_of` listed, with its list."""
        self._nodes: NodeSet | None = None
        self._seen = -1
        """The generation of the records `_nodes` was made from when they were in name order as given, else -1."""
        self._judgements = _Judgements()
        self._context: tuple[Policy, tuple[PodDisruptionBudget, ...]] | None = None

    def records_of(self, by_name: Mapping[str, NodeRecord]) -> list[NodeRecord]:
        """`list(by_name.values())`, the very list of the last call when `by_name` is the very mapping of the last call
        (the decision memo hands the same facts mapping on while no node changed, and never edits a mapping it handed
        out): a list of every node is not made again, and `plan` sees the same records."""
        listed = self._listed
        if listed is None or listed[0] is not by_name:
            listed = self._listed = (by_name, list(by_name.values()))
        return listed[1]

    def plan(self, records: Sequence[NodeRecord], *, table: WhatIf, pods_by_node: Mapping[str, Sequence[Pod]],
             pdbs: Sequence[PodDisruptionBudget], policy: Policy, state: EngineState, now: float,
             cap: SimulationCap | None = None) -> ScaleDownResult:
        """`plan_scale_down` for every node of `records` (the whole cluster), unneeded since what their
        `DeletionCandidateOfClusterAutoscaler` taints say. What the what-if's store says changed
        (`WhatIf.pods_moved`: the nodes whose pods may differ from the arrangement before; `WhatIf.facts_changed`:
        the records new and gone since those of the generation before) narrows what is compared with the last plan:
        without it, every reused verdict's pods and every record are compared."""
        moved, came = table.pods_moved(), table.facts_changed()
        if not policy.scale_down_enabled:
            return ScaleDownResult()
        last, seen = self._nodes, self._seen
        if last is None:
            nodes, source = NodeSet(records), None
        elif came is not None and seen >= 0 and came[0] == seen + 1:
            nodes, source = last.hinted(records, came[1], came[2])
        else:
            nodes, source = last.changed(records)
        self._nodes = nodes
        in_order = nodes.records is records or nodes is last  # the very same records: in name order
        self._seen = came[0] if came is not None and in_order else -1
        context = (policy, tuple(pdbs))
        if self._context is None or self._context != context:
            self._judgements.forget()
            self._context = context
        self._judgements.follow(nodes, source)
        return _plan(nodes, table=table, pods_by_node=pods_by_node, policy=policy, state=state, now=now,
                     unneeded_since=nodes.unneeded_since(), cap=cap, budget=PdbBudget(pdbs),
                     judgements=self._judgements, moved=moved)


def plan_removals(table: WhatIf, records: Mapping[str, NodeRecord], pods_by_node: Mapping[str, Sequence[Pod]],
                  pdbs: Sequence[PodDisruptionBudget], state: EngineState, policy: Policy,
                  now: float) -> ScaleDownResult:
    """Scale-down of one decision on `table`, where the pending pods that existing capacity covers already sit on
    their future nodes; `records`: every node's facts by name. Carried from decision to decision by the what-if's
    store (`WhatIf.kept`)."""
    cache = table.kept(ScaleDownCache)
    return cache.plan(cache.records_of(records), table=table, pods_by_node=pods_by_node, pdbs=pdbs, policy=policy,
                      state=state, now=now)

