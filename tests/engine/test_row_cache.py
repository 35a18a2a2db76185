"""`RowCache`: a table built from the rows carried over from earlier builds equals one built from scratch, whatever
changed in between (pods bound, finished or re-annotated, nodes added, removed, relabelled or resized, new resource
names, duplicate node names). The carried table's few changed rows are summed row by row in Python, the fresh one's
by NumPy: the two ways give the same rows."""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gpuscale.engine.whatif.rows as table_module
from gpuscale.engine.placement.devices import DEVICE_ANNOTATION, GpuDevices
from gpuscale.engine.whatif.model import WhatIf, _offered
from gpuscale.engine.whatif.rows import RowCache, _common_prefix
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect
from tests.builders import make_pod

SHAPES = (
    Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 8}),
    Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 8, NVIDIA_GPU: 2, GPU_MILLI: 2000}),
    Resources.of({"cpu": 32_000, "memory": 128 * 2**30, "pods": 8, NVIDIA_GPU: 4, GPU_MILLI: 4000}),
    Resources.of({"cpu": 8_000, "memory": 32 * 2**30, "pods": 8, NVIDIA_GPU: 1}),
)


def node(name: str, shape: int, tainted: bool = False, copy: bool = False) -> Node:
    """`copy`: the node's capacity an equal object of its own (else the one its shape's nodes share)."""
    taints = (Taint(key="DeletionCandidateOfClusterAutoscaler", value=name, effect=TaintEffect.PREFER_NO_SCHEDULE),
              ) if tainted else ()
    allocatable = Resources(items=SHAPES[shape].items) if copy else SHAPES[shape]
    return Node(name=name, allocatable=allocatable, capacity=allocatable, labels={"shape": str(shape)},
                taints=taints, ready=True)


def pod(i: int, kind: int, on: str | None) -> Pod:
    extra: dict[str, int] = {}
    gpus = 0
    if kind == 1:
        extra = {GPU_MILLI: 300 + 100 * (i % 5)}
    elif kind == 2:
        gpus = 1
    elif kind == 3:
        extra = {"example.com/fpga": 1}  # a resource no node offers: a column of its own
    p = make_pod(f"p{i}", cpu=f"{100 * (1 + i % 4)}m", memory="1Gi", gpus=gpus, extra=extra, node=on)
    if kind == 1 and i % 3 == 0:
        p = replace(p, annotations={DEVICE_ANNOTATION: str(i % 2)})
    return p


def churn_nodes(op: str, a: int, b: int, serial: int, nodes: list[Node]) -> bool:
    """The node steps both churn tests draw (`add`, `remove`, `taint`), applied to `nodes` in place; False for any
    other step (the caller's own), or one with no node to act on."""
    if op == "add":
        nodes.append(node(f"m{serial}", b))
    elif op == "remove" and nodes:
        nodes.pop(a % len(nodes))
    elif op == "taint" and nodes:
        i = a % len(nodes)
        nodes[i] = node(nodes[i].name, int(nodes[i].labels["shape"]), tainted=not nodes[i].taints)
    else:
        return False
    return True


def snapshot(table: WhatIf) -> tuple[object, ...]:
    devices = table.devices
    return (table.columns, table.free.tolist(), table.free_pods.tolist(), table.enabled.tolist(),
            None if devices is None else (devices.count.tolist(), devices.free.tolist()),
            table._s.group_of, table._s.group_members, dict(table._s.workload), table._s.index)


def grouped_by_node(nodes: list[Node], pods: list[Pod]) -> dict[str, list[Pod]]:
    by_node: dict[str, list[Pod]] = {n.name: [] for n in nodes}
    for p in pods:
        if p.node_name is not None:
            by_node.setdefault(p.node_name, []).append(p)
    return by_node


def build(nodes: list[Node], pods: list[Pod], memo: RowCache | None, pending: list[Pod],
          grouped: bool = True, moved: tuple[int, frozenset[str] | None] | None = None) -> WhatIf:
    """`grouped`: pass the pods per node (every node with an entry, as `Cluster.index` does); else the table groups
    the placed pods itself (a node whose last pod left has no entry). `moved`: the arrangement's hint (see
    `engine.arrange.Arranged.moved`)."""
    placed = [p for p in pods if p.node_name is not None]
    return (memo if memo is not None else RowCache()).table(nodes, [n.allocatable for n in nodes], placed,
                           {r for p in pending for r in p.requests.names()}, placement="gpuscale", workload=pending,
                           by_node=grouped_by_node(nodes, pods) if grouped else None, moved=moved)


SELECTORS = [make_pod("s", node_selector={"shape": str(shape)}).constraints for shape in range(len(SHAPES))]

OPS = st.lists(st.tuples(st.sampled_from(["bind", "finish", "add", "remove", "taint", "resize", "dup", "pend",
                                          "start", "drain", "copy"]),
                         st.integers(0, 30), st.integers(0, 3), st.booleans()), min_size=1, max_size=40)


