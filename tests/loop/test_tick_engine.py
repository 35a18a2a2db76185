"""A few ticks end to end: the real engine's `decide` behind the loop, against the in-memory fakes.

These check the seams: the provider's stockout reaches the engine as backoff on the next tick; the taints the loop
writes are what the engine reads back; a drain the engine plans is carried out over several ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import FailureKind
from gpuscale.loop import events as ev
from gpuscale.loop.report import TickReport
from gpuscale.loop.tick import Autoscaler
from gpuscale.model.pool import NodePool
from tests.fakes import T0, FakeClock, FakeCluster, FakeEvents, FakeProvider, make_pool, node_of, owned_pod

CPU = make_pool("cpu-general", cpu=16_000, max_size=10, min_size=1, usd_per_hour=0.8)
A100_A = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8, usd_per_hour=29.39, zones=("us-central1-a",))
A100_B = make_pool("gpu-training-a100-b", gpus=8, cpu=95_000, max_size=8, usd_per_hour=29.40,
                   zones=("us-central1-b",))


@dataclass
class Loop:
    clock: FakeClock
    cluster: FakeCluster
    provider: FakeProvider
    events: FakeEvents
    autoscaler: Autoscaler

    def tick_after(self, seconds: float) -> TickReport:
        self.clock.advance(seconds)
        return self.autoscaler.tick()


def loop(cluster: FakeCluster, pools: tuple[NodePool, ...], policy: Policy | None = None,
         **faults: Any) -> Loop:
    clock = FakeClock()
    provider = FakeProvider(pools, clock, cluster, **faults)
    events = FakeEvents()
    autoscaler = Autoscaler(reader=cluster, writer=cluster, provider=provider, events=events, clock=clock,
                            pools=pools, policy=policy or Policy())
    return Loop(clock, cluster, provider, events, autoscaler)


def test_stockout_backs_off_and_the_next_tick_falls_back_to_the_second_a100_pool() -> None:
    cluster = FakeCluster([node_of(CPU, "cpu-1", created_s=T0 - 7200)],
                          [owned_pod("train-0", namespace="ml", gpus=8, cpu=8000)])
    w = loop(cluster, (CPU, A100_A, A100_B), stockout_pools={"gpu-training-a100"})

    first = w.autoscaler.tick()
    assert first.plan is not None and [s.pool for s in first.plan.scale_up] == ["gpu-training-a100"]
    assert first.scaled_up == () and first.errors[0].error == "capacity-unavailable"
    backoff = w.autoscaler.state.in_backoff("gpu-training-a100", w.clock.now())
    assert backoff is not None and backoff.kind is FailureKind.STOCKOUT

    second = w.tick_after(10)
    assert [s.pool for s in second.scaled_up] == ["gpu-training-a100-b"]
    [triggered] = w.events.about("ml/train-0", ev.TRIGGERED_SCALE_UP)
    assert triggered.message == "pod triggered scale-up: [gpu-training-a100-b 0->1 (max: 8)]"

    third = w.tick_after(10)  # the request is upcoming: the pod waits for it, no second scale-up
    assert third.scaled_up == () and third.errors == ()
    assert [a[0] for a in w.provider.actions()].count("increase") == 2


def test_node_registers_pod_binds_then_idle_node_is_marked_and_removed() -> None:
    cluster = FakeCluster([node_of(CPU, "cpu-1", created_s=T0 - 7200)],
                          [owned_pod("train-0", namespace="ml", gpus=8, cpu=8000)])
    w = loop(cluster, (CPU, A100_A))
    assert len(w.autoscaler.tick().scaled_up) == 1
    [node] = w.provider.register_all()
    cluster.bind("ml/train-0", node.name)
    assert w.tick_after(10).scaled_up == ()

    cluster.remove_pod("ml/train-0")  # the job finished: the A100 node is empty
    report = w.tick_after(60)
    assert node.name in report.marked_unneeded
    taint = next(t for t in cluster.nodes[node.name].taints if t.key == DELETION_CANDIDATE_TAINT)
    since = float(taint.value)

    removed: list[str] = []
    for _ in range(80):  # up to ~13 min: unneeded time (10 m) and delay after add (10 m) both pass
        report = w.tick_after(10)
        removed.extend(report.deleted)
        if removed:
            break
    assert removed == [node.name]
    assert w.clock.now() - since >= (Policy().scale_down_gpu_unneeded_time_s or 0)  # an A100 node: the GPU clock
    assert node.name not in cluster.nodes
    assert w.events.about(node.name, ev.SCALE_DOWN)


def test_underutilized_node_is_drained_through_evictions_then_deleted() -> None:
    nodes = [node_of(CPU, f"cpu-{i}", created_s=T0 - 7200) for i in (1, 2)]
    pods = [owned_pod("web-0", namespace="web", node="cpu-1", cpu=2000),
            owned_pod("web-1", namespace="web", node="cpu-2", cpu=2000)]
    cluster = FakeCluster(nodes, pods, remove_evicted=False)
    w = loop(cluster, (CPU,))
    started: list[str] = []
    for _ in range(80):
        report = w.tick_after(10)
        started.extend(report.drains_started)
        if started:
            break
    [draining] = started
    evicted = next(iter(w.autoscaler.drains)).pods
    assert all(("evict", pod) in cluster.calls for pod in evicted)
    assert any(t.key == TO_BE_DELETED_TAINT for t in cluster.nodes[draining].taints)
    assert w.tick_after(10).deleted == ()  # pods still terminating

    for pod in evicted:  # the controller recreates them; they terminate on the drained node
        cluster.remove_pod(pod)
    assert w.tick_after(10).deleted == (draining,)
    assert len(w.autoscaler.drains) == 0 and w.autoscaler.state.last_scale_down_s == w.clock.now()


def test_gpu_node_that_never_gets_its_gpus_is_given_back_and_the_pod_goes_elsewhere() -> None:
    cluster = FakeCluster([node_of(CPU, "cpu-1", created_s=T0 - 7200)],
                          [owned_pod("train-0", namespace="ml", gpus=8, cpu=8000)])
    w = loop(cluster, (CPU, A100_A, A100_B))
    assert [s.pool for s in w.autoscaler.tick().scaled_up] == ["gpu-training-a100"]
    [node] = [w.provider.register(r, gpus_registered=False) for r in list(w.provider.requests)]  # driver stuck

    timed_out: list[str] = []
    for _ in range(200):
        report = w.tick_after(10)
        timed_out.extend(report.timed_out)
        assert report.scaled_up == () or timed_out, "no second node while the first one is still starting"
        if timed_out:
            break
    assert timed_out == [node.name] and node.name not in cluster.nodes
    assert w.events.about(node.name, ev.SCALE_UP_TIMED_OUT)
    backoff = w.autoscaler.state.in_backoff("gpu-training-a100", w.clock.now())
    assert backoff is not None and backoff.kind is FailureKind.GPU_INIT_TIMEOUT and backoff.failures == 1

    pools = [s.pool for s in report.scaled_up] or [s.pool for s in w.tick_after(10).scaled_up]
    assert pools == ["gpu-training-a100-b"]
