"""`gpuscale.engine.scheduling` against kube-scheduler v1.37's filter plugins and FitError message.

Each filter is table-tested on its own, then through the what-if's `explain` (first failing plugin only, in the
default profile's order), which must say what the plain per-node oracle (tests/engine/oracle.py) says. Messages are
the scheduler's own strings (`pkg/scheduler/framework/plugins/*`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.scheduling import (
    FitCode,
    FitFailure,
    Topology,
    static_failures,
    summarize,
    unsupported_failures,
)
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import HOSTNAME_LABEL, ZONE_LABEL, Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import NodeSelectorTerm, PodAffinityTerm, Requirement
from gpuscale.model.taints import Taint, Toleration
from tests.builders import make_node, make_pod, pod_term, req, taint, term, toleration
from tests.engine.oracle import node_failures, resource_failures

UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"


def evaluate(pod: Pod, nodes: Sequence[Node], placed: Iterable[Pod] = ()) -> dict[str, tuple[FitFailure, ...]]:
    """Every node's failures for `pod` as the what-if explains them, with `placed` pods holding capacity and forming
    the topology; the oracle must agree node by node."""
    placed = tuple(placed)
    topology = Topology(nodes, placed)
    table = whatif_of(list(nodes), [n.allocatable for n in nodes], placed, pod.requests.names(), with_topology=True)
    result = {}
    for row, node in enumerate(nodes):
        here = [p for p in placed if p.node_name == node.name]
        used = sum((p.requests for p in here), Resources())
        result[node.name] = table.explain(pod, row)
        assert result[node.name] == node_failures(pod, node, used, len(here), topology, here,
                                                  (nodes, placed)), node.name
    return result


def feasible(pod: Pod, nodes: Sequence[Node], placed: Iterable[Pod] = ()) -> set[str]:
    return {name for name, failures in evaluate(pod, nodes, placed).items() if not failures}


def codes(failures: Iterable[FitFailure]) -> list[FitCode]:
    return [f.code for f in failures]


# ------------------------------------------------------------------------------------------------------- messages

@pytest.mark.parametrize(("failure", "message"), [
    (FitFailure(FitCode.UNSCHEDULABLE), "node(s) were unschedulable"),
    (FitFailure(FitCode.NODE_NAME), "node(s) didn't match the requested node name"),
    # kubernetes#134740: the event no longer names the taint; gpuscale keeps it in `detail`.
    (FitFailure(FitCode.TAINT, "{nvidia.com/gpu: present}"), "node(s) had untolerated taint(s)"),
    (FitFailure(FitCode.NODE_AFFINITY), "node(s) didn't match Pod's node affinity/selector"),
    (FitFailure(FitCode.INSUFFICIENT, "nvidia.com/gpu"), "Insufficient nvidia.com/gpu"),
    (FitFailure(FitCode.INSUFFICIENT, "cpu"), "Insufficient cpu"),
    (FitFailure(FitCode.TOO_MANY_PODS), "Too many pods"),
    (FitFailure(FitCode.POD_AFFINITY), "node(s) didn't match pod affinity rules"),
    (FitFailure(FitCode.POD_ANTI_AFFINITY), "node(s) didn't match pod anti-affinity rules"),
    (FitFailure(FitCode.EXISTING_ANTI_AFFINITY), "node(s) didn't satisfy existing pods anti-affinity rules"),
    (FitFailure(FitCode.UNSUPPORTED, "host ports"), "unsupported constraint: host ports"),
])
def test_messages_are_the_schedulers(failure: FitFailure, message: str) -> None:
    assert failure.message == message


# ------------------------------------------------------------------------------------- NodeName, NodeUnschedulable

@pytest.mark.parametrize(("tolerations", "fits"), [
    ((), False),
    ((toleration(UNSCHEDULABLE_KEY, "Exists", "", "NoSchedule"),), True),
    ((toleration(UNSCHEDULABLE_KEY, "Exists"),), True),
    ((toleration(UNSCHEDULABLE_KEY, "Equal", ""),), True),  # the implied taint has an empty value
    ((toleration(UNSCHEDULABLE_KEY, "Equal", "x"),), False),
    ((toleration(UNSCHEDULABLE_KEY, "Exists", "", "NoExecute"),), False),
    ((toleration("", "Exists"),), True),  # tolerates everything, cordons included
    ((toleration("other", "Exists"),), False),
])
def test_cordoned_node_admits_only_pods_tolerating_the_unschedulable_taint(tolerations: tuple[Toleration, ...],
                                                                          fits: bool) -> None:
    pod = make_pod(tolerations=tolerations)
    failures = static_failures(pod.constraints, make_node(unschedulable=True))
    assert failures == (() if fits else (FitFailure(FitCode.UNSCHEDULABLE),))
    assert static_failures(pod.constraints, make_node(unschedulable=False)) == ()


@pytest.mark.parametrize(("node_name", "fits"), [(None, True), ("n1", True), ("n2", False)])
def test_node_name(node_name: str | None, fits: bool) -> None:
    failures = static_failures(make_pod(node_name=node_name).constraints, make_node("n1"))
    assert failures == (() if fits else (FitFailure(FitCode.NODE_NAME),))


# ------------------------------------------------------------------------------------------------- TaintToleration

GPU_TAINT = taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(("taints", "tolerations", "blocking"), [
    ((GPU_TAINT,), (), GPU_TAINT),
    ((GPU_TAINT,), (toleration("nvidia.com/gpu", "Exists"),), None),
    ((GPU_TAINT,), (toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"),), None),
    ((GPU_TAINT,), (toleration("nvidia.com/gpu", "Equal", "other"),), GPU_TAINT),
    ((GPU_TAINT,), (toleration("nvidia.com/gpu", "Exists", "", "NoExecute"),), GPU_TAINT),
    ((taint("k", "v", "NoExecute"),), (), taint("k", "v", "NoExecute")),
    ((taint("k", "v", "PreferNoSchedule"),), (), None),  # PreferNoSchedule never blocks
    ((taint("soft", "", "PreferNoSchedule"), GPU_TAINT), (), GPU_TAINT),
    ((GPU_TAINT, taint("k", "v", "NoExecute")), (toleration("nvidia.com/gpu", "Exists"),),
     taint("k", "v", "NoExecute")),
    ((GPU_TAINT, taint("k", "v", "NoExecute")), (toleration("", "Exists"),), None),
])
def test_taint_toleration(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...],
                          blocking: Taint | None) -> None:
    failures = static_failures(make_pod(tolerations=tolerations).constraints, make_node(taints=taints))
    assert failures == (() if blocking is None else (FitFailure(FitCode.TAINT, str(blocking)),))


# --------------------------------------------------------------------------------------------------- NodeAffinity

GPU_NODE = make_node("gpu-1", labels={"tier": "gpu", "gpu-count": "8", "gen": "h100"}, zone="z1")


@pytest.mark.parametrize(("node_selector", "terms", "fits"), [
    (None, None, True),
    ({"tier": "gpu"}, None, True),
    ({"tier": "cpu"}, None, False),
    ({"tier": "gpu", ZONE_LABEL: "z1"}, None, True),
    ({"tier": "gpu", ZONE_LABEL: "z2"}, None, False),
    (None, [term(req("tier", "In", "gpu", "cpu"))], True),
    (None, [term(req("tier", "NotIn", "gpu"))], False),
    (None, [term(req("tier", "NotIn", "cpu"))], True),
    (None, [term(req("missing", "NotIn", "x"))], True),
    (None, [term(req("tier", "Exists"))], True),
    (None, [term(req("missing", "Exists"))], False),
    (None, [term(req("missing", "DoesNotExist"))], True),
    (None, [term(req("tier", "DoesNotExist"))], False),
    (None, [term(req("gpu-count", "Gt", "4"))], True),
    (None, [term(req("gpu-count", "Gt", "8"))], False),
    (None, [term(req("gpu-count", "Lt", "9"))], True),
    (None, [term(req("gpu-count", "Lt", "8"))], False),
    (None, [term(req("gen", "Gt", "1"))], False),  # a label that is not an integer never matches Gt/Lt
    (None, [term(req("gen", "Lt", "1"))], False),
    (None, [term(req("tier", "In", "gpu"), req(ZONE_LABEL, "In", "z2"))], False),  # ANDed
    (None, [term(req("tier", "In", "cpu")), term(req(ZONE_LABEL, "In", "z1"))], True),  # ORed
    (None, [term(fields=[req("metadata.name", "In", "gpu-1")])], True),
    (None, [term(fields=[req("metadata.name", "In", "gpu-2")])], False),
    (None, [term(fields=[req("metadata.name", "NotIn", "gpu-2")])], True),
    (None, [term()], False),  # an empty term matches nothing
    (None, [term(), term(req("tier", "Exists"))], True),
    (None, [], False),  # an empty nodeSelectorTerms list matches nothing
    ({"tier": "cpu"}, [term(req("tier", "Exists"))], False),  # nodeSelector AND affinity
    ({"tier": "gpu"}, [term(req("tier", "In", "cpu"))], False),
    ({"tier": "gpu"}, [term(req("gpu-count", "Gt", "7"))], True),
])
def test_node_affinity(node_selector: dict[str, str] | None, terms: list[NodeSelectorTerm] | None,
                       fits: bool) -> None:
    pod = make_pod(node_selector=node_selector, required_terms=terms)
    failures = static_failures(pod.constraints, GPU_NODE)
    assert failures == (() if fits else (FitFailure(FitCode.NODE_AFFINITY),))


def test_static_filters_run_in_the_default_profile_order() -> None:
    """NodeName → NodeUnschedulable → TaintToleration → NodeAffinity; only the first failing plugin is reported."""
    node = make_node("n1", unschedulable=True, taints=(GPU_TAINT,), labels={"tier": "gpu"})
    everything = make_pod(node_name="other", node_selector={"tier": "cpu"})
    assert codes(static_failures(everything.constraints, node)) == [FitCode.NODE_NAME]
    cordon_tolerated = make_pod(node_selector={"tier": "cpu"})
    assert codes(static_failures(cordon_tolerated.constraints, node)) == [FitCode.UNSCHEDULABLE]
    taint_left = make_pod(node_selector={"tier": "cpu"}, tolerations=[toleration(UNSCHEDULABLE_KEY, "Exists")])
    assert codes(static_failures(taint_left.constraints, node)) == [FitCode.TAINT]
    affinity_left = make_pod(node_selector={"tier": "cpu"}, tolerations=[toleration("", "Exists")])
    assert codes(static_failures(affinity_left.constraints, node)) == [FitCode.NODE_AFFINITY]


# ----------------------------------------------------------------------------------------------- NodeResourcesFit

@pytest.mark.parametrize(("request_", "free", "free_pods", "expected"), [
    ({"cpu": 100}, {"cpu": 100}, 1, []),
    ({"cpu": 101}, {"cpu": 100}, 1, ["Insufficient cpu"]),
    ({"cpu": 1, "memory": 10}, {"cpu": 0, "memory": 0}, 1, ["Insufficient cpu", "Insufficient memory"]),
    ({"nvidia.com/gpu": 1}, {"cpu": 8000}, 1, ["Insufficient nvidia.com/gpu"]),
    ({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}, 1, []),
    ({"nvidia.com/mig-1g.10gb": 2}, {"nvidia.com/mig-1g.10gb": 1}, 1, ["Insufficient nvidia.com/mig-1g.10gb"]),
    ({"nvidia.com/mig-1g.10gb": 1}, {"nvidia.com/gpu": 1}, 1, ["Insufficient nvidia.com/mig-1g.10gb"]),
    ({"amd.com/gpu": 1}, {"nvidia.com/gpu": 8}, 1, ["Insufficient amd.com/gpu"]),
    ({"example.com/unknown": 1}, {}, 1, ["Insufficient example.com/unknown"]),  # unknown names are kept
    ({"cpu": 100}, {"cpu": 100}, 0, ["Too many pods"]),
    ({"cpu": 200}, {"cpu": 100}, 0, ["Too many pods", "Insufficient cpu"]),  # both, pods first
    ({}, {}, 0, ["Too many pods"]),  # a pod requesting nothing still takes a pod slot
    ({}, {}, 1, []),
    ({"cpu": 1}, {"cpu": -500}, 5, ["Insufficient cpu"]),  # an overcommitted node
])
def test_resource_failures(request_: dict[str, int], free: dict[str, int], free_pods: int,
                           expected: list[str]) -> None:
    failures = resource_failures(Resources.of(request_), Resources.of(free), free_pods)
    assert [f.message for f in failures] == expected


def test_node_failures_counts_used_resources_and_pods() -> None:
    node = make_node("n1", cpu="4", gpus=2, pods=3)
    two_gpus = make_pod("new", cpu="1", gpus=2)
    assert node_failures(two_gpus, node, Resources(), 0) == ()
    used = make_pod("old", cpu="1", gpus=1).requests
    assert [f.message for f in node_failures(two_gpus, node, used, 1)] == ["Insufficient nvidia.com/gpu"]
    assert [f.message for f in node_failures(make_pod(), node, used, 3)] == ["Too many pods"]


def test_node_without_pods_allocatable_takes_no_pods() -> None:
    node = Node(name="bare", allocatable=Resources.of(cpu=8000))
    assert [f.message for f in node_failures(make_pod(memory=0), node, Resources(), 0)] == ["Too many pods"]


def test_resources_run_after_static_filters() -> None:
    node = make_node("n1", cpu="1", taints=(GPU_TAINT,))
    assert codes(node_failures(make_pod(cpu="2"), node, Resources(), 0)) == [FitCode.TAINT]
    tolerant = make_pod(cpu="2", tolerations=[toleration("nvidia.com/gpu", "Exists")])
    assert codes(node_failures(tolerant, node, Resources(), 0)) == [FitCode.INSUFFICIENT]


# ---------------------------------------------------------------------------------------------- InterPodAffinity

#   z1: n1, n2     z2: n3     no zone: n4
NODES = (make_node("n1", zone="z1"), make_node("n2", zone="z1"), make_node("n3", zone="z2"), make_node("n4"))
ZONE = ZONE_LABEL


def _web(name: str, node: str, namespace: str = "default", anti_affinity: Iterable[PodAffinityTerm] = ()) -> Pod:
    return make_pod(name, namespace, labels={"app": "web"}, node=node, anti_affinity=anti_affinity)


@pytest.mark.parametrize(("topology_key", "placed", "expected"), [
    (HOSTNAME_LABEL, [_web("w", "n1")], {"n2", "n3", "n4"}),
    (ZONE, [_web("w", "n1")], {"n3", "n4"}),  # n4 has no zone: it is in no domain
    (ZONE, [_web("w", "n1"), _web("w2", "n3")], {"n4"}),
    (ZONE, [_web("w", "n4")], {"n1", "n2", "n3", "n4"}),  # a pod on a node without the key is in no domain
    (ZONE, [_web("w", "n1", namespace="other")], {"n1", "n2", "n3", "n4"}),  # another namespace
    (ZONE, [make_pod("db", labels={"app": "db"}, node="n1")], {"n1", "n2", "n3", "n4"}),
])
def test_incoming_pod_anti_affinity(topology_key: str, placed: list[Pod], expected: set[str]) -> None:
    pod = make_pod("new", labels={"app": "web"}, anti_affinity=[pod_term({"app": "web"}, topology_key)])
    results = evaluate(pod, NODES, placed)
    assert {n for n, f in results.items() if not f} == expected
    for name in set(results) - expected:
        assert codes(results[name]) == [FitCode.POD_ANTI_AFFINITY]


@pytest.mark.parametrize(("guard_term", "new_namespace", "expected"), [
    (pod_term({"app": "web"}, HOSTNAME_LABEL), "default", {"n2", "n3", "n4"}),
    (pod_term({"app": "web"}, ZONE), "default", {"n3", "n4"}),
    (pod_term({"app": "web"}, ZONE), "other", {"n1", "n2", "n3", "n4"}),  # the term covers its own namespace only
    (pod_term({"app": "web"}, ZONE, namespaces=["other"]), "other", {"n3", "n4"}),
    (pod_term({"app": "web"}, ZONE, all_namespaces=True), "other", {"n3", "n4"}),
])
def test_existing_pods_anti_affinity(guard_term: PodAffinityTerm, new_namespace: str, expected: set[str]) -> None:
    """The symmetric direction: an existing pod's anti-affinity keeps the incoming pod out of its domain."""
    guard = _web("guard", "n1", anti_affinity=[guard_term])
    pod = make_pod("new", new_namespace, labels={"app": "web"})
    results = evaluate(pod, NODES, [guard])
    assert {n for n, f in results.items() if not f} == expected
    for name in set(results) - expected:
        assert codes(results[name]) == [FitCode.EXISTING_ANTI_AFFINITY]


