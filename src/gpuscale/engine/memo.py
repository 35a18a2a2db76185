"""What one decision derives from each node, kept for the next decision while the node object is the same.

Snapshots are built from frozen model values, and both the watch cache and the twin hand the *same* object back while
an object is unchanged. So a fact derived from a node (its pool, lifecycle phase, usable capacity, node-group key,
utilization amounts) stays valid for as long as the snapshot holds that very object (`is`), and a decision need only
derive facts for the nodes that changed since the previous one. The arrangement says which (`Arranged.replaced`) and,
when nodes come or go, where they left and came (`Arranged.node_edits`): the facts and the existing nodes' table rows
follow by those edits rather than by a pass over every node. A memo never changes a result: `decide` with and without
one gives the same plan (tests/engine/test_memo.py, test_memo_churn.py, test_memo_edits.py), it only skips
recomputation.

The memo is a cache owned by the caller (the control loop keeps one across ticks); it holds the node objects it keyed
facts on, so an identity test can never match a recycled object, and forgets nodes that leave the snapshot.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count
from operator import is_, is_not
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuscale.engine.arrange import ArrangeMemo
from gpuscale.engine.limits import Totals, totals_of
from gpuscale.engine.nodes import NodePhase, as_it_counts, as_it_will_be, degraded_gpus, gpu_phase, phase
from gpuscale.engine.scaledown import ScaleDownMemo, allocatable_amounts
from gpuscale.engine.scaleup import ScaleUpMemo, Verdicts
from gpuscale.engine.table import GroupKey, RowMemo, RowMoves, node_group_key, node_group_key_again
from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources


@quick_init
@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One node as a decision sees it, derived once per node object."""

    node: Node
    provider_pool: str | None
    """The provider's answer for this node, part of the key: a different answer derives the facts anew."""
    pool_name: str | None
    pool: NodePool | None
    phase: NodePhase
    row_node: Node
    """The node as pods will see it once usable (start-up taints dropped for an upcoming node)."""
    capacity: Resources
    """Usable capacity: allocatable, raised to the pool template's while the node is still starting."""
    gpu_units: int
    """GPUs and slices `capacity` offers."""
    group_key: GroupKey
    """`node_group_key(row_node)`, the one object every node with an equal key shares (within a memo)."""
    amounts: tuple[int, int, int, int]
    """cpu, memory, whole GPUs and GPU milli of the node's allocatable (scale-down's utilization)."""
    degraded: bool = False
    """A usable node advertising fewer GPUs than its pool's template (`engine.nodes.degraded_gpus`)."""
    gpus: NodePhase | None = field(default=None, compare=False)
    """`engine.nodes.gpu_phase` of the node when Ready (None: not worked out): it depends on the pool and the
    allocatable only, so it is kept while they are; the phase also depends on the taints."""


