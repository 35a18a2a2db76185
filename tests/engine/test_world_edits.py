"""The world's word on its nodes (`DecideMemo.world_edits`, read by scale-up's normalizer through
`NodeTable.node_edits`): the rows it does not name hold the very node the last world held there, so the normalizer's
carried allocatables, looked at only where it says, are those of the table's nodes, each the very object, and their
counts are counted afresh, under churn of nodes (Ready, GPUs arriving, pool, gone) and of upcoming nodes (requested,
registered, replaced by one of another pool under the same count), with pending pods so that scale-up runs. The
decisions equal fresh ones."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.memo import DecideMemo
from gpuscale.engine.plan import Snapshot, UpcomingNode
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from tests.engine.test_memo_churn import NAMES, POOLS, node, pod

steps = st.lists(st.tuples(st.sampled_from(["flip", "node", "drop", "pod", "ask", "swap", "registered", "quiet",
                                            "decide", "decide", "decide"]),
                           st.integers(0, 100), st.integers(0, 6), st.integers(0, 3)),
                 min_size=1, max_size=50)


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(0, 2**16))
@example([("decide", 0, 0, 0), ("flip", 1, 2, 0), ("quiet", 0, 0, 0), ("decide", 0, 0, 0)], 0)  # n1's GPUs go
# while scale-up looks away: the next word is about the quiet world, not the one the normalizer saw
def test_normalizer_told_which_rows_changed_equals_its_nodes_counted_afresh(ops: list[tuple[str, int, int, int]],
                                                                           seed: int) -> None:
    shuffle = random.Random(seed)
    memo = DecideMemo()
    now = 1000.0
    nodes = {name: node(name, i % 2, 0, now) for i, name in enumerate(NAMES)}
    pods: dict[str, Pod] = {p.key: p for p in (pod(i, i % 3, None, 0) for i in range(3))}  # pending: scale-up runs
    upcoming: dict[str, UpcomingNode] = {}
    serial = 0
    policy = Policy()

    def check(quiet: bool = False) -> None:
        """`quiet`: the pending pods left out, so scale-up does not look at the nodes (the next decision's word is
        then about a world the normalizer did not see)."""
        node_list: list[Node] = list(nodes.values())
        if shuffle.random() < 0.2:
            shuffle.shuffle(node_list)
        seen = [p for p in pods.values() if p.node_name is not None] if quiet else list(pods.values())
        snapshot = Snapshot(cluster=Cluster(nodes=tuple(node_list), pods=tuple(seen)),
                            upcoming=tuple(upcoming.values()))
        assert decide(snapshot, POOLS, EngineState(), policy, now, memo=memo) == \
            decide(snapshot, POOLS, EngineState(), policy, now)
        up = memo.scale_up
        assert len(up._allocatables) == len(up._nodes)
        assert all(a is n.allocatable for a, n in zip(up._allocatables, up._nodes, strict=True))
        assert up._counts == Counter(up._allocatables)

    for op, i, state, kind in ops:
        name = NAMES[i % len(NAMES)]
        if op == "flip" and name in nodes:  # the same node, another state (state 2: a GPU node without its GPUs)
            nodes[name] = node(name, 0 if nodes[name].pool == "cpu" else 1, state, now)
        elif op == "node":
            nodes[name] = node(name, i % 2, state, now)
        elif op == "drop":
            nodes.pop(name, None)
        elif op == "pod":
            p = pod(i, kind, name if state % 2 and name in nodes else None, 0)
            pods[p.key] = p
        elif op == "ask":  # another node requested
            serial += 1
            upcoming[f"r{serial:03}"] = UpcomingNode(pool=POOLS[i % 2].name, request_id=f"r{serial:03}",
                                                     requested_s=now)
        elif op == "swap" and upcoming:  # one request gone, another of either pool in: as many templates as before
            del upcoming[sorted(upcoming)[i % len(upcoming)]]
            serial += 1
            upcoming[f"r{serial:03}"] = UpcomingNode(pool=POOLS[i % 2].name, request_id=f"r{serial:03}",
                                                     requested_s=now)
        elif op == "registered" and upcoming:
            del upcoming[sorted(upcoming)[i % len(upcoming)]]
        elif op == "quiet":
            now += 10.0
            check(quiet=True)
        else:
            now += 10.0
            check()
    check()