DB = make_pod("db", labels={"app": "db"}, node="n1")


@pytest.mark.parametrize(("pod", "placed", "expected"), [
    # affinity to a db pod's zone / host
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE)]), [DB], {"n1", "n2"}),
    (make_pod(affinity=[pod_term({"app": "db"}, HOSTNAME_LABEL)]), [DB], {"n1"}),
    # no db pod anywhere, and the pod does not match its own term: nowhere
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE)]), [], set()),
    # the first pod of a group whose term selects itself may go to any node carrying the topology key
    (make_pod(labels={"app": "db"}, affinity=[pod_term({"app": "db"}, ZONE)]), [], {"n1", "n2", "n3"}),
    (make_pod(labels={"app": "db"}, affinity=[pod_term({"app": "db"}, HOSTNAME_LABEL)]), [],
     {"n1", "n2", "n3", "n4"}),
    # ... but not once a matching pod exists: then only its domain
    (make_pod(labels={"app": "db"}, affinity=[pod_term({"app": "db"}, ZONE)]), [DB], {"n1", "n2"}),
    # a matching pod in another namespace does not count unless the term names it
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE)]), [make_pod("db", "other", labels={"app": "db"}, node="n3")],
     set()),
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE, namespaces=["other"])]),
     [make_pod("db", "other", labels={"app": "db"}, node="n3")], {"n3"}),
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE, all_namespaces=True)]),
     [make_pod("db", "other", labels={"app": "db"}, node="n3")], {"n3"}),
    # several terms: one existing pod must match them all (upstream's updateWithAffinityTerms)
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE), pod_term({"tier": "cache"}, ZONE)]),
     [DB, make_pod("cache", labels={"tier": "cache"}, node="n2")], set()),
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE), pod_term({"tier": "cache"}, ZONE)]),
     [make_pod("both", labels={"app": "db", "tier": "cache"}, node="n3")], {"n3"}),
    (make_pod(affinity=[pod_term({"app": "db"}, ZONE), pod_term({"app": "db"}, HOSTNAME_LABEL)]), [DB], {"n1"}),
])
def test_pod_affinity(pod: Pod, placed: list[Pod], expected: set[str]) -> None:
    results = evaluate(pod, NODES, placed)
    assert {n for n, f in results.items() if not f} == expected
    for name in set(results) - expected:
        assert codes(results[name]) == [FitCode.POD_AFFINITY]