@settings(max_examples=100, deadline=None)
@given(OPS)
@example([("bind", 1, 0, True), ("add", 0, 1, False)])  # a pod binds as a node joins: its row must not be carried
@example([("pend", 0, 1, False), ("start", 0, 0, True), ("bind", 0, 0, False)])  # as many pods pending, others
@example([("bind", 1, 1, False)] * 3 + [("finish", 0, 0, True), ("finish", 0, 0, False)])  # two of three leave
@example([("bind", 0, 1, False), ("finish", 0, 0, True), ("bind", 0, 3, False)])  # a node's pods ask other names
@example([("bind", 0, 2, False)] + [("bind", 1, 0, False)] * 3 + [("bind", 0, 2, False), ("finish", 0, 0, False)])
# two pods asking the very same on one node (p1, p5), one leaves: its row is redone, both its pods counted out
def test_a_carried_table_equals_a_fresh_one_after_any_churn(ops: list[tuple[str, int, int, bool]]) -> None:
    nodes = [node(f"n{i}", i % len(SHAPES)) for i in range(6)]
    pods: list[Pod] = []
    pending: list[Pod] = []
    memo = RowCache()
    last: dict[str, list[int]] = {}
    generation = 0
    for serial, (op, a, b, wait) in enumerate(ops, start=1):
        names = [n.name for n in nodes]
        if op == "bind" and names:
            pods.append(pod(serial, b, names[a % len(names)]))
        elif op == "finish" and pods:
            pods.pop(a % len(pods))
        elif churn_nodes(op, a, b, serial, nodes):
            pass
        elif op == "resize" and nodes:
            i = a % len(nodes)
            nodes[i] = node(nodes[i].name, b)
        elif op == "copy" and nodes:  # an equal capacity, but another object (or back to the shared one)
            i = a % len(nodes)
            nodes[i] = node(nodes[i].name, int(nodes[i].labels["shape"]), bool(nodes[i].taints), copy=wait)
        elif op == "dup" and nodes:
            nodes.append(nodes[a % len(nodes)])
        elif op == "drain" and nodes:  # every pod of a node finishes at once
            pods = [p for p in pods if p.node_name != nodes[a % len(nodes)].name]
        elif op == "pend":
            pending.append(pod(serial, b, None))
        elif op == "start" and pending and nodes:  # a pending pod binds: as many pending pods as before, or fewer
            waiting = pending.pop(a % len(pending))
            pods.append(replace(waiting, node_name=nodes[b % len(nodes)].name))
            if wait:
                pending.append(pod(serial, (b + 1) % 4, None))
        nodes.sort(key=lambda n: n.name)
        if wait and serial < len(ops):
            continue  # more changes before the next build: nodes come or go while pods move
        # Grouped builds say which nodes' pods moved since the last build (plus one that did not: a hint may say
        # more than changed), as the arrangement does; a build without a hint breaks the chain.
        now = {name: [id(p) for p in held] for name, held in grouped_by_node(nodes, pods).items() if held}
        moved = frozenset({n for n in now.keys() | last.keys() if now.get(n) != last.get(n)} | {f"n{a % 6}"})
        last = now
        generation += 1
        grouped = generation % 3 != 0
        carried = build(nodes, pods, memo, pending, grouped=grouped, moved=(generation, moved) if grouped else None)
        with patch.object(table_module, "FEW_ROWS", 0):  # the fresh table's rows summed by NumPy, never row by row
            fresh = build(nodes, pods, None, pending)
        assert snapshot(carried) == snapshot(fresh)
        for constraints in SELECTORS:  # static masks are carried while the node groups stay
            assert carried.static_mask(constraints).tolist() == fresh.static_mask(constraints).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.booleans()), max_size=30))
def test_offered_capacity_equals_devices_of_each_row(rows: list[tuple[int, bool]]) -> None:
    """`_offered` groups the rows by capacity object with NumPy: the same devices as `GpuDevices.of`, row by row,
    and the resources of every capacity, whether rows share an object or hold equal ones of their own."""
    capacity = [Resources(items=SHAPES[shape].items) if own else SHAPES[shape] for shape, own in rows]
    names, devices = _offered(capacity)
    fresh = GpuDevices.of(capacity)
    assert names == frozenset(name for c in capacity for name in c.names())
    assert devices.count.tolist() == fresh.count.tolist()
    assert devices.free.shape == fresh.free.shape and devices.free.tolist() == fresh.free.tolist()


def test_only_changed_rows_are_computed() -> None:
    nodes = [node(f"n{i}", 1) for i in range(4)]
    pods = [pod(i, 1, f"n{i % 4}") for i in range(8)]
    memo = RowCache()
    first = build(nodes, pods, memo, [])
    kept = memo._rows["n1"]
    pods.append(pod(100, 1, "n0"))
    second = build(nodes, pods, memo, [])
    assert memo._rows["n1"] is kept and memo._rows["n0"] is not kept
    assert second.free_of(0, GPU_MILLI) < first.free_of(0, GPU_MILLI)
    assert sum(second._s.workload.values()) == sum(first._s.workload.values()) + 1
    assert np.array_equal(second.free[1:], first.free[1:])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=12), st.lists(st.integers(0, 2), max_size=12))
def test_common_prefix_is_the_leading_items_both_share(a: list[int], b: list[int]) -> None:
    """The node groups are regrouped from the first key that changed (`_common_prefix`), found by halving."""
    naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert _common_prefix(a, b) == naive
