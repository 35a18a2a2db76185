"""The snapshot arranged for one decision — nodes and pods in name order, the pod index — carried between decisions.

A decision reads the cluster sorted by name (so its result does not depend on input order) and indexed (pending,
bound, bound per node). Done afresh, that is a sort and a pass over every object each loop. Between two loops only a
few objects change, and snapshots hand back the very same object for every object that did not (the watch cache and
the twin both do). `ArrangeCache` therefore tells objects apart by identity: it finds the objects that left and the
ones that came (a changed object is one of each), and moves only those in its sorted lists and its index. It finds
them by walking the last input and this one side by side, since a snapshot of a dict keeps its order from loop to
loop; input in another order is diffed by identity as a whole. Past a handful of changes, or when two objects share a
name (where input order would decide a tie), it sorts afresh.

It also says what changed, for the next steps' own memos: which nodes were replaced by a new object of the same name
(`Arranged.replaced`), where nodes were taken out and put in (`Arranged.node_edits`: lists kept in node order follow
by them instead of being made afresh when nodes come or go), and which nodes' bound pods may differ
(`Arranged.moved`), all against the arrangement just before.
An arrangement made with a memo equals one made without (tests/engine/test_arrange.py); the pod index's lists are the
memo's and are valid until its next arrangement.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress, count, islice, repeat
from operator import attrgetter, eq, is_, is_not, length_hint
from typing import Any, Generic, TypeVar

from gpuscale.model.cluster import (
    PENDING,
    PLACED,
    Cluster,
    PodGroupSpec,
    PodIndex,
    group_member,
    index_slot,
)
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod, depends_on_placed, uses_claims, uses_devices

T = TypeVar("T")
K = TypeVar("K", PodDisruptionBudget, PodGroupSpec)
_KEY = attrgetter("key")

_POD_ORDER: Callable[[Pod], tuple[str, str]] = attrgetter("namespace", "name")
_NODE_ORDER: Callable[[Node], str] = attrgetter("name")

_FEW = 16
"""Up to this many changed objects (or an eighth of them all, if more) are moved one by one; past it, all are sorted."""
_LOOK = 8
"""How far ahead `_Sorted._walk` looks for an object whose predecessors left."""
_WALKED = 64
"""At most this many objects left or came found by `_Sorted._walk` (a step in Python each): input in another order is
given up on soon, and more changes are diffed as a whole."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Arranged:
    cluster: Cluster
    """The snapshot's cluster with nodes, pods, budgets and pod groups in name order."""
    pods: PodIndex
    replaced: Mapping[str, Node] | None
    """The nodes are those of the memo's last arrangement but for these, by name, whose objects were replaced (empty:
    the very same nodes); None when nodes came or went, or there was no last arrangement."""
    moved: frozenset[str] | None
    """Nodes whose bound pods may differ from the last arrangement's (None: any may)."""
    generation: int
    """This arrangement's number in its memo (0 without one): `moved` is against `generation - 1`."""
    node_edits: tuple[tuple[int, Node | None], ...] | None = None
    """How the last arrangement's nodes became these, in order: (position, None) takes the node there out, (position,
    node) puts the node in there (a replaced node is taken out and put in again); None when the nodes were sorted
    afresh or there was no last arrangement. A list kept in node order follows the nodes by these edits."""


def _sorted_rest(cluster: Cluster, nodes: tuple[Node, ...], pods: tuple[Pod, ...]) -> Cluster:
    return replace(cluster, nodes=nodes, pods=pods, pdbs=_by_key(cluster.pdbs), pod_groups=_by_key(cluster.pod_groups),
                   changes=None)


def _by_key(items: Sequence[K]) -> tuple[K, ...]:
    return tuple(sorted(items, key=_KEY))


def arrange(cluster: Cluster) -> Arranged:
    """The arrangement from scratch."""
    ordered = _sorted_rest(cluster, tuple(sorted(cluster.nodes, key=_NODE_ORDER)),
                           tuple(sorted(cluster.pods, key=_POD_ORDER)))
    return Arranged(cluster=ordered, pods=ordered.index(), replaced=None, moved=None, generation=0)