def test_inter_pod_affinity_reports_affinity_then_anti_affinity_then_existing() -> None:
    guard = _web("guard", "n1", anti_affinity=[pod_term({"app": "new"}, ZONE)])
    placed = [guard, DB]
    affinity_fails = make_pod(labels={"app": "new"}, affinity=[pod_term({"app": "db"}, HOSTNAME_LABEL)],
                              anti_affinity=[pod_term({"app": "web"}, ZONE)])
    assert codes(evaluate(affinity_fails, NODES, placed)["n2"]) == [FitCode.POD_AFFINITY]
    anti_fails = make_pod(labels={"app": "new"}, anti_affinity=[pod_term({"app": "web"}, ZONE)])
    assert codes(evaluate(anti_fails, NODES, placed)["n2"]) == [FitCode.POD_ANTI_AFFINITY]
    existing_fails = make_pod(labels={"app": "new"})
    assert codes(evaluate(existing_fails, NODES, placed)["n2"]) == [FitCode.EXISTING_ANTI_AFFINITY]


def test_topology_add_records_what_if_placements() -> None:
    topology = Topology(NODES, [])
    pod = make_pod("b", labels={"app": "web"}, anti_affinity=[pod_term({"app": "web"}, ZONE)])
    assert topology.failures(pod, NODES[1]) == ()
    assert not topology.relevant
    topology.add(_web("a", "n1", anti_affinity=[pod_term({"app": "web"}, ZONE)]), NODES[0])
    assert topology.relevant
    assert codes(topology.failures(pod, NODES[1])) == [FitCode.POD_ANTI_AFFINITY]
    template = make_node("template-1", zone="z9")
    topology.add(_web("c", "template-1"), template)
    assert codes(topology.failures(pod, make_node("template-2", zone="z9"))) == [FitCode.POD_ANTI_AFFINITY]


