"""loop/provreq.py: the ProvisioningRequest extension driven through real ticks on the in-memory fakes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuscale.engine.policy import Policy
from gpuscale.engine.provreq import (
    BEST_EFFORT_ATOMIC,
    FAILED,
    PROVISIONED,
    TRUE,
    Condition,
    PodSet,
    ProvisioningRequest,
)
from gpuscale.loop.ports import NotSynced
from gpuscale.loop.provreq import DryRunRequests, ProvisioningRequests, SkipSyntheticPods
from gpuscale.loop.report import Action
from gpuscale.loop.tick import Autoscaler
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.model.taints import Toleration, TolerationOperator
from tests.builders import make_pod
from tests.fakes import T0, FakeClock, FakeCluster, FakeEvents, FakeProvider, make_pool, node_of

A100 = make_pool("gpu-training-a100", cpu=95_000, memory=630 * 2**30, gpus=8, max_size=8)
POLICY = Policy(new_pod_delay_s=0.0, new_gpu_pod_delay_s=0.0)


@dataclass
class FakeRequests:
    """A `RequestSource` in memory: conditions written are applied (with the clock's time as transition time)."""

    items: dict[str, ProvisioningRequest] = field(default_factory=dict)
    synced: bool = True
    fail_writes: bool = False
    writes: list[tuple[str, tuple[Condition, ...]]] = field(default_factory=list)

    def requests(self) -> tuple[ProvisioningRequest, ...]:
        if not self.synced:
            raise NotSynced("provisioning-request cache not synced: ProvisioningRequest")
        return tuple(self.items.values())

    def write_conditions(self, request: str, conditions: Sequence[Condition], now_s: float) -> None:
        if self.fail_writes:
            raise ConnectionError("apiserver unavailable")
        self.writes.append((request, tuple(conditions)))
        current = self.items[request]
        merged = dict(current.conditions)
        for c in conditions:
            old = merged.get(c.type)
            merged[c.type] = replace(c, since_s=old.since_s if old and old.status == c.status else now_s)
        self.items[request] = replace(current, conditions=merged)


def atomic(count: int) -> ProvisioningRequest:
    pod = make_pod("ppt", cpu="4", memory="16Gi", gpus=8,
                   tolerations=(Toleration(key=NVIDIA_GPU, operator=TolerationOperator.EXISTS),))
    return ProvisioningRequest(namespace="team", name="train", class_name=BEST_EFFORT_ATOMIC,
                               pod_sets=(PodSet(template_name="ppt-train-main", template=pod, count=count),),
                               created_s=T0 - 30)


def build(pools: tuple[NodePool, ...], requests: FakeRequests,
          **faults: object) -> tuple[Autoscaler, FakeProvider, FakeEvents, FakeClock]:
    clock = FakeClock()
    cluster = FakeCluster()
    provider = FakeProvider(pools, clock, cluster, **faults)  # type: ignore[arg-type]
    events = FakeEvents()
    autoscaler = Autoscaler(reader=cluster, writer=cluster, provider=provider, events=SkipSyntheticPods(events),
                            clock=clock, pools=pools, policy=POLICY, extension=ProvisioningRequests(requests))
    return autoscaler, provider, events, clock


def test_atomic_request_scales_up_then_is_provisioned_when_nodes_are_usable() -> None:
    requests = FakeRequests({"team/train": atomic(4)})
    autoscaler, provider, events, clock = build((A100,), requests)
    first = autoscaler.tick()
    assert [(s.pool, s.nodes) for s in first.scaled_up] == [(A100.name, 4)] and first.errors == ()
    assert requests.items["team/train"].conditions[PROVISIONED].reason == "ScaleUpInProgress"
    assert not [e for e in events.events if e.kind == "Pod"]  # synthetic pods get no events
    clock.advance(10)
    assert autoscaler.tick().scaled_up == ()  # upcoming nodes cover the gang
    for request_id in list(provider.requests):
        provider.register(request_id, ready=True, gpus_registered=False)
    clock.advance(10)
    autoscaler.tick()
    assert requests.items["team/train"].conditions[PROVISIONED].status != TRUE  # GPUs not registered yet
    cluster = provider.cluster
    assert cluster is not None
    for name in list(cluster.nodes):  # the device plugin registers the GPUs
        cluster.nodes[name] = node_of(A100, name, created_s=clock.now() - 20)
    clock.advance(10)
    report = autoscaler.tick()
    assert requests.items["team/train"].conditions[PROVISIONED].status == TRUE
    assert report.scaled_up == () and report.plan is not None and report.plan.scale_down == ()
    assert [a[0] for a in provider.actions()].count("increase") == 1


def test_stockout_fails_the_request_and_orders_nothing() -> None:
    requests = FakeRequests({"team/train": atomic(2)})
    autoscaler, provider, _, _ = build((A100,), requests, stockout_pools={A100.name})
    report = autoscaler.tick()
    assert report.scaled_up == () and provider.requests == {}
    failed = requests.items["team/train"].conditions[FAILED]
    assert failed.status == TRUE and failed.reason == "ScaleUpFailed" and "no capacity" in failed.message


def test_unsynced_requests_stop_the_whole_tick() -> None:
    requests = FakeRequests({"team/train": atomic(2)}, synced=False)
    autoscaler, provider, _, _ = build((A100,), requests)
    report = autoscaler.tick()
    assert not report.synced and provider.actions() == []
    assert report.errors[0].error == "NotSynced"


def test_failed_writes_are_reported_and_retried() -> None:
    requests = FakeRequests({"team/train": atomic(2)}, fail_writes=True)
    autoscaler, _, _, clock = build((A100,), requests)
    report = autoscaler.tick()
    assert [e.action for e in report.errors] == [Action.UPDATE_PROVISIONING_REQUEST]
    requests.fail_writes = False
    clock.advance(10)
    autoscaler.tick()
    assert requests.writes and requests.writes[-1][0] == "team/train"


def test_dry_run_records_and_writes_nothing() -> None:
    inner = FakeRequests({"team/train": atomic(1)})
    dry = DryRunRequests(inner)
    dry.write_conditions("team/train", (Condition(type=PROVISIONED, status=TRUE, reason="x", message=""),), T0)
    assert dry.requests() == inner.requests() and inner.writes == [] and len(dry.writes) == 1
