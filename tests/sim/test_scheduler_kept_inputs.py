"""What the twin's scheduler keeps beside its arrays for scoring and filtering must equal what it would compute afresh
from the cluster, under churn:

- `_fit_alloc`, `_fit_zero_rows`: NodeResourcesFit's allocatable columns and the rows with a zero there, kept as
  rows come, go and change; the fit scores read from them equal the plain formula on the rows as they are;
- `_filtered`: per row, the node its filter masks were computed from — a relabel that leaves the filters' inputs
  alike (a `PreferNoSchedule` mark, mostly) redoes only the soft-taint counts, so the masks must still equal fresh
  verdicts after labels, cordons and taints of every effect come and go."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.scheduling import static_failures
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator, soft_taint_count
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import Scoring, SimScheduler
from tests.builders import make_pod
from tests.sim.test_scheduler_incremental import COLUMNS, NAMES, apply, node, steps

SOFT = Taint(key="soft", value="x", effect=TaintEffect.PREFER_NO_SCHEDULE)
HARD = Taint(key="hard", value="x", effect=TaintEffect.NO_EXECUTE)


def fit_formula(s: SimScheduler, pod: Pod) -> list[float]:
    """NodeResourcesFit's score of every row from `_alloc` and `_free` as they are, column by column in Python."""
    vec = s._request(pod.requests).vec
    assert vec is not None
    out = []
    for row in range(len(s._names)):
        shares = [float(int(s._free[row, c]) - int(vec[c])) / float(int(s._alloc[row, c]))
                  if s._alloc[row, c] > 0 else 0.0 for c in s._fit_cols]
        mean = (shares[0] + shares[1]) / 2.0 if len(shares) == 2 else float(np.mean(shares))
        out.append(100.0 * (mean if s._scoring is Scoring.LEAST_ALLOCATED else 1.0 - mean))
    return out


def assert_kept_inputs_fresh(cluster: SimCluster, s: SimScheduler, probes: list[Pod]) -> None:
    if s._stale:
        return
    assert [c.tolist() for c in s._fit_alloc] == [s._alloc[:, col].tolist() for col in s._fit_cols]
    assert s._fit_zero_rows == sum(1 for row in s._alloc.tolist() if any(row[col] <= 0 for col in s._fit_cols))
    assert sorted(s._filtered) == sorted(s._names)
    for constraints, mask in s._static.items():
        assert mask.tolist() == [not static_failures(constraints, cluster.nodes[n]) for n in s._names]
        assert [not static_failures(constraints, s._filtered[n]) for n in s._names] == mask.tolist()
    for tolerations, soft in s._soft.items():
        assert soft.tolist() == [soft_taint_count(cluster.nodes[n].taints, tolerations) for n in s._names]
    every = np.arange(len(s._names), dtype=np.int64)
    for probe in probes:
        if s._request(probe.requests).vec is not None and len(every):
            assert s._fit_scores(probe, every, s._free).tolist() == fit_formula(s, probe)
            # the feasibility mask (one-device shortcut included) equals the row-by-row check
            feasible = s._feasible(probe, s._free, s._free_pods).tolist()
            assert feasible == [s._any_feasible(probe, {row}) for row in range(len(s._names))]


PROBES = [make_pod("probe-a", cpu="3", memory="5Gi"), make_pod("probe-b", cpu="1", extra={GPU_MILLI: 400}),
          make_pod("probe-c", cpu="1", gpus=1), make_pod("probe-d", cpu="1", gpus=2)]


