"""What a decision derives from each node (`NodeFacts`) and the what-if rows existing nodes make (`NodeRows`).

A fact depends only on the node object, the provider's answer for it and the pools, so a store may keep it for as
long as the snapshot holds that very object (`store.IncrementalStore`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count
from operator import is_not
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuscale.engine.nodes import NodePhase, as_it_counts, as_it_will_be, degraded_gpus, gpus_registered, phase
from gpuscale.engine.scaledown import allocatable_amounts
from gpuscale.engine.whatif.model import GroupKey, RowMoves, node_group_key, node_group_key_again
from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources

STARTING = (NodePhase.REGISTERED, NodePhase.READY)
"""The phases in which a node can time out (`engine.decide.find_timeouts`)."""


def is_unusual(fact: NodeFacts) -> bool:
    """A usable node that is cordoned (an operator's set-up cordon, maintenance) or degraded (fewer GPUs than its
    pool's template): rare, so a decision looks at these few rather than at every node (`Store.unusual`)."""
    return fact.phase is NodePhase.USABLE and (fact.node.unschedulable or fact.degraded)


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
    slices: bool = True
    """Its pool's DRA ResourceSlices are published (or it declares none): `engine.nodes.awaiting_slices`."""
    gpus: bool | None = field(default=None, compare=False)
    """`engine.nodes.gpus_registered` of the node when Ready (None: not worked out): it depends on the pool and the
    allocatable only, so it is kept while they are; the phase also depends on the taints."""


def derive(node: Node, provider_pool: str | None, pools: Mapping[str, NodePool],
           keys: dict[GroupKey, GroupKey] | None = None,
           capacities: dict[Resources, Resources] | None = None, last: NodeFacts | None = None,
           slices: bool = True) -> NodeFacts:
    """The facts of one node; `keys` (canonical group keys) makes equal keys one object, `capacities` equal usable
    capacities (nodes of a pool and shape then share one, which the table's by-identity paths count once). `last`:
    the facts of the node this one replaced (same name), derived with the same `keys` and `capacities`: what
    depends only on the allocatable (the very same object), the labels (the same mapping) and the pool is taken
    from there (the usual change is a taint set or cleared). `slices`: False for a node `awaiting_slices` names."""
    name = provider_pool or node.pool  # engine.nodes.pool_of: the provider's answer first
    pool = pools.get(name) if name else None
    if last is not None and (last.pool is not pool or last.node.allocatable is not node.allocatable
                             or last.slices is not slices):
        last = None
    gpus = last.gpus if last is not None else None
    if gpus is None and node.ready:
        gpus = gpus_registered(node, pool)
    current = phase(node, pool, gpus, slices)
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
                     slices=slices, gpus=gpus)


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
    rows redone in place (`engine.whatif.model.RowMoves`; None: no row was, or two rows share a name)."""
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


