"""Where a decision's what-if comes from: a store, asked for each step of `engine.decide`.

Two stores stand behind one interface (`Store`), as Cluster Autoscaler keeps a basic and a delta snapshot store:

- `ReferenceStore` computes everything from the snapshot, every decision. Cost per decision: a sort of the nodes and
  pods (O(n log n)), one pass per node for its facts, one pass over the bound pods for the rows
  (O(pods + nodes × resources)), and every stage's judgements afresh. It is the definition: simple and slow.
- `IncrementalStore` carries what one decision derived to the next (the control loop and the twin keep one across
  ticks). Snapshots are built from frozen model values, and both the watch cache and the twin hand back the *same*
  object while an object is unchanged, so anything derived from an object (a node's pool, phase, usable capacity,
  node-group key; a row's free capacity; a stage's verdicts) stays valid for as long as the snapshot holds that very
  object (`is`). Cost per decision: O(changed objects) plus a few vectorised passes over the rows. It holds the
  objects it keyed on, so an identity test never matches a recycled object, and forgets those that leave.

Both give the same what-if and the same plan for any sequence of snapshots (tests/engine/test_store_property.py):
a store only saves work. Which rows, facts or pods changed since the last decision (the change hints) is the
incremental store's private business: it tells the row cache (`rows.RowCache`) and the what-if answers
`WhatIf.rows_changed_since` / `facts_changed_since` for the stage caches; no decision function sees a hint.
Stage caches (`engine.scaleup.ScaleUpCache`, `engine.scaledown.ScaleDownCache`) are kept by the store per kind and
handed out by the what-if (`WhatIf.kept`): the reference store hands out fresh ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from itertools import compress, count
from operator import is_, is_not

from gpuscale.engine.arrange import ArrangeCache, Arranged, arrange
from gpuscale.engine.limits import Totals, totals_of
from gpuscale.engine.whatif.facts import (
    STARTING,
    NodeFacts,
    NodeRows,
    _patched,
    _world_moves,
    derive,
    is_unusual,
    node_rows_of,
    request_names,
)
from gpuscale.engine.whatif.model import Changes, GroupKey, RowMoves, WhatIf, node_group_key
from gpuscale.engine.whatif.rows import RowCache
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.model.volumes import Storage

_WORLDS = count()
"""Numbers of the worlds (`IncrementalStore.world_edits`), unique across stores."""


class Store(ABC):
    """What a decision asks of its store, step by step (`engine.decide`); see the module docstring for the costs."""

    @abstractmethod
    def arrange(self, cluster: Cluster) -> Arranged:
        """The snapshot in name order and its pod index (`engine.arrange`)."""

    @abstractmethod
    def facts(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
              arranged: Arranged, awaiting: frozenset[str] = frozenset()) -> dict[str, NodeFacts]:
        """Facts of every node of the arrangement, by name (callers only read the mapping). `awaiting`: the nodes
        whose DRA ResourceSlices are not published yet (`engine.nodes.awaiting_slices`)."""

    @abstractmethod
    def starting(self, facts: Mapping[str, NodeFacts], nodes: Sequence[Node]) -> list[NodeFacts]:
        """The facts of the nodes still starting (`STARTING`), in node order."""

    @abstractmethod
    def unusual(self, facts: Mapping[str, NodeFacts], nodes: Sequence[Node]) -> list[NodeFacts]:
        """The facts of usable nodes that are cordoned or degraded (`facts.is_unusual`: rare), in node order."""

    @abstractmethod
    def node_rows(self, nodes: Sequence[Node], pools: Mapping[str, NodePool], facts: Mapping[str, NodeFacts],
                  expired: frozenset[str], generation: int) -> NodeRows:
        """`node_rows_of(nodes, pools, facts, expired)`; its lists and arrays are only read."""

    @abstractmethod
    def templates(self, upcoming: Sequence[tuple[NodePool, str]]) -> list[Node]:
        """`pool.template(f"upcoming-{request_id}")` for each upcoming node."""

    @abstractmethod
    def template_key(self, pool: NodePool, template: Node) -> GroupKey:
        """`node_group_key(template)`, `template` being one of `pool`'s template nodes."""

    @abstractmethod
    def totals(self, counted: list[tuple[NodePool | None, int]], upcoming: Sequence[NodePool]) -> Totals:
        """`totals_of(counted + one node per upcoming pool)`."""

    @abstractmethod
    def pending_names(self, pending: tuple[Pod, ...]) -> set[str]:
        """`request_names(pending)`; only read."""

    @abstractmethod
    def table(self, nodes: list[Node], capacity: list[Resources], pods_placed: Sequence[Pod],
              pending_names: set[str], *, with_topology: bool, placement: str | None, workload: Sequence[Pod],
              group_keys: list[GroupKey], by_node: Mapping[str, Sequence[Pod]], names: list[str],
              arranged: Arranged, templates: list[Node], held: frozenset[str],
              storage: Storage | None = None) -> WhatIf:
        """The what-if of these rows (`rows.RowCache.table`, which see). `templates`: the upcoming rows' template
        nodes (the last rows); `held`: the nodes whose row capacity is not their facts' (a Ready node that lost its
        GPUs under its pods, a node in an operator's set-up cordon); `storage`: the snapshot's storage objects when
        some pod uses claims (the table then keeps the volume state)."""


