"""The twin's scheduler keeps its arrays by increments — a node's row redone when the node comes, goes, turns Ready or
registers its GPUs; pods taken off and given back as they bind and leave; the GPU workload counted as pods come, bind
and go — and must hold exactly what a rebuild from the cluster would: any drift would change placements silently."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import DEVICE_ANNOTATION
from gpuscale.engine.placement.frag import FragTable, class_key, typical_classes_of
from gpuscale.engine.scheduling import static_failures
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, PODS, Resources
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator, soft_taint_count
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import SimScheduler
from tests.builders import make_pod

COLUMNS = ["cpu", "memory", NVIDIA_GPU, GPU_MILLI]
NAMES = [f"n{i}" for i in range(4)]
TAINT = Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE)


def node(name: str, gpus: int, *, ready: bool, registered: bool = True, tainted: bool = False) -> Node:
    amounts = {"cpu": 16_000, "memory": 64 * 2**30, PODS: 6}
    if gpus and registered:
        amounts |= {NVIDIA_GPU: gpus, GPU_MILLI: 1000 * gpus}
    allocatable = Resources.of(amounts)
    return Node(name=name, allocatable=allocatable, capacity=allocatable, ready=ready,
                labels={"kubernetes.io/hostname": name}, taints=(TAINT,) if tainted else ())


def pod(i: int, kind: int, priority: int, tolerant: bool) -> Pod:
    extra = {GPU_MILLI: (250, 500, 700)[kind]} if kind < 3 else None
    tolerations = (Toleration(key="dedicated", operator=TolerationOperator.EXISTS),) if tolerant else ()
    return make_pod(f"p{i}", cpu="2", memory="4Gi", gpus=1 if kind == 3 else 0, extra=extra, priority=priority,
                    tolerations=tolerations)


def arrays(s: SimScheduler) -> tuple[object, ...]:
    return (list(s._names), dict(s._row), s._alloc.tolist(), s._free.tolist(), s._free_pods.tolist(),
            s._all_devices.count.tolist(), s._all_devices.free.tolist(), s._devices is None)


def assert_matches_rebuild(cluster: SimCluster, s: SimScheduler, *, with_table: bool = True) -> None:
    """The arrays, masks, workload, queue and feasibility equal a rebuild; with `with_table`, the chooser's table too
    (asking for it builds it: without, the classes moved keep adding up across choices that need no chooser)."""
    if s._stale:  # nothing built yet: the first pass builds from scratch
        return
    incremental = arrays(s)
    masks = {c: m.tolist() for c, m in s._static.items()}
    for constraints, mask in masks.items():
        assert mask == [not static_failures(constraints, cluster.nodes[n]) for n in s._names]
    for tolerations, soft in s._soft.items():
        assert soft.tolist() == [soft_taint_count(cluster.nodes[n].taints, tolerations) for n in s._names]
    workload = +s._workload
    expected: Counter[object] = Counter()
    for p in cluster.pods.values():
        if (shape := s._request(p.requests).shape) is not None:
            expected[class_key(shape)] += 1
    assert workload == expected
    if with_table and s._gpu_placement is not None:  # the chooser's table, moved by the classes counted since the last
        table = s._chooser().table
        assert (table is None) == (not workload)
        if table is not None:
            fresh = FragTable(typical_classes_of(workload), ("",))
            assert table.classes == fresh.classes and table.weight.tolist() == fresh.weight.tolist()
    if s._queue_order is not None:  # the kept queue is the pending pods sorted afresh (queued at creation or failure)
        fresh = sorted(((-p.priority, s._stamps[p.key][0] if p.key in s._stamps else p.created_s or 0.0, p.key),
                        p.key, s._kind_ids[s._request(p.requests), s._constraint(p.constraints), p.priority])
                       for p in (cluster.pods[k] for k in cluster.pending))
        assert set(s._stamps) <= set(cluster.pending)
        kept = list(s._queue_order)
        assert [(pos, p.key, kind) for pos, p, kind in kept] == fresh
        assert all(p is cluster.pods[p.key] for _, p, _ in kept)
    for p in cluster.pods.values():  # the row-by-row check `_may_fit` uses is the vectorised one
        feasible = s._feasible(p, s._free, s._free_pods).tolist()
        assert [s._any_feasible(p, {row}) for row in range(len(s._names))] == feasible
        assert s._any_feasible(p, set(range(len(s._names)))) == any(feasible)
    s._rebuild()
    assert arrays(s) == incremental
    for constraints in masks:  # cached again, so later steps keep the masks up to date by rows
        s._static_mask(constraints)
        s._soft_counts(constraints.tolerations)


def apply(sim: Simulation, cluster: SimCluster, i: int, op: str, n: int, k: int, flag: bool) -> None:
    """One step of churn: nodes come, turn Ready, register GPUs, go, get marked; pods come and go; passes run."""
    name, current = NAMES[n], cluster.nodes.get(NAMES[n])
    if op == "add" and current is None:  # registered without its GPUs (flag) or with them, maybe Ready
        cluster.put_node(node(name, k, ready=k % 2 == 0, registered=flag, tainted=k == 3))
    elif op == "ready" and current is not None:
        cluster.put_node(replace(current, ready=not current.ready))
    elif op == "gpus" and current is not None:  # the device plugin registers (another count: a new shape)
        cluster.put_node(replace(current, allocatable=node(name, k + 1, ready=True).allocatable))
    elif op == "remove":
        cluster.remove_node(name)
    elif op == "taint" and current is not None:
        cluster.mark_to_be_deleted(name, sim.now) if flag else cluster.unmark_to_be_deleted(name)
    elif op == "candidate" and current is not None:
        cluster.set_deletion_candidate(name, sim.now) if flag else cluster.clear_deletion_candidate(name)
    elif op == "dedicate" and current is not None:  # a taint that blocks scheduling comes or goes, or a cordon
        kept = tuple(t for t in current.taints if t != TAINT)
        cluster.put_node(replace(current, taints=(*kept, TAINT) if flag else kept) if k < 2
                         else replace(current, unschedulable=flag))
    elif op == "pod":
        cluster.put_pod(pod(i, k, n % 3, flag))
    elif op == "delete" and cluster.pods:
        cluster.delete_pod(sorted(cluster.pods)[n % len(cluster.pods)])
    else:
        sim.run(sim.now + 1)


steps = st.lists(st.tuples(st.sampled_from(["add", "ready", "gpus", "remove", "taint", "candidate", "dedicate",
                                             "pod", "delete", "pass"]),
                           st.integers(0, 3), st.integers(0, 3), st.booleans()), min_size=1, max_size=40)


SHRUNK_UNDER_PODS = [("pod", 0, 0, False), ("pod", 0, 0, False), ("pod", 0, 1, False), ("add", 0, 0, False),
                     ("gpus", 0, 0, False)]
"""n0's GPUs re-register as one while its pods hold 1,250 milli on two: the devices can only be reconstructed."""