class _Sorted(Generic[T]):
    """Objects in key order (their keys kept beside them), brought from one input to the next by the objects that
    left and came."""

    __slots__ = ("_by_id", "_key", "_keys", "_last", "_ties", "edits", "items")

    def __init__(self, key: Callable[[T], Any]) -> None:
        self._key = key
        self.items: list[T] = []
        self._keys: list[Any] = []
        """The key of each object in `items`, position by position (searched without calling `key`)."""
        self._by_id: dict[int, T] = {}
        """Every object held, by `id`: held, so an id can never be that of a new object."""
        self._last: tuple[T, ...] = ()
        """The last input, as it came (held too)."""
        self._ties = False
        """Two held objects have the same key: their order is the input's, so every update sorts afresh."""
        self.edits: list[tuple[int, T | None]] | None = None
        """What the last `update` did to `items`, in order: (position, None) took the object there out, (position,
        object) put the object in there; None when it sorted afresh."""

    def update(self, objects: Sequence[T], told: tuple[Sequence[T], Sequence[T], Sequence[T]] | None = None,
               ) -> tuple[list[T], list[T]] | None:
        """Bring the list to `objects`; the objects that left and came, or None if it was sorted afresh. `edits` then
        says where in the list they left and came. `told`: the producer's word (`model.cluster.Changes`) that
        `objects` are its tuple `told[0]` less the objects `told[1]` plus `told[2]`; taken, instead of a walk, when
        `told[0]` is the very last input and it agrees with what is held (`_told`)."""
        given = tuple(objects)  # the input is compared with the next one position by position: kept as it is now
        last, self._last = self._last, given
        if not self._ties:
            if told is not None and told[0] is last and last:
                hinted = self._told(told[1], told[2], len(given))
                if hinted is not None:
                    return self._apply(*hinted, given)
            walked = self._walk(last, given)
            if walked is not None:
                return self._apply(*walked, given)
        held, fresh = self._by_id, dict(zip(map(id, given), given, strict=True))
        self._by_id = fresh
        if self._ties or len(fresh) != len(given):
            self._reset(given)
            return None
        changed = set(held)  # the ids held or given but not both: one copy and one pass, then a split of the few
        changed.symmetric_difference_update(fresh)
        if not changed:
            self.edits = []
            return [], []
        if len(changed) > max(_FEW, len(objects) // 8):
            self._reset(objects)
            return None
        new = {i for i in changed if i in fresh}
        return self._apply([held[i] for i in changed - new], [fresh[i] for i in new], objects)

    def _told(self, left: Sequence[T], came: Sequence[T], size: int) -> tuple[list[T], list[T]] | None:
        """The objects that left and came as the producer says, if that agrees with what is held: each that left is
        held, each that came is not (nor given twice), and the counts add up to `size`; `_by_id` is brought up to
        date. None (nothing changed yet) when it does not agree, or past `_FEW` changes (an eighth of the objects,
        if more): the caller walks, and diffs or sorts as without a hint."""
        if len(left) + len(came) > max(_FEW, size // 8):
            return None
        held = self._by_id
        out = [o for o in left if id(o) in held]
        into = {id(o): o for o in came}
        if (len(out) != len(left) or len(into) != len(came) or not held.keys().isdisjoint(into)
                or len({id(o) for o in out}) != len(out) or len(held) - len(out) + len(into) != size):
            return None
        for o in out:
            del held[id(o)]
        held.update(into)
        return out, list(into.values())

    def _walk(self, last: tuple[T, ...], objects: tuple[T, ...]) -> tuple[list[T], list[T]] | None:
        """The objects that left and came, found by walking `last` and `objects` side by side, comparing identities in
        C and stepping in Python only where they part: an object replaced in place, a run of objects that left, one
        that came in between, objects that came or left at the end. A snapshot of a dict keeps its objects' order
        from one loop to the next (a changed object stays where it was, new ones come last), so this visits only
        the few changes rather than hashing every object. Any pairing of identical objects in order gives the true
        difference once an object found both unpaired in `last` and in `objects` is dropped from both (it moved);
        `_by_id` is brought up to date. None (nothing changed yet) when too many objects are unpaired or one is
        given twice: the caller then diffs everything."""
        n, m = len(objects), len(last)
        limit = min(max(_FEW, n // 8), _WALKED)
        out: list[T] = []
        into: list[T] = []
        ahead, behind = iter(objects), iter(last)
        shift = 0  # objects[j + shift] is paired with last[j]
        for _ in compress(repeat(None), map(is_not, ahead, behind)):  # the positions can be told from what is left
            if len(out) + len(into) > limit:
                return None
            i, j = n - length_hint(ahead) - 1, m - length_hint(behind) - 1  # objects[i] is not last[j]
            came, left = objects[i], last[j]
            if i + 1 < n and j + 1 < m and objects[i + 1] is last[j + 1]:  # replaced in place
                out.append(left)
                into.append(came)
                shift = i - j
                continue
            end = min(j + 1 + _LOOK, m)
            at = next(compress(count(j + 1), map(is_, last[j + 1:end], repeat(came))), -1)
            if at >= 0:  # last[j:at] left
                out.extend(last[j:at])
                next(islice(behind, at - j, at - j), None)  # next pair: objects[i + 1], last[at + 1]
                shift = i - at
            elif i + 1 < n and objects[i + 1] is left:  # `came` came in between
                into.append(came)
                next(ahead)  # next pair: objects[i + 2], last[j + 1]
                shift = i + 1 - j
            else:
                out.append(left)
                into.append(came)
                shift = i - j
        out.extend(last[n - shift:])  # the scan stopped where the shorter ran out: the rest of the other left or came
        into.extend(objects[m + shift:])
        if len(out) + len(into) > limit:
            return None
        gone = {id(o): o for o in out}
        new = {id(o): o for o in into}
        if len(gone) != len(out) or len(new) != len(into):
            return None  # one object twice: the full diff sorts afresh
        both = gone.keys() & new.keys()
        held = self._by_id
        for i in gone.keys() - both:
            del held[i]
        held.update(new)
        return [o for i, o in gone.items() if i not in both], [o for i, o in new.items() if i not in both]

    def _apply(self, left: list[T], came: list[T], objects: Sequence[T]) -> tuple[list[T], list[T]] | None:
        """Move the objects that left and came in the sorted list (or sort `objects` afresh on a tie)."""
        edits: list[tuple[int, T | None]] = []
        self.edits = edits
        if not left and not came:
            return left, came
        items, keys, key = self.items, self._keys, self._key
        for obj in left:
            at = bisect_left(keys, key(obj))
            while items[at] is not obj:
                at += 1
            del items[at], keys[at]
            edits.append((at, None))
        for obj in came:
            wanted = key(obj)
            at = bisect_left(keys, wanted)
            if at < len(keys) and keys[at] == wanted:
                self._reset(objects)  # two objects, one name: their input order decides, so sort
                return None
            items.insert(at, obj)
            keys.insert(at, wanted)
            edits.append((at, obj))
        return left, came

    def _reset(self, objects: Sequence[T]) -> None:
        self.edits = None
        self.items = sorted(objects, key=self._key)
        keys = self._keys = list(map(self._key, self.items))
        self._ties = any(map(eq, keys, islice(keys, 1, None)))


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    """The very same objects in the same order."""
    return a is b or (len(a) == len(b) and all(map(is_, a, b)))


def _drop(items: list[Pod], pod: Pod) -> None:
    at = bisect_left(items, _POD_ORDER(pod), key=_POD_ORDER)
    while items[at] is not pod:
        at += 1
    del items[at]


def _add(items: list[Pod], pod: Pod) -> None:
    items.insert(bisect_left(items, _POD_ORDER(pod), key=_POD_ORDER), pod)


class ArrangeCache:
    """The last arrangement's sorted nodes and pods and its pod index (see the module docstring)."""

    __slots__ = ("_affinity", "_by_node", "_claims", "_devices", "_generation", "_groups", "_nodes", "_pending",
                 "_placed", "_pods", "_rest", "last")

    def __init__(self) -> None:
        self._nodes: _Sorted[Node] = _Sorted(_NODE_ORDER)
        self._pods: _Sorted[Pod] = _Sorted(_POD_ORDER)
        self._pending: list[Pod] = []
        self._placed: list[Pod] = []
        self._by_node: dict[str, list[Pod]] = {}
        self._affinity = 0
        """Pods with inter-pod affinity terms."""
        self._claims = 0
        self._devices = 0
        """Pods whose volumes use claims."""
        self._groups: dict[str, int] = {}
        self._generation = 0
        self.last: Arranged | None = None
        """The last arrangement made."""
        self._rest: tuple[tuple[PodDisruptionBudget, ...], tuple[PodGroupSpec, ...], tuple[PodDisruptionBudget, ...],
                          tuple[PodGroupSpec, ...]] | None = None
        """The last input's budgets and pod groups, and the same sorted (`_sorted_rest`)."""

    def arrange(self, cluster: Cluster) -> Arranged:
        """The arrangement of `cluster`, from the last one; `cluster.changes` (the producer's hint), when it holds
        against the last input, spares the walk that finds what changed."""
        self._generation += 1
        told = cluster.changes
        node_change = self._nodes.update(cluster.nodes, None if told is None else (
            told.nodes_before, told.nodes_left, told.nodes_came))
        pod_change = self._pods.update(cluster.pods, None if told is None else (
            told.pods_before, told.pods_left, told.pods_came))
        last = self.last
        ordered = self._ordered(cluster, last.cluster if last is not None else None, node_change == ([], []),
                                pod_change == ([], []))
        moved: frozenset[str] | None
        if last is not None and pod_change == ([], []):  # the very same pods: the same index
            index, moved = last.pods, frozenset()
        elif pod_change is None:
            index = ordered.index()
            self._pending, self._placed = list(index.pending), list(index.placed)
            self._by_node = index.by_node
            self._groups = dict(index.group_members)
            self._affinity = sum(1 for p in ordered.pods if depends_on_placed(p))
            self._claims = sum(1 for p in ordered.pods if uses_claims(p))
            self._devices = sum(1 for p in ordered.pods if uses_devices(p))
            moved = None
        else:
            left, came = pod_change
            moved = frozenset(self._move(left, -1) + self._move(came, 1))
            index = PodIndex(pending=tuple(self._pending), placed=tuple(self._placed), by_node=self._by_node,
                             depends_on_placed=self._affinity > 0, uses_claims=self._claims > 0,
                             uses_devices=self._devices > 0, group_members=self._groups)
        replaced: dict[str, Node] | None = None
        edits = self._nodes.edits
        node_edits = tuple(edits) if edits is not None and self._generation > 1 else None
        if node_change is not None and self._generation > 1:
            replaced = {n.name: n for n in node_change[1]}
            if len(replaced) != len(node_change[1]) or sorted(replaced) != sorted(n.name for n in node_change[0]):
                replaced = None
        self.last = Arranged(cluster=ordered, pods=index, replaced=replaced, moved=moved, generation=self._generation,
                             node_edits=node_edits)
        return self.last

    def _ordered(self, cluster: Cluster, last: Cluster | None, same_nodes: bool, same_pods: bool) -> Cluster:
        """`_sorted_rest` of the held lists, sharing what is the same as in the `last` arrangement: its node and pod
        tuples when no object came or left, its sorted budgets and pod groups when the input's are the very same
        objects, and the whole cluster when all of that and the other kinds are."""
        if last is None:
            return _sorted_rest(cluster, tuple(self._nodes.items), tuple(self._pods.items))
        nodes = last.nodes if same_nodes else tuple(self._nodes.items)
        pods = last.pods if same_pods else tuple(self._pods.items)
        rest = self._rest
        if rest is None or not _same(rest[0], cluster.pdbs) or not _same(rest[1], cluster.pod_groups):
            rest = self._rest = (cluster.pdbs, cluster.pod_groups, _by_key(cluster.pdbs), _by_key(cluster.pod_groups))
        if (nodes is last.nodes and pods is last.pods and rest[2] is last.pdbs and rest[3] is last.pod_groups
                and cluster.other_kinds == last.other_kinds and cluster.storage is last.storage
                and cluster.dra is last.dra):
            return last
        return replace(cluster, nodes=nodes, pods=pods, pdbs=rest[2], pod_groups=rest[3], changes=None)

    def _move(self, pods: list[Pod], sign: int) -> list[str]:
        """Take out (`sign` −1) or put in (+1) these pods; the names of the nodes they are bound to."""
        nodes: list[str] = []
        for pod in pods:
            if depends_on_placed(pod):
                self._affinity += sign
            if uses_claims(pod):
                self._claims += sign
            if uses_devices(pod):
                self._devices += sign
            if (group := group_member(pod)) is not None:
                left = self._groups.get(group, 0) + sign
                if left:
                    self._groups[group] = left
                else:
                    del self._groups[group]
            slot = index_slot(pod)
            if slot == PENDING:
                (_drop if sign < 0 else _add)(self._pending, pod)
            elif slot == PLACED:
                name = pod.node_name or ""
                nodes.append(name)
                (_drop if sign < 0 else _add)(self._placed, pod)
                held = self._by_node.get(name)
                if sign > 0:
                    if held is None:
                        held = self._by_node[name] = []
                    _add(held, pod)
                else:
                    assert held is not None
                    _drop(held, pod)
                    if not held:
                        del self._by_node[name]
        return nodes
