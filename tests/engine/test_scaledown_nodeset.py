"""Scale-down's node set carried from one decision to the next (`NodeSet.updated`) equals the set derived afresh from
the same records, under random churn (Hypothesis): records replaced by equal ones, by ones of another phase, pool,
allocatable, Ready or deleting flag or unneeded clock, records added and removed. What a set derives from its columns
(usable, unready and live nodes, totals, pool sizes, unneeded clocks, utilization denominators, destination ranks) is
taken over only while the columns it reads stay equal; a carry that ignored a change shows here as a difference. A set
patched where it is told records came and went (`NodeSet.hinted`) equals the one patched after comparing every
record (`NodeSet.changed`)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.nodes import phase
from gpuscale.engine.plan import TO_BE_DELETED_TAINT
from gpuscale.engine.scaledown import NodeSet, _capacities, _Record, allocatable_amounts
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.taints import Taint, TaintEffect
from tests.engine.test_store_property import POOLS, node

NAMES = [f"n{i:02d}" for i in range(6)]
POOL_OF = {p.name: p for p in POOLS}
NOW = 1000.0


def _record(n: Node, orphan: bool = False) -> _Record:
    pool = None if orphan else POOL_OF.get(n.labels["gpuscale.io/pool"])
    return _Record(n, pool.name if pool is not None else None, pool, phase(n, pool), allocatable_amounts(n))


def _derived(nodes: NodeSet, table: WhatIf) -> tuple[object, ...]:
    """Everything a set derives (and may carry), as plain values; the unready nodes as the objects themselves."""
    rows = nodes.rows(table)
    capacities = _capacities(nodes, nodes.usable_positions)
    return (nodes.names.tolist(), [id(r) for r in nodes.records], nodes.usable.tolist(),
            nodes.usable_positions.tolist(), nodes.registered, nodes.usable_total.tolist(), nodes.live_count,
            [id(n) for n in nodes.unready], sorted(nodes.live()), dict(nodes.pool_sizes()),
            dict(nodes.unneeded_since()), [a.tolist() for a in capacities], rows.tolist(),
            nodes.ranks(rows, len(table)).tolist(), nodes.columns.phases.tolist(), nodes.columns.alloc.tolist(),
            nodes.columns.gpu_pool.tolist(), nodes.columns.deleting.tolist(), nodes.columns.ready.tolist(),
            nodes.columns.since.tolist(), [id(n) for n in nodes.nodes])


steps = st.lists(st.tuples(st.sampled_from(["same", "state", "state", "pool", "ready", "ready", "doomed",
                                            "orphan", "add", "remove", "update", "update"]),
                           st.integers(0, len(NAMES) - 1), st.integers(0, 6), st.integers(0, len(POOLS) - 1)),
                 min_size=1, max_size=40)


@settings(max_examples=400, deadline=None)
@given(steps, st.integers(0, len(NAMES)))
def test_carried_node_sets_equal_fresh_ones(ops: list[tuple[str, int, int, int]], start: int) -> None:
    records = {name: _record(node(name, i % len(POOLS), 0, NOW)) for i, name in enumerate(NAMES[:start])}
    every = [node(name, 0, 0, NOW) for name in NAMES]
    table = whatif_of(every, [n.allocatable for n in every], [])  # one index: rows and ranks are carried

    def listed() -> list[_Record]:
        return [records[name] for name in sorted(records)]

    nodes = NodeSet(listed())
    for op, i, state, pool in ops:
        name = NAMES[i]
        if op == "same" and name in records:  # equal objects, not the same ones
            records[name] = replace(records[name], node=replace(records[name].node))
        elif op in ("state", "add") and (op == "add" or name in records):
            records[name] = _record(node(name, pool if op == "add" else POOLS.index(
                POOL_OF[records[name].node.labels["gpuscale.io/pool"]]), state, NOW))
        elif op == "pool" and name in records:
            records[name] = _record(node(name, pool, state, NOW))
        elif op == "ready" and name in records:  # Ready flipped alone
            n = records[name].node
            records[name] = _record(replace(n, ready=not n.ready))
        elif op == "doomed" and name in records:  # tainted to be deleted: Deleting, whether Ready or not
            n = records[name].node
            records[name] = _record(replace(n, taints=(Taint(key=TO_BE_DELETED_TAINT, value="1",
                                                             effect=TaintEffect.NO_SCHEDULE),)))
        elif op == "orphan" and name in records:
            records[name] = _record(records[name].node, orphan=True)
        elif op == "remove":
            records.pop(name, None)
        elif op == "update":
            _derived(nodes, table)  # what the set caches is then there to be carried
            now = listed()
            updated = nodes.updated(now)
            assert _derived(updated, table) == _derived(NodeSet(now), table)
            hinted, source = nodes.hinted(now, *_told(nodes, now))
            expected, expected_source = nodes.changed(now)
            assert _derived(hinted, table) == _derived(expected, table)
            assert (source is None) == (expected_source is None)
            assert source is None or source.tolist() == expected_source.tolist()  # type: ignore[union-attr]
            nodes = updated
    updated = nodes.updated(listed())
    assert _derived(updated, table) == _derived(NodeSet(listed()), table)


def _told(nodes: NodeSet, records: list[_Record]) -> tuple[frozenset[str], frozenset[str]]:
    """What the decision memo tells `NodeSet.hinted` (`IncrementalStore.facts_change`): the names whose records are not
    the set's very same objects, and the names gone."""
    held = {r.node.name: r for r in nodes.records}
    came = frozenset(r.node.name for r in records if held.get(r.node.name) is not r)
    return came, frozenset(held.keys() - {r.node.name for r in records})


def test_a_node_turning_unready_is_not_carried_as_ready() -> None:
    """The one-record changes the carry must see: a Ready node becomes not Ready (its phase changes with it), and a
    node tainted to be deleted, whose phase stays Deleting, becomes not Ready (only the Ready column changes)."""
    doomed = Taint(key=TO_BE_DELETED_TAINT, value="1", effect=TaintEffect.NO_SCHEDULE)
    records = [_record(node(NAMES[0], 0, 0, NOW)), _record(node(NAMES[1], 0, 0, NOW)),
               _record(replace(node(NAMES[2], 0, 0, NOW), taints=(doomed,)))]
    nodes = NodeSet(records)
    assert nodes.unready == [] and nodes.usable_positions.tolist() == [0, 1]
    for changed, unready in (([records[0], _record(node(NAMES[1], 0, 1, NOW)), records[2]], [NAMES[1]]),
                             ([*records[:2], _record(replace(records[2].node, ready=False))], [NAMES[2]])):
        updated = nodes.updated(changed)
        assert [n.name for n in updated.unready] == unready
        assert _derived(updated, table := whatif_of([r.node for r in changed],
                                                          [r.node.allocatable for r in changed], [])) == \
            _derived(NodeSet(changed), table)
