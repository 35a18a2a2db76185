"""`RowCache.build` told which rows' nodes may differ from the table it built last (`NodeEdits`, as
`engine.whatif.store.IncrementalStore` says it) compares only those rows' names, capacities and group keys with the last
build's: under node churn (taints, resizes, capacities changed under the same labels, equal copies, nodes replaced by
others, nodes coming and going, pods binding and leaving) the table built with the word equals the one built without
it and a fresh one."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.whatif.model import NodeEdits, WhatIf, node_group_key
from gpuscale.engine.whatif.rows import RowCache
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from tests.engine.test_row_cache import SELECTORS, SHAPES, grouped_by_node, node, pod, snapshot

OPS = st.lists(st.tuples(st.sampled_from(["bind", "finish", "taint", "resize", "grow", "copy", "swap", "add",
                                          "remove"]),
                         st.integers(0, 30), st.integers(0, 3)), min_size=1, max_size=30)


def build(nodes: list[Node], pods: list[Pod], memo: RowCache | None, node_edits: NodeEdits | None) -> WhatIf:
    cache = memo if memo is not None else RowCache()
    return cache.table(nodes, [n.allocatable for n in nodes], [p for p in pods if p.node_name is not None], (),
                       placement="gpuscale", group_keys=[node_group_key(n) for n in nodes],
                           by_node=grouped_by_node(nodes, pods), names=[n.name for n in nodes],
                           node_edits=node_edits)


def honest(last: list[Node] | None, nodes: list[Node]) -> list[int] | None:
    """The rows whose node is not the very object of the last build's row (None: rows came or went)."""
    if last is None or len(last) != len(nodes):
        return None
    return [i for i, (a, b) in enumerate(zip(last, nodes, strict=True)) if a is not b]


@settings(max_examples=150, deadline=None)
@given(OPS)
@example([("taint", 0, 0), ("swap", 1, 2)])
@example([("bind", 0, 1), ("grow", 0, 0)])  # a row's capacity changes under the same key
def test_a_table_built_with_the_word_equals_one_built_without(ops: list[tuple[str, int, int]]) -> None:
    nodes = [node(f"n{i}", i % len(SHAPES)) for i in range(5)]
    pods: list[Pod] = []
    told, untold = RowCache(), RowCache()
    last: list[Node] | None = None
    for world, (op, a, b) in enumerate(ops):
        i = a % len(nodes)
        shape = int(nodes[i].labels["shape"])
        if op == "bind":
            pods.append(pod(world, b % 3, nodes[i].name))
        elif op == "finish" and pods:
            pods.pop(a % len(pods))
        elif op == "taint":  # a blocking taint: another group key
            nodes[i] = node(nodes[i].name, shape, tainted=not nodes[i].taints)
        elif op == "resize":
            nodes[i] = node(nodes[i].name, b)
        elif op == "grow":  # another capacity, the same labels: the same group key
            nodes[i] = replace(nodes[i], allocatable=SHAPES[b], capacity=SHAPES[b])
        elif op == "copy":  # another object, an equal capacity of its own or the shared one again
            nodes[i] = node(nodes[i].name, shape, bool(nodes[i].taints), copy=b % 2 == 0)
        elif op == "swap":  # another node, the same number of rows
            nodes[i] = node(f"{nodes[i].name}s", b)
        elif op == "add":
            nodes.append(node(f"m{world}", b))
        elif op == "remove" and len(nodes) > 1:
            nodes.pop(i)
        nodes.sort(key=lambda n: n.name)
        rows = honest(last, nodes)
        edits = None if rows is None and world % 2 else (world - 1, world, rows)
        with_word = build(nodes, pods, told, edits)
        without = build(nodes, pods, untold, None)
        assert snapshot(with_word) == snapshot(without) == snapshot(build(nodes, pods, None, None))
        for constraints in SELECTORS:
            assert with_word.static_mask(constraints).tolist() == without.static_mask(constraints).tolist()
        last = list(nodes)