def test_inter_pod_affinity_runs_after_resources() -> None:
    pod = make_pod(cpu="100", anti_affinity=[pod_term({"app": "web"}, ZONE)])
    assert codes(evaluate(pod, NODES, [_web("w", "n1")])["n1"]) == [FitCode.INSUFFICIENT]


# ---------------------------------------------------------------------------------------------------- unsupported

def test_unsupported_constraints_never_fit_and_come_last() -> None:
    pod = make_pod(unsupported=["host ports", "volume topology (persistent volume claims)"])
    results = evaluate(pod, NODES)
    for failures in results.values():
        assert [f.message for f in failures] == ["unsupported constraint: host ports",
                                                 "unsupported constraint: volume topology (persistent volume claims)"]
    assert unsupported_failures(pod.constraints) == results["n1"]
    # A node that fails a modelled filter reports that instead.
    assert codes(node_failures(pod, make_node(taints=(GPU_TAINT,)), Resources(), 0)) == [FitCode.TAINT]


# ------------------------------------------------------------------------------------------------------ summarize

@pytest.mark.parametrize(("total", "counts", "message"), [
    (12, {"Insufficient nvidia.com/gpu": 4, "node(s) had untolerated taint(s)": 8},
     "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint(s)."),
    # sorted as strings, count included, like Go's sort.Strings: "10 …" < "4 …", "T" < "n"
    (14, {"node(s) had untolerated taint(s)": 4, "Insufficient cpu": 10},
     "0/14 nodes are available: 10 Insufficient cpu, 4 node(s) had untolerated taint(s)."),
    (3, {"node(s) were unschedulable": 1, "Too many pods": 1, "Insufficient memory": 1},
     "0/3 nodes are available: 1 Insufficient memory, 1 Too many pods, 1 node(s) were unschedulable."),
    (1, {"Insufficient memory": 1, "Insufficient cpu": 1},  # one node, two reasons: both counted
     "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."),
    (0, {}, "0/0 nodes are available:"),  # no reasons: no trailing " ."
])
def test_summarize(total: int, counts: dict[str, int], message: str) -> None:
    assert summarize(total, counts) == message


