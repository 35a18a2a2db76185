"""`WhatIf.feasible` (one comparison per asked column on the table's arrays) equals the row-by-row answer: enabled,
past the static filters, a free pod slot and `fits_row` (the request vector against the row, devices included),
after any mix of pods placed, given back and nodes disabled, for pods asking any mix of resources."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from tests.builders import make_pod

SHAPES = (
    Resources.of({"cpu": 4000, "memory": 16 * 2**30, "pods": 3}),
    Resources.of({"cpu": 8000, "memory": 32 * 2**30, "pods": 4, NVIDIA_GPU: 2, GPU_MILLI: 2000}),
    Resources.of({"cpu": 2000, "memory": 8 * 2**30, "pods": 2, "example.com/fpga": 1}),
)


def node(i: int, shape: int) -> Node:
    return Node(name=f"n{i}", allocatable=SHAPES[shape], capacity=SHAPES[shape], labels={"shape": str(shape)},
                ready=True)


def pod(i: int, kind: int, selector: int | None) -> Pod:
    extra = ({}, {GPU_MILLI: 300 + 200 * (i % 4)}, {"example.com/fpga": 1}, {"example.com/none": 1})[kind]
    return make_pod(f"p{i}", cpu=f"{500 * (1 + i % 5)}m", memory=f"{1 + i % 7}Gi", gpus=int(kind == 0 and i % 3 == 0),
                    extra=extra, node_selector=None if selector is None else {"shape": str(selector)})


pods = st.builds(pod, st.integers(0, 40), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 2)))


def by_row(table: WhatIf, p: Pod) -> list[bool]:
    if table.request_vector(p.requests) is None:
        return [False] * len(table)
    static = table.static_mask(p.constraints)
    return [bool(table.enabled[i]) and bool(static[i]) and table.fits_row(i, p) for i in range(len(table))]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=8),
       st.lists(st.tuples(st.sampled_from(["place", "place", "unplace", "disable", "ask"]), st.integers(0, 7), pods),
                max_size=40))
def test_feasible_equals_the_row_by_row_answer(shapes: list[int], ops: list[tuple[str, int, Pod]]) -> None:
    nodes = [node(i, shape) for i, shape in enumerate(shapes)]
    table = whatif_of(nodes, [n.allocatable for n in nodes], [], {GPU_MILLI, NVIDIA_GPU, "example.com/fpga"})
    placed: list[tuple[int, Pod]] = []
    for op, at, p in ops:
        row = at % len(nodes)
        if op == "place" and table.fits_row(row, p) and table.request_vector(p.requests) is not None:
            table.place(row, p)
            placed.append((row, p))
        elif op == "unplace" and placed:
            table.unplace(*placed.pop(at % len(placed)))
        elif op == "disable":
            table.disable(row)
        assert table.feasible(p).tolist() == by_row(table, p)
        assert table.fork().feasible(p).tolist() == by_row(table, p)
