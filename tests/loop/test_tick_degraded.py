"""The loop with the real engine: a degraded node is reported (a Warning event, rate-limited), never deleted by a
time-out, and its pool never backed off; and the property that no node running workloads is ever deleted except
through the drain path."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.engine.policy import Policy
from gpuscale.loop import events as ev
from gpuscale.loop.tick import Autoscaler
from gpuscale.model.node import Node
from gpuscale.model.pod import OwnerRef, Pod
from gpuscale.model.resources import NVIDIA_GPU, Resources
from tests.fakes import T0, FakeClock, FakeCluster, FakeEvents, FakeProvider, make_pool, node_of, owned_pod

A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8)
CPU = make_pool("cpu-general", cpu=16_000, max_size=10)
LONG_AGO = T0 - 200_000


def _gpus(node: Node, gpus: int, *, ready: bool = True) -> Node:
    amounts = {**dict(node.allocatable.items), NVIDIA_GPU: gpus}
    return replace(node, allocatable=Resources.of(amounts), ready=ready, ready_since_s=LONG_AGO)


def _autoscaler(cluster: FakeCluster, policy: Policy | None = None, *, repair: bool = False,
                ) -> tuple[Autoscaler, FakeClock, FakeProvider, FakeEvents]:
    clock, events = FakeClock(), FakeEvents()
    pools = (replace(A100, node_repair=True, max_nodes_under_repair=2) if repair else A100, CPU)
    provider = FakeProvider(pools, clock, cluster)
    scaler = Autoscaler(reader=cluster, writer=cluster, provider=provider, events=events, clock=clock,
                        pools=pools, policy=policy or Policy())
    return scaler, clock, provider, events


def test_the_xid79_node_is_reported_once_per_interval_and_never_deleted() -> None:
    node = _gpus(node_of(A100, "a100-1", created_s=LONG_AGO), 7)
    cluster = FakeCluster([node], [owned_pod("train-0", namespace="ml", node="a100-1", gpus=7, owner="Job")])
    scaler, clock, provider, events = _autoscaler(cluster)
    for _ in range(40):  # 400 s: one event, then quiet until the 300 s interval passes
        report = scaler.tick()
        assert report.timed_out == () and report.deleted == ()
        clock.advance(10)
    assert [c for c in provider.actions() if c[0] == "delete"] == []
    warnings = events.about("a100-1", ev.NODE_DEGRADED)
    assert len(warnings) == 2 and warnings[0].type == "Warning"
    assert "nvidia.com/gpu 7 of 8" in warnings[0].message
    assert scaler.state.backoff == {}


def _workload_nodes(cluster: FakeCluster) -> set[str]:
    return {p.node_name for p in cluster.pods.values()
            if p.node_name and not p.of_daemonset() and not p.is_terminal()}


NODE_KIND = st.sampled_from(["usable", "partial", "no-gpus", "not-ready", "fresh-no-gpus"])


@st.composite
def _world(draw: st.DrawFn) -> tuple[list[Node], list[Pod]]:
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 5))):
        kind = draw(NODE_KIND)
        created = T0 - 30 if kind == "fresh-no-gpus" else LONG_AGO
        base = node_of(A100, f"a100-{i}", created_s=created)
        gpus = {"usable": 8, "partial": draw(st.integers(1, 7)), "not-ready": 8}.get(kind, 0)
        nodes.append(_gpus(base, gpus, ready=kind != "not-ready"))
        for j in range(draw(st.integers(0, 2))):
            owner = draw(st.sampled_from(["Job", "ReplicaSet", "DaemonSet", None]))
            pod = owned_pod(f"p-{i}-{j}", node=base.name, gpus=draw(st.integers(0, 1)), cpu=500, owner=owner)
            pods.append(pod if owner != "DaemonSet" else replace(pod, owner=OwnerRef(kind="DaemonSet", name="ds")))
    pods += [owned_pod(f"pending-{k}", gpus=draw(st.sampled_from([1, 8])), cpu=1000)
             for k in range(draw(st.integers(0, 3)))]
    return nodes, pods


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=_world(), steps=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["gpus", "ready", "finish", "none"]),
                                               st.integers(0, 8)), min_size=5, max_size=25), repair=st.booleans())
def test_no_node_running_workloads_is_deleted_except_through_a_drain(
        world: tuple[list[Node], list[Pod]], steps: list[tuple[int, str, int]], repair: bool) -> None:
    """With and without the repair policy: a repair drains too."""
    nodes, pods = world
    cluster = FakeCluster(nodes, pods)
    policy = Policy(scale_down_unneeded_time_s=60, scale_down_gpu_unneeded_time_s=60)
    scaler, clock, _, _ = _autoscaler(cluster, policy, repair=repair)
    drained: set[str] = set()
    for target, change, amount in steps:
        name = f"a100-{target}"
        if name in cluster.nodes and change == "gpus":
            cluster.nodes[name] = _gpus(cluster.nodes[name], amount, ready=cluster.nodes[name].ready)
        elif name in cluster.nodes and change == "ready":
            cluster.nodes[name] = replace(cluster.nodes[name], ready=not cluster.nodes[name].ready)
        elif change == "finish":
            for key in [k for k, p in cluster.pods.items() if p.node_name == name][:1]:
                cluster.remove_pod(key)
        busy = _workload_nodes(cluster)
        report = scaler.tick()
        drained.update(report.drains_started)
        assert not set(report.timed_out) & busy, "a time-out deleted a node under its workloads"
        for node in report.deleted:
            assert node not in busy or node in drained, f"{node} deleted under its pods without a drain"
        clock.advance(120)


def test_a_malformed_do_not_disrupt_value_is_a_warning_event_on_the_pod_once_per_interval() -> None:
    idle = [node_of(CPU, "cpu-1", created_s=LONG_AGO), node_of(CPU, "cpu-2", created_s=LONG_AGO)]
    pod = replace(owned_pod("w-0", node="cpu-1", cpu=500), annotations={"karpenter.sh/do-not-disrupt": "4 hours"})
    busy = owned_pod("busy", node="cpu-2", cpu=12_000)
    cluster = FakeCluster(idle, [pod, busy])
    scaler, clock, provider, events = _autoscaler(cluster, Policy(scale_down_unneeded_time_s=0,
                                                                  scale_down_delay_after_add_s=0))
    for _ in range(35):
        scaler.tick()
        clock.advance(10)
    warnings = events.about("default/w-0", ev.MALFORMED_ANNOTATION)
    assert len(warnings) == 2 and warnings[0].type == "Warning"
    assert "karpenter.sh/do-not-disrupt: '4 hours'" in warnings[0].message
    assert "cpu-1" in cluster.nodes and "default/w-0" in cluster.pods
    assert [c for c in provider.actions() if c[0] == "delete" and "cpu-1" in c[1]] == []


def test_a_repair_taints_cordons_evicts_and_deletes_only_once_drained() -> None:
    node = _gpus(node_of(A100, "a100-1", created_s=LONG_AGO), 7)
    cluster = FakeCluster([node], [owned_pod("serve-0", node="a100-1", gpus=1)], remove_evicted=False)
    scaler, clock, provider, _ = _autoscaler(cluster, repair=True)
    first = scaler.tick()
    assert first.drains_started == ("a100-1",) and [e.pod for e in first.evictions] == ["default/serve-0"]
    assert cluster.nodes["a100-1"].unschedulable
    clock.advance(10)
    assert scaler.tick().deleted == ()  # the pod is still terminating
    cluster.remove_pod("default/serve-0")
    clock.advance(10)
    assert scaler.tick().deleted == ("a100-1",)
    assert [c[0] for c in provider.actions()].count("delete") == 1
