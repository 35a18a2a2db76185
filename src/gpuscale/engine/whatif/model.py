"""A what-if view of node capacity for packing: free resources per node as NumPy arrays, with fork for what-ifs.

One `WhatIf` is built per decision from the snapshot (cost O(nodes × resources + pods)). `fork()` copies the
mutable arrays — free capacity, free pod slots, enabled flags — and shares the immutable parts (nodes, the static
feasibility cache), so a what-if costs O(nodes × resources) to start and never touches the original: there is nothing
to revert. Placing a pod is O(resources); finding a node for a pod is one vectorised pass over the nodes plus Python
checks (inter-pod affinity) on the few candidates only when some pod uses affinity.

Columns are fixed at construction: the union of every resource name any node offers or any pod requests. A request
naming a resource outside the columns fits nowhere.

Nodes that share GPUs by fraction (`gpuscale.io/gpu-milli` in allocatable) also get per-GPU accounting
(`engine.placement.devices.GpuDevices`): a fractional pod fits only where one device has its milli free, a whole-GPU
pod only where enough devices are completely free. The columns keep the API's per-resource totals (what scale-down's
utilization reads); the devices are the extra constraint. With a placement policy (`fgd`, `gpuscale`), `choose`
picks among feasible nodes by fragmentation for GPU pods, measured against the GPU pods the table was built with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.devices import (
    FragChooser,
    GpuDevices,
    GpuNeed,
    RequestKinds,
    annotated_devices,
    class_counts,
    device_count,
)
from gpuscale.engine.placement.frag import TypicalTables
from gpuscale.engine.placement.shapes import MILLI, PodShape
from gpuscale.engine.scheduling import FitFailure, HostPorts, Topology, static_failures
from gpuscale.engine.whatif import filters
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.filters import names_nodes_individually
from gpuscale.engine.whatif.volumes import VolumeState, without_claims
from gpuscale.model.node import HOSTNAME_LABEL, Node
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.resources import CPU, PODS, Resources
from gpuscale.model.taints import blocking_taints

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
NodeEdits = tuple[int, int, list[int] | None]
"""Said by a what-if's store of its rows (`store.IncrementalStore`): the number of the what-if before, this one's,
and the rows whose node may not be the very object the table before held at that row (None: not
known, rows came or went); a reader holding the table before (by number) need look at those rows only."""
RowMoves = tuple[list[int], list[int], list[int]]
"""Said with `NodeEdits` whose rows are None when rows came or went (`store.IncrementalStore`): the rows of the
table before taken out (ascending), the rows of this table put in (ascending), and the other rows of this table
whose node may not be the very object the table before held at its row; every other row holds, in order, the very
node of a row of the table before that was not taken out."""

@dataclass(frozen=True, slots=True)
class Changes:
    """The incremental store's change hints for the stage caches, answered through `WhatIf.pods_moved` and
    `WhatIf.facts_changed` (never handed out as such): each is against the store's decision just before."""

    pods_moved: tuple[int, frozenset[str] | None] | None = None
    """The arrangement's generation and the nodes whose bound pods may differ from the one before (None: any may)."""
    facts_changed: tuple[int, frozenset[str], frozenset[str]] | None = None
    """The facts' generation and the nodes whose facts are new objects, and those gone (None: not known)."""


T = TypeVar("T")


_NO_RANK = np.iinfo(np.int64).max
"""What `WhatIf.choose` ranks rows outside the mask at."""


class GroupKey:
    """What the node-only filters read of a node (labels but the hostname, taints, cordon): nodes with equal keys pass
    or fail those filters together. Hashed once, so a decision can group a thousand nodes without hashing their
    labels and taints each time (the incremental store also shares one key object among equal keys)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, GroupKey) and self._hash == other._hash and self.value == other.value


def node_group_key(node: Node) -> GroupKey:
    """PreferNoSchedule taints are left out: they never fail a filter (an unneeded node's deletion-candidate taint,
    which carries a time, would otherwise make every marked node a group of its own)."""
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if k != HOSTNAME_LABEL))
    return GroupKey((labels, blocking_taints(node.taints), node.unschedulable))


def node_group_key_again(node: Node, last: Node, key: GroupKey) -> GroupKey:
    """`node_group_key(node)`, given `key`, that of `last` (the node before it changed): `key` itself while the node
    kept its labels (the very same mapping) and its key's taints and cordon, without sorting and hashing again."""
    if (node.labels is last.labels and node.unschedulable == key.value[2]
            and blocking_taints(node.taints) == key.value[1]):
        return key
    return node_group_key(node)