def test_failed_scheduling_message_end_to_end() -> None:
    """4 full GPU nodes and 8 tainted nodes, as a FailedScheduling event would count them."""
    gpu_nodes = [make_node(f"gpu-{i}", gpus=8) for i in range(4)]
    tainted = [make_node(f"cpu-{i}", taints=(taint("dedicated", "infra"),)) for i in range(8)]
    nodes = gpu_nodes + tainted
    placed = [make_pod(f"hog-{i}", gpus=8, node=f"gpu-{i}") for i in range(4)]
    results = evaluate(make_pod("train", gpus=1), nodes, placed)
    counts = Counter(f.message for failures in results.values() for f in failures)
    assert summarize(len(nodes), counts) == (
        "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint(s).")
    assert {f.detail for f in results["cpu-0"]} == {"{dedicated: infra}"}


# ----------------------------------------------------------------------------------------------------- properties

_TAINTS = [taint("nvidia.com/gpu", "present"), taint("dedicated", "ml", "NoExecute"),
           taint("spot", "", "PreferNoSchedule"), taint("dedicated", "infra")]
_LABEL_VALUES = {"tier": ["gpu", "cpu"], ZONE: ["z1", "z2"], "gpu-count": ["1", "8", "16", "x"]}


@st.composite
def nodes_strategy(draw: st.DrawFn, min_size: int = 1) -> list[Node]:
    count = draw(st.integers(min_value=min_size, max_value=6))
    nodes = []
    for i in range(count):
        labels = {k: draw(st.sampled_from(v)) for k, v in _LABEL_VALUES.items() if draw(st.booleans())}
        nodes.append(make_node(f"n{i}", cpu=draw(st.sampled_from(["1", "4", "8"])), gpus=draw(st.sampled_from([0, 8])),
                               pods=draw(st.integers(min_value=0, max_value=3)), labels=labels,
                               taints=draw(st.lists(st.sampled_from(_TAINTS), max_size=2, unique=True)),
                               unschedulable=draw(st.booleans())))
    return nodes


