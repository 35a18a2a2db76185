"""What one decision derives from each node, kept for the next decision while the node object is the same.

Snapshots are built from frozen model values, and both the watch cache and the twin hand the *same* object back while
an object is unchanged. So a fact derived from a node (its pool, lifecycle phase, usable capacity, node-group key,
utilization amounts) stays valid for as long as the snapshot holds that very object (`is`), and a decision need only
derive facts for the nodes that changed since the previous one. A memo never changes a result: `decide` with and
without one gives the same plan (tests/engine/test_memo.py), it only skips recomputation.

The memo is a cache owned by the caller (the control loop keeps one across ticks); it holds the node objects it keyed
facts on, so an identity test can never match a recycled object, and forgets nodes that leave the snapshot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpuscale.engine.arrange import ArrangeMemo
from gpuscale.engine.nodes import NodePhase, as_it_will_be, phase
from gpuscale.engine.scaledown import ScaleDownMemo, allocatable_amounts
from gpuscale.engine.scaleup import ScaleUpMemo, Verdicts
from gpuscale.engine.table import GroupKey, RowMemo, node_group_key
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources


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


def derive(node: Node, provider_pool: str | None, pools: Mapping[str, NodePool],
           keys: dict[GroupKey, GroupKey] | None = None) -> NodeFacts:
    """The facts of one node; `keys` (canonical group keys) makes equal keys one object."""
    name = provider_pool or node.pool  # engine.nodes.pool_of: the provider's answer first
    pool = pools.get(name) if name else None
    current = phase(node, pool)
    usable = current is NodePhase.USABLE
    row_node = node if usable else as_it_will_be(node)
    capacity = node.allocatable if usable or pool is None else node.allocatable.max(pool.allocatable)
    key = node_group_key(row_node)
    if keys is not None:
        key = keys.setdefault(key, key)
    return NodeFacts(node=node, provider_pool=provider_pool, pool_name=name, pool=pool, phase=current,
                     row_node=row_node, capacity=capacity, gpu_units=capacity.gpu_count(),
                     group_key=key,
                     amounts=allocatable_amounts(node))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRows:
    """The rows of the what-if table that existing nodes make (`engine.decide.build_world`), and what they were made
    from: while the facts (the same dict: the memo hands back the last one when no node changed) and the expired nodes
    are the same, so are these; when only a few nodes' facts changed, only their rows are redone (`_patched`)."""

    facts: Mapping[str, NodeFacts]
    expired: frozenset[str]
    generation: int
    """The arrangement these rows were made for (-1: unknown)."""
    position: dict[str, int]
    """Row of each node that has one."""
    nodes: list[Node]
    capacity: list[Resources]
    row_pool: list[str | None]
    upcoming: list[bool]
    group_keys: list[GroupKey]
    gpus: list[int]
    counted: list[tuple[NodePool | None, int]]
    """Node counts per pool, pools in first-seen order (the order `totals_of` adds them in)."""


def _has_row(fact: NodeFacts, expired: frozenset[str]) -> bool:
    return fact.phase is not NodePhase.DELETING and fact.node.name not in expired


def node_rows_of(nodes: Sequence[Node], pools: Mapping[str, NodePool], facts: Mapping[str, NodeFacts],
                 expired: frozenset[str], generation: int = -1) -> NodeRows:
    """The rows of `nodes` (in order) but those being deleted or `expired`, from their facts."""
    # facts hold the nodes in order, once each unless two share a name
    every = facts.values() if len(facts) == len(nodes) else [facts[n.name] for n in nodes]
    # `_has_row`, inlined, and enum members looked up once (slow to look up): this pass runs when nodes come or go
    deleting, usable = NodePhase.DELETING, NodePhase.USABLE
    kept = [f for f in every if f.phase is not deleting and f.node.name not in expired]
    of_pool = Counter(None if f.pool is None else f.pool.name for f in kept)
    return NodeRows(facts=facts, expired=expired, generation=generation,
                    position={f.node.name: i for i, f in enumerate(kept)}, nodes=[f.row_node for f in kept],
                    capacity=[f.capacity for f in kept], row_pool=[f.pool_name for f in kept],
                    upcoming=[f.phase is not usable for f in kept], group_keys=[f.group_key for f in kept],
                    gpus=[f.gpu_units for f in kept],
                    counted=[(None if name is None else pools[name], n) for name, n in of_pool.items()])


def _patched(last: NodeRows, facts: Mapping[str, NodeFacts], names: frozenset[str],
             generation: int) -> NodeRows | None:
    """`last` with the rows of `names` redone from `facts` (every other node's facts are those `last` was made from);
    None when a node gains or loses its row or changes pool (then the rows are made afresh)."""
    def pool_of(fact: NodeFacts) -> str | None:
        return None if fact.pool is None else fact.pool.name

    rows = NodeRows(facts=facts, expired=last.expired, generation=generation, position=last.position,
                    nodes=list(last.nodes), capacity=list(last.capacity), row_pool=list(last.row_pool),
                    upcoming=list(last.upcoming), group_keys=list(last.group_keys), gpus=list(last.gpus),
                    counted=last.counted)
    for name in names:
        before, after = last.facts[name], facts[name]
        had = _has_row(before, last.expired)
        if had != _has_row(after, last.expired) or (had and pool_of(before) != pool_of(after)):
            return None
        if had:
            i = last.position[name]
            rows.nodes[i], rows.capacity[i], rows.row_pool[i] = after.row_node, after.capacity, after.pool_name
            rows.upcoming[i], rows.group_keys[i] = after.phase is not NodePhase.USABLE, after.group_key
            rows.gpus[i] = after.gpu_units
    return rows