def derive(node: Node, provider_pool: str | None, pools: Mapping[str, NodePool],
           keys: dict[GroupKey, GroupKey] | None = None,
           capacities: dict[Resources, Resources] | None = None, last: NodeFacts | None = None) -> NodeFacts:
    """The facts of one node; `keys` (canonical group keys) makes equal keys one object, `capacities` equal usable
    capacities (nodes of a pool and shape then share one, which the table's by-identity paths count once). `last`:
    the facts of the node this one replaced (same name), derived with the same `keys` and `capacities`: what
    depends only on the allocatable (the very same object), the labels (the same mapping) and the pool is taken
    from there (the usual change is a taint set or cleared)."""
    name = provider_pool or node.pool  # engine.nodes.pool_of: the provider's answer first
    pool = pools.get(name) if name else None
    if last is not None and (last.pool is not pool or last.node.allocatable is not node.allocatable):
        last = None
    gpus = last.gpus if last is not None else None
    if gpus is None and node.ready:
        gpus = gpu_phase(node, pool)
    current = phase(node, pool, gpus)
    usable = current is NodePhase.USABLE
    row_node = as_it_counts(node, pool) if usable else as_it_will_be(node, pool)
    if last is not None and usable == (last.phase is NodePhase.USABLE):
        capacity, gpu_units = last.capacity, last.gpu_units
    else:
        capacity = node.allocatable if usable or pool is None else node.allocatable.max(pool.allocatable)
        if capacities is not None:
            capacity = capacities.setdefault(capacity, capacity)
        gpu_units = capacity.gpu_count()
    key = (node_group_key(row_node) if last is None
           else node_group_key_again(row_node, last.row_node, last.group_key))
    if keys is not None and (last is None or key is not last.group_key):  # a kept key is canonical already
        key = keys.setdefault(key, key)
    if last is not None and last.phase is current:
        degraded = last.degraded
    else:
        degraded = usable and pool is not None and bool(degraded_gpus(node, pool))
    return NodeFacts(node=node, provider_pool=provider_pool, pool_name=name, pool=pool, phase=current,
                     row_node=row_node, capacity=capacity, gpu_units=gpu_units, group_key=key,
                     amounts=last.amounts if last is not None else allocatable_amounts(node), degraded=degraded,
                     gpus=gpus)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRows:
    """The rows of the what-if table that existing nodes make (`engine.decide.build_world`), and what they were made
    from: while the facts (the same dict: the memo hands back the last one when no node changed) and the expired nodes
    are the same, so are these; when only a few nodes' facts changed, came or left, only their rows are redone, put in
    or taken out (`_patched`)."""

    facts: Mapping[str, NodeFacts]
    expired: frozenset[str]
    position: dict[str, int]
    """Row of each node that has one."""
    names: list[str]
    """The node of each row."""
    nodes: list[Node]
    capacity: list[Resources]
    row_pool: list[str | None]
    upcoming: list[bool]
    group_keys: list[GroupKey]
    gpus: list[int]
    upcoming_rows: npt.NDArray[np.bool_]
    """`upcoming` as an array (the world's rows start with these: made once per rows, not per decision)."""
    gpu_rows: npt.NDArray[np.int64]
    """`gpus` as an array."""
    pool_keys: list[str | None]
    """The name of each row's pool (None: none), which `counted` counts."""
    counted: list[tuple[NodePool | None, int]]
    """Node counts per pool, pools in first-seen order (the order `totals_of` adds them in)."""


def _has_row(fact: NodeFacts, expired: frozenset[str]) -> bool:
    return fact.phase is not NodePhase.DELETING and fact.node.name not in expired


def _pool_key(fact: NodeFacts) -> str | None:
    return None if fact.pool is None else fact.pool.name


def _positions(names: list[str]) -> dict[str, int]:
    return dict(zip(names, range(len(names)), strict=True))


def _counted(pool_keys: list[str | None], pools: Mapping[str, NodePool]) -> list[tuple[NodePool | None, int]]:
    return [(None if name is None else pools[name], n) for name, n in Counter(pool_keys).items()]


def node_rows_of(nodes: Sequence[Node], pools: Mapping[str, NodePool], facts: Mapping[str, NodeFacts],
                 expired: frozenset[str]) -> NodeRows:
    """The rows of `nodes` (in order) but those being deleted or `expired`, from their facts."""
    # facts hold the nodes in order, once each unless two share a name
    every = facts.values() if len(facts) == len(nodes) else [facts[n.name] for n in nodes]
    # `_has_row`, inlined, and enum members looked up once (slow to look up): this pass runs when nodes come or go
    deleting, usable = NodePhase.DELETING, NodePhase.USABLE
    kept = [f for f in every if f.phase is not deleting and f.node.name not in expired]
    names = [f.node.name for f in kept]
    pool_keys = [None if f.pool is None else f.pool.name for f in kept]
    upcoming, gpus = [f.phase is not usable for f in kept], [f.gpu_units for f in kept]
    return NodeRows(facts=facts, expired=expired, position=_positions(names), names=names,
                    nodes=[f.row_node for f in kept], capacity=[f.capacity for f in kept],
                    row_pool=[f.pool_name for f in kept], upcoming=upcoming, group_keys=[f.group_key for f in kept],
                    gpus=gpus, upcoming_rows=np.array(upcoming, dtype=bool), gpu_rows=np.array(gpus, dtype=np.int64),
                    pool_keys=pool_keys, counted=_counted(pool_keys, pools))


