"""The twin cluster's snapshot reuses its node tuple between node changes: every snapshot must still hold exactly the
objects a fresh build from the cluster's dicts would, in the same order (compared by identity), under random churn."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.sim.cluster import SimCluster
from tests.builders import make_node, make_pod

TAINT = Taint(key="k", effect=TaintEffect.NO_SCHEDULE)
step = st.tuples(st.sampled_from(["node", "retaint", "remove", "pod", "bind", "delete", "mark", "snapshot"]),
                 st.integers(0, 5))


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=50))
def test_snapshots_hold_what_a_fresh_build_holds(steps: list[tuple[str, int]]) -> None:
    cluster = SimCluster()
    for op, i in steps:
        name, key = f"n{i}", f"default/p{i}"
        if op == "node":
            cluster.put_node(make_node(name, cpu=str(4 + i)))
        elif op == "retaint" and name in cluster.nodes:
            node = cluster.nodes[name]
            cluster.put_node(replace(node, taints=() if node.taints else (TAINT,)))
        elif op == "remove":
            cluster.remove_node(name)
        elif op == "mark":
            cluster.set_deletion_candidate(name, 5.0)
        elif op == "pod" and key not in cluster.pods:
            cluster.put_pod(make_pod(f"p{i}"))
        elif op == "bind" and key in cluster.pods and cluster.nodes:
            cluster.put_pod(replace(cluster.pods[key], node_name=sorted(cluster.nodes)[0]))
        elif op == "delete":
            cluster.delete_pod(key)
        snapshot = cluster.snapshot()
        assert list(map(id, snapshot.nodes)) == list(map(id, cluster.nodes.values()))
        assert list(map(id, snapshot.pods)) == list(map(id, cluster.pods.values()))
        assert cluster.snapshot() is snapshot
