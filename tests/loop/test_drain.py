"""`DrainTracker` / `Drain`: which pods of a drain are still on the node."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.loop.drain import DrainTracker
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import PodPhase
from tests.fakes import T0, owned_pod


def test_remaining_counts_pods_of_the_drain_still_on_the_node() -> None:
    tracker = DrainTracker()
    drain = tracker.start("n1", "cpu", T0, ["a/x", "a/y", "a/z"], ["a/y"])
    cluster = Cluster(pods=(
        owned_pod("x", namespace="a", node="n1"),                                  # still there
        owned_pod("y", namespace="a", node="n2"),                                  # same name, elsewhere: left
        owned_pod("other", namespace="a", node="n1"),                              # not part of the drain
    ))
    assert drain.remaining(cluster) == {"a/x"}
    done = Cluster(pods=(replace(owned_pod("x", namespace="a", node="n1"), phase=PodPhase.SUCCEEDED),))
    assert drain.remaining(done) == frozenset()


def test_tracker_keeps_start_order_and_updates() -> None:
    tracker = DrainTracker()
    tracker.start("n2", "cpu", T0, ["a/x"], ["a/x"])
    tracker.start("n1", "cpu", T0 + 1, ["a/y"], [])
    assert [d.node for d in tracker] == ["n2", "n1"] and len(tracker) == 2 and "n1" in tracker
    tracker.set_unevicted("n2", [])
    drain = tracker.get("n2")
    assert drain is not None and drain.unevicted == frozenset()
    for drain in tracker:  # finishing while iterating is safe
        tracker.finish(drain.node)
    assert len(tracker) == 0 and tracker.get("n1") is None