def _patched(last: NodeRows, pools: Mapping[str, NodePool], facts: Mapping[str, NodeFacts], changed: frozenset[str],
             gone: frozenset[str]) -> tuple[NodeRows, list[int] | None, RowMoves | None]:
    """`last` with the rows of the nodes `changed` (derived again, or new) redone from `facts` and those of the nodes
    `gone` taken out; every other node's facts are those `last` was made from. A node that gains its row is put in by
    name: the facts hold the nodes of an arrangement, in name order. `last`'s lists and arrays are patched in place
    (no copy of every row per decision): the memo holds them alone (`build_world` copies what it hands on) and drops
    `last` for the result. Also: the rows redone in place when no row was put in or taken out (every other row's
    node is the very same object as in `last`), else None; and then where rows were taken out and put in, with the
    rows redone in place (`engine.table.RowMoves`; None: no row was, or two rows share a name)."""
    rows = NodeRows(facts=facts, expired=last.expired, position=last.position, names=last.names, nodes=last.nodes,
                    capacity=last.capacity, row_pool=last.row_pool, upcoming=last.upcoming,
                    group_keys=last.group_keys, gpus=last.gpus, upcoming_rows=last.upcoming_rows,
                    gpu_rows=last.gpu_rows, pool_keys=last.pool_keys, counted=last.counted)
    columns: tuple[list[Any], ...] = (rows.names, rows.nodes, rows.capacity, rows.row_pool, rows.upcoming,
                                      rows.group_keys, rows.gpus, rows.pool_keys)
    out = [i for name in gone if (i := last.position.get(name)) is not None]
    into: list[NodeFacts] = []
    redone: list[int] = []
    for name in changed:
        after = facts[name]
        i = last.position.get(name)
        has = _has_row(after, last.expired)
        if i is not None and has and last.pool_keys[i] == _pool_key(after):  # the same row, redone in place
            rows.nodes[i], rows.capacity[i], rows.row_pool[i] = after.row_node, after.capacity, after.pool_name
            rows.upcoming[i] = rows.upcoming_rows[i] = after.phase is not NodePhase.USABLE
            rows.group_keys[i] = after.group_key
            rows.gpus[i] = rows.gpu_rows[i] = after.gpu_units
            redone.append(i)
            continue
        if i is not None:
            out.append(i)
        if has:
            into.append(after)
    if not out and not into:
        return rows, redone, None
    redone_names = [rows.names[i] for i in redone]
    for i in sorted(out, reverse=True):
        for column in columns:
            del column[i]
    for fact in into:
        at = bisect_left(rows.names, fact.node.name)
        for column, value in zip(columns, (fact.node.name, fact.row_node, fact.capacity, fact.pool_name,
                                           fact.phase is not NodePhase.USABLE, fact.group_key, fact.gpu_units,
                                           _pool_key(fact)), strict=True):
            column.insert(at, value)
    names = rows.names
    position = _positions(names)
    moves: RowMoves | None = None
    if len(position) == len(names):
        moves = (sorted(out), sorted(position[f.node.name] for f in into), [position[n] for n in redone_names])
    return replace(rows, position=position, counted=_counted(rows.pool_keys, pools),
                   upcoming_rows=np.array(rows.upcoming, dtype=bool),
                   gpu_rows=np.array(rows.gpus, dtype=np.int64)), None, moves


def _world_moves(moves: RowMoves, known: int, templates: list[Node], last: list[Node]) -> RowMoves:
    """`moves` of the node rows (`known` of them now) carried to a world, whose rows are these then one per
    template: templates of the same names, row by row, keep their rows (named where not the very same object), else
    every last template's row is taken out and every template's put in."""
    out, into, redone = moves
    before = known - len(into) + len(out)
    if len(templates) == len(last) and all(t.name == s.name for t, s in zip(templates, last, strict=True)):
        return out, into, [*redone, *compress(count(known), map(is_not, templates, last))]
    return [*out, *range(before, before + len(last))], [*into, *range(known, known + len(templates))], redone


