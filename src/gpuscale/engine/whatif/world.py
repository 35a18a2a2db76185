"""The what-if of one decision (`World`): the rows of the snapshot's usable and upcoming nodes, and what each row is.

One function builds it (`build_world`) whatever the store: the store only decides how much of it is carried from the
last decision. Cost: the store's (see `engine.whatif.store`), plus O(upcoming + held nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuscale.engine.arrange import Arranged
from gpuscale.engine.limits import Totals
from gpuscale.engine.nodes import as_it_will_be
from gpuscale.engine.plan import UpcomingNode
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.facts import NodeFacts
from gpuscale.engine.whatif.model import WhatIf, node_group_key
from gpuscale.engine.whatif.store import Store
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool


@dataclass(frozen=True, slots=True, kw_only=True)
class World:
    """The snapshot arranged for packing: rows of the what-if and what each row is."""

    table: WhatIf
    rows: tuple[Node, ...]
    row_pool: tuple[str | None, ...]
    upcoming_rows: np.ndarray
    totals: Totals
    free_pods_before: np.ndarray
    """Free pod slots per row before this decision placed anything (scale-up mutates the table in place)."""
    gpu_capacity: np.ndarray
    """GPUs (and GPU slices) each row offers once usable: with the free ones, what a warm buffer counts as in use."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Excluded:
    """What the decision's time-outs say of the nodes before the world is built (`engine.decide.find_timeouts`)."""

    expired_nodes: frozenset[str] = frozenset()
    """Nodes timed out: no row."""
    expired_requests: frozenset[str] = frozenset()
    """Upcoming requests timed out: no row."""
    held: frozenset[str] = frozenset()
    """Ready nodes still starting that run workloads: their row counts their real allocatable, not the template's."""
    setting_up: frozenset[str] = frozenset()
    """Usable nodes in an operator's set-up cordon: their row ignores the cordon and counts as upcoming."""


def _offer(pool: NodePool, zone: str | None) -> NodePool:
    """The pool's offer in `zone` (`NodePool.in_zones`) when it lists several zones and names that one, else the
    pool: an upcoming node requested in a zone counts as a template in that zone."""
    if zone is None or len(pool.zones) < 2 or zone not in pool.zones:
        return pool
    return replace(pool, zone=zone)


def build_world(store: Store, arranged: Arranged, upcoming: Sequence[UpcomingNode], pools: Mapping[str, NodePool],
                excluded: Excluded, facts: Mapping[str, NodeFacts], gpu_placement: str | None) -> World:
    """The rows: existing nodes (but those being deleted or expired) from their facts, then one template per upcoming
    request of a known pool, in request order."""
    cluster, pods = arranged.cluster, arranged.pods
    base = store.node_rows(cluster.nodes, pools, facts, excluded.expired_nodes, arranged.generation)
    ordered = [(_offer(pool, request.zone), request.request_id)
               for request in sorted(upcoming, key=lambda u: u.request_id)
               if (pool := pools.get(request.pool)) is not None
               and request.request_id not in excluded.expired_requests]
    extra = [pool for pool, _ in ordered]
    templates = store.templates(ordered)
    nodes = [*base.nodes, *templates]
    names = [*base.names, *(t.name for t in templates)]
    capacity = [*base.capacity, *(pool.allocatable for pool in extra)]
    group_keys = [*base.group_keys, *(store.template_key(pool, t) for pool, t in zip(extra, templates, strict=True))]
    # copies: the base rows' arrays are the store's
    upcoming_rows = np.concatenate([base.upcoming_rows, np.ones(len(extra), dtype=bool)])
    gpus = np.concatenate([base.gpu_rows, np.array([p.allocatable.gpu_count() for p in extra], dtype=np.int64)])
    for name in sorted(excluded.held):  # a Ready node that lost its GPUs under its pods offers what it really has
        if (i := base.position.get(name)) is not None:
            node = facts[name].node
            capacity[i] = node.allocatable
            upcoming_rows[i] = False
            gpus[i] = node.allocatable.gpu_count()
    for name in sorted(excluded.setting_up):  # an operator's set-up cordon: the node counts as still starting
        if (i := base.position.get(name)) is not None:
            fact = facts[name]
            nodes[i] = as_it_will_be(fact.node, fact.pool)
            group_keys[i] = node_group_key(nodes[i])
            upcoming_rows[i] = True
    table = store.table(nodes, capacity, pods.placed, store.pending_names(pods.pending),
                        with_topology=pods.depends_on_placed, placement=gpu_placement, workload=pods.pending,
                        group_keys=group_keys, by_node=pods.by_node, names=names, arranged=arranged,
                        templates=templates, held=excluded.held | excluded.setting_up,
                        storage=cluster.storage if pods.uses_claims else None)
    if pods.uses_devices:
        table.dra = DraState.of(cluster.dra, nodes, pods.by_node, pools, upcoming_rows.tolist())
    return World(table=table, rows=tuple(nodes), row_pool=(*base.row_pool, *(pool.name for pool in extra)),
                 upcoming_rows=upcoming_rows, totals=store.totals(base.counted, extra),
                 free_pods_before=table.free_pods.copy(), gpu_capacity=gpus)
