"""`RowCache` patches its own arrays in place and hands each table copies: whatever a caller does to a table it was
handed (scale-up places pods on the decision's table, a what-if unplaces and disables), the next build equals a fresh
one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import RowCache
from gpuscale.model.pod import Pod
from tests.builders import make_pod
from tests.engine.test_row_cache import build, node, pod, snapshot

STEPS = st.lists(st.tuples(st.sampled_from(["bind", "finish", "add", "remove"]), st.integers(0, 30),
                           st.integers(0, 2), st.lists(st.integers(0, 30), max_size=4)), min_size=1, max_size=12)


def use(table: WhatIf, picks: list[int], serial: int) -> None:
    """What a decision does to its table: places pods, gives pods back and disables rows."""
    for k, at in enumerate(picks):
        row = at % len(table)
        if k % 3 == 2:
            table.disable(row)
            continue
        p = pod(1000 * serial + k, k % 2, table.nodes[row].name)
        if table.request_vector(p.requests) is None:  # asks a resource outside the columns
            continue
        if table.fits_row(row, p):
            table.place(row, p)
        else:
            table.unplace(row, p)


@settings(max_examples=100, deadline=None)
@given(STEPS)
def test_tables_handed_out_leave_the_memo_as_it_was(steps: list[tuple[str, int, int, list[int]]]) -> None:
    nodes = [node(f"n{i}", i % 3) for i in range(4)]
    pods: list[Pod] = []
    memo = RowCache()
    for serial, (op, a, b, picks) in enumerate(steps, start=1):
        if op == "bind" and nodes:
            pods.append(pod(serial, b, nodes[a % len(nodes)].name))
        elif op == "finish" and pods:
            pods.pop(a % len(pods))
        elif op == "add":
            nodes.append(node(f"m{serial}", b))
        elif op == "remove" and len(nodes) > 1:
            gone = nodes.pop(a % len(nodes))
            pods = [p for p in pods if p.node_name != gone.name]
        nodes.sort(key=lambda n: n.name)
        carried = build(nodes, pods, memo, [])
        assert snapshot(carried) == snapshot(build(nodes, pods, None, []))
        use(carried, picks, serial)


NAMES = st.lists(st.lists(st.sampled_from(["cpu", "memory", "example.com/a", "example.com/b", "gpuscale.io/gpu-milli"]),
                          min_size=1, max_size=3), max_size=4)


@settings(max_examples=100, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=20))
def test_request_names_are_those_of_the_very_requests(rounds: list[list[list[str]]]) -> None:
    """Names are kept per request object by its id: objects made and dropped round after round (CPython reuses
    their ids) are never taken for one another."""
    memo = RowCache()
    for asked in rounds:
        pods = [make_pod(f"p{k}", extra=dict.fromkeys(names, 1)) for k, names in enumerate(asked)]
        expected = frozenset(name for p in pods for name in p.requests.names())
        assert memo._request_names(pods) == expected
        del pods