def request_names(pods: Sequence[Pod]) -> set[str]:
    """Every resource name the pods request (the pending pods' names are columns of the what-if table)."""
    return {r for p in pods for r in p.requests.names()}


VERDICTS_KEPT = 10_000
_WORLDS = count()
"""Numbers of the worlds (`DecideMemo.world_edits`), unique across memos."""
STARTING = (NodePhase.REGISTERED, NodePhase.READY)
"""The phases in which a node can time out (`engine.decide.find_timeouts`)."""


class DecideMemo:
    """Per-node facts and rows carried from one decision to the next (see the module docstring)."""

    __slots__ = ("_capacities", "_facts", "_facts_change", "_handed", "_held", "_keys", "_node_pools", "_node_rows",
                 "_order", "_pending_names", "_pools", "_rows_edit", "_rows_generation", "_rows_moves", "_rows_told",
                 "_seen", "_starting", "_templates", "_totals", "_unique", "_upcoming", "_verdicts", "_world",
                 "_world_moves", "_world_templates", "arrange", "rows", "scale_down", "scale_up")

    def __init__(self) -> None:
        self.arrange = ArrangeMemo()
        """The snapshot in name order and its pod index (`engine.arrange`)."""
        self._held: frozenset[str] = frozenset()
        """The nodes the last world counted with their real allocatable though starting (`note_held`)."""
        self._facts: dict[str, NodeFacts] = {}
        self._node_pools: dict[str, str] = {}
        self._handed: Mapping[str, str] | None = None
        """The provider answers last handed in that equal `_node_pools` (held: compared by identity). A mapping handed
        in is never changed afterwards (the contract of `loop.ports.Provider.node_pools`: a provider returns another
        mapping, it never edits one it returned; the twin's cloud hands out the very same one until a node registers
        or goes), so the very same object again needs no compare of its ~900 entries. A caller handing in a fresh
        mapping each time (the kube providers) is compared as before."""
        self._seen = -1
        """The arrangement `_facts` was made for (its `generation`; -1: unknown)."""
        self._facts_change: tuple[int, frozenset[str], frozenset[str]] | None = None
        """After `facts` for arrangement `generation`: the facts are the last call's but for the nodes of the first
        set (derived again or new) and without those of the second (None: any may differ). `node_rows` patches its
        rows by it."""
        self._pools: dict[str, NodePool] = {}
        self._keys: dict[GroupKey, GroupKey] = {}
        self._capacities: dict[Resources, Resources] = {}
        """Canonical usable capacities (`derive`), dropped with the canonical keys."""
        self._templates: dict[str, tuple[NodePool, GroupKey]] = {}
        self._verdicts: Verdicts = {}
        self.rows = RowMemo()
        """The what-if table's rows (`NodeTable.build`)."""
        self.scale_down = ScaleDownMemo()
        """Scale-down's node set, unneeded clocks and candidate verdicts (`ScaleDownMemo`)."""
        self.scale_up = ScaleUpMemo()
        """Scale-up's pool verdicts per unit, share normalizer and reasons for units no pool takes (`ScaleUpMemo`)."""
        self._node_rows: NodeRows | None = None
        self._rows_generation = -1
        """The arrangement `_node_rows` were last handed out for (-1: unknown)."""
        self._rows_edit: list[int] | None = None
        """The rows of the last `node_rows` call whose node may not be the very object of the call before (None:
        rows came, went or were made afresh, or the call before was not told to a world)."""
        self._rows_moves: RowMoves | None = None
        """Where the last `node_rows` call took rows out and put them in (`_patched`; None: not known or none)."""
        self._world_moves: RowMoves | None = None
        """The last world's `RowMoves` (`world_moves`)."""
        self._rows_told = True
        """`_rows_edit` was handed to a world (`world_edits`), or there was none yet."""
        self._world = -1
        """The number of the last world (`world_edits`; -1: none yet)."""
        self._world_templates: list[Node] = []
        """The last world's upcoming template nodes."""
        self._unique = False
        """No two nodes of the last full pass shared a name (else `_starting` is not kept)."""
        self._order: dict[str, int] | None = None
        """Position of each name in `_facts`, made when first needed (None: not made since the last full pass)."""
        self._starting: dict[str, int] = {}
        """The nodes of `_facts` still starting (`STARTING`), with their positions there."""
        self._upcoming: dict[str, tuple[NodePool, Node]] = {}
        """The last decision's upcoming template nodes by request id, with the pool each was made from."""
        self._totals: tuple[list[tuple[NodePool | None, int]], list[NodePool], Totals] | None = None
        """The last `totals` call: the rows' pool counts (held), the upcoming nodes' pools and their totals."""
        self._pending_names: tuple[tuple[Pod, ...], set[str]] | None = None
        """The last pending pods and the resource names they request."""

    def facts(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
              arranged: tuple[int, Mapping[str, Node] | None] | None = None) -> dict[str, NodeFacts]:
        """Facts of every node, by name; derived again only for nodes (or pools) that changed. `arranged`: the
        generation of the arrangement `nodes` come from and the nodes replaced since the one before
        (`engine.arrange.Arranged`): then, with the same pools and provider answers, only those are looked at, and
        with none replaced the facts are the last ones — the same dict, which callers only read. When nodes came or
        went (`replaced` None) and `nodes` are those of the memo's own last arrangement, its node edits say which
        facts to take out and which to derive and put in (`_edited`)."""
        generation, replaced = arranged if arranged is not None else (-1, None)
        seen, self._seen = self._seen, generation
        self._facts_change = None
        if pools != self._pools:  # pools compare by value: a reloaded but equal config keeps the memo
            self._facts, self._pools, self._verdicts = {}, dict(pools), {}
        elif (replaced is not None and generation >= 0 and seen == generation - 1
              and (node_pools is self._handed or node_pools == self._node_pools)):
            self._handed = node_pools
            self._facts_change = (generation, frozenset(replaced), frozenset())
            if not replaced:
                return self._facts
            patched = dict(self._facts)  # the same names in the same order, a few derived again
            starting = self._starting
            for name, node in replaced.items():
                patched[name] = fact = derive(node, node_pools.get(name), pools, self._keys, self._capacities,
                                              patched.get(name))
                if not self._unique:
                    continue
                if fact.phase in STARTING:
                    if self._order is None:  # the same names in the same order as the last full pass
                        self._order = {n: i for i, n in enumerate(patched)}
                    starting[name] = self._order[name]
                else:
                    starting.pop(name, None)
            self._facts = patched
            self._trim(patched)
            return patched
        elif replaced is None and generation >= 0 and seen == generation - 1 and self._unique:
            edited = self._edited(nodes, node_pools, pools, generation)
            if edited is not None:
                return edited
        self._node_pools, self._handed = dict(node_pools), node_pools
        old = self._facts
        keys = self._keys
        fresh: dict[str, NodeFacts] = {}
        derived = False
        for node in nodes:
            provider_pool = node_pools.get(node.name)
            known = old.get(node.name)
            if known is None or known.node is not node or known.provider_pool != provider_pool:
                known = derive(node, provider_pool, pools, keys, self._capacities, known)
                derived = True
            fresh[node.name] = known
        self._facts = fresh
        self._unique, self._order = len(fresh) == len(nodes), None
        self._starting = {name: i for i, (name, fact) in enumerate(fresh.items())
                          if fact.phase in STARTING} if self._unique else {}
        if derived or len(fresh) != len(old):
            self._trim(fresh)
        return fresh

    def _trim(self, facts: Mapping[str, NodeFacts]) -> None:
        """Stale canonical keys and capacities only cost memory: dropped now and then (those of `facts` kept)."""
        bound = 2 * len(facts) + 64
        if len(self._keys) > bound:
            self._keys = {f.group_key: f.group_key for f in facts.values()}
        if len(self._capacities) > bound:
            self._capacities = {f.capacity: f.capacity for f in facts.values()}

    def _edited(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
                generation: int) -> dict[str, NodeFacts] | None:
        """The last facts with the nodes that left since the last arrangement taken out and those that came derived
        and put in, where the arrangement's `node_edits` say (`nodes` must be its nodes); None (nothing changed yet)
        when they are not known or the provider's answer changed for a node that stayed."""
        last = self.arrange.last
        if last is None or last.generation != generation or last.cluster.nodes is not nodes \
                or last.node_edits is None:
            return None
        names, every = list(self._facts), list(self._facts.values())
        answers = dict(self._node_pools)  # the provider's answers expected: the last ones, but for the nodes edited
        came: set[str] = set()
        left: set[str] = set()
        for at, node in last.node_edits:
            if node is None:
                name = names.pop(at)
                del every[at]
                left.add(name)
                came.discard(name)
            else:
                name = node.name
                names.insert(at, name)
                every.insert(at, derive(node, node_pools.get(name), pools, self._keys, self._capacities))
                came.add(name)
            if name in node_pools:
                answers[name] = node_pools[name]
            else:
                answers.pop(name, None)
        if answers != node_pools or len(names) != len(nodes):
            return None
        facts = dict(zip(names, every, strict=True))
        if len(facts) != len(names):
            return None
        self._node_pools, self._handed, self._facts, self._order = answers, node_pools, facts, None
        starting = {name for name in self._starting if name not in left}
        starting.update(name for name in came if facts[name].phase in STARTING)
        self._starting = {name: bisect_left(names, name) for name in starting}  # names in order, as arranged
        self._facts_change = (generation, frozenset(came), frozenset(left - came))
        self._trim(facts)
        return facts

    @property
    def facts_change(self) -> tuple[int, frozenset[str], frozenset[str]] | None:
        """What the last `facts` call changed: its arrangement generation, the names whose facts are new objects
        (derived again or come) and those gone, since the call before (of the generation before); None when not
        known (the facts were looked at in full)."""
        return self._facts_change

    def starting(self, facts: Mapping[str, NodeFacts]) -> list[NodeFacts] | None:
        """The facts of the nodes still starting (`STARTING`), in the order of `facts`, when `facts` is the last
        `facts` call's dict with no two nodes sharing a name; else None (the caller looks at every node)."""
        if facts is not self._facts or not self._unique:
            return None
        return [facts[name] for name in sorted(self._starting, key=self._starting.__getitem__)]

    def node_rows(self, nodes: Sequence[Node], pools: Mapping[str, NodePool], facts: Mapping[str, NodeFacts],
                  expired: frozenset[str], generation: int) -> NodeRows:
        """`node_rows_of`, from the last rows: the same while the facts are the very same dict, patched for the nodes
        the last `facts` call derived again (arrangement `generation`), else made afresh."""
        last, change = self._node_rows, self._facts_change
        made_for, self._rows_generation = self._rows_generation, generation
        rows: NodeRows | None = None
        told, self._rows_told, self._rows_edit, self._rows_moves = self._rows_told, False, None, None
        if last is not None and last.expired == expired:
            if last.facts is facts:
                rows, self._rows_edit = last, [] if told else None
            elif change is not None and change[0] == generation >= 0 and made_for == generation - 1:
                rows, edit, moves = _patched(last, pools, facts, change[1], change[2])
                self._rows_edit = edit if told else None
                self._rows_moves = moves if told else None
        self._node_rows = rows = rows or node_rows_of(nodes, pools, facts, expired)
        return rows

    def world_edits(self, templates: list[Node]) -> tuple[int, int, list[int] | None]:
        """For the table `engine.decide.build_world` makes next, right after `node_rows` (its rows, then one per
        `templates`): the number of the last world, this world's (unique across memos), and the rows whose node may
        not be the very object the last world's row held (None: not known, rows came or went). Scale-up's normalizer
        then looks at those rows only (`engine.scaleup.ScaleUpMemo`)."""
        edit, last, rows = None if self._rows_told else self._rows_edit, self._world_templates, self._node_rows
        moves = None if self._rows_told else self._rows_moves
        self._rows_told, self._world_moves = True, None
        before, self._world, self._world_templates = self._world, next(_WORLDS), templates
        if edit is None and moves is not None and rows is not None:
            self._world_moves = _world_moves(moves, len(rows.nodes), templates, last)
        if edit is None or rows is None or len(templates) != len(last):
            return before, self._world, None
        known = len(rows.nodes)
        moved = compress(count(known), map(is_not, templates, last))  # the same number of templates
        return before, self._world, [*edit, *moved]

    def note_held(self, held: frozenset[str]) -> bool:
        """Whether this world or the last one counts a starting node with its real allocatable (a Ready node that
        lost its GPUs under its pods, `engine.decide.build_world`): its row's capacity then differs from its facts',
        so the table compares every row rather than trust the edits. Rare: only broken nodes are held."""
        before, self._held = self._held, held
        return bool(before or held)

    @property
    def world_moves(self) -> RowMoves | None:
        """Where rows came and went since the last world, for the one the last `world_edits` call numbered, when
        it said None for its rows (rows came or went) and the node rows were patched (`_patched`); else None."""
        return self._world_moves

    def verdicts(self) -> Verdicts:
        """Pool verdicts per pod shape (`engine.scaleup.verdict_of`) for the pools of the last `facts` call: pods that
        wait for no pool at all are judged once, not every loop. Bounded: cleared past `VERDICTS_KEPT` entries."""
        if len(self._verdicts) > VERDICTS_KEPT:
            self._verdicts = {}
        return self._verdicts

    def template_key(self, pool: NodePool, template: Node) -> GroupKey:
        """`node_group_key` of one of `pool`'s template nodes: the same object for every template of the pool while
        the pool is (templates differ only in name and hostname label, which the key leaves out)."""
        known = self._templates.get(pool.name)
        if known is None or known[0] is not pool:
            known = self._templates[pool.name] = (pool, node_group_key(template))
        return known[1]


    def templates(self, upcoming: Sequence[tuple[NodePool, str]]) -> list[Node]:
        """`pool.template(f"upcoming-{request_id}")` for each upcoming node: the last decision's node object again
        while its request id and pool (the very same object) are (a template depends on nothing else)."""
        last, kept = self._upcoming, {}
        for pool, request_id in upcoming:
            known = last.get(request_id)
            if known is None or known[0] is not pool:
                known = (pool, pool.template(f"upcoming-{request_id}"))
            kept[request_id] = known
        self._upcoming = kept
        return [node for _, node in kept.values()] if len(kept) == len(upcoming) else [
            kept[request_id][1] for _, request_id in upcoming]

    def totals(self, counted: list[tuple[NodePool | None, int]], upcoming: Sequence[NodePool]) -> Totals:
        """`totals_of(counted + one node per upcoming pool)`: the last result while `counted` is the very same list
        (`NodeRows.counted`, shared while the rows' pools are) and the upcoming nodes' pools the very same ones."""
        last = self._totals
        if (last is not None and last[0] is counted and len(last[1]) == len(upcoming)
                and all(map(is_, last[1], upcoming))):
            return last[2]
        totals = totals_of([*counted, *((pool, 1) for pool in upcoming)])
        self._totals = (counted, list(upcoming), totals)
        return totals

    def pending_names(self, pending: tuple[Pod, ...]) -> set[str]:
        """`request_names(pending)`: the last set while the pending pods are the same (the very same objects, in the
        same order: compared in C). Callers only read it."""
        last = self._pending_names
        if last is not None and last[0] == pending:
            return last[1]
        names = request_names(pending)
        self._pending_names = (pending, names)
        return names


def facts_of(nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
             memo: DecideMemo | None, arranged: tuple[int, Mapping[str, Node] | None] | None = None,
             ) -> dict[str, NodeFacts]:
    """Facts of every node by name: from the memo when there is one, else derived afresh."""
    if memo is not None:
        return memo.facts(nodes, node_pools, pools, arranged)
    return {n.name: derive(n, node_pools.get(n.name), pools) for n in nodes}