@dataclass(slots=True)
class _Shared:
    """Immutable per-decision data every fork shares."""

    nodes: list[Node]
    index: dict[str, int]
    columns: list[str]
    column_of: dict[str, int]
    group_of: list[int]
    group_members: list[list[int]]
    group_index: dict[GroupKey, int]
    """Each group's node-group key (`node_group_key`) to its number: `extend` adds rows to the groups without
    computing the existing rows' keys again. Shared with `RowCache` and other tables: never mutated."""
    static_cache: dict[SchedulingConstraints, BoolArray]
    request_cache: dict[Resources, IntArray | None]
    asked_cache: dict[Resources, list[tuple[int, int]] | None] = field(default_factory=dict)
    """Per request, `WhatIf.asked`: like `request_cache`, valid for any table with these columns."""
    placement: str | None = None
    """Fragmentation-aware policy for GPU pods (`fgd`, `gpuscale`), or None: first fit."""
    workload: Counter[PodShape] = field(default_factory=Counter)
    """GPU pod shapes (bound and pending) that fragmentation is measured against."""
    chooser: FragChooser | None = None
    kinds: RequestKinds = field(default_factory=RequestKinds)
    score_cache: dict[PodShape, tuple[IntArray, IntArray]] = field(default_factory=dict)
    """Per shape, each row's fragmentation score and the row version it was computed at (see `WhatIf.version`)."""
    clock: list[int] = field(default_factory=lambda: [0])
    """Source of row versions, shared by every fork: a version is never reused, so a cached score is valid in any
    fork whose row still has that version."""
    group_masks: dict[SchedulingConstraints, BoolArray] = field(default_factory=dict)
    """`static_cache`'s masks decided per node group (not per node): the same for any table with the same group keys
    row by row, so `RowCache` hands them from one build to the next while the keys stay."""

    tables: TypicalTables | None = None
    """Fragmentation tables by class list, carried from one decision to the next (`RowCache`); None: none kept."""
    node_edits: NodeEdits | None = None
    """What the builder said of `nodes` (`NodeEdits`); None: nothing (a table extended by rows says nothing)."""
    changes: Changes | None = None
    """What the store said changed since its last what-if (`Changes`); None: nothing known. Extended tables keep it
    (it is about the node rows, which they keep)."""
    kept: dict[type[object], object] = field(default_factory=dict)
    """The stage caches of the store this what-if came from, by kind (`WhatIf.kept`)."""

    def make_chooser(self, placement: str) -> FragChooser:
        """`FragChooser(placement, self.workload)`, its table from `tables` (equal: `TypicalTables.table`) if kept."""
        if self.tables is None:
            return FragChooser(placement, self.workload)
        return FragChooser.of_classes(placement, class_counts(self.workload), self.tables)

    def tick(self) -> int:
        self.clock[0] += 1
        return self.clock[0]

    def need(self, requests: Resources) -> GpuNeed | None:
        return self.kinds.need(requests)

    def shape(self, requests: Resources) -> PodShape | None:
        return self.kinds.shape(requests)


def _capacity_vectors(capacity: Sequence[Resources], column_of: Mapping[str, int]) -> tuple[IntArray, IntArray]:
    """Each capacity as a row over the columns, and its pod slots. Nodes of one pool share their capacity object: each
    distinct one is read once. Resources outside the columns are left out."""
    distinct: dict[int, int] = {}
    cap_of = np.array([distinct.setdefault(id(c), len(distinct)) for c in capacity], dtype=np.int64)
    shapes = list({id(c): c for c in capacity}.values())
    shape_free = np.zeros((len(shapes), len(column_of)), dtype=np.int64)
    shape_pods = np.zeros(len(shapes), dtype=np.int64)
    for i, cap in enumerate(shapes):
        for name, amount in cap.items:
            if name == PODS:
                shape_pods[i] = amount
            elif (column := column_of.get(name)) is not None:
                shape_free[i, column] = amount
    return shape_free[cap_of], shape_pods[cap_of]


