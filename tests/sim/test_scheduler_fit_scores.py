"""NodeResourcesFit's score in the twin's scheduler equals the plain formula to the bit: per node, the mean over CPU
and memory of (free after the pod) / allocatable (0 where nothing is allocatable), × 100 (least-allocated) or
(1 − mean) × 100 (most-allocated). Ties between nodes go by these floats, so any other rounding could move a pod."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.model.node import Node
from gpuscale.model.resources import PODS, Resources
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import Scoring, SimScheduler
from tests.builders import make_pod

node_st = st.tuples(st.integers(0, 64), st.integers(0, 9), st.integers(0, 12), st.integers(0, 3))
"""CPUs (0: none), memory in 7 GiB steps, CPUs and memory GiB the node's pods take."""


@given(st.lists(node_st, min_size=1, max_size=6), st.integers(0, 4000), st.integers(0, 3),
       st.sampled_from([Scoring.LEAST_ALLOCATED, Scoring.MOST_ALLOCATED]))
@settings(max_examples=150, deadline=None)
def test_fit_scores_equal_the_formula(nodes: list[tuple[int, int, int, int]], cpu_milli: int, memory_gib: int,
                                      scoring: Scoring) -> None:
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, ["cpu", "memory"], scoring)
    for i, (cpus, memory, used_cpus, used_gib) in enumerate(nodes):
        allocatable = Resources.of({"cpu": cpus * 1000, "memory": memory * 7 * 2**30, PODS: 110})
        cluster.put_node(Node(name=f"n{i}", allocatable=allocatable, capacity=allocatable,
                              labels={"kubernetes.io/hostname": f"n{i}"}))
        if used_cpus or used_gib:
            cluster.put_pod(make_pod(f"p{i}", cpu=str(used_cpus), memory=f"{used_gib}Gi", node=f"n{i}"))
    scheduler._rebuild()
    pod = make_pod("x", cpu=f"{cpu_milli}m", memory=f"{memory_gib}Gi")
    candidates = np.arange(len(nodes), dtype=np.int64)
    got = scheduler._fit_scores(pod, candidates, scheduler._free).tolist()
    expected = []
    for cpus, memory, used_cpus, used_gib in nodes:
        shares = []
        for alloc, used, asked in ((cpus * 1000, used_cpus * 1000, cpu_milli),
                                   (memory * 7 * 2**30, used_gib * 2**30, memory_gib * 2**30)):
            shares.append(float(alloc - used - asked) / float(alloc) if alloc > 0 else 0.0)
        mean = (shares[0] + shares[1]) / 2.0
        expected.append(100.0 * (mean if scoring is Scoring.LEAST_ALLOCATED else 1.0 - mean))
    assert got == expected


@given(st.lists(st.tuples(node_st, st.booleans()), min_size=1, max_size=8), st.lists(st.integers(0, 7), min_size=1,
                                                                                      max_size=12),
       st.integers(0, 4000), st.sampled_from([Scoring.LEAST_ALLOCATED, Scoring.MOST_ALLOCATED]))
@settings(max_examples=150, deadline=None)
def test_the_rank_keys_put_the_best_scored_row_first_in_name_order_first(
        nodes: list[tuple[tuple[int, int, int, int], bool]], of_row: list[int], cpu_milli: int,
        scoring: Scoring) -> None:
    """The fragmentation chooser breaks its ties by the first minimum of `_kube_rank`'s keys among the tied rows
    (ascending): that must be the row kube's scoring ranks first — the highest score, the first name on ties —
    which rows repeating a few states (equal scores) put to the test."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, ["cpu", "memory"], scoring)
    marked = Taint(key="DeletionCandidateOfClusterAutoscaler", value="1", effect=TaintEffect.PREFER_NO_SCHEDULE)
    for i, row in enumerate(of_row):
        (cpus, memory, used_cpus, used_gib), tainted = nodes[row % len(nodes)]
        allocatable = Resources.of({"cpu": cpus * 1000, "memory": memory * 7 * 2**30, PODS: 110})
        cluster.put_node(Node(name=f"n{i:02}", allocatable=allocatable, capacity=allocatable,
                              labels={"kubernetes.io/hostname": f"n{i:02}"}, taints=(marked,) if tainted else ()))
        if used_cpus or used_gib:
            cluster.put_pod(make_pod(f"p{i}", cpu=str(used_cpus), memory=f"{used_gib}Gi", node=f"n{i:02}"))
    scheduler._rebuild()
    pod = make_pod("x", cpu=f"{cpu_milli}m", memory="1Gi")
    feasible = np.arange(len(of_row), dtype=np.int64)
    for tied in (feasible, feasible[::2], feasible[1:]):
        if not len(tied):
            continue
        score = scheduler._kube_scores(pod, tied, scheduler._free, feasible)
        first = int(np.lexsort((tied, -score))[0])  # kube's order: score descending, then name
        assert int(np.argmin(scheduler._kube_rank(pod, tied, scheduler._free, feasible))) == first
