"""`WhatIf.extend` against a table built fresh with the extra rows: the node groups (carried from the table's shared
data and `RowCache`, not recomputed) are the same, and extending never changes the table it extends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.whatif.model import WhatIf, node_group_key
from gpuscale.engine.whatif.rows import RowCache
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.model.taints import Taint, TaintEffect
from tests.engine.test_row_cache import SELECTORS, SHAPES, build, churn_nodes, node, pod, snapshot

CHURN = st.lists(st.tuples(st.sampled_from(["bind", "add", "remove", "taint", "dup"]), st.integers(0, 30),
                           st.integers(0, 3)), max_size=12)
EXTRA = st.lists(st.lists(st.tuples(st.integers(0, len(SHAPES)), st.booleans()), max_size=4), min_size=1,
                 max_size=3)


def groups(table: WhatIf) -> tuple[object, ...]:
    s = table._s
    return s.group_of, s.group_members, s.group_index, s.index


def template(name: str, shape: int, tainted: bool) -> Node:
    """A pool's template node: a shape the table has, or (`shape == len(SHAPES)`) a label no row carries."""
    if shape < len(SHAPES):
        return node(name, shape, tainted)
    base = node(name, 0, tainted)
    return Node(name=name, allocatable=base.allocatable, capacity=base.capacity, labels={"shape": "new"},
                taints=base.taints, ready=True)


@settings(max_examples=150, deadline=None)
@given(CHURN, CHURN, EXTRA)
def test_an_extended_table_groups_its_rows_as_a_fresh_one(first: list[tuple[str, int, int]],
                                                           second: list[tuple[str, int, int]],
                                                           extra: list[list[tuple[int, bool]]]) -> None:
    nodes = [node(f"n{i}", i % len(SHAPES)) for i in range(5)]
    pods: list[Pod] = []
    memo = RowCache()
    table = None
    for serial, (op, a, b) in enumerate([*first, ("build", 0, 0), *second], start=1):
        if op == "build":  # the memo carries the groups of this build into the next
            build(nodes, pods, memo, [])
        elif op == "bind" and nodes:
            pods.append(pod(serial, b, nodes[a % len(nodes)].name))
        elif churn_nodes(op, a, b, serial, nodes):
            pass
        elif op == "dup" and nodes:
            nodes.append(nodes[a % len(nodes)])
    table = build(nodes, pods, memo, [])
    before = snapshot(table), groups(table)
    rows = list(nodes)
    for step, batch in enumerate(extra):
        added = [template(f"t{step}-{k}", shape, tainted) for k, (shape, tainted) in enumerate(batch)]
        keys = [node_group_key(n) for n in added] if step % 2 else None  # the caller's keys, or the table's own
        extended = table.extend(added, [n.allocatable for n in added], keys)
        rows += added
        fresh = build(rows, pods, None, [])
        assert groups(extended) == groups(fresh)
        assert extended._s.group_index == {node_group_key(rows[m[0]]): g
                                           for g, m in enumerate(extended._s.group_members)}
        for constraints in SELECTORS:
            assert extended.static_mask(constraints).tolist() == fresh.static_mask(constraints).tolist()
        table = extended
    # the first table (its groups shared with the memo and the extended tables) is unchanged
    first_table = build(nodes, pods, memo, [])
    assert (snapshot(first_table), groups(first_table)) == before


LABELS = st.dictionaries(st.sampled_from(["a", "b", "kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
                         st.sampled_from(["x", "y"]), max_size=3)
TAINTS = st.lists(st.builds(Taint, key=st.sampled_from(["k", "m"]), value=st.sampled_from(["", "v"]),
                            effect=st.sampled_from(list(TaintEffect))), max_size=2).map(tuple)


@settings(max_examples=100, deadline=None)
@given(LABELS, TAINTS, st.lists(st.sampled_from(["z1", "z2"]), max_size=2).map(tuple),
       st.lists(st.text("abc-0123", min_size=1, max_size=6), min_size=2, max_size=4))
def test_a_pools_templates_share_one_node_group_key(labels: dict[str, str], taints: tuple[Taint, ...],
                                                   zones: tuple[str, ...], names: list[str]) -> None:
    """What `scaleup.estimate` relies on to hand `extend` one key for all of a pool's templates."""
    pool = NodePool(name="p", allocatable=Resources.of(cpu=1000, pods=4), labels=labels, taints=taints, zones=zones)
    keys = {node_group_key(pool.template(name)) for name in names}
    assert len(keys) == 1
