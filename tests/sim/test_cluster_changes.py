"""The twin cluster tells the engine what changed since its last snapshot (`Cluster.changes`), and the engine's
arrangement takes that word instead of walking the snapshot (`engine.arrange._Sorted._told`). Under random churn of
nodes and pods (put, replaced, bound, finished, deleted, nodes removed with their pods, taints set and cleared,
snapshots nobody decided on), the word is exactly the identity difference between two snapshots, and every decision
told it equals the decision that walks (and an arrangement made from scratch)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.arrange import ArrangeCache, _Sorted, arrange
from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Buffer, Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.sim.cluster import SimCluster
from tests.engine.test_arrange import ids, view
from tests.engine.test_store_property import NAMES, POOLS, node, pod

POLICY = Policy(buffers=(Buffer(pool="gpu", free_gpus=1, free_gpus_ratio=0.5),))

steps = st.lists(st.tuples(st.sampled_from(["node", "node", "remove", "pod", "pod", "pod", "bind", "finish", "delete",
                                            "mark", "unmark", "peek", "decide", "decide"]),
                           st.integers(0, 100), st.integers(0, 6), st.integers(0, 3), st.integers(0, 2)),
                 min_size=1, max_size=60)


def assert_told_right(before: Cluster | None, now: Cluster) -> None:
    """The snapshot's word: the objects of the last snapshot less those that left plus those that came, by identity."""
    told = now.changes
    if before is None:
        return
    assert told is not None
    for was, left, came, after in ((before.nodes, told.nodes_left, told.nodes_came, now.nodes),
                                   (before.pods, told.pods_left, told.pods_came, now.pods)):
        assert set(ids(left)) <= set(ids(was))
        assert not set(ids(came)) & set(ids(was))
        assert (set(ids(was)) - set(ids(left))) | set(ids(came)) == set(ids(after))
        assert len(ids(left)) == len(set(ids(left))) and len(ids(came)) == len(set(ids(came)))
    assert told.nodes_before is before.nodes and told.pods_before is before.pods


@settings(max_examples=200, deadline=None)
@given(steps)
@example([("pod", 3, 1, 0, 0), ("decide", 0, 0, 0, 0), ("bind", 3, 0, 0, 0), ("decide", 0, 0, 0, 0)])  # bound
@example([("node", 1, 0, 0, 0), ("pod", 1, 1, 2, 0), ("decide", 0, 0, 0, 0), ("mark", 1, 0, 0, 0),
          ("decide", 0, 0, 0, 0)])  # a node replaced under its name
def test_decisions_told_the_changes_equal_those_that_walk(ops: list[tuple[str, int, int, int, int]]) -> None:
    cluster = SimCluster()
    for i, name in enumerate(NAMES[:3]):
        cluster.put_node(node(name, i % 2, 0, 1000.0))
    told_memo, walked_memo = IncrementalStore(), IncrementalStore()
    now = 1000.0
    last: Cluster | None = None

    def check() -> None:
        nonlocal last
        snap = cluster.snapshot()
        if last is not None and snap is not last:
            assert_told_right(last, snap)
        last = snap
        plain = replace(snap, changes=None)
        told = decide(Snapshot(cluster=snap), POOLS, EngineState(), POLICY, now, store=told_memo)
        walked = decide(Snapshot(cluster=plain), POOLS, EngineState(), POLICY, now, store=walked_memo)
        assert told_memo._arrange.last is not None and walked_memo._arrange.last is not None
        assert view(told_memo._arrange.last) == view(walked_memo._arrange.last) == view(arrange(plain))
        assert (told_memo._arrange.last.replaced, told_memo._arrange.last.moved) == \
            (walked_memo._arrange.last.replaced, walked_memo._arrange.last.moved)
        assert told == walked

    for op, i, state, kind, phase in ops:
        name = NAMES[i % len(NAMES)]
        key = f"default/p{i % 30}"
        if op == "node":
            cluster.put_node(node(name, i % 2, state, now))
        elif op == "remove":
            cluster.remove_node(name)
        elif op == "pod":
            cluster.put_pod(pod(i, kind, name if state % 2 and name in cluster.nodes else None, phase))
        elif op == "bind" and key in cluster.pods and cluster.nodes:
            cluster.put_pod(replace(cluster.pods[key], node_name=sorted(cluster.nodes)[state % len(cluster.nodes)]))
        elif op == "finish" and key in cluster.pods:
            cluster.put_pod(pod(i, kind, cluster.pods[key].node_name, 1))
        elif op == "delete":
            cluster.delete_pod(key)
        elif op == "mark":
            cluster.set_deletion_candidate(name, now - 60)
        elif op == "unmark":
            cluster.clear_deletion_candidate(name)
        elif op == "peek":  # a snapshot no decision reads: the next one is told against it, not the decided one
            last = cluster.snapshot()
        elif op == "decide":
            now += 10.0
            check()
    check()


def test_an_honest_word_spares_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the producer's word against the last input, no walk runs; a word that does not add up is not taken."""
    cluster = SimCluster()
    for name in NAMES:
        cluster.put_node(node(name, 0, 0, 1000.0))
    for i in range(40):
        cluster.put_pod(pod(i, 0, NAMES[i % len(NAMES)], 0))
    memo = ArrangeCache()
    memo.arrange(cluster.snapshot())
    shuffle = random.Random(7)
    for _ in range(5):
        key = f"default/p{shuffle.randrange(30)}"
        cluster.put_pod(replace(cluster.pods[key], node_name=NAMES[shuffle.randrange(len(NAMES))]))
    cluster.put_pod(pod(77, 0, None, 0))
    cluster.delete_pod("default/p3")
    cluster.set_deletion_candidate(NAMES[2], 940.0)
    snap = cluster.snapshot()

    def no_walk(*_: object) -> None:
        raise AssertionError("walked although told")

    with monkeypatch.context() as patched:
        patched.setattr(_Sorted, "_walk", no_walk)
        arranged = memo.arrange(snap)
    assert view(arranged) == view(arrange(snap))
    assert arranged.replaced is not None and set(arranged.replaced) == {NAMES[2]}
    assert snap.changes is not None
    # a word that leaves out an object that came does not add up: walked, and the arrangement is still right
    cluster.put_pod(pod(78, 0, None, 0))
    cluster.put_pod(pod(79, 0, None, 0))
    short = cluster.snapshot()
    assert short.changes is not None
    wrong = replace(short, changes=replace(short.changes, pods_came=short.changes.pods_came[:1]))
    walked: list[int] = []
    walk = _Sorted._walk

    def counted(self: _Sorted[object], *args: tuple[object, ...]) -> object:
        walked.append(1)
        return walk(self, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:
        patched.setattr(_Sorted, "_walk", counted)
        arranged = memo.arrange(wrong)
    assert walked and view(arranged) == view(arrange(short))