tolerations_strategy = st.builds(
    toleration, key=st.sampled_from(["", "nvidia.com/gpu", "dedicated", "spot", UNSCHEDULABLE_KEY]),
    operator=st.sampled_from(["Equal", "Exists"]), value=st.sampled_from(["", "present", "ml", "infra"]),
    effect=st.sampled_from([None, "NoSchedule", "NoExecute", "PreferNoSchedule"]))


def _monotone_requirement(draw: st.DrawFn) -> Requirement:
    """A label requirement that can only stop matching when a label goes away: In, Exists, Gt, Lt."""
    key = draw(st.sampled_from(sorted(_LABEL_VALUES)))
    op = draw(st.sampled_from(["In", "Exists", "Gt", "Lt"]))
    if op == "In":
        return req(key, op, *draw(st.lists(st.sampled_from(_LABEL_VALUES[key]), min_size=1, max_size=2)))
    if op == "Exists":
        return req(key, op)
    return req(key, op, str(draw(st.integers(min_value=0, max_value=20))))


@st.composite
def monotone_pods(draw: st.DrawFn) -> Pod:
    """Pods whose node constraints use only nodeSelector and In/Exists/Gt/Lt terms."""
    node_selector = {k: draw(st.sampled_from(v)) for k, v in _LABEL_VALUES.items() if draw(st.booleans())}
    terms = None
    if draw(st.booleans()):
        terms = [term(*[_monotone_requirement(draw) for _ in range(draw(st.integers(1, 2)))])
                 for _ in range(draw(st.integers(0, 2)))]
    return make_pod("p", cpu=draw(st.sampled_from(["0", "2", "6"])), gpus=draw(st.sampled_from([0, 1])),
                    node_selector=node_selector, required_terms=terms,
                    tolerations=draw(st.lists(tolerations_strategy, max_size=2)))


