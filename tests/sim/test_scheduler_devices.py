"""The twin's scheduler on fractional GPUs: per-GPU accounting, the device annotation it writes, fragmentation-aware
choice for GPU pods (configured scoring for ties and for CPU pods), and no device ever overcommitted."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import DEVICE_ANNOTATION
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, PODS, Resources
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import Scoring, SimScheduler
from tests.builders import make_pod

COLUMNS = ["cpu", "memory", NVIDIA_GPU, GPU_MILLI]


def gpu_node(name: str, gpus: int = 2) -> Node:
    allocatable = Resources.of({"cpu": 32_000, "memory": 128 * 2**30, PODS: 110, NVIDIA_GPU: gpus,
                                GPU_MILLI: 1000 * gpus})
    return Node(name=name, allocatable=allocatable, capacity=allocatable, labels={"kubernetes.io/hostname": name})


def share(name: str, milli: int) -> Pod:
    return make_pod(name, cpu="1", memory="1Gi", extra={GPU_MILLI: milli})


def whole(name: str, gpus: int) -> Pod:
    return make_pod(name, cpu="1", memory="1Gi", gpus=gpus)


def cluster_with(nodes: list[Node], scoring: Scoring = Scoring.LEAST_ALLOCATED,
                 placement: str | None = None) -> tuple[Simulation, SimCluster, SimScheduler]:
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, COLUMNS, scoring, gpu_placement=placement)
    for node in nodes:
        cluster.put_node(node)
    return sim, cluster, scheduler


def submit(sim: Simulation, cluster: SimCluster, *pods: Pod) -> None:
    for pod in pods:
        cluster.put_pod(pod)
        sim.run(sim.now + 1)


def where(cluster: SimCluster, name: str) -> tuple[str | None, str | None]:
    pod = cluster.pods[f"default/{name}"]
    return pod.node_name, pod.annotations.get(DEVICE_ANNOTATION)


def test_fractions_need_one_device_with_room() -> None:
    sim, cluster, _ = cluster_with([gpu_node("a")])
    submit(sim, cluster, share("x", 600), share("y", 600))
    assert {where(cluster, "x")[1], where(cluster, "y")[1]} == {"0", "1"}
    submit(sim, cluster, share("p", 500), whole("w", 1))  # 800 milli and 2 GPUs free by totals: neither fits a device
    assert where(cluster, "p")[0] is None and cluster.pods["default/p"].unschedulable
    assert where(cluster, "w")[0] is None
    submit(sim, cluster, share("q", 400))
    assert where(cluster, "q")[0] == "a"


def test_devices_come_back_when_a_pod_leaves() -> None:
    sim, cluster, _ = cluster_with([gpu_node("a", gpus=1)])
    submit(sim, cluster, share("x", 600))
    cluster.delete_pod("default/x")
    submit(sim, cluster, whole("w", 1))
    assert where(cluster, "w") == ("a", "0")


def test_least_allocated_spreads_fractions_but_fragmentation_aware_packs_them() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    sim, cluster, _ = cluster_with(nodes, Scoring.LEAST_ALLOCATED)
    submit(sim, cluster, share("x", 500), share("y", 500))
    assert where(cluster, "x")[0] != where(cluster, "y")[0]  # kube's default spreads: two half-used GPUs
    sim, cluster, _ = cluster_with(nodes, Scoring.LEAST_ALLOCATED, placement="gpuscale")
    submit(sim, cluster, share("x", 500), share("y", 500))
    assert where(cluster, "x") == where(cluster, "y")  # one full GPU, three free
    cpu = make_pod("c", cpu="4", memory="1Gi")
    submit(sim, cluster, cpu)
    assert where(cluster, "c")[0] != where(cluster, "x")[0]  # CPU pods keep the configured (spreading) scoring


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.integers(100, 1000).map(lambda m: ("milli", m)),
                          st.integers(1, 2).map(lambda k: ("whole", k)),
                          st.integers(0, 40).map(lambda i: ("delete", i))), min_size=1, max_size=40),
       st.sampled_from([None, "gpuscale", "fgd"]))
def test_no_device_is_overcommitted(steps: list[tuple[str, int]], placement: str | None) -> None:
    sim, cluster, _ = cluster_with([gpu_node("a"), gpu_node("b", gpus=4)], Scoring.MOST_ALLOCATED, placement)
    for i, (kind, value) in enumerate(steps):
        if kind == "delete":
            keys = sorted(cluster.pods)
            if keys:
                cluster.delete_pod(keys[value % len(keys)])
            continue
        pod = share(f"p{i}", value) if kind == "milli" and value < 1000 else whole(f"p{i}", value if kind == "whole"
                                                                                    else 1)
        submit(sim, cluster, pod)
    used: dict[tuple[str, int], int] = defaultdict(int)
    for pod in cluster.pods.values():
        if pod.node_name is None:
            assert pod.phase is PodPhase.PENDING
            continue
        devices = [int(d) for d in pod.annotations[DEVICE_ANNOTATION].split(",")]
        milli = pod.requests.get(GPU_MILLI) or 1000
        assert len(devices) == max(pod.requests.get(NVIDIA_GPU), 1)
        for d in devices:
            assert 0 <= d < cluster.nodes[pod.node_name].allocatable.get(NVIDIA_GPU)
            used[(pod.node_name, d)] += milli
    assert all(v <= 1000 for v in used.values()), used


def test_the_sharing_scenario_offers_fractional_gpus_and_presets_differ_in_placement() -> None:
    from gpuscale.sim.scenario import load_scenario, policy_named

    setup, config = load_scenario("sharing")
    pools = {p.pool.name: p.pool for p in setup.pools}
    assert pools["t4x4"].allocatable.get(GPU_MILLI) == 4000 and pools["v100x8"].allocatable.get(GPU_MILLI) == 8000
    assert any(j.requests.get(GPU_MILLI) for j in setup.jobs)  # openb fractions are in the workload
    ours, ca = policy_named("gpuscale", config), policy_named("ca-defaults", config)
    assert ours.gpu_placement == "gpuscale" and ours.policy.gpu_placement == "gpuscale"
    assert ca.gpu_placement is None and ca.policy.gpu_placement is None and ca.scoring is Scoring.LEAST_ALLOCATED