@settings(max_examples=150, deadline=None)
@given(steps, st.sampled_from([Scoring.LEAST_ALLOCATED, Scoring.MOST_ALLOCATED, Scoring.GPU_BINPACK]))
def test_kept_scoring_inputs_equal_fresh_ones_under_churn(ops: list[tuple[str, int, int, bool]],
                                                           scoring: Scoring) -> None:
    """gpu-binpack reads the two GPU columns, zero on CPU rows: the zero-denominator path is taken too."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, COLUMNS, scoring, gpu_placement="fgd")
    cluster.put_node(node("n0", 1, ready=True))
    whole = node("m0", 0, ready=True)  # whole GPUs without per-device accounting: a row without devices
    cluster.put_node(replace(whole, allocatable=Resources.of({**dict(whole.allocatable.items), NVIDIA_GPU: 2})))
    cluster.put_pod(make_pod("p0", cpu="1", extra={GPU_MILLI: 250}))
    sim.run(sim.now + 1)
    for i, (op, n, k, flag) in enumerate(ops, start=1):
        apply(sim, cluster, i, op, n, k, flag)
        assert_kept_inputs_fresh(cluster, scheduler, PROBES)
    sim.run(sim.now + 1)
    assert_kept_inputs_fresh(cluster, scheduler, PROBES)


relabels = st.lists(st.tuples(st.sampled_from(["label", "soft", "hard", "cordon", "candidate", "pod", "pass"]),
                              st.integers(0, 3), st.integers(0, 2), st.booleans()), min_size=1, max_size=40)


def relabel(cluster: SimCluster, sim: Simulation, i: int, op: str, n: int, k: int, flag: bool) -> None:
    """One relabel of node n (labels, a soft or blocking taint, a cordon, the autoscaler's candidate mark), a pod with
    a node selector and tolerations, or a pass."""
    name = NAMES[n]
    current = cluster.nodes.get(name)
    if op == "label" and current is not None:
        labels = dict(current.labels)
        if flag:
            labels["pool"] = f"p{k}"
        else:
            labels.pop("pool", None)
        cluster.put_node(replace(current, labels=labels))
    elif op in ("soft", "hard") and current is not None:
        taint = SOFT if op == "soft" else HARD
        kept = tuple(t for t in current.taints if t != taint)
        cluster.put_node(replace(current, taints=(taint, *kept) if flag else kept))
    elif op == "cordon" and current is not None:
        cluster.put_node(replace(current, unschedulable=flag))
    elif op == "candidate" and current is not None:
        cluster.set_deletion_candidate(name, sim.now) if flag else cluster.clear_deletion_candidate(name)
    elif op == "pod":
        tolerations = [(), (Toleration(key="soft", operator=TolerationOperator.EXISTS),),
                       (Toleration(key="hard", operator=TolerationOperator.EXISTS),)][k]
        cluster.put_pod(make_pod(f"q{i}", cpu="1", extra={GPU_MILLI: 300} if flag else None, tolerations=tolerations,
                                 node_selector={"pool": f"p{n % 3}"} if n < 3 else None))
    else:
        sim.run(sim.now + 1)


@settings(max_examples=200, deadline=None)
@given(relabels)
def test_masks_equal_fresh_verdicts_after_relabels_that_skip_the_filters(
        ops: list[tuple[str, int, int, bool]]) -> None:
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, [*COLUMNS], gpu_placement="gpuscale")
    for i, name in enumerate(NAMES):
        base: Node = node(name, i % 2, ready=True)
        cluster.put_node(replace(base, labels={**base.labels, "pool": f"p{i % 3}"}))
    cluster.put_pod(make_pod("seed", cpu="1", node_selector={"pool": "p1"},
                             tolerations=(Toleration(key="soft", operator=TolerationOperator.EXISTS),)))
    sim.run(sim.now + 1)
    for i, (op, n, k, flag) in enumerate(ops, start=1):
        relabel(cluster, sim, i, op, n, k, flag)
        assert_kept_inputs_fresh(cluster, scheduler, [])
        for p in list(cluster.pods.values()):  # masks for every pod's constraints exist and are checked next step
            scheduler._static_mask(p.constraints)
            scheduler._soft_counts(scheduler._constraint(p.constraints).tolerations)
    sim.run(sim.now + 1)
    assert_kept_inputs_fresh(cluster, scheduler, [])


def test_a_candidate_mark_redoes_only_the_soft_counts() -> None:
    """The common relabel: the autoscaler marks a node a deletion candidate (`PreferNoSchedule`): the filter masks
    are left as they are (their verdicts cannot change) and the soft counts see the mark."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, [*COLUMNS, NVIDIA_GPU])
    cluster.put_node(node("n0", 0, ready=True))
    cluster.put_pod(make_pod("a", cpu="1"))
    sim.run(sim.now + 1)
    pod = make_pod("b", cpu="1")
    mask = scheduler._static_mask(pod.constraints)
    soft = scheduler._soft_counts(())
    calls: list[str] = []
    original = scheduler._redo_filters
    scheduler._redo_filters = lambda row, n: (calls.append(n.name), original(row, n))  # type: ignore[method-assign]
    cluster.set_deletion_candidate("n0", 0.0)
    assert calls == [] and mask.tolist() == [True] and soft.tolist() == [1]
    cluster.mark_to_be_deleted("n0", 0.0)  # a blocking taint and a cordon: the filters are redone
    assert calls == ["n0"] and mask.tolist() == [False]