@settings(max_examples=200, deadline=None)
@given(steps)
@example([*SHRUNK_UNDER_PODS, ("pod", 1, 0, False)])  # a higher-priority share preempts there: arrays equal a rebuild
@example([*SHRUNK_UNDER_PODS, ("pod", 1, 1, False)])  # ... and victims' stale device indices are not given back
@example([("add", 1, 2, True), ("gpus", 0, 2, False), ("gpus", 0, 0, False)])  # n0: 3 GPUs, then 1 beside n1's 2
def test_arrays_match_a_rebuild_after_any_churn(ops: list[tuple[str, int, int, bool]]) -> None:
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, COLUMNS, gpu_placement="gpuscale")
    cluster.put_node(node("n0", 2, ready=True, registered=True))
    cluster.put_pod(pod(0, 0, 0, False))
    sim.run(sim.now + 1)
    assert not scheduler._stale
    for i, (op, n, k, flag) in enumerate(ops, start=1):
        apply(sim, cluster, i, op, n, k, flag)
        assert_matches_rebuild(cluster, scheduler, with_table=i % 4 == 0)
    sim.run(sim.now + 1)
    assert_matches_rebuild(cluster, scheduler)


def test_a_kind_that_failed_waits_for_a_change_and_every_pod_of_it_is_marked() -> None:
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, COLUMNS)
    cluster.put_node(node("a", 0, ready=True))
    for p in (make_pod("big", cpu="15"), make_pod("x", cpu="2")):
        cluster.put_pod(p)
        sim.run(sim.now + 1)
    assert cluster.pods["default/x"].unschedulable
    attempts = scheduler.attempts
    cluster.put_pod(make_pod("y", cpu="2"))  # a new pod of the failed kind; nothing freed: both marked, none bound
    sim.run(sim.now + 1)
    assert cluster.pods["default/y"].unschedulable and cluster.pods["default/x"].node_name is None
    assert scheduler.attempts == attempts + 2
    cluster.delete_pod("default/big")  # room again: the kind is retried
    sim.run(sim.now + 1)
    assert cluster.pods["default/x"].node_name == "a" and cluster.pods["default/y"].node_name == "a"


