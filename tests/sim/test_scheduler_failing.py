"""Kinds that fit nowhere stay marked as failing (`SimScheduler._still_failing`) through a change on one node when that
node's row cannot take them even empty: the passes must bind, mark and count exactly as retrying every kind on every
node in every pass would. The churn of test_scheduler_incremental plus pods at the edge of a node's allocatable: a
pod asking the whole node's CPU (fits an empty node only: `<` against `<=`), more CPU than any node has, or more GPUs
than most nodes have."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import SimScheduler
from tests.builders import make_pod
from tests.sim.test_scheduler_incremental import apply, in_lockstep, node

EDGE = {0: dict(cpu="16"), 1: dict(cpu="17"), 2: dict(cpu="1", gpus=3), 3: dict(cpu="16", gpus=1)}
"""Requests at the edge of the test nodes' allocatable (16 CPUs, 0–3 GPUs)."""

ops = st.lists(st.tuples(st.sampled_from(["add", "ready", "gpus", "remove", "taint", "dedicate", "pod", "edge",
                                          "delete", "pass"]),
                         st.integers(0, 3), st.integers(0, 3), st.booleans()), min_size=1, max_size=40)

WHOLE_NODE_AFTER_A_REMOVAL = [("add", 1, 0, False), ("pass", 0, 0, False), ("pod", 1, 3, False),
                              ("pass", 0, 0, False), ("edge", 0, 0, False), ("pass", 0, 0, False),
                              ("delete", 0, 0, False), ("delete", 0, 0, False), ("edge", 1, 0, False),
                              ("pass", 0, 0, False)]
"""A pod asking all 16 CPUs fails while the nodes hold pods; once a node is emptied the kind must be tried again."""


def step(sim: Simulation, cluster: SimCluster, i: int, op: str, n: int, k: int, flag: bool) -> None:
    if op == "edge":
        cluster.put_pod(make_pod(f"e{i}", priority=n % 2, **EDGE[k]))
    else:
        apply(sim, cluster, i, op, n, k, flag)


@settings(max_examples=300, deadline=None)
@given(ops)
@example(WHOLE_NODE_AFTER_A_REMOVAL)
def test_kinds_kept_failing_through_one_node_changes_place_as_a_full_retry(
        steps: list[tuple[str, int, int, bool]]) -> None:
    in_lockstep([("pod", 0, 3, False), ("edge", 0, 1, False), *steps], step)


def test_a_removal_keeps_only_the_kinds_its_node_cannot_take_empty() -> None:
    """Two kinds fail on a full node: one asks more CPU than the node has, one fits the node once room is freed.
    A pod leaving keeps the first marked and lets the second be tried (and bound)."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, ["cpu", "memory"])
    cluster.put_node(node("a", 0, ready=True))
    cluster.put_pod(make_pod("fill", cpu="15"))
    sim.run(sim.now + 1)
    cluster.put_pod(make_pod("huge", cpu="17"))
    cluster.put_pod(make_pod("small", cpu="2"))
    sim.run(sim.now + 1)
    assert len(scheduler._still_failing) == 2
    cluster.delete_pod("default/fill")
    huge = scheduler._kind_ids[(scheduler._request(cluster.pods["default/huge"].requests),
                                scheduler._constraint(cluster.pods["default/huge"].constraints), 0)]
    assert list(scheduler._still_failing) == [huge]
    sim.run(sim.now + 1)
    assert cluster.pods["default/small"].node_name == "a" and cluster.pods["default/huge"].unschedulable
