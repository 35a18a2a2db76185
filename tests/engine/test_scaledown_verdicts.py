"""Scale-down verdicts for nodes kept because a pod fits on no other node: they name what keeps the pod (its host
ports, its topology spread constraint, its claims), and they never contradict themselves or the what-if — checked over
random clusters (`test_scaledown_properties.worlds`) against the plain per-node oracle (`tests/engine/oracle.py`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import example, given
from hypothesis import strategies as st

from gpuscale.engine.nowhere import port_text
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import HostPort, Pod, TopologySpreadConstraint
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import LabelSelector
from tests.engine.oracle import node_failures
from tests.engine.test_scaledown import node, pod, removed, run
from tests.engine.test_scaledown_properties import PROPERTY, World, plan, worlds

PORTS = ((), (), (HostPort(8080),), (HostPort(8080, "UDP"),), (HostPort(8080, host_ip="10.0.0.1"),), (HostPort(9100),))

ZONE = "topology.kubernetes.io/zone"


def _zoned(name: str, zone: str) -> Node:
    base = node(name)
    return replace(base, labels={**base.labels, ZONE: zone})


def _ported(p: Pod, *ports: HostPort) -> Pod:
    return replace(p, constraints=replace(p.constraints, host_ports=ports))


def test_a_pod_kept_by_its_host_port_names_the_port() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [_ported(pod("web", "a"), HostPort(8080), HostPort(9090, "UDP", "10.0.0.1")),
            _ported(pod("other", "b"), HostPort(8080)), pod("busy-c", "c", cpu="3950m")]
    result = run(nodes, pods)
    assert removed(result) == []
    (verdict,) = [v for v in result.blocked if v.node == "a"]
    reason = verdict.reasons[0]
    assert reason.code is ReasonCode.NO_PLACE_TO_MOVE
    assert reason.message == ("node a: pod default/web fits on no other node: node(s) didn't have free ports for the "
                              "requested pod ports (TCP 8080, UDP 10.0.0.1:9090)")
    # the port free on b: a goes
    freed = [p if p.name != "other" else pod("other", "b") for p in pods]
    assert removed(run(nodes, freed)) == ["a"]


def test_a_pod_kept_by_its_spread_names_the_topology_key() -> None:
    spread = TopologySpreadConstraint(max_skew=1, topology_key=ZONE,
                                      selector=LabelSelector(match_labels=(("app", "web"),)))

    def web(name: str, on: str) -> Pod:
        p = pod(name, on, labels={"app": "web"})
        return replace(p, constraints=replace(p.constraints, topology_spread=(spread,)))

    # z1: a (one web pod, underused) and d (full); z2: b with two web pods and room. Moving w1 to b skews z2 by 3.
    nodes = [_zoned("a", "z1"), _zoned("d", "z1"), _zoned("b", "z2")]
    pods = [web("w1", "a"), pod("busy-d", "d", cpu="3950m"), web("w2", "b"), web("w3", "b")]
    table = whatif_of(nodes, [n.allocatable for n in nodes], pods, with_topology=True)
    result = run(nodes, pods, table=table)
    assert "a" not in removed(result)
    (verdict,) = [v for v in result.blocked if v.node == "a"]
    assert verdict.reasons[0].message == (
        "node a: pod default/w1 fits on no other node: node(s) didn't match pod topology spread constraints "
        f"(topology key {ZONE}, maxSkew 1)")


@PROPERTY
@given(worlds())
def test_kept_node_verdicts_agree_with_themselves_and_the_oracle(world: World) -> None:
    result = plan(world)
    by_key = {p.key: p for p in world.pods}
    for verdict in result.blocked:
        kept = [r for r in verdict.reasons if r.code is ReasonCode.NO_PLACE_TO_MOVE]
        if not kept:
            continue
        (reason,) = kept
        others = [r for r in verdict.reasons if r is not reason]
        # never "no pod needs to move" beside "pod P fits on no other node", nor fewer pods to move than it names
        assert all(r.code is not ReasonCode.EMPTY for r in others)
        assert all(reason.numbers["pods_to_move"] >= r.numbers.get("pods_to_move", 0) for r in others)
        prefix = f"node {verdict.node}: pod "
        assert reason.message.startswith(prefix)
        named = by_key[reason.message[len(prefix):].split(" ", 1)[0]]
        ports = named.constraints.host_ports
        if "free ports" in reason.message:
            assert ports and all(port_text(p) in reason.message for p in ports)
        if reason.numbers["moved_before"]:
            assert "moved before it" in reason.message
            continue
        if "found unneeded before it" in reason.message:
            continue
        # No node was found unneeded before (none gave up a pod or a destination) and the pod was the node's first to
        # move: it fits on no other node, as the plain oracle finds it on each, and if some node rejects it for its
        # ports, the verdict names them.
        assert named.node_name == verdict.node
        used: dict[str, Resources] = {n.name: Resources() for n in world.nodes}
        count: Counter[str] = Counter()
        here: dict[str, list[Pod]] = {n.name: [] for n in world.nodes}
        for p in world.pods:
            used[p.node_name or ""] = used[p.node_name or ""] + p.requests
            count[p.node_name or ""] += 1
            here[p.node_name or ""].append(p)
        others_nodes = [n for n in world.nodes if n.name != verdict.node and n.ready and not n.deleting]
        failures = [node_failures(named, n, used[n.name], count[n.name], here=here[n.name]) for n in others_nodes]
        assert all(failures)
        if any(f[0].code.value == "NodePorts" for f in failures):
            assert "free ports" in reason.message


@st.composite
def one_candidate(draw: st.DrawFn) -> tuple[list[Node], list[Pod]]:
    """Node a, underused (below 2 of 4 cores), with one to three pods to move; two to four other nodes above the
    threshold (not candidates) with room of 0.05 to 2 cores; host ports anywhere."""
    nodes = [node("a"), *(node(f"n{i}") for i in range(draw(st.integers(2, 4))))]
    pods = [_ported(pod(f"m{k}", "a", cpu=draw(st.sampled_from(("100m", "500m", "600m")))),
                    *draw(st.sampled_from(PORTS))) for k in range(draw(st.integers(1, 3)))]
    pods = [p for k, p in enumerate(pods) if not any(
        q.constraints.host_ports and p.constraints.host_ports and q.constraints.host_ports[0].conflicts(
            p.constraints.host_ports[0]) for q in pods[:k])]  # the scheduler never bound two conflicting pods
    for n in nodes[1:]:
        pods.append(_ported(pod(f"busy-{n.name}", n.name, cpu=draw(st.sampled_from(("2", "3", "3500m", "3950m")))),
                            *draw(st.sampled_from(PORTS))))
    return nodes, pods


@PROPERTY
@given(one_candidate())
# m0 takes n0's last half core: m1 fits nowhere only once m0 moved (alone, it would fit on n0).
@example(([node("a"), node("n0"), node("n1")], [pod("m0", "a", cpu="500m"), pod("m1", "a", cpu="500m"),
                                                  pod("busy-n0", "n0", cpu="3500m"),
                                                  pod("busy-n1", "n1", cpu="3950m")]))
def test_a_pod_said_to_fit_nowhere_fits_nowhere(world: tuple[list[Node], list[Pod]]) -> None:
    """The only candidate's verdict: "fits on no other node" for its first pod to move is what the oracle finds on
    every other node; a later pod's verdict says the pods moved before it took the room, and removal means every pod
    found a node in the oracle's eyes too (first fit, in the verdict's order)."""
    nodes, pods = world
    result = run(nodes, pods)
    if removed(result) == ["a"] or any(v.node == "a" for v in result.unneeded):
        return  # accepted (removed, or unneeded waiting for its time)
    (verdict,) = [v for v in result.blocked if v.node == "a"]
    (reason,) = [r for r in verdict.reasons if r.code is ReasonCode.NO_PLACE_TO_MOVE]
    name = reason.message.removeprefix("node a: pod ").split(" ", 1)[0]
    named = next(p for p in pods if p.key == name)
    fails = [node_failures(named, n, sum((p.requests for p in pods if p.node_name == n.name), Resources()),
                           sum(1 for p in pods if p.node_name == n.name),
                           here=[p for p in pods if p.node_name == n.name]) for n in nodes[1:]]
    if reason.numbers["moved_before"] == 0:
        assert all(fails), (reason.message, fails)
        assert ("free ports" in reason.message) == any(f[0].code.value == "NodePorts" for f in fails)
    else:
        assert "moved before it" in reason.message