VERDICTS_KEPT = 10_000
STARTING = (NodePhase.REGISTERED, NodePhase.READY)
"""The phases in which a node can time out (`engine.decide.find_timeouts`)."""


class DecideMemo:
    """Per-node facts and rows carried from one decision to the next (see the module docstring)."""

    __slots__ = ("_facts", "_facts_change", "_keys", "_node_pools", "_node_rows", "_order", "_pools", "_seen",
                 "_starting", "_templates", "_unique", "_verdicts", "arrange", "rows", "scale_down", "scale_up")

    def __init__(self) -> None:
        self.arrange = ArrangeMemo()
        """The snapshot in name order and its pod index (`engine.arrange`)."""
        self._facts: dict[str, NodeFacts] = {}
        self._node_pools: dict[str, str] = {}
        self._seen = -1
        """The arrangement `_facts` was made for (its `generation`; -1: unknown)."""
        self._facts_change: tuple[int, frozenset[str]] | None = None
        """After `facts` for arrangement `generation`: the facts are the last call's but for these nodes (None: any
        may differ). `node_rows` patches its rows by it."""
        self._pools: dict[str, NodePool] = {}
        self._keys: dict[GroupKey, GroupKey] = {}
        self._templates: dict[str, tuple[NodePool, GroupKey]] = {}
        self._verdicts: Verdicts = {}
        self.rows = RowMemo()
        """The what-if table's rows (`NodeTable.build`)."""
        self.scale_down = ScaleDownMemo()
        """Scale-down's node set, unneeded clocks and candidate verdicts (`ScaleDownMemo`)."""
        self.scale_up = ScaleUpMemo()
        """Scale-up's pool verdicts per unit, share normalizer and reasons for units no pool takes (`ScaleUpMemo`)."""
        self._node_rows: NodeRows | None = None
        self._unique = False
        """No two nodes of the last full pass shared a name (else `_starting` is not kept)."""
        self._order: dict[str, int] | None = None
        """Position of each name in `_facts`, made when first needed (None: not made since the last full pass)."""
        self._starting: dict[str, int] = {}
        """The nodes of `_facts` still starting (`STARTING`), with their positions there."""

    def facts(self, nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
              arranged: tuple[int, Mapping[str, Node] | None] | None = None) -> dict[str, NodeFacts]:
        """Facts of every node, by name; derived again only for nodes (or pools) that changed. `arranged`: the
        generation of the arrangement `nodes` come from and the nodes replaced since the one before
        (`engine.arrange.Arranged`): then, with the same pools and provider answers, only those are looked at, and
        with none replaced the facts are the last ones — the same dict, which callers only read."""
        generation, replaced = arranged if arranged is not None else (-1, None)
        seen, self._seen = self._seen, generation
        self._facts_change = None
        if pools != self._pools:  # pools compare by value: a reloaded but equal config keeps the memo
            self._facts, self._pools, self._verdicts = {}, dict(pools), {}
        elif (replaced is not None and generation >= 0 and seen == generation - 1
              and node_pools == self._node_pools):
            self._facts_change = (generation, frozenset(replaced))
            if not replaced:
                return self._facts
            patched = dict(self._facts)  # the same names in the same order, a few derived again
            starting = self._starting
            for name, node in replaced.items():
                patched[name] = fact = derive(node, node_pools.get(name), pools, self._keys)
                if not self._unique:
                    continue
                if fact.phase in STARTING:
                    if self._order is None:  # the same names in the same order as the last full pass
                        self._order = {n: i for i, n in enumerate(patched)}
                    starting[name] = self._order[name]
                else:
                    starting.pop(name, None)
            self._facts = patched
            if len(self._keys) > 2 * len(patched) + 64:  # stale canonical keys only cost memory: dropped now and then
                self._keys = {f.group_key: f.group_key for f in patched.values()}
            return patched
        self._node_pools = dict(node_pools)
        old = self._facts
        keys = self._keys
        fresh: dict[str, NodeFacts] = {}
        derived = False
        for node in nodes:
            provider_pool = node_pools.get(node.name)
            known = old.get(node.name)
            if known is None or known.node is not node or known.provider_pool != provider_pool:
                known = derive(node, provider_pool, pools, keys)
                derived = True
            fresh[node.name] = known
        self._facts = fresh
        self._unique, self._order = len(fresh) == len(nodes), None
        self._starting = {name: i for i, (name, fact) in enumerate(fresh.items())
                          if fact.phase in STARTING} if self._unique else {}
        if (derived or len(fresh) != len(old)) and len(keys) > 2 * len(fresh) + 64:  # as when patched
            self._keys = {f.group_key: f.group_key for f in fresh.values()}
        return fresh

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
        rows: NodeRows | None = None
        if last is not None and last.expired == expired:
            if last.facts is facts:
                rows = last if last.generation == generation else replace(last, generation=generation)
            elif change is not None and change[0] == generation >= 0 and last.generation == generation - 1:
                rows = _patched(last, facts, change[1], generation)
        self._node_rows = rows = rows or node_rows_of(nodes, pools, facts, expired, generation)
        return rows

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


def facts_of(nodes: Sequence[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
             memo: DecideMemo | None, arranged: tuple[int, Mapping[str, Node] | None] | None = None,
             ) -> dict[str, NodeFacts]:
    """Facts of every node by name: from the memo when there is one, else derived afresh."""
    if memo is not None:
        return memo.facts(nodes, node_pools, pools, arranged)
    return {n.name: derive(n, node_pools.get(n.name), pools) for n in nodes}
