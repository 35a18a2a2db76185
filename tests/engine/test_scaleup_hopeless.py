"""Scale-up's hopeless requests kept by a column under churn: `ScaleUpCache._hopeless_of` keeps, for each request it
found asking more than any row has free, one column it asks more of than any row had free (or that no row had a pod
slot), and while the table's columns are the same it reads only that column's maximum to find the request hopeless
again. Whatever the tables it is asked about in turn (nodes coming and going, pods binding and leaving, a resource
appearing that reorders the columns, rows overcommitted), its answer must be the fresh rule: the requests not
`_below` the table's `_ceiling`; and a ceiling it hands back must be the table's."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.scaleup import ScaleUpCache, _below, _ceiling
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.resources import Resources
from tests.builders import make_node, make_pod, resources

NODE_SHAPES = (
    {"cpu": "4", "memory": "16Gi", "pods": 3},
    {"cpu": "8", "memory": "32Gi", "pods": 2, "gpus": 1},
    {"cpu": "16", "memory": "64Gi", "pods": 4, "gpus": 2},
    {"cpu": "2", "memory": "8Gi", "pods": 1, "extra": {"example.com/fpga": 1}},  # a column of its own
)
POD_SHAPES = (
    {"cpu": "1", "memory": "1Gi"},
    {"cpu": "3", "memory": "4Gi", "gpus": 1},
    {"cpu": "6", "memory": "8Gi"},
    {"cpu": "1", "memory": "1Gi", "gpus": 2},
    {"cpu": "20", "memory": "1Gi"},
)
ASKED = (
    resources("1", "1Gi"),
    resources("4", "1Gi"),
    resources("8", "1Gi"),
    resources("1", "40Gi"),
    resources("1", "1Gi", gpus=1),
    resources("1", "1Gi", gpus=2),
    resources("1", "1Gi", gpus=3),
    resources(0, "1Gi", extra={"example.com/fpga": 1}),
    resources("1", "1Gi", extra={"example.com/other": 1}),  # a resource no node offers (no column either)
    resources(0, 0),
)

steps = st.lists(st.tuples(st.sampled_from(["node", "node", "drop", "bind", "bind", "bind", "unbind", "ask", "same"]),
                           st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=30)


def fresh(asked: list[Resources], table: WhatIf) -> frozenset[Resources]:
    ceiling = _ceiling(table)
    return frozenset(r for r in asked if not _below(table.request_vector(r), ceiling))


@settings(max_examples=300, deadline=None)
@given(steps, st.lists(st.integers(0, len(ASKED) - 1), min_size=1, max_size=6))
# Two GPU pods fill the only GPU node: the two-GPU request found hopeless by the GPU column; the node empties again.
@example([("node", 2, 0), ("bind", 0, 3), ("same", 0, 0), ("unbind", 0, 0), ("same", 0, 0)], [5])
# A request exactly what the roomiest row has free in its column is not hopeless (kept by the column while above).
@example([("node", 1, 0), ("bind", 0, 1), ("same", 0, 0), ("unbind", 0, 0), ("same", 0, 0)], [4, 6])
# The pod slots run out, then one frees up.
@example([("node", 3, 0), ("bind", 0, 0), ("same", 0, 0), ("unbind", 0, 0), ("same", 0, 0)], [7])
# A node with a resource of its own comes: the columns are reordered under the kept column numbers; a request naming a
# resource without a column stays hopeless while the columns are the same.
@example([("node", 0, 0), ("ask", 0, 0), ("node", 3, 0), ("ask", 0, 0), ("drop", 1, 0), ("ask", 0, 0)], [2, 7])
@example([("node", 0, 0), ("same", 0, 0), ("same", 0, 0)], [8, 2])
def test_kept_hopeless_requests_equal_the_fresh_rule(ops: list[tuple[str, int, int]], picks: list[int]) -> None:
    memo = ScaleUpCache()
    nodes: list[Node] = []
    bound: list[Pod] = []
    asked = list(dict.fromkeys(ASKED[i] for i in picks))
    for serial, (op, a, b) in enumerate(ops):
        if op == "node":
            nodes.append(make_node(f"n{serial}", **NODE_SHAPES[a % len(NODE_SHAPES)]))  # type: ignore[arg-type]
        elif op == "drop" and nodes:
            gone = nodes.pop(a % len(nodes))
            bound = [p for p in bound if p.node_name != gone.name]
        elif op == "bind" and nodes:  # may overcommit a row (negative free capacity)
            target = nodes[a % len(nodes)]
            bound.append(make_pod(f"b{serial}", node=target.name, phase=PodPhase.RUNNING,
                                  **POD_SHAPES[b % len(POD_SHAPES)]))  # type: ignore[arg-type]
        elif op == "unbind" and bound:
            bound.pop(a % len(bound))
        elif op == "ask":
            asked = list(dict.fromkeys([*asked[1:], ASKED[a % len(ASKED)]]))
        table = whatif_of(nodes, [n.allocatable for n in nodes], bound,  # no column for the one no node offers
                                {name for r in asked for name in r.names()} - {"example.com/other"})
        hopeless, ceiling = memo._hopeless_of(asked, table)
        assert hopeless == fresh(asked, table)
        if ceiling is not None:
            expected = _ceiling(table)
            assert np.array_equal(ceiling[0], expected[0]) and ceiling[1] == expected[1]
        again, _ = memo._hopeless_of(asked, table)  # the same table asked again: the kept columns answer
        assert again == hopeless


def test_a_request_kept_hopeless_is_answered_without_the_ceiling() -> None:
    """The point of the kept column: the same table asked again needs no ceiling."""
    memo = ScaleUpCache()
    node = make_node("n", cpu="4", memory="16Gi")
    table = whatif_of([node], [node.allocatable], [], set())
    big = resources("8", "1Gi")
    hopeless, ceiling = memo._hopeless_of([big], table)
    assert hopeless == frozenset({big}) and ceiling is not None  # found by the ceiling, the CPU column kept
    hopeless, ceiling = memo._hopeless_of([big], table)
    assert hopeless == frozenset({big}) and ceiling is None
    small = resources("1", "1Gi")
    hopeless, ceiling = memo._hopeless_of([big, small], table)
    assert hopeless == frozenset({big}) and ceiling is not None  # the small one needs the ceiling to be cleared