@given(nodes_strategy(), monotone_pods(), tolerations_strategy)
def test_adding_a_toleration_never_shrinks_the_feasible_set(nodes: list[Node], pod: Pod, extra: Toleration) -> None:
    more = replace(pod, constraints=replace(pod.constraints, tolerations=(*pod.constraints.tolerations, extra)))
    assert feasible(pod, nodes) <= feasible(more, nodes)


@given(nodes_strategy(), monotone_pods(), st.data())
def test_removing_a_node_label_never_grows_the_feasible_set(nodes: list[Node], pod: Pod, data: st.DataObject) -> None:
    """With nodeSelector and In/Exists/Gt/Lt terms, every requirement needs its label present, so taking a label
    away can only turn matches into non-matches.

    This is NOT true in general: `NotIn` and `DoesNotExist` match an absent label (test below), and an anti-affinity
    term ignores a node without its topology key. So the property is stated for the monotone operators only, and
    without inter-pod terms.
    """
    index = data.draw(st.integers(min_value=0, max_value=len(nodes) - 1))
    node = nodes[index]
    key = data.draw(st.sampled_from(sorted(node.labels)))
    stripped = replace(node, labels={k: v for k, v in node.labels.items() if k != key})
    after = [*nodes[:index], stripped, *nodes[index + 1:]]
    assert feasible(pod, after) <= feasible(pod, nodes)