class ReferenceStore(Store):
    """Everything from the snapshot, every decision (the definition; see the module docstring)."""

    def arrange(self, cluster: Cluster) -> Arranged:
        return arrange(cluster)

    def facts(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
              arranged: Arranged, awaiting: frozenset[str] = frozenset()) -> dict[str, NodeFacts]:
        return {n.name: derive(n, node_pools.get(n.name), pools, slices=n.name not in awaiting) for n in nodes}

    def starting(self, facts: Mapping[str, NodeFacts], nodes: Sequence[Node]) -> list[NodeFacts]:
        every = facts.values() if len(facts) == len(nodes) else [facts[n.name] for n in nodes]
        return [f for f in every if f.phase in STARTING]

    def unusual(self, facts: Mapping[str, NodeFacts], nodes: Sequence[Node]) -> list[NodeFacts]:
        every = facts.values() if len(facts) == len(nodes) else [facts[n.name] for n in nodes]
        return [f for f in every if is_unusual(f)]

    def node_rows(self, nodes: Sequence[Node], pools: Mapping[str, NodePool], facts: Mapping[str, NodeFacts],
                  expired: frozenset[str], generation: int) -> NodeRows:
        return node_rows_of(nodes, pools, facts, expired)

    def templates(self, upcoming: Sequence[tuple[NodePool, str]]) -> list[Node]:
        return [pool.template(f"upcoming-{request_id}") for pool, request_id in upcoming]

    def template_key(self, pool: NodePool, template: Node) -> GroupKey:
        return node_group_key(template)

    def totals(self, counted: list[tuple[NodePool | None, int]], upcoming: Sequence[NodePool]) -> Totals:
        return totals_of([*counted, *((pool, 1) for pool in upcoming)])

    def pending_names(self, pending: tuple[Pod, ...]) -> set[str]:
        return request_names(pending)

    def table(self, nodes: list[Node], capacity: list[Resources], pods_placed: Sequence[Pod],
              pending_names: set[str], *, with_topology: bool, placement: str | None, workload: Sequence[Pod],
              group_keys: list[GroupKey], by_node: Mapping[str, Sequence[Pod]], names: list[str],
              arranged: Arranged, templates: list[Node], held: frozenset[str],
              storage: Storage | None = None) -> WhatIf:
        return RowCache().table(nodes, capacity, pods_placed, pending_names, with_topology=with_topology,
                                placement=placement, workload=workload, group_keys=group_keys, by_node=by_node,
                                names=names, storage=storage)


