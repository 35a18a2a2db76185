"""The rows of a what-if, computed from the snapshot (`whatif_of`, the reference) or carried from the last build
(`RowCache`, the incremental store's): the same what-if either way.

A row's free capacity, free pod slots and per-GPU state depend only on its capacity and its bound pods.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter

import numpy as np

from gpuscale.engine.placement.devices import (
    DEVICE_ANNOTATION,
    GpuDevices,
    GpuNeed,
    RequestKinds,
)
from gpuscale.engine.placement.frag import TypicalTables
from gpuscale.engine.placement.shapes import PodShape
from gpuscale.engine.scheduling import HostPorts, Topology
from gpuscale.engine.whatif.model import (
    BoolArray,
    GroupKey,
    IntArray,
    NodeEdits,
    RowMoves,
    WhatIf,
    _add_to_groups,
    _capacity_vectors,
    _offered,
    _Shared,
    node_group_key,
)
from gpuscale.engine.whatif.volumes import VolumeState
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.resources import PODS, Resources
from gpuscale.model.volumes import Storage


def whatif_of(nodes: Sequence[Node], capacity: Sequence[Resources], placed: Iterable[Pod],
              extra_names: Iterable[str] = (), with_topology: bool = False, placement: str | None = None,
              workload: Iterable[Pod] = (), storage: Storage | None = None) -> WhatIf:
    """The what-if of `nodes` computed from scratch (the reference store's): `RowCache().table(...)`, which see."""
    return RowCache().table(nodes, capacity, placed, extra_names, with_topology, placement, workload,
                            storage=storage)


MASKS_KEPT = 1024
"""Static masks a `RowCache` carries at most (distinct pod constraints seen while the node groups stay)."""

_RowEntry = tuple[Resources, tuple[Pod, ...]]
"""A row as the memo keys it: its capacity object and its bound pods."""


FEW_ROWS = 64
"""Up to this many rows to compute, `RowCache._compute` sums in Python (NumPy's fixed cost per call outweighs it)."""

NAMES_KEPT = 4096
"""Request objects whose resource names a `RowCache` keeps at most."""

LOADS_KEPT = 4096
"""Distinct device loads (`RowCache._load`) a `RowCache` keeps at most."""

_LoadKey = tuple[int, int, tuple[int, ...], tuple[str | None, ...]]
"""A row's device load as `RowCache._load` keys it: device count, table width, its GPU pods' needs (the `id` of the
memo's own `GpuNeed` objects: `RequestKinds` keeps each for good, so an id stands for one value while the memo
lives, and hashes in C) and device annotations, in order."""


def _common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading items `a` and `b` share (equal), by comparing slices in C (halving the length)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n - 1  # a[:low] == b[:low] and a[:high + 1] != b[:high + 1]
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


_Moves = tuple[IntArray, list[int]]
"""Each row's row in the last build (-1: put in) and the rows kept whose node may differ (`RowCache._moved`)."""


def _regrouped(last_keys: Sequence[GroupKey], last_group_of: IntArray, last_groups: dict[GroupKey, int],
               keys: Sequence[GroupKey], moves: _Moves,
               ) -> tuple[list[int], list[list[int]], dict[GroupKey, int], IntArray]:
    """The grouping of `keys` (`_add_to_groups` from row 0) from the last build's (`last_keys` grouped as
    `last_group_of`, `last_groups`): each row kept stays in its last group, the rows put in and the named rows whose
    key changed are looked up, then the groups are numbered again by first row, by NumPy rather than a pass in
    Python. Also the groups as an array (the next call's `last_group_of`)."""
    old_at, suspect = moves
    group = last_group_of[np.maximum(old_at, 0)]
    by_id = list(last_groups)  # numbered in insertion order
    looked = (old_at < 0).nonzero()[0].tolist()
    looked += [i for i in suspect if keys[i] != last_keys[old_at[i]]]
    new: dict[GroupKey, int] = {}  # the last build's dict is shared: never changed
    for i in looked:
        key = keys[i]
        g = last_groups.get(key)
        if g is None:
            g = new.setdefault(key, len(by_id))
            if g == len(by_id):
                by_id.append(key)
        group[i] = g
    rows = group.argsort(kind="stable")  # by group, each group's rows in order: its first row first
    sizes = np.bincount(group, minlength=len(by_id))
    used = sizes.nonzero()[0]
    starts = (sizes.cumsum() - sizes)[used]
    firsts = rows[starts]
    order = np.argsort(firsts)  # the groups numbered again by first row
    number = np.empty(len(by_id), dtype=np.int64)
    number[used[order]] = np.arange(len(used))
    ordered = rows.tolist()
    members = [ordered[start:start + size] for start, size in zip(starts[order].tolist(),
                                                                   sizes[used[order]].tolist(), strict=True)]
    group = number[group]
    return group.tolist(), members, {keys[f]: g for g, f in enumerate(firsts[order].tolist())}, group


class RowCache:
    """The rows of the last what-if built, carried to the next build (`RowCache.table`, the incremental store's).

    A row's free capacity, free pod slots and per-GPU state depend only on its capacity and its bound pods. While a
    node keeps the same capacity object and the same pods (the same objects, in the same order: snapshots hand back
    unchanged objects), its row is copied from the last build, and only rows that changed are computed — the
    vectorised sums and `GpuDevices.load` on those rows alone. The columns (every resource a node offers or a pod
    requests) are kept per node too; when they change, every row is computed. A fresh memo computes everything, so a
    build without one is the same code, and a memo never changes a table (tests/engine/test_row_cache.py, and the
    store property, tests/engine/test_store_property.py). When the rows are those of the last build (same names and
    capacities: the usual tick), the table starts from the last one and only rows whose pods changed are touched. It
    holds the objects it compares by identity, so a recycled object can never match.
    """

    __slots__ = ("_capacity", "_caps", "_chooser", "_column_of", "_columns", "_devices", "_free", "_free_pods",
                 "_gpu_shapes", "_group_array", "_groups", "_kinds", "_loads", "_name_count", "_names",
                 "_names_by_request", "_names_of", "_pending", "_ported", "_ports", "_position", "_recounted", "_rows",
                 "_seen", "_shapes_version", "_tables", "_union_of", "_world")

    def __init__(self) -> None:
        self._columns: list[str] = []
        self._names_of: dict[str, tuple[tuple[Pod, ...], frozenset[str]]] = {}
        self._name_count: Counter[str] = Counter()
        """How many entries of `_names_of` request each resource."""
        self._names_by_request: dict[int, tuple[Resources, frozenset[str]]] = {}
        """The resource names of each request object seen, by its id (bounded: cleared past `NAMES_KEPT`)."""
        self._loads: dict[_LoadKey, list[int]] = {}
        """Each distinct row load's devices (`_load`; bounded: cleared past `LOADS_KEPT`)."""
        self._rows: dict[str, _RowEntry] = {}
        self._position: dict[str, int] = {}
        self._names: list[str] | None = None
        """The last build's node names, row by row (None: two rows shared a name)."""
        self._caps: list[Resources] = []
        """The last build's capacity objects, row by row (held: a row is carried only to the very same object)."""
        self._free: IntArray = np.zeros((0, 0), dtype=np.int64)
        self._free_pods: IntArray = np.zeros(0, dtype=np.int64)
        self._devices: IntArray = np.zeros((0, 0), dtype=np.int64)
        self._capacity: tuple[list[Resources], frozenset[str], GpuDevices, bool] | None = None
        self._gpu_shapes: Counter[PodShape] = Counter()
        """Shapes of the GPU pods bound to the rows in `_rows`, counted (what fragmentation is measured against); no
        entry below 1."""
        self._groups: tuple[list[GroupKey], list[int], list[list[int]], dict[SchedulingConstraints, BoolArray],
                            dict[GroupKey, int]] | None = None
        self._group_array: tuple[list[int], IntArray] | None = None
        """`_groups`' group of each row (the very list) as an array, when `_regrouped` made it."""
        self._kinds = RequestKinds()
        self._chooser: tuple[str, _Shared, int, Counter[PodShape]] | None = None
        """The last table's placement and shared part (its fragmentation chooser, once made, serves an equal
        workload), the `_shapes_version` and the pending shapes (`_pending_shapes`) its workload was made from."""
        self._shapes_version = 0
        """Bumped whenever `_gpu_shapes` changes."""
        self._column_of: dict[str, int] = {}
        """Column of each name in `_columns`."""
        self._union_of: tuple[frozenset[str], frozenset[str], list[str]] | None = None
        """The last extra names, offered names and the columns made from them with the name counts (`_union`)."""
        self._recounted = True
        """The name counts moved since `_union_of` was made."""
        self._seen = -1
        """The generation of the arrangement `_names_of` was last brought to (-1: unknown)."""
        self._tables = TypicalTables()
        """Fragmentation tables by class list, for the tables' choosers (`_Shared.make_chooser`)."""
        self._pending: tuple[tuple[Pod, ...], Counter[PodShape]] | None = None
        """The last pending pods and their GPU shapes (`_pending_shapes`)."""
        self._world = -1
        """The number its builder gave the last table (`NodeEdits`; -1: none)."""
        self._ported: dict[str, tuple[Pod, ...]] = {}
        """Per node name in `_names_of`, its pods with host ports (no entry: none)."""
        self._ports = HostPorts()
        """The host ports of `_ported`, in use per node: each table gets a copy (`HostPorts.copy`)."""

    def _columns_of(self, by_node: Mapping[str, Sequence[Pod]], offered: frozenset[str],
                    extra_names: Iterable[str], moved: tuple[int, frozenset[str] | None] | None,
                    ) -> tuple[list[str], list[str]]:
        """Every resource any node offers or any pod (bound anywhere) requests, but pods; and the node names whose
        pods changed since the last build (new, different or gone). Request names are counted per node entry. With
        `moved` against the arrangement of the last build, only the nodes it names are looked at; else every node
        with pods now or last time."""
        generation, hint = moved if moved is not None else (-1, None)
        seen, self._seen = self._seen, generation
        names = hint if hint is not None and generation >= 0 and seen == generation - 1 else (
            self._names_of.keys() | by_node.keys())
        changed = self._recount(by_node, names)  # first: the union reads the counts it brings up to date
        return self._union(offered, extra_names), changed

    def _recount(self, by_node: Mapping[str, Sequence[Pod]], names: Iterable[str]) -> list[str]:
        """`_columns_of`'s entries brought up to date for `names`; those whose pods changed."""
        entries, count = self._names_of, self._name_count
        changed: list[str] = []
        for key in names:
            pods, hit = by_node.get(key), entries.get(key)
            held = tuple(pods) if pods is not None else None
            if (hit[0] if hit is not None else None) == held:
                continue
            changed.append(key)
            self._repoint_ports(key, held)
            if held is None:  # the node's pods all left (or the node did)
                if hit is not None:
                    count.subtract(hit[1])
                    del entries[key]
                    self._recounted = True
                continue
            requested = self._request_names(held)
            if hit is not None:
                if requested == hit[1]:  # the same names (the usual change): nothing to recount
                    entries[key] = (held, hit[1])
                    continue
                count.subtract(hit[1])
            entries[key] = (held, requested)
            count.update(requested)
            self._recounted = True
        return changed

    def _repoint_ports(self, node: str, held: tuple[Pod, ...] | None) -> None:
        """The host ports in use on `node` follow its pods now `held`. O(its pods)."""
        ported = tuple(p for p in held if p.constraints.host_ports) if held else ()
        before = self._ported.get(node, ())
        if ported == before:
            return
        for pod in before:
            self._ports.remove(pod, node)
        for pod in ported:
            self._ports.add(pod, node)
        if ported:
            self._ported[node] = ported
        else:
            del self._ported[node]

    def _request_names(self, pods: Sequence[Pod]) -> frozenset[str]:
        """Every resource name the pods request: the union of each distinct request's names, kept per request (a
        node's pods mostly ask for the same names, so the union is mostly one kept set, shared)."""
        known = self._names_by_request
        if len(known) > NAMES_KEPT:
            known.clear()
        union: frozenset[str] | None = None
        for pod in pods:  # kept by request object id, hashed in C (the entry holds the object: its id is not reused)
            requests = pod.requests
            hit = known.get(id(requests))
            if hit is None:
                hit = known[id(requests)] = (requests, frozenset(requests.names()))
            names = hit[1]
            if names is not union:
                union = names if union is None or union == names else union | names
        return union if union is not None else frozenset()

    def _union(self, offered: frozenset[str], extra_names: Iterable[str]) -> list[str]:
        """The columns: kept (the very same list) while no name count moved and the offered and extra names are
        equal to the last build's."""
        extra = extra_names if isinstance(extra_names, frozenset) else frozenset(extra_names)
        last = self._union_of
        if last is not None and not self._recounted and last[0] == extra and last[1] == offered:
            return last[2]
        union = {name for name, n in self._name_count.items() if n > 0}
        union.update(extra)
        union.update(offered)
        union.discard(PODS)
        columns = sorted(union)
        self._union_of, self._recounted = (extra, offered, columns), False
        return columns

    def _same_rows(self, node_edits: NodeEdits | None, last_world: int, nodes: Sequence[Node],
                   capacity: Sequence[Resources], keys: Sequence[GroupKey],
                   known_names: Sequence[str] | None) -> list[str] | None:
        """The last build's names when `node_edits` say which rows' nodes may differ from the table this memo built
        last (`last_world`) and those rows have the last build's names, capacity objects and group keys (every other
        row's node is the very same object, so are they: they follow from the node); else None (compare in full)."""
        names = self._names
        if (node_edits is None or node_edits[2] is None or node_edits[0] != last_world or last_world < 0
                or names is None or len(names) != len(nodes) or self._groups is None
                or len(self._caps) != len(nodes) or len(self._groups[0]) != len(nodes)):
            return None
        caps, last_keys = self._caps, self._groups[0]
        for i in node_edits[2]:
            name = known_names[i] if known_names is not None else nodes[i].name
            if name != names[i] or capacity[i] is not caps[i] or keys[i] != last_keys[i]:
                return None
        return names

    def _capacity_of(self, capacity: Sequence[Resources], same_rows: object = None,
                     ) -> tuple[frozenset[str], GpuDevices, bool, bool]:
        """The resources the rows offer, their devices all free, whether any row has devices, and whether the
        capacities are those of the last build (kept while they are). `same_rows` (not None): they are."""
        base = self._capacity
        same = base is not None and (same_rows is not None or base[0] == capacity)
        if base is None or not same:
            offered, devices = _offered(capacity)
            base = self._capacity = (list(capacity), offered, devices, bool(devices))
        return base[1], base[2], base[3], same

    def table(self, nodes: Sequence[Node], capacity: Sequence[Resources], placed: Iterable[Pod],
              extra_names: Iterable[str] = (), with_topology: bool = False, placement: str | None = None,
              workload: Iterable[Pod] = (), group_keys: Sequence[GroupKey] | None = None,
              by_node: Mapping[str, Sequence[Pod]] | None = None,
              moved: tuple[int, frozenset[str] | None] | None = None,
              names: Sequence[str] | None = None, node_edits: NodeEdits | None = None,
              row_moves: RowMoves | None = None, storage: Storage | None = None) -> WhatIf:
        """Nodes with their usable capacity (`capacity[i]`, e.g. a template's for a GPU node still initialising),
        minus the requests of `placed` pods bound to them. `extra_names` adds columns (the pending pods' requests).
        `placement` makes `choose` fragmentation-aware; `workload` (pending pods) joins the bound GPU pods as the
        workload fragmentation is measured against. `group_keys[i]` is `node_group_key(nodes[i])` and `by_node` the
        `placed` pods per node name, if the caller has them already; rows are carried from this cache's last build
        (same what-if, less work), and `moved` says which nodes' entries in `by_node` may differ from the last
        build's (`engine.arrange.Arranged`: its generation and `moved`); `names[i]` is `nodes[i].name`, if the
        caller has them already; `node_edits` is kept for the what-if's readers (`WhatIf.rows_changed_since`), and
        `row_moves` (with it) says where rows came and went (`RowMoves`). `storage`: the snapshot's storage objects
        when some pod uses claims; the table then keeps the volume state of the placed pods
        (`whatif.volumes.VolumeState`, O(nodes + placed pods) per build)."""
        if by_node is None or with_topology:
            placed = list(placed)
        if by_node is None:
            moved = None
            grouped: dict[str, list[Pod]] = {}
            for pod in placed:
                grouped.setdefault(pod.node_name or "", []).append(pod)
            by_node = grouped
        table = self.build(nodes, capacity, by_node, extra_names, placement, workload,
                           group_keys if group_keys is not None else [node_group_key(n) for n in nodes], moved,
                           names, node_edits, row_moves)
        if with_topology:
            table.topology = Topology(nodes, placed)
        if storage is not None:
            table.volumes = VolumeState.of(storage, nodes, by_node)
        return table

    def build(self, nodes: Sequence[Node], capacity: Sequence[Resources], by_node: Mapping[str, Sequence[Pod]],
              extra_names: Iterable[str], placement: str | None, workload: Iterable[Pod],
              group_keys: Sequence[GroupKey], moved: tuple[int, frozenset[str] | None] | None = None,
              known_names: Sequence[str] | None = None, node_edits: NodeEdits | None = None,
              row_moves: RowMoves | None = None) -> WhatIf:
        """The table of `WhatIf.build` (which see), from the rows that changed since the last build. `node_edits`
        about the table this memo built last: only the rows it names are compared with the last build's (name,
        capacity object, group key), not every row; when rows came or went, `row_moves` say where (`_moved`): the
        rows kept follow the last build's by position, not by name, and their groups are kept."""
        last_world, self._world = self._world, node_edits[1] if node_edits is not None else -1
        kept = self._same_rows(node_edits, last_world, nodes, capacity, group_keys, known_names)
        offered, template, has_devices, same_capacity = self._capacity_of(capacity, kept)
        columns, changed = self._columns_of(by_node, offered, extra_names, moved)
        column_of = self._column_of if columns is self._columns else {n: i for i, n in enumerate(columns)}
        names = kept if kept is not None else (
            list(known_names) if known_names is not None else list(map(attrgetter("name"), nodes)))
        if same_capacity and columns == self._columns and (kept is not None or names == self._names):
            # The same rows as last time (the common case): only rows whose pods changed are computed.
            index = self._position
            miss = sorted(i for name in changed if (i := index.get(name)) is not None)
            rows, moves = self._rows, None
            gone: list[str] = []
            # The memo's own arrays, patched in place (it hands the table copies): only the rows redone change.
            free, free_pods = self._free, self._free_pods
            devices = GpuDevices(template.count, self._devices)
            if miss:
                devices.free[miss] = template.free[miss]
        else:
            index, rows, gone, moves, (miss, free, free_pods, devices) = self._rearrange(
                names, nodes, capacity, columns, changed, template, group_keys, last_world, node_edits, row_moves)
        self._redo_rows(miss, gone, names, index, rows, capacity, columns, column_of, free, free_pods, devices)
        group_of, members, group_index, masks = self._groups_of(group_keys, kept is not None, moves)
        shared = _Shared(list(nodes), index, columns, column_of, group_of, members, group_index, {}, {},
                         placement=placement, kinds=self._kinds, group_masks=masks, tables=self._tables,
                         node_edits=node_edits)
        if placement is not None and has_devices:
            self._share_chooser(shared, placement, workload)
        self._columns, self._column_of, self._rows, self._position = columns, column_of, rows, index
        if kept is None:
            self._caps = list(capacity)
            self._names = names if len(index) == len(names) else None  # duplicate names: never the same rows
        self._free, self._free_pods, self._devices = free, free_pods, devices.free
        return WhatIf(shared, free.copy(), free_pods.copy(), np.ones(len(nodes), dtype=bool), None,
                         devices.copy() if has_devices else None, ports=self._ports.copy() if self._ports else None)

    def _rearrange(self, names: list[str], nodes: Sequence[Node], capacity: Sequence[Resources], columns: list[str],
                   changed: list[str], template: GpuDevices, group_keys: Sequence[GroupKey], last_world: int,
                   node_edits: NodeEdits | None, row_moves: RowMoves | None
                   ) -> tuple[dict[str, int], dict[str, _RowEntry], list[str], _Moves | None,
                              tuple[list[int], IntArray, IntArray, GpuDevices]]:
        """`build` when rows came, went or moved (or the columns or capacities changed): the row of each name (in C;
        the last row of a name wins), the kept rows (none when the columns changed or names repeat), the names
        gone, where rows moved (`_moved`), and the rows carried from the last build with those left to compute
        (`_carry`)."""
        index = dict(zip(names, range(len(names)), strict=True))
        if columns != self._columns or len(index) != len(nodes):  # duplicate names: nothing is carried
            self._rows, self._gpu_shapes = {}, Counter()
            self._shapes_version += 1
        rows = self._rows
        gone = list(rows.keys() - index.keys())
        moves = None
        if rows and len(index) == len(nodes):
            moves = self._moved(row_moves, node_edits, last_world, names, capacity, group_keys)
        return index, rows, gone, moves, self._carry(names, capacity, index, changed, len(columns), template, moves)

    def _redo_rows(self, miss: list[int], gone: list[str], names: list[str], index: Mapping[str, int],
                   rows: dict[str, _RowEntry], capacity: Sequence[Resources], columns: list[str],
                   column_of: dict[str, int], free: IntArray, free_pods: IntArray, devices: GpuDevices) -> None:
        """`build`'s rows to redo: computes rows `miss` (`_compute`, into `free`, `free_pods` and `devices` in
        place), drops the rows of names `gone`, and keeps the count of GPU pod shapes on the rows (`_gpu_shapes`)
        by counting out the pods of the rows gone or redone and in those computed; its version moves when any
        shape's count did. A row's pods are the ones its name's node last held (`_names_of`) unless the name now
        repeats on a later row."""
        names_of = self._names_of
        held_of = [known[0] if (known := names_of.get(names[i])) is not None and index[names[i]] == i else ()
                   for i in miss]
        shapes, kinds = self._gpu_shapes, self._kinds
        touched: set[PodShape] = set()
        for name in [*gone, *(names[i] for i in miss if names[i] in rows)]:
            for p in rows[name][1]:
                if (shape := kinds.shape(p.requests)) is not None:
                    shapes[shape] -= 1
                    touched.add(shape)
        for name in gone:
            del rows[name]
        if miss:
            for requests, count in self._compute(miss, held_of, [capacity[i] for i in miss], columns, column_of,
                                                 free, free_pods, devices).items():
                if (shape := kinds.shape(requests)) is not None:
                    shapes[shape] += count
                    touched.add(shape)
        for shape in touched:
            if shapes[shape] <= 0:
                del shapes[shape]
        if touched:
            self._shapes_version += 1
        for i, held in zip(miss, held_of, strict=True):
            rows[names[i]] = (capacity[i], held)

    def _share_chooser(self, shared: _Shared, placement: str, workload: Iterable[Pod]) -> None:
        """The workload (GPU pod shapes on the rows and pending) and device chooser of a table with devices and a
        placement: the last table's when its shapes and pending pods are the same, or its chooser alone when the
        counts came out equal; else a fresh workload and no chooser. Kept for the next build (`_chooser`)."""
        pending = self._pending_shapes(workload)
        last = self._chooser
        if last is not None and last[0] == placement and last[2] == self._shapes_version and last[3] is pending:
            # the same shapes on the rows and the same pending pods: the last workload, and its chooser
            shared.workload, shared.chooser = last[1].workload, last[1].chooser
        else:
            shared.workload.update(self._gpu_shapes)  # a copy (counts are carried), then the pending pods
            shared.workload.update(pending)
            # no count below 1 on either side, so dict equality is Counter equality (in C)
            if last is not None and last[0] == placement and dict.__eq__(last[1].workload, shared.workload):
                shared.chooser = last[1].chooser
        self._chooser = (placement, shared, self._shapes_version, pending)

    def _moved(self, row_moves: RowMoves | None, node_edits: NodeEdits | None, last_world: int, names: list[str],
               capacity: Sequence[Resources], keys: Sequence[GroupKey]) -> _Moves | None:
        """Each row's row in the last build (-1: put in) and the rows kept whose node may differ, when `row_moves`
        (with `node_edits` about the table this memo built last) say where rows came and went and that adds up;
        None (follow the rows by name) when not told or anything does not line up. The rows kept that are not named
        hold the very node of their row last time, so its name, capacity object and group key; the named ones must
        keep their names (a different name: not the node of that row)."""
        last_names, groups = self._names, self._groups
        if (row_moves is None or node_edits is None or node_edits[2] is not None or node_edits[0] != last_world
                or last_world < 0 or last_names is None or groups is None):
            return None
        out, into, suspect = row_moves
        n, m = len(names), len(last_names)
        if (len(self._caps) != m or len(groups[0]) != m or m - len(out) + len(into) != n
                or len(keys) != n or len(capacity) != n):
            return None
        gone, came = np.array(out, dtype=np.int64), np.array(into, dtype=np.int64)
        if (len(out) and (gone[0] < 0 or gone[-1] >= m or np.any(gone[1:] <= gone[:-1]))) or (
                len(into) and (came[0] < 0 or came[-1] >= n or np.any(came[1:] <= came[:-1]))):
            return None
        old_at = np.insert(np.delete(np.arange(m, dtype=np.int64), gone), came - np.arange(len(into)), -1)
        for i in suspect:
            if not 0 <= i < n or (j := int(old_at[i])) < 0 or names[i] != last_names[j]:
                return None
        return old_at, suspect

    def _carry(self, names: list[str], capacity: Sequence[Resources], index: dict[str, int], changed: list[str],
               width: int, template: GpuDevices, moves: _Moves | None = None,
               ) -> tuple[list[int], IntArray, IntArray, GpuDevices]:
        """Rows that moved or changed (nodes came or went): each row whose node had a row last time, with the very
        same capacity object and pods not `changed` since, is copied from there; the others are returned to compute.
        Which rows those are is found by array operations, not a pass in Python (only `changed` is walked), or, with
        `moves` (`_moved`), read from them (only the rows they name are compared)."""
        n = len(names)
        free = np.empty((n, width), dtype=np.int64)
        free_pods = np.empty(n, dtype=np.int64)
        devices = template.copy()
        if not self._rows:  # nothing to carry (the first build, or the columns changed)
            return list(range(n)), free, free_pods, devices
        if moves is not None:
            old_at = moves[0]
            hit = old_at >= 0
            caps = self._caps
            for row in moves[1]:
                if capacity[row] is not caps[old_at[row]]:
                    hit[row] = False
        else:
            old_at = np.fromiter(map(self._position.get, names, repeat(-1)), dtype=np.int64, count=n)
            old_caps = np.fromiter(map(id, self._caps), dtype=np.int64, count=len(self._caps))
            hit = old_at >= 0
            hit &= old_caps[np.where(hit, old_at, 0)] == np.fromiter(map(id, capacity), dtype=np.int64, count=n)
        for name in changed:
            if (i := index.get(name)) is not None:
                hit[i] = False
        hit_new = hit.nonzero()[0]
        if len(hit_new):
            hit_old = old_at[hit_new]
            free[hit_new] = self._free[hit_old]
            free_pods[hit_new] = self._free_pods[hit_old]
            gpus = min(self._devices.shape[1], devices.free.shape[1])
            devices.free[hit_new, :gpus] = self._devices[hit_old, :gpus]
        return np.flatnonzero(~hit).tolist(), free, free_pods, devices

    def _compute(self, miss: list[int], held_of: list[tuple[Pod, ...]], caps: list[Resources], columns: list[str],
                 column_of: dict[str, int], free: IntArray, free_pods: IntArray,
                 devices: GpuDevices) -> dict[Resources, int]:
        """Rows `miss` from scratch: capacity minus the requests of their pods (one pass in Python maps each pod to
        its row and distinct request; the sums per row are NumPy's), and their devices from their GPU pods. Returns
        the GPU requests of those pods, counted. A few rows (the usual decision) are summed in Python instead
        (`_compute_few`): the same integers, without the fixed cost of the NumPy calls."""
        if len(miss) <= FEW_ROWS:
            return self._compute_few(miss, held_of, caps, len(columns), column_of, free, free_pods, devices)
        at = np.array(miss, dtype=np.int64)
        free[at], free_pods[at] = _capacity_vectors(caps, column_of)
        kinds: dict[Resources, int] = {}
        bound_rows: list[int] = []
        bound_kinds: list[int] = []
        bound: list[Pod] = []
        for row, held in zip(miss, held_of, strict=True):
            for pod in held:
                bound_rows.append(row)
                bound_kinds.append(kinds.setdefault(pod.requests, len(kinds)))
                bound.append(pod)
        if not bound:
            return {}
        vectors = np.zeros((len(kinds), len(columns)), dtype=np.int64)
        for requests, kind in kinds.items():
            for name, amount in requests.items:
                vectors[kind, column_of[name]] = amount
        rows = np.array(bound_rows, dtype=np.int64)
        of_kind = np.array(bound_kinds, dtype=np.int64)
        starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))  # pods come grouped by row
        free[rows[starts]] -= np.add.reduceat(vectors[of_kind], starts, axis=0)
        free_pods[rows[starts]] -= np.diff(np.append(starts, len(rows)))
        needs = [self._kinds.need(requests) for requests in kinds]
        gpu_kind = np.array([need is not None for need in needs], dtype=bool)
        if devices:
            loaded = np.flatnonzero(gpu_kind[of_kind] & (devices.count[rows] > 0)).tolist()
            self._load(devices, rows[loaded].tolist(),
                       [gn for i in loaded if (gn := needs[bound_kinds[i]]) is not None], [bound[i] for i in loaded])
        counts = np.bincount(of_kind, minlength=len(kinds)).tolist()
        return {requests: counts[kind] for requests, kind in kinds.items() if gpu_kind[kind] and counts[kind]}

    def _compute_few(self, miss: list[int], held_of: list[tuple[Pod, ...]], caps: list[Resources], width: int,
                     column_of: dict[str, int], free: IntArray, free_pods: IntArray,
                     devices: GpuDevices) -> dict[Resources, int]:
        """`_compute` row by row in Python: each row's capacity (read once per distinct capacity object) minus its
        pods' requests, and the GPU pods of device-accounted rows loaded in the same order (rows, then pods)."""
        kinds = self._kinds
        vectors: dict[int, tuple[list[int], int]] = {}
        counts: dict[Resources, int] = {}
        rows_free: list[list[int]] = []
        slots: list[int] = []
        gpu_rows: list[int] = []
        gpu_needs: list[GpuNeed] = []
        gpu_pods: list[Pod] = []
        accounted = devices.count[miss].tolist() if devices else [0] * len(miss)
        for row, held, cap, has_devices in zip(miss, held_of, caps, accounted, strict=True):
            base = vectors.get(id(cap))
            if base is None:
                vector, pods = [0] * width, 0
                for name, amount in cap.items:
                    if name == PODS:
                        pods = amount
                    elif (column := column_of.get(name)) is not None:
                        vector[column] = amount
                base = vectors[id(cap)] = (vector, pods)
            left = list(base[0])
            for pod in held:
                requests = pod.requests
                for name, amount in requests.items:
                    left[column_of[name]] -= amount
                counts[requests] = counts.get(requests, 0) + 1
                if has_devices > 0 and (need := kinds.need(requests)) is not None:
                    gpu_rows.append(row)
                    gpu_needs.append(need)
                    gpu_pods.append(pod)
            rows_free.append(left)
            slots.append(base[1] - len(held))
        at = np.array(miss, dtype=np.int64)
        free[at] = np.array(rows_free, dtype=np.int64).reshape(len(miss), width)
        free_pods[at] = slots
        if gpu_rows:
            self._load(devices, gpu_rows, gpu_needs, gpu_pods)
        return {requests: n for requests, n in counts.items() if kinds.need(requests) is not None}

    def _load(self, devices: GpuDevices, rows: list[int], needs: list[GpuNeed], pods: list[Pod]) -> None:
        """`devices.load(rows, needs, pods)` on rows whose devices are all free, each row's pods consecutive, `needs`
        those of the memo's `RequestKinds` (see `_LoadKey`). Load
        rebuilds each row on its own, from all free: the result depends only on the row's device count, the table's
        width and its GPU pods' needs and device annotations, in order (annotated pods are taken in order; whole and
        fractional pods by amount). Each distinct such load is done once and kept (rows repeat a few loads: the
        twin's one-device nodes hold a handful of fraction mixes); a kept one is written, not reconstructed."""
        kept = self._loads
        if len(kept) > LOADS_KEPT:
            kept.clear()
        width = int(devices.free.shape[1])
        counts = devices.count
        hit_rows: list[int] = []
        hit_free: list[list[int]] = []
        miss_keys: list[tuple[int, _LoadKey]] = []
        miss_at: list[int] = []
        n, i = len(rows), 0
        while i < n:
            row, j = rows[i], i + 1
            while j < n and rows[j] == row:
                j += 1
            key = (int(counts[row]), width, tuple(map(id, needs[i:j])),
                   tuple([p.annotations.get(DEVICE_ANNOTATION) for p in pods[i:j]]))
            known = kept.get(key)
            if known is None:
                miss_keys.append((row, key))
                miss_at.extend(range(i, j))
            else:
                hit_rows.append(row)
                hit_free.append(known)
            i = j
        if hit_rows:
            devices.free[hit_rows] = hit_free
        if miss_keys:
            devices.load(np.array([rows[k] for k in miss_at], dtype=np.int64), [needs[k] for k in miss_at],
                         [pods[k] for k in miss_at])
            for (_, key), free in zip(miss_keys, devices.free[[row for row, _ in miss_keys]].tolist(), strict=True):
                kept[key] = free

    def _pending_shapes(self, workload: Iterable[Pod]) -> Counter[PodShape]:
        """The GPU shapes of the pending pods, counted in first-seen order; kept while the pods are the same (the
        very same objects, in the same order: compared in C)."""
        pods = workload if isinstance(workload, tuple) else tuple(workload)
        last = self._pending
        if last is not None and last[0] == pods:
            return last[1]
        counts: Counter[PodShape] = Counter()
        kinds = self._kinds
        for pod in pods:
            if (shape := kinds.shape(pod.requests)) is not None:
                counts[shape] += 1
        self._pending = (pods, counts)
        return counts

    def _groups_of(self, keys: Sequence[GroupKey], same: bool = False, moves: _Moves | None = None,
                   ) -> tuple[list[int], list[list[int]], dict[GroupKey, int], dict[SchedulingConstraints, BoolArray]]:
        """Rows grouped by node-group key (in first-seen order), each key's group, and the static masks decided per
        group so far (see `_Shared.group_masks`): kept while the keys are equal row by row (`same`: known to be;
        bounded: cleared past `MASKS_KEPT`); with `moves` (`_moved`), the rows kept keep their groups and only the
        rows put in or named are looked up (`_regrouped`)."""
        cached = self._groups
        if cached is not None and (same or cached[0] == keys):
            if len(cached[3]) > MASKS_KEPT:
                cached[3].clear()
            return cached[1], cached[2], cached[4], cached[3]
        if cached is not None and moves is not None and len(keys):
            held = self._group_array
            last = held[1] if held is not None and held[0] is cached[1] else np.asarray(cached[1], dtype=np.int64)
            carried = _regrouped(cached[0], last, cached[4], keys, moves)
            self._groups, self._group_array = (list(keys), carried[0], carried[1], {}, carried[2]), (
                carried[0], carried[3])
            return carried[0], carried[1], carried[2], self._groups[3]
        # The rows before the first changed key keep their groups (numbered by first row, so those groups come
        # first): only the rows from there on are grouped again (upcoming nodes are the last rows).
        start = _common_prefix(cached[0], keys) if cached is not None else 0
        group_of: list[int] = cached[1][:start] if cached is not None else []
        members: list[list[int]] = []
        if cached is not None and start:
            for rows in cached[2]:
                if rows[0] >= start:
                    break
                members.append(rows[:bisect_left(rows, start)])
        groups = {keys[rows[0]]: g for g, rows in enumerate(members)}
        _add_to_groups(keys[start:], start, groups, group_of, members)
        self._groups = (list(keys), group_of, members, {}, groups)
        return group_of, members, groups, self._groups[3]