@pytest.mark.parametrize("requirement", [req("tier", "NotIn", "gpu"), req("tier", "DoesNotExist")])
def test_removing_a_label_can_grow_the_feasible_set_under_not_in_and_does_not_exist(requirement: Requirement) -> None:
    """Why the property above excludes NotIn/DoesNotExist: Kubernetes matches them against an absent label."""
    pod = make_pod(required_terms=[term(requirement)])
    assert feasible(pod, [make_node("n", labels={"tier": "gpu"})]) == set()
    assert feasible(pod, [make_node("n")]) == {"n"}


def test_removing_a_topology_label_can_grow_the_feasible_set_under_anti_affinity() -> None:
    pod = make_pod(labels={"app": "web"}, anti_affinity=[pod_term({"app": "web"}, ZONE)])
    web = _web("w", "n0")
    assert feasible(pod, [make_node("n0", zone="z1"), make_node("n1", zone="z1")], [web]) == set()
    assert feasible(pod, [make_node("n0", zone="z1"), make_node("n1")], [web]) == {"n1"}


_APPS = st.sampled_from(["web", "db"])


@st.composite
def placed_pods(draw: st.DrawFn, nodes: list[Node]) -> list[Pod]:
    pods = []
    for i in range(draw(st.integers(min_value=0, max_value=5))):
        app = draw(_APPS)
        anti = [pod_term({"app": draw(_APPS)}, draw(st.sampled_from([ZONE, HOSTNAME_LABEL])))] if draw(
            st.booleans()) else []
        pods.append(make_pod(f"placed-{i}", cpu="1", labels={"app": app}, anti_affinity=anti,
                             node=draw(st.sampled_from(nodes)).name))
    return pods


@settings(max_examples=200)
@given(st.data())
def test_feasibility_does_not_depend_on_node_order(data: st.DataObject) -> None:
    nodes = data.draw(nodes_strategy())
    placed = data.draw(placed_pods(nodes))
    keys = st.sampled_from([ZONE, HOSTNAME_LABEL])
    pod = make_pod(
        "new", cpu=data.draw(st.sampled_from(["0", "1", "5"])), labels={"app": data.draw(_APPS)},
        tolerations=data.draw(st.lists(tolerations_strategy, max_size=2)),
        affinity=data.draw(st.lists(st.builds(pod_term, st.fixed_dictionaries({"app": _APPS}), keys), max_size=2)),
        anti_affinity=data.draw(st.lists(st.builds(pod_term, st.fixed_dictionaries({"app": _APPS}), keys),
                                         max_size=2)),
    )
    shuffled = list(nodes)
    random.Random(data.draw(st.integers())).shuffle(shuffled)
    assert evaluate(pod, shuffled, placed) == evaluate(pod, nodes, placed)
    assert feasible(pod, list(reversed(nodes)), list(reversed(placed))) == feasible(pod, nodes, placed)