class IncrementalStore(Store):
    """What one decision derived, carried to the next while the objects it came from are the very same (see the
    module docstring)."""

    __slots__ = (
        "_arrange",
        "_awaiting",
        "_capacities",
        "_facts",
        "_facts_change",
        "_handed",
        "_held",
        "_kept",
        "_keys",
        "_node_pools",
        "_node_rows",
        "_order",
        "_pending_names",
        "_pools",
        "_rows",
        "_rows_edit",
        "_rows_generation",
        "_rows_moves",
        "_rows_told",
        "_seen",
        "_starting",
        "_templates",
        "_totals",
        "_unique",
        "_upcoming",
        "_world",
        "_world_moves",
        "_world_templates",
    )

    def __init__(self) -> None:
        self._arrange = ArrangeCache()
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
        self._awaiting: frozenset[str] = frozenset()
        """The nodes the last `facts` call was told are without their DRA slices."""
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
        self._rows = RowCache()
        """The what-if table's rows (`WhatIf.build`)."""
        self._kept: dict[type[object], object] = {}
        """The stage caches, by kind (`WhatIf.kept`)."""
        self._unusual: tuple[Mapping[str, NodeFacts], int, list[NodeFacts]] | None = None
        """The last `unusual` call: the facts it was for, their generation (-2: not the store's own) and its list."""
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

    def arrange(self, cluster: Cluster) -> Arranged:
        return self._arrange.arrange(cluster)

    def facts(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
              arranged: Arranged, awaiting: frozenset[str] = frozenset()) -> dict[str, NodeFacts]:
        """Derived again only for nodes (or pools) that changed: with the same pools and provider answers, only the
        nodes the arrangement replaced are looked at, and with none replaced the facts are the last ones — the same
        dict. When nodes came or went and `nodes` are those of this store's own last arrangement, its node edits say
        which facts to take out and which to derive and put in (`_edited`). When `awaiting` (nodes without their
        DRA slices yet) differs from the last call's, a full pass derives the nodes it changed for."""
        generation, replaced = arranged.generation, arranged.replaced
        seen, self._seen = self._seen, generation
        self._facts_change = None
        flipped = awaiting != self._awaiting
        self._awaiting = awaiting
        if pools != self._pools:  # pools compare by value: a reloaded but equal config keeps the memo
            self._facts, self._pools = {}, dict(pools)
        elif flipped:
            pass
        elif (replaced is not None and generation >= 0 and seen == generation - 1
              and (node_pools is self._handed or node_pools == self._node_pools)):
            self._handed = node_pools
            self._facts_change = (generation, frozenset(replaced), frozenset())
            if not replaced:
                return self._facts
            return self._patched(replaced, node_pools, pools)
        elif replaced is None and generation >= 0 and seen == generation - 1 and self._unique:
            edited = self._edited(nodes, node_pools, pools, generation)
            if edited is not None:
                return edited
        return self._derived(nodes, node_pools, pools)

    def _patched(self, replaced: Mapping[str, Node], node_pools: Mapping[str, str],
                 pools: Mapping[str, NodePool]) -> dict[str, NodeFacts]:
        """`facts` when only the nodes `replaced` changed: the last facts with theirs derived again (the same names
        in the same order), and the starting ones (`_starting`) kept up to date when names are unique."""
        patched = dict(self._facts)  # the same names in the same order, a few derived again
        starting = self._starting
        for name, node in replaced.items():
            patched[name] = fact = derive(node, node_pools.get(name), pools, self._keys, self._capacities,
                                          patched.get(name), name not in self._awaiting)
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

    def _derived(self, nodes: Sequence[Node], node_pools: Mapping[str, str],
                 pools: Mapping[str, NodePool]) -> dict[str, NodeFacts]:
        """`facts` in a full pass over `nodes`: a node's last fact is kept while its node object and provider pool
        are the same, else derived again; the starting ones (`_starting`) are found again."""
        self._node_pools, self._handed = dict(node_pools), node_pools
        old = self._facts
        keys = self._keys
        fresh: dict[str, NodeFacts] = {}
        derived = False
        for node in nodes:
            provider_pool = node_pools.get(node.name)
            known = old.get(node.name)
            slices = node.name not in self._awaiting
            if known is None or known.node is not node or known.provider_pool != provider_pool \
                    or known.slices is not slices:
                known = derive(node, provider_pool, pools, keys, self._capacities, known, slices)
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
        last = self._arrange.last
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
                every.insert(at, derive(node, node_pools.get(name), pools, self._keys, self._capacities,
                                        slices=name not in self._awaiting))
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

    def starting(self, facts: Mapping[str, NodeFacts], nodes: Sequence[Node]) -> list[NodeFacts]:
        """Kept from call to call when `facts` is the last `facts` call's dict with no two nodes sharing a name."""
        if facts is not self._facts or not self._unique:
            every = facts.values() if len(facts) == len(nodes) else [facts[n.name] for n in nodes]
            return [f for f in every if f.phase in STARTING]
        return [facts[name] for name in sorted(self._starting, key=self._starting.__getitem__)]

    def unusual(self, facts: Mapping[str, NodeFacts], nodes: Sequence[Node]) -> list[NodeFacts]:
        """Kept from call to call: the same list while the facts are the very same dict; patched by the names the
        last `facts` call derived again or dropped when it said so and the list was made for the facts just before
        (names unique: the facts are in name order); else every fact is looked at."""
        last, change = self._unusual, self._facts_change
        if last is not None and last[0] is facts:
            return last[2]
        if (last is not None and facts is self._facts and self._unique and change is not None
                and last[1] == change[0] - 1):
            kept = {f.node.name: f for f in last[2] if f.node.name not in change[1] and f.node.name not in change[2]}
            kept.update((name, f) for name in change[1] if is_unusual(f := facts[name]))
            found = [kept[name] for name in sorted(kept)]
        else:
            every = facts.values() if len(facts) == len(nodes) else [facts[n.name] for n in nodes]
            found = [f for f in every if is_unusual(f)]
        self._unusual = (facts, self._seen if facts is self._facts and self._unique else -2, found)
        return found

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

    def _world_edits(self, templates: list[Node]) -> tuple[int, int, list[int] | None]:
        """For the table `engine.decide.build_world` makes next, right after `node_rows` (its rows, then one per
        `templates`): the number of the last world, this world's (unique across memos), and the rows whose node may
        not be the very object the last world's row held (None: not known, rows came or went). Scale-up's normalizer
        then looks at those rows only (`engine.scaleup.ScaleUpCache`)."""
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

    def _note_held(self, held: frozenset[str]) -> bool:
        """Whether this world or the last one counts a starting node with its real allocatable (a Ready node that
        lost its GPUs under its pods, `engine.decide.build_world`): its row's capacity then differs from its facts',
        so the table compares every row rather than trust the edits. Rare: only broken nodes are held."""
        before, self._held = self._held, held
        return bool(before or held)

    @property
    def _world_moves_now(self) -> RowMoves | None:
        """Where rows came and went since the last world, for the one the last `world_edits` call numbered, when
        it said None for its rows (rows came or went) and the node rows were patched (`_patched`); else None."""
        return self._world_moves

    def template_key(self, pool: NodePool, template: Node) -> GroupKey:
        """`node_group_key` of one of `pool`'s template nodes: the same object for every template of the pool while
        the pool is (templates differ only in name and hostname label, which the key leaves out)."""
        known = self._templates.get(pool.key)
        if known is None or known[0] is not pool:
            known = self._templates[pool.key] = (pool, node_group_key(template))
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

    def table(self, nodes: list[Node], capacity: list[Resources], pods_placed: Sequence[Pod],
              pending_names: set[str], *, with_topology: bool, placement: str | None, workload: Sequence[Pod],
              group_keys: list[GroupKey], by_node: Mapping[str, Sequence[Pod]], names: list[str],
              arranged: Arranged, templates: list[Node], held: frozenset[str],
              storage: Storage | None = None) -> WhatIf:
        """The rows carried from the last what-if (`RowCache`), told which rows may differ: those the node rows
        redid, came or went (`_world_edits`), every row when a held node is in this what-if or the last."""
        edits = self._world_edits(templates)
        row_moves = self._world_moves_now
        if self._note_held(held) and edits is not None:
            edits, row_moves = (edits[0], edits[1], None), None
        moved = (arranged.generation, arranged.moved)
        table = self._rows.table(nodes, capacity, pods_placed, pending_names, with_topology=with_topology,
                                 placement=placement, workload=workload, group_keys=group_keys, by_node=by_node,
                                 moved=moved, names=names, node_edits=edits, row_moves=row_moves, storage=storage)
        table._s.changes = Changes(pods_moved=moved, facts_changed=self._facts_change)
        table._s.kept = self._kept
        return table