class _NeverKept(dict[int, int]):
    """A `_still_failing` that keeps nothing: every kind is attempted again in every pass."""

    def __setitem__(self, kind: int, priority: int) -> None:
        pass


class _CreationOrder(SimScheduler):
    """The scheduler with its queue in creation order: a failed attempt does not move the pod back in the queue.
    Which pods count as tried is the kinds kept failing (kube-scheduler's queueing hints: not retried, not re-queued),
    so under the real queue the shortcut changes the order by design; the lockstep tests compare the shortcuts'
    feasibility and marks, which must not depend on the order (tests/sim/test_scheduler_queue.py tests the queue)."""

    def _failed(self, pod: Pod) -> None:
        pass

    def _skipped(self, pod: Pod) -> None:
        pass


class _AlwaysRetry(_CreationOrder):
    """The reference: every pending kind is tried on every node in every pass (no `_no_fit` shortcut, no kinds kept
    as still failing)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._still_failing = _NeverKept()

    def _may_fit(self, pod: Pod, kind: int) -> bool:
        return True


def placements(cluster: SimCluster, scheduler: SimScheduler) -> tuple[object, ...]:
    return scheduler.attempts, {key: (p.node_name, p.unschedulable, p.annotations.get(DEVICE_ANNOTATION))
                                for key, p in cluster.pods.items()}


BOUND_BELOW_A_FAILED_KIND = [("delete", 0, 0, False), ("delete", 0, 0, False), ("remove", 0, 0, False),
                             ("add", 1, 2, True), *[("pass", 0, 0, False)] * 3,
                             ("pod", 0, 2, False), ("pass", 0, 0, False),  # p10: 700 milli at priority 0 on GPU 0
                             ("pod", 1, 2, False), ("pass", 0, 0, False),  # p12: 700 milli at priority 1 on GPU 1
                             ("pod", 2, 1, False), ("pass", 0, 0, False),  # p14: 500 milli at priority 2 fails
                             ("pod", 0, 0, False), ("pass", 0, 0, False),  # p16: 250 milli at priority 0 binds
                             ("pod", 2, 2, False), ("pass", 0, 0, False)]  # p18 pending: another pass
"""p14 fails even by preemption (the node's totals fit it without victims, its devices do not); p16 then binds at a
lower priority and takes room, so preemption now evicts p10 first and p14 fits GPU 0: a pod bound below a failed
kind's priority must make that kind be tried again (in the next pass, which p18 brings)."""


@settings(max_examples=200, deadline=None)
@given(steps)
@example(BOUND_BELOW_A_FAILED_KIND)
def test_kinds_that_fit_nowhere_are_retried_exactly_when_a_full_retry_would_place_them(
        ops: list[tuple[str, int, int, bool]]) -> None:
    """A kind that fitted nowhere is re-checked only on nodes whose room or filters changed since; the binds,
    the devices picked, the Unschedulable marks and the attempts must equal those of retrying every node."""
    in_lockstep([("pod", 0, 3, False), ("pod", 1, 3, True), *ops], apply)


Step = Callable[[Simulation, SimCluster, int, str, int, int, bool], None]


def in_lockstep(steps: list[tuple[str, int, int, bool]], step: Step) -> None:
    """The same churn (`step` applied to each of `steps`) on a scheduler and on one that retries every node each time,
    both starting from one empty Ready GPU node: their placements must agree after every step and at the end."""
    runs = []
    for kind in (_CreationOrder, _AlwaysRetry):
        sim, cluster = Simulation(), SimCluster()
        runs.append((sim, cluster, kind(sim, cluster, COLUMNS, gpu_placement="gpuscale")))
        cluster.put_node(node("n0", 1, ready=True))
    for i, (op, n, k, flag) in enumerate(steps, start=1):
        for sim, cluster, _ in runs:
            step(sim, cluster, i, op, n, k, flag)
        assert placements(*runs[0][1:]) == placements(*runs[1][1:])
    for sim, _, _ in runs:
        sim.run(sim.now + 1)
    assert placements(*runs[0][1:]) == placements(*runs[1][1:])
