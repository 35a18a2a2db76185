"""The twin's scheduler models host ports as the engine's what-if does (NodePorts): its verdicts equal
`WhatIf.feasible` on the same cluster through binds and removals, its shortcuts (a kind that failed, queueing hints)
place as retrying every pod would, and preemption evicts a lower-priority pod holding the port."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.pod import HostPort, Pod
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import SimScheduler
from tests.builders import make_node, make_pod
from tests.sim.test_scheduler_incremental import _AlwaysRetry, _CreationOrder, placements

COLUMNS = ["cpu", "memory"]
PORTS = [(), (), (HostPort(80),), (HostPort(80, host_ip="10.0.0.1"),), (HostPort(80, "UDP"),),
         (HostPort(80), HostPort(443))]


@st.composite
def pods(draw: st.DrawFn, name: str, node: str | None = None) -> Pod:
    return make_pod(name, cpu=draw(st.sampled_from(["500m", "2"])), node=node, priority=draw(st.integers(0, 1)),
                    host_ports=draw(st.sampled_from(PORTS)))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_verdicts_equal_the_engines_and_shortcuts_place_as_retrying_everything(data: st.DataObject) -> None:
    runs = []
    for kind in (_CreationOrder, _AlwaysRetry):
        sim, cluster = Simulation(), SimCluster()
        runs.append((sim, cluster, kind(sim, cluster, COLUMNS)))
    nodes = data.draw(st.integers(1, 3))
    steps = [data.draw(pods(f"p{i}")) if data.draw(st.integers(0, 3)) else None for i in range(16)]
    for _, cluster, _ in runs:
        for i in range(nodes):
            cluster.put_node(make_node(f"n{i}", cpu="4", memory="16Gi", pods=6))
    for i, step in enumerate(steps):
        for sim, cluster, _ in runs:
            if step is not None:
                cluster.put_pod(step)
            elif cluster.pods:
                cluster.delete_pod(sorted(cluster.pods)[i % len(cluster.pods)])
            sim.run(sim.now + 1)
        assert placements(*runs[0][1:]) == placements(*runs[1][1:])
        _, cluster, scheduler = runs[0]
        ready = [cluster.nodes[n] for n in scheduler._names]
        table = whatif_of(ready, [n.allocatable for n in ready], [p for p in cluster.pods.values() if p.node_name])
        probe = data.draw(pods(f"probe{i}"))
        assert (scheduler._feasible(probe, scheduler._free, scheduler._free_pods).tolist()
                == table.feasible(probe).tolist())


def test_preemption_evicts_the_lower_priority_pod_holding_the_port() -> None:
    """The only node has room, but a low-priority pod binds host port 80: a high-priority pod asking it preempts that
    pod (and only it), as DefaultPreemption's victims must free the port."""
    sim, cluster = Simulation(), SimCluster()
    SimScheduler(sim, cluster, COLUMNS)
    cluster.put_node(make_node("n0", cpu="4", memory="16Gi"))
    cluster.put_pod(make_pod("holder", cpu="500m", priority=0, host_ports=(HostPort(80),)))
    cluster.put_pod(make_pod("bystander", cpu="500m", priority=0))
    sim.run(sim.now + 1)
    assert cluster.pods["default/holder"].node_name == "n0"
    cluster.put_pod(make_pod("urgent", cpu="500m", priority=10, host_ports=(HostPort(80),)))
    sim.run(sim.now + 1)
    assert cluster.pods["default/urgent"].node_name == "n0"
    assert "default/holder" not in cluster.pods and cluster.pods["default/bystander"].node_name == "n0"
