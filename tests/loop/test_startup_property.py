"""Property (issue 25, item 6): however nodes start — labels late, cordoned and uncordoned, start-up taints, GPUs
late, some never finishing — the loop orders no more nodes for a fixed set of pending pods than it does when every
node starts instantly. Driven through the real `decide` and `tick` against the in-memory fakes."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.engine.policy import Policy
from gpuscale.loop.tick import Autoscaler
from gpuscale.model.node import Node
from gpuscale.model.pod import NodeAffinity, Pod, SchedulingConstraints
from gpuscale.model.resources import Resources, is_gpu_resource
from gpuscale.model.taints import Taint, TaintEffect
from tests.fakes import FakeClock, FakeCluster, FakeEvents, FakeProvider, make_pool, owned_pod

PRODUCT = "nvidia.com/gpu.product"
GFD = {PRODUCT: "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8", "nvidia.com/mig.config": "all-disabled"}
A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=20, labels=GFD)
CPU = make_pool("cpu-general", cpu=16_000, max_size=20)
NOT_READY = Taint(key="node.kubernetes.io/not-ready", effect=TaintEffect.NO_SCHEDULE)
CORDON = Taint(key="node.kubernetes.io/unschedulable", effect=TaintEffect.NO_SCHEDULE)
STARTUP = ("readiness.k8s.io/GPUReady", "readiness.k8s.io/NetworkReady", "nodewright.nvidia.com")
POLICY = Policy(new_pod_delay_s=0, new_gpu_pod_delay_s=0, max_gpu_init_time_s=1e6, max_node_provision_time_s=1e6)
TICKS = 12


@dataclass(frozen=True)
class Script:
    """When (in ticks after registering) each part of a node's start-up happens; None: never."""

    ready: int | None
    gpus: int | None
    labels: int | None
    cordon: tuple[int, int | None] | None
    taint: str | None
    untaint: int | None


def _script() -> st.SearchStrategy[Script]:
    at = st.one_of(st.none(), st.integers(0, TICKS + 2))
    window = st.one_of(st.none(), st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(1, TICKS))))
    return st.builds(Script, ready=at, gpus=at, labels=at, cordon=window, taint=st.one_of(st.none(),
                     st.sampled_from(STARTUP)), untaint=at)


def _due(at: int | None, age: int) -> bool:
    return at is not None and age >= at


def _as_of(base: Node, script: Script, age: int) -> Node:
    ready = _due(script.ready, age)
    allocatable = base.allocatable
    if not _due(script.gpus, age):
        allocatable = Resources(tuple((n, a) for n, a in allocatable.items if not is_gpu_resource(n)))
    labels = dict(base.labels) if _due(script.labels, age) else {k: v for k, v in base.labels.items() if k not in GFD}
    cordoned = script.cordon is not None and age >= script.cordon[0] and (
        script.cordon[1] is None or age < script.cordon[0] + script.cordon[1])
    taints = list(base.taints)
    if not ready:
        taints.append(NOT_READY)
    if cordoned:
        taints.append(CORDON)
    if script.taint is not None and not _due(script.untaint, age):
        taints.append(Taint(key=script.taint, value="pending", effect=TaintEffect.NO_SCHEDULE))
    return replace(base, ready=ready, allocatable=allocatable, capacity=allocatable, labels=labels,
                   unschedulable=cordoned, taints=tuple(taints))


def _ordered(pods: list[Pod], scripts: list[Script] | None) -> int:
    """Nodes ordered over `TICKS` ticks; `scripts` None: every node starts instantly, else node i follows
    `scripts[i % len]`."""
    clock = FakeClock()
    cluster = FakeCluster([], pods)
    provider = FakeProvider((A100, CPU), clock, cluster)
    scaler = Autoscaler(reader=cluster, writer=cluster, provider=provider, events=FakeEvents(), clock=clock,
                        pools=(A100, CPU), policy=POLICY)
    booting: list[tuple[Node, Script, int]] = []
    for tick in range(TICKS):
        scaler.tick()
        for request_id in list(provider.requests):
            node = provider.register(request_id)
            if scripts is not None:
                booting.append((node, scripts[len(booting) % len(scripts)], tick))
        for base, script, born in booting:
            cluster.nodes[base.name] = _as_of(base, script, tick - born)
        clock.advance(10)
    return sum(c[2] for c in provider.calls if c[0] == "increase")


@st.composite
def _pods(draw: st.DrawFn) -> list[Pod]:
    pods = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        pod = owned_pod(f"p-{i}", gpus=gpus, cpu=draw(st.sampled_from([500, 4000, 12_000])))
        if gpus and draw(st.booleans()):  # selects the label GFD adds late
            pod = replace(pod, constraints=SchedulingConstraints(
                affinity=NodeAffinity(node_selector=((PRODUCT, GFD[PRODUCT]),)),
                tolerations=pod.constraints.tolerations))
        pods.append(pod)
    return pods


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=_pods(), scripts=st.lists(_script(), min_size=1, max_size=4))
def test_start_up_sequences_never_order_more_nodes_than_instant_start(pods: list[Pod], scripts: list[Script]) -> None:
    instant = _ordered(pods, None)
    assert _ordered(pods, scripts) <= instant, scripts