def _offered(capacity: Sequence[Resources]) -> tuple[frozenset[str], GpuDevices]:
    """The resources the capacities offer and their devices all free: `GpuDevices.of(capacity)`, with each distinct
    capacity object (few: the facts share one per value) read once and the rows mapped to them by NumPy, not by a pass
    in Python."""
    n = len(capacity)
    ids = np.fromiter(map(id, capacity), dtype=np.int64, count=n)
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    distinct = [capacity[i] for i in first.tolist()]
    count = np.array([device_count(c) for c in distinct], dtype=np.int64)[inverse.reshape(n)]
    free = np.where(np.arange(int(count.max(initial=0))) < count[:, None], MILLI, 0).astype(np.int64)
    return frozenset(name for c in distinct for name, _ in c.items), GpuDevices(count, free)


def _add_to_groups(keys: Iterable[GroupKey], start: int, groups: dict[GroupKey, int], group_of: list[int],
                  members: list[list[int]]) -> None:
    """Rows `start`, `start + 1`, … with these node-group keys join their groups (new keys open groups, in order)."""
    for i, key in enumerate(keys, start):
        g = groups.setdefault(key, len(groups))
        if g == len(members):
            members.append([])
        members[g].append(i)
        group_of.append(g)


class WhatIf:
    """Free capacity of a set of nodes (real, upcoming or hypothetical), for what-if placement."""

    __slots__ = ("_s", "devices", "dra", "enabled", "free", "free_pods", "ports", "topology", "version", "volumes")

    def __init__(self, shared: _Shared, free: IntArray, free_pods: IntArray, enabled: BoolArray,
                 topology: Topology | None, devices: GpuDevices | None = None,
                 version: IntArray | None = None, ports: HostPorts | None = None,
                 volumes: VolumeState | None = None, dra: DraState | None = None) -> None:
        self._s = shared
        self.ports = ports
        """The host ports in use per node name (NodePorts); None: none in use. Kept by `place` and `unplace`."""
        self.free = free
        self.free_pods = free_pods
        self.enabled = enabled
        self.topology = topology
        self.devices = devices
        """Per-GPU free milli of rows with `gpuscale.io/gpu-milli`; None when no row has any."""
        self.version = np.zeros(len(free), dtype=np.int64) if version is None else version
        """Bumped (to a fresh value of the shared clock) whenever a row's free capacity changes."""
        self.volumes = volumes
        """The volume filters' state (`whatif.volumes.VolumeState`); None when no pod uses claims."""
        self.dra = dra
        """DynamicResources' state (`whatif.dra.DraState`); None when no pod uses ResourceClaims."""

    # ------------------------------------------------------------------------------------------------ structure
    @property
    def nodes(self) -> list[Node]:
        return self._s.nodes

    @property
    def columns(self) -> list[str]:
        return self._s.columns

    def rows_changed(self) -> NodeEdits | None:
        """Which rows' nodes may differ from the store's last what-if (`NodeEdits`: its number, this one's, the rows),
        if the store says; None: not known (compare every row)."""
        return self._s.node_edits

    def pods_moved(self) -> tuple[int, frozenset[str] | None] | None:
        """The generation of the arrangement the bound pods are of and the nodes whose bound pods may differ from the
        arrangement before (None: any may); None when the store says nothing (a stage cache then compares)."""
        return self._s.changes.pods_moved if self._s.changes is not None else None

    def facts_changed(self) -> tuple[int, frozenset[str], frozenset[str]] | None:
        """The generation of the node facts and the nodes whose facts are new objects and those gone since the
        generation before; None when not known."""
        return self._s.changes.facts_changed if self._s.changes is not None else None

    def kept(self, kind: type[T]) -> T:
        """The stage cache of `kind` (made by `kind()`) that this what-if's store keeps from one decision to the next:
        the incremental store keeps one per kind, the reference store none (a fresh one for each what-if). A stage
        cache only saves work; it never changes a result. Cost O(1)."""
        cache = self._s.kept.get(kind)
        if cache is None:
            cache = self._s.kept[kind] = kind()
        assert isinstance(cache, kind)
        return cache

    def __len__(self) -> int:
        return len(self._s.nodes)

    def fork(self) -> WhatIf:
        topology = self.topology.copy() if self.topology is not None else None
        return WhatIf(self._s, self.free.copy(), self.free_pods.copy(), self.enabled.copy(), topology,
                      self.devices.copy() if self.devices is not None else None, self.version.copy(),
                      self.ports.copy() if self.ports is not None else None,
                      self.volumes.copy() if self.volumes is not None else None,
                      self.dra.copy() if self.dra is not None else None)

    def extend(self, nodes: Sequence[Node], capacity: Sequence[Resources],
               group_keys: Sequence[GroupKey] | None = None) -> WhatIf:
        """A new table with extra, empty nodes appended (a pool's template nodes for scale-up estimation).
        `group_keys[k]` is `node_group_key(nodes[k])`, if the caller has them already (a pool's templates share one).

        Cost O((n + k) × resources); the static cache is rebuilt lazily since masks grow by k entries. Resources the
        new nodes offer beyond the table's columns are ignored: no placed or pending pod requests them.
        """
        s = self._s
        start = len(s.nodes)
        extra_free, extra_pods = _capacity_vectors(capacity, s.column_of)
        keys = list(group_keys) if group_keys is not None else list(map(node_group_key, nodes))
        groups = dict(s.group_index)
        members = list(s.group_members)  # the lists are shared: only those the new rows join are copied
        for g in {g for key in keys if (g := groups.get(key)) is not None}:
            members[g] = list(members[g])
        group_of = list(s.group_of)
        _add_to_groups(keys, start, groups, group_of, members)
        index = dict(s.index)
        index.update((node.name, start + k) for k, node in enumerate(nodes))
        shared = _Shared([*s.nodes, *nodes], index, s.columns, s.column_of, group_of, members, groups, {},
                         s.request_cache, s.asked_cache, s.placement, s.workload, s.chooser, s.kinds, {}, s.clock,
                         tables=s.tables, changes=s.changes, kept=s.kept)
        topology = self.topology.copy() if self.topology is not None else None
        if topology is not None:
            for node in nodes:
                topology.add_node(node)
        devices = (self.devices.extended(capacity) if self.devices is not None
                   else GpuDevices.of([*([Resources()] * start), *capacity]))
        return WhatIf(shared, np.vstack([self.free, extra_free]), np.concatenate([self.free_pods, extra_pods]),
                         np.concatenate([self.enabled, np.ones(len(nodes), dtype=bool)]), topology,
                      devices if devices else None,
                      np.concatenate([self.version, np.zeros(len(nodes), dtype=np.int64)]),
                      self.ports.copy() if self.ports is not None else None,
                      self.volumes.extended(len(nodes)) if self.volumes is not None else None,
                      self.dra.extended(nodes) if self.dra is not None else None)

    # ----------------------------------------------------------------------------------------------- feasibility
    def request_vector(self, requests: Resources) -> IntArray | None:
        """The request as a row over the table's columns; `None` if it names a resource no node offers."""
        cache = self._s.request_cache
        if requests in cache:
            return cache[requests]
        row: IntArray | None = np.zeros(len(self._s.columns), dtype=np.int64)
        for name, amount in requests.items:
            column = self._s.column_of.get(name)
            if column is None:
                if amount > 0:
                    row = None
                    break
                continue
            assert row is not None
            row[column] = amount
        cache[requests] = row
        return row

    def asked(self, requests: Resources) -> list[tuple[int, int]] | None:
        """The columns the request asks something of, each with its amount (`request_vector`'s non-zero entries, in
        column order); cached."""
        cache = self._s.asked_cache
        try:
            return cache[requests]
        except KeyError:
            row = self.request_vector(requests)
            asked = cache[requests] = None if row is None else [
                (column, int(row[column])) for column in row.nonzero()[0].tolist()]
            return asked

    def static_mask(self, constraints: SchedulingConstraints) -> BoolArray:
        """Nodes that pass the node-only filters (cordon, name, taints, labels) for these constraints; cached (by the
        constraints without their claims, which these filters do not read)."""
        if constraints.claims:
            constraints = without_claims(constraints)
        cached = self._s.static_cache.get(constraints)
        if cached is not None:
            return cached
        cached = self._s.group_masks.get(constraints)
        if cached is not None:
            self._s.static_cache[constraints] = cached
            return cached
        mask = np.zeros(len(self._s.nodes), dtype=bool)
        nodes = self._s.nodes
        if names_nodes_individually(constraints):
            for i, node in enumerate(nodes):
                mask[i] = not static_failures(constraints, node)
        else:
            for members in self._s.group_members:
                if not static_failures(constraints, nodes[members[0]]):
                    mask[members] = True
            self._s.group_masks[constraints] = mask
        self._s.static_cache[constraints] = mask
        return mask

    def feasible(self, pod: Pod) -> BoolArray:
        """Rows (enabled) where the pod fits now: every filter in kube-scheduler's order (`filters.FILTERS`),
        inter-pod affinity included. Cost O(rows × asked columns) vectorised, plus devices and inter-pod affinity on
        the candidates only."""
        return filters.feasible(pod, self, self.enabled)

    def explain(self, pod: Pod, row: int) -> tuple[FitFailure, ...]:
        """Why `row` cannot take the pod, in kube-scheduler's words (the first failing filter; every insufficient
        resource for NodeResourcesFit); empty when it can. Cost: O(requested resources) plus that row's affinity."""
        return filters.explain(pod, self, row)

    @property
    def group_of(self) -> list[int]:
        """`filters.Rows.group_of`: each row's node group."""
        return self._s.group_of

    def reasons(self, pod: Pod, among: BoolArray | None = None) -> tuple[BoolArray, Counter[str]]:
        """`filters.reasons`: the rows (of `among`, default all) that take the pod, and the other rows' failure
        messages counted."""
        return filters.reasons(pod, self, among)

    @property
    def depends_on_placed(self) -> bool:
        """Whether some pod's placement may depend on placed pods here (`model.pod.depends_on_placed`): the what-if
        then keeps their topology and `feasible` runs InterPodAffinity."""
        return self.topology is not None

    def need(self, requests: Resources) -> GpuNeed | None:
        """`filters.Rows.need`: the request's GPU need (cached)."""
        return self._s.kinds.need(requests)

    def fits_row(self, index: int, pod: Pod) -> bool:
        """Whether the pod's requests still fit one row's free capacity, devices and host ports (the node-only filters
        not re-run): what a placement on the row can change."""
        vector = self.request_vector(pod.requests)
        if vector is None or self.free_pods[index] < 1 or np.count_nonzero(self.free[index] >= vector) < len(vector):
            return False
        if pod.constraints.host_ports and self.ports and self.ports.conflicts(pod, self._s.nodes[index].name):
            return False
        need = self._s.need(pod.requests) if self.devices is not None else None
        if need is not None and self.devices is not None and not self.devices.can_take(index, need):
            return False
        return not (pod.constraints.resource_claims and self.dra is not None
                    and filters.DynamicResources().why(pod, self, index))

    def first_fit(self, pod: Pod) -> int | None:
        """Index of the first feasible node in table order, or `None`."""
        mask = self.feasible(pod)
        if not mask.any():
            return None
        return int(np.argmax(mask))

    def choose(self, pod: Pod, mask: BoolArray, rank: IntArray | None = None,
               aware: bool = True) -> tuple[int, tuple[int, ...] | None]:
        """The row (of `mask`, which must have one) to place `pod` on, and the devices to use there (None: the
        default best fit). With a placement policy and `aware`, a GPU pod goes where fragmentation grows least,
        ties to the lowest `rank` (default: table order); otherwise, and for other pods, the lowest rank wins."""
        shared = self._s
        if (aware and shared.placement is not None and self.devices is not None
                and shared.need(pod.requests) is not None):
            shape = shared.shape(pod.requests)
            if shape is not None:
                if shared.chooser is None:
                    shared.chooser = shared.make_chooser(shared.placement)
                rows = mask.nonzero()[0]
                cpu = shared.column_of.get(CPU)
                cpu_free = self.free[:, cpu] if cpu is not None else np.zeros(len(self), dtype=np.int64)
                scores = self._frag_scores(shared.chooser, shape, cpu_free, rows)
                if scores is not None:
                    ranks = rows if rank is None else rank[rows]
                    best = (scores == scores[scores.argmax()]).nonzero()[0]
                    row = int(rows[best[ranks[best].argmin()]])
                    return row, shared.chooser.pick(shape, cpu_free, self.devices, row) or None
        if rank is None:
            return int(np.argmax(mask)), None
        return int(np.where(mask, rank, _NO_RANK).argmin()), None

    def _frag_scores(self, chooser: FragChooser, shape: PodShape, cpu_free: IntArray,
                     rows: IntArray) -> IntArray | None:
        """Scores of `shape` on `rows`, recomputed only for rows whose version moved since they were cached (a
        placement changes one row, so most of a decision's choices rescore a handful of rows)."""
        assert self.devices is not None
        cached = self._s.score_cache.get(shape)
        if cached is None:
            cached = self._s.score_cache[shape] = (np.zeros(len(self), dtype=np.int64),
                                                   np.full(len(self), -1, dtype=np.int64))
        score, stamp = cached
        stale = rows[stamp[rows] != self.version[rows]]
        if len(stale):
            fresh = chooser.scores(shape, cpu_free, self.devices, stale)
            if fresh is None:
                return None
            score[stale] = fresh
            stamp[stale] = self.version[stale]
        return score[rows]

    # ----------------------------------------------------------------------------------------------- mutation
    def place(self, index: int, pod: Pod, gpus: Sequence[int] | None = None) -> None:
        """Bind a pod to a row: its requests leave the row's free capacity and, on a device-accounted row, `gpus`
        (default: the best fit) lose its share."""
        row = self.request_vector(pod.requests)
        assert row is not None, "placing a pod whose request names a resource outside the table"
        self.free[index] -= row
        self.free_pods[index] -= 1
        self.version[index] = self._s.tick()
        if self.devices is not None and self.devices.count[index]:
            need = self._s.need(pod.requests)
            if need is not None:
                picked = tuple(gpus) if gpus else self.devices.best_fit(index, need)
                assert picked, "placing a GPU pod on a row whose devices cannot take it"
                self.devices.take(index, need, picked)
        if self.topology is not None:
            self.topology.add(pod, self._s.nodes[index])
        if pod.constraints.host_ports:
            if self.ports is None:
                self.ports = HostPorts()
            self.ports.add(pod, self._s.nodes[index].name)
        if self.volumes is not None and pod.constraints.claims:
            self.volumes.add(pod, index, self._s.nodes[index])
        if self.dra is not None and pod.constraints.resource_claims:
            self.dra.add(pod, self._s.nodes[index])

    def unplace(self, index: int, pod: Pod) -> None:
        """Give back a pod's requests (a pod leaving a node in a drain what-if). Its devices are those of its
        `gpuscale.io/gpu-index` annotation, else the fullest devices (the table does not remember picks)."""
        row = self.request_vector(pod.requests)
        assert row is not None
        self.free[index] += row
        self.free_pods[index] += 1
        self.version[index] = self._s.tick()
        if self.devices is not None and self.devices.count[index]:
            need = self._s.need(pod.requests)
            if need is not None:
                held = annotated_devices(pod)
                if held is None or len(held) != need.count:
                    order = np.argsort(self.devices.free[index, : int(self.devices.count[index])], kind="stable")
                    held = tuple(int(d) for d in order[:need.count])
                self.devices.give(index, need, held)
        if pod.constraints.host_ports and self.ports is not None:
            self.ports.remove(pod, self._s.nodes[index].name)
        if self.volumes is not None and pod.constraints.claims:
            self.volumes.remove(pod, index)
        if self.dra is not None and pod.constraints.resource_claims:
            self.dra.remove(pod)

    def unplace_volumes(self, index: int, pod: Pod) -> None:
        """The pod's claims leave row `index` (a pod evicted in a drain what-if, its requests still counted there:
        the row is disabled): its volumes, and its ResourceClaims, released when no other pod uses them. O(claims)."""
        if self.volumes is not None and pod.constraints.claims:
            self.volumes.remove(pod, index)
        if self.dra is not None and pod.constraints.resource_claims:
            self.dra.remove(pod)

    def keeps_claims_of(self, pod: Pod) -> bool:
        """Whether this what-if keeps state of the pod's claims (volume claims, ResourceClaims) that placements change:
        a placement may then change the pod's verdict on rows other than its own. O(1)."""
        c = pod.constraints
        return bool((c.claims and self.volumes is not None) or (c.resource_claims and self.dra is not None))

    def disable(self, index: int) -> None:
        """Take a node out of consideration (it is being removed in this what-if)."""
        self.enabled[index] = False

    def remove(self, index: int) -> None:
        """The row's node leaves the cluster in this what-if (scale-down): out of consideration, and its pods and
        topology domains no longer count for inter-pod affinity and topology spread, as Cluster Autoscaler's
        simulation removes a node from its snapshot. O(1); O(placed pods) with a topology."""
        self.enabled[index] = False
        if self.topology is not None:
            self.topology.remove_node(self._s.nodes[index].name)

    def index_of(self, name: str) -> int | None:
        return self._s.index.get(name)

    def row_index(self) -> Mapping[str, int]:
        """Node name → row, for every row (`index_of` for many names at once)."""
        return self._s.index

    def free_of(self, index: int, resource: str) -> int:
        column = self._s.column_of.get(resource)
        return 0 if column is None else int(self.free[index, column])


