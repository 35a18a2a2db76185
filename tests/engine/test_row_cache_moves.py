"""`RowCache.build` told where rows came and went (`RowMoves`, as `engine.whatif.store.IncrementalStore` says it)
follows the last build's rows by position (np.delete / np.insert) and keeps their groups, looking up only the rows
put in and the rows named: under churn (nodes coming and going at random positions, replaced in place or taken out
and put in again, taints, resizes, pods binding and leaving) the table built with the word equals the one built
without it and a fresh one; a word that does not add up is not followed."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.whatif.model import NodeEdits, RowMoves, WhatIf, node_group_key
from gpuscale.engine.whatif.rows import RowCache
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from tests.engine.test_row_cache import SELECTORS, SHAPES, grouped_by_node, node, pod, snapshot

OPS = st.lists(st.tuples(st.sampled_from(["bind", "finish", "taint", "resize", "copy", "add", "remove", "swap"]),
                         st.integers(0, 40), st.integers(0, 3), st.booleans()), min_size=1, max_size=30)


def build(nodes: list[Node], pods: list[Pod], memo: RowCache | None, node_edits: NodeEdits | None = None,
          moves: RowMoves | None = None) -> WhatIf:
    cache = memo if memo is not None else RowCache()
    return cache.table(nodes, [n.allocatable for n in nodes], [p for p in pods if p.node_name is not None], (),
                       placement="gpuscale", group_keys=[node_group_key(n) for n in nodes],
                           by_node=grouped_by_node(nodes, pods), names=[n.name for n in nodes],
                           node_edits=node_edits, row_moves=moves)


def honest(last: list[Node], nodes: list[Node], renew: bool) -> RowMoves:
    """Rows of `last` whose name went, rows of `nodes` whose name came, and the kept rows holding another object;
    `renew`: a node replaced by another object is taken out and put in again instead of named."""
    before = {n.name: i for i, n in enumerate(last)}
    now = {n.name for n in nodes}
    out = [i for i, n in enumerate(last) if n.name not in now or (renew and n is not nodes_named(nodes, n.name))]
    into, named = [], []
    for i, n in enumerate(nodes):
        j = before.get(n.name)
        if j is None or (renew and last[j] is not n):
            into.append(i)
        elif last[j] is not n:
            named.append(i)
    return out, into, named


def nodes_named(nodes: list[Node], name: str) -> Node | None:
    return next((n for n in nodes if n.name == name), None)


def check(nodes: list[Node], pods: list[Pod], table: WhatIf, without: WhatIf) -> None:
    fresh = build(nodes, pods, None)
    assert snapshot(table) == snapshot(without) == snapshot(fresh)
    assert table._s.group_index == fresh._s.group_index
    assert list(table._s.group_index.values()) == list(fresh._s.group_index.values())
    for constraints in SELECTORS:
        assert table.static_mask(constraints).tolist() == fresh.static_mask(constraints).tolist()


@settings(max_examples=200, deadline=None)
@given(OPS)
@example([("add", 0, 1, False), ("remove", 0, 0, False)])  # the first row (and its group's first row) goes
@example([("taint", 0, 0, False), ("add", 0, 3, True)])
@example([("remove", 0, 0, False), ("remove", 0, 0, False), ("remove", 0, 0, False), ("remove", 0, 0, False),
          ("add", 0, 2, False)])
def test_a_table_built_with_the_moves_equals_one_built_without(ops: list[tuple[str, int, int, bool]]) -> None:
    nodes = [node(f"n{i:02}", i % len(SHAPES), tainted=i == 3) for i in range(6)]
    pods: list[Pod] = []
    told, untold = RowCache(), RowCache()
    last = list(nodes)
    build(nodes, pods, told, (-1, 0, None))
    build(nodes, pods, untold)
    for world, (op, a, b, flag) in enumerate(ops, 1):
        i = a % len(nodes) if nodes else 0
        if op == "bind" and nodes:
            pods.append(pod(world, b % 3, nodes[i].name))
        elif op == "finish" and pods:
            pods.pop(a % len(pods))
        elif op == "taint" and nodes:  # another group key, the same row
            nodes[i] = node(nodes[i].name, int(nodes[i].labels["shape"]), tainted=not nodes[i].taints)
        elif op == "resize" and nodes:  # another capacity and key, the same row
            nodes[i] = node(nodes[i].name, b)
        elif op == "copy" and nodes:  # another object, an equal capacity of its own
            nodes[i] = node(nodes[i].name, int(nodes[i].labels["shape"]), bool(nodes[i].taints), copy=True)
        elif op == "add":  # one to four, at random positions (names sort anywhere among the others)
            nodes.extend(node(f"n{(a + 17 * k) % 41:02}{world}", (b + k) % len(SHAPES), tainted=flag and k % 2 == 0)
                         for k in range(b + 1))
        elif op == "remove":  # one to four, at random positions
            for k in range(min(b + 1, len(nodes) - 1)):
                nodes.pop((a + 7 * k) % len(nodes))
        elif op == "swap" and nodes:  # one goes, another comes at the same row
            nodes[i] = node(f"{nodes[i].name}s", b)
        nodes.sort(key=lambda n: n.name)
        moves = honest(last, nodes, flag) if world % 3 else None  # now and then no word: the full path between
        edits = (world - 1, world, None)
        check(nodes, pods, build(nodes, pods, told, edits, moves), build(nodes, pods, untold))
        last = list(nodes)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5), st.sampled_from(["short", "unsorted", "range", "world", "rows", "named"]))
def test_a_word_that_does_not_line_up_is_not_followed(at: int, lie: str) -> None:
    nodes = [node(f"n{i}", i % len(SHAPES)) for i in range(6)]
    memo = RowCache()
    build(nodes, [], memo, (-1, 0, None))
    nodes.insert(at, node(f"n{at}a", 2, tainted=True))
    nodes.insert(0, node("a", 3))
    out: list[int] = []
    into, named = sorted([0, at + 1]), []
    edits: NodeEdits = (0, 1, None)
    if lie == "short":
        into = into[:1]
    elif lie == "unsorted":
        into = into[::-1] if into[0] != into[1] else [1, 0]
    elif lie == "range":
        into = [0, len(nodes)]
    elif lie == "world":
        edits = (5, 1, None)
    elif lie == "rows":
        edits = (0, 1, [])
    elif lie == "named":
        named = [len(nodes) + 3]
    check(nodes, [], build(nodes, [], memo, edits, (out, into, named)), build(nodes, [], None))
