"""The twin's scheduler models inter-pod affinity and anti-affinity as the engine's what-if does (InterPodAffinity of
kube-scheduler's default profile): its feasibility equals `WhatIf.feasible` on the same cluster, its topology kept
in step with binds, removals and node changes equals one built afresh, and in the twin a spread set of pods waits for
the nodes the engine scales up for it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.policy import Policy
from gpuscale.engine.scheduling import Topology
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.loop.tick import Autoscaler
from gpuscale.model.node import HOSTNAME_LABEL, ZONE_LABEL, Node
from gpuscale.model.pod import Pod, PodGroupRef
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.sim.cloud import CloudPool, SimCloud
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation, VirtualClock
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.run import EventLog
from gpuscale.sim.scheduler import SimScheduler
from gpuscale.sim.workloads import Service, ServiceSpec, Traffic
from gpuscale.sim.world import World
from tests.builders import make_node, make_pod, pod_term
from tests.sim.test_scheduler_incremental import _AlwaysRetry, _CreationOrder, placements

GI = 2**30
COLUMNS = ["cpu", "memory"]
APPS = ("web", "db", "cache")
ZONES = ("a", "b")

terms = st.lists(st.tuples(st.sampled_from(APPS), st.sampled_from([HOSTNAME_LABEL, ZONE_LABEL])), max_size=2)


@st.composite
def pods(draw: st.DrawFn, name: str, node: str | None = None) -> Pod:
    """A small pod of one app, in one of two namespaces, maybe with (anti-)affinity terms (some selecting itself)."""
    app = draw(st.sampled_from(APPS))
    anti = [pod_term({"app": a}, key) for a, key in draw(terms)] if draw(st.booleans()) else []
    affinity = [pod_term({"app": a}, key) for a, key in draw(terms)] if draw(st.integers(0, 3)) == 0 else []
    return make_pod(name, draw(st.sampled_from(["default", "other"])), cpu=draw(st.sampled_from(["500m", "2"])),
                    labels={"app": app}, anti_affinity=anti, affinity=affinity, node=node,
                    priority=draw(st.integers(0, 1)))


def zone_node(i: int, zone: str | None) -> Node:
    return make_node(f"n{i}", cpu="4", memory="16Gi", pods=6, zone=zone)


def topology_view(topology: Topology) -> tuple[object, ...]:
    return (topology._labels, sorted((p.key, p.node) for p in topology._placed),
            sorted((p.key, p.node) for p in topology._with_anti))


def assert_same_as_engine(cluster: SimCluster, scheduler: SimScheduler, probes: list[Pod]) -> None:
    """The scheduler's topology equals one built from the cluster, and its verdicts equal the engine's what-if
    built from scratch over the same (Ready) nodes and bound pods."""
    assert scheduler._topology is not None
    assert topology_view(scheduler._topology) == topology_view(scheduler._topology_now())
    nodes = [cluster.nodes[n] for n in scheduler._names]
    placed = [p for p in cluster.pods.values() if p.node_name is not None]
    table = whatif_of(nodes, [n.allocatable for n in nodes], placed, with_topology=True)
    for probe in probes:
        mine = scheduler._feasible(probe, scheduler._free, scheduler._free_pods)
        assert mine.tolist() == table.feasible(probe).tolist(), probe
        assert [scheduler._any_feasible(probe, {row}) for row in range(len(nodes))] == mine.tolist()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_feasibility_equals_the_engines_whatif_through_binds_removals_and_node_changes(data: st.DataObject) -> None:
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, COLUMNS)
    count = data.draw(st.integers(1, 4))
    for i in range(count):
        cluster.put_node(zone_node(i, data.draw(st.sampled_from([*ZONES, None]))))
    # a pod with a term that fits nowhere: the scheduler keeps a topology from its first pass
    cluster.put_pod(make_pod("anchor", cpu="64", anti_affinity=[pod_term({"app": "none"})]))
    sim.run(sim.now + 1)
    assert scheduler._topology is not None
    for i in range(data.draw(st.integers(0, 12))):
        op = data.draw(st.sampled_from(["bind", "bind", "pending", "delete", "relabel", "remove", "add", "pass"]))
        if op == "bind":
            cluster.put_pod(data.draw(pods(f"b{i}", f"n{data.draw(st.integers(0, count - 1))}")))
        elif op == "pending":
            cluster.put_pod(data.draw(pods(f"q{i}")))
        elif op == "delete" and len(cluster.pods) > 1:
            cluster.delete_pod(data.draw(st.sampled_from(sorted(k for k in cluster.pods if k != "default/anchor"))))
        elif op == "relabel" and cluster.nodes:
            node = cluster.nodes[data.draw(st.sampled_from(sorted(cluster.nodes)))]
            zone = data.draw(st.sampled_from([*ZONES, None]))
            labels = {k: v for k, v in node.labels.items() if k != ZONE_LABEL} | ({ZONE_LABEL: zone} if zone else {})
            cluster.put_node(replace(node, labels=labels))
        elif op == "remove" and cluster.nodes:
            cluster.remove_node(data.draw(st.sampled_from(sorted(cluster.nodes))))
        elif op == "add":
            cluster.put_node(zone_node(count, data.draw(st.sampled_from(ZONES))))
            count += 1
        else:
            sim.run(sim.now + 1)
        probes = [data.draw(pods(f"probe{i}-{k}")) for k in range(3)]
        assert_same_as_engine(cluster, scheduler, probes)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_passes_with_affinity_pods_place_as_retrying_every_pod_on_every_node(data: st.DataObject) -> None:
    """Pods whose feasibility depends on the pods placed take no shortcut: binds, marks and attempts equal those of
    a scheduler that retries everything (preemption included: two priorities)."""
    runs = []
    for kind in (_CreationOrder, _AlwaysRetry):
        sim, cluster = Simulation(), SimCluster()
        runs.append((sim, cluster, kind(sim, cluster, COLUMNS)))
    zones = [data.draw(st.sampled_from(ZONES)) for _ in range(3)]
    steps = [data.draw(pods(f"p{i}")) if data.draw(st.integers(0, 3)) else None for i in range(20)]
    for _, cluster, _ in runs:
        for i, zone in enumerate(zones):
            cluster.put_node(zone_node(i, zone))
    for i, step in enumerate(steps):
        for sim, cluster, _ in runs:
            if step is not None:
                cluster.put_pod(step)
            elif cluster.pods:
                cluster.delete_pod(sorted(cluster.pods)[i % len(cluster.pods)])
            sim.run(sim.now + 1)
        assert placements(*runs[0][1:]) == placements(*runs[1][1:])


def test_preemption_takes_the_victims_anti_affinity_into_account() -> None:
    """A high-priority pod is kept off the only node by a low-priority pod's anti-affinity against it: the victims
    must include that pod even though the resources fit without evicting anything."""
    sim, cluster = Simulation(), SimCluster()
    scheduler = SimScheduler(sim, cluster, COLUMNS)
    cluster.put_node(zone_node(0, "a"))
    cluster.put_pod(make_pod("filler", cpu="1", labels={"app": "cache"}, node="n0"))
    cluster.put_pod(make_pod("loner", cpu="1", labels={"app": "db"}, node="n0",
                             anti_affinity=[pod_term({"app": "web"})]))
    cluster.put_pod(make_pod("web", cpu="1", labels={"app": "web"}, priority=10))
    sim.run(sim.now + 1)
    assert cluster.pods["default/web"].node_name == "n0"
    assert "default/loner" not in cluster.pods and "default/filler" in cluster.pods
    assert scheduler._topology is not None and topology_view(scheduler._topology) == topology_view(
        scheduler._topology_now())


def test_a_gang_spread_by_anti_affinity_is_placed_only_when_every_member_has_a_node() -> None:
    """The gang's trial includes the members placed before: two members that avoid each other per host need two
    nodes; with one node neither binds, with a second both do."""
    sim, cluster = Simulation(), SimCluster()
    SimScheduler(sim, cluster, COLUMNS)
    cluster.put_node(zone_node(0, "a"))
    group = PodGroupRef(key="default/g", source="kueue", min_member=2)
    for i in range(2):
        cluster.put_pod(replace(make_pod(f"m{i}", labels={"app": "web"}, anti_affinity=[pod_term({"app": "web"})]),
                                group=group))
    sim.run(sim.now + 1)
    assert all(p.node_name is None for p in cluster.pods.values())
    cluster.put_node(zone_node(1, "a"))
    sim.run(sim.now + 1)
    assert sorted(p.node_name or "" for p in cluster.pods.values()) == ["n0", "n1"]


# --------------------------------------------------------------------------------------------------------- the twin

def twin(pools: list[NodePool], preload: dict[str, int]) -> tuple[Simulation, SimCluster, World, Autoscaler]:
    sim, cluster = Simulation(), SimCluster()
    world: list[World] = []
    scheduler = SimScheduler(sim, cluster, COLUMNS, on_bound=lambda p, n: world[0].bound(p, n))
    cloud = SimCloud(sim, cluster, {p.name: CloudPool(pool=p, profile=PROFILES["cpu"]) for p in pools},
                     np.random.default_rng(1), [])
    world.append(World(sim=sim, cluster=cluster, scheduler=scheduler, cloud=cloud, rng=np.random.default_rng(1)))
    for name, count in preload.items():
        cloud.preload(name, count)
    autoscaler = Autoscaler(reader=cluster, writer=cluster, provider=cloud, events=EventLog(),
                            clock=VirtualClock(sim), pools=pools, policy=Policy(new_pod_delay_s=0))
    return sim, cluster, world[0], autoscaler


def cpu_pool(name: str, zone: str) -> NodePool:
    return NodePool(name=name, allocatable=Resources.of({"cpu": 8_000, "memory": 32 * GI, "pods": 110}),
                    usd_per_hour=0.4, max_size=10, zones=(zone,))


def service(name: str, replicas: int, cpu: int, **constraints: object) -> ServiceSpec:
    pod = make_pod(name, **constraints)  # type: ignore[arg-type]
    return ServiceSpec(name=name, requests=Resources.of({"cpu": cpu, "memory": GI}), constraints=pod.constraints,
                       traffic=Traffic(trough_rps=1.0, peak_rps=1.0), rps_per_replica=1.0, min_replicas=replicas,
                       max_replicas=replicas, sync_s=3600.0)


def bound_pods(cluster: SimCluster, app: str) -> list[Pod]:
    return [p for p in cluster.pods.values() if p.labels.get("app") == app and p.node_name is not None]


def run_with_ticks(sim: Simulation, autoscaler: Autoscaler, seconds: float, every: float = 10.0) -> None:
    end = sim.now + seconds
    while sim.now < end:
        sim.run(sim.now + every)
        autoscaler.tick()


def test_required_hostname_anti_affinity_spreads_one_per_node_and_the_rest_wait_for_the_scale_up() -> None:
    """Five replicas that avoid each other per host, small enough that a node holds many: the two nodes take one
    each, three stay pending and Unschedulable, the engine scales the pool up by three for them, and all five end on
    five distinct nodes."""
    pool = cpu_pool("cpu", "zone-a")
    sim, cluster, world, autoscaler = twin([pool], {"cpu": 2})
    Service(world, service("web", 5, 500, labels={"app": "web"}, anti_affinity=[pod_term({"app": "web"})]))
    sim.run(sim.now + 2 + Policy().batch_idle_s)  # the pending pods' batch window has closed (D39)
    assert len({p.node_name for p in bound_pods(cluster, "web")}) == len(bound_pods(cluster, "web")) == 2
    waiting = [p for p in cluster.pods.values() if p.node_name is None]
    assert len(waiting) == 3 and all(p.unschedulable for p in waiting)
    report = autoscaler.tick()
    assert report.plan is not None
    assert sum(s.nodes for s in report.plan.scale_up if s.pool == "cpu") == 3
    assert {k for s in report.plan.scale_up for k in s.pods} == {p.key for p in waiting}
    run_with_ticks(sim, autoscaler, 900.0)
    web = bound_pods(cluster, "web")
    assert len(web) == 5 and len({p.node_name for p in web}) == 5 and len(cluster.nodes) == 5


def test_required_zone_affinity_keeps_pods_in_their_peers_zone_and_scales_that_zones_pool() -> None:
    """A database runs in zone b and fills its node; the web pods must share its zone. Zone a's node has room, yet
    they stay pending there; the engine scales zone b's pool, and they run in zone b only."""
    pools = [cpu_pool("cpu-a", "zone-a"), cpu_pool("cpu-b", "zone-b")]
    sim, cluster, world, autoscaler = twin(pools, {"cpu-a": 1, "cpu-b": 1})
    Service(world, service("db", 1, 7_000, labels={"app": "db"}, node_selector={ZONE_LABEL: "zone-b"}))
    Service(world, service("web", 3, 2_000, labels={"app": "web"}, affinity=[pod_term({"app": "db"}, ZONE_LABEL)]))
    sim.run(sim.now + 2 + Policy().batch_idle_s)  # the pending pods' batch window has closed (D39)
    assert [cluster.nodes[p.node_name or ""].labels[ZONE_LABEL] for p in bound_pods(cluster, "db")] == ["zone-b"]
    assert not bound_pods(cluster, "web") and sum(p.labels.get("app") == "web" for p in cluster.pods.values()) == 3
    report = autoscaler.tick()
    assert report.plan is not None
    assert {s.pool for s in report.plan.scale_up} == {"cpu-b"}
    run_with_ticks(sim, autoscaler, 900.0)
    web = bound_pods(cluster, "web")
    assert len(web) == 3 and {cluster.nodes[p.node_name or ""].labels[ZONE_LABEL] for p in web} == {"zone-b"}
