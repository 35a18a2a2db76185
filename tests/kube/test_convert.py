"""`gpuscale.kube.convert`: Kubernetes JSON → model, with kube-scheduler's effective requests and typed input errors.

Effective requests follow component-helpers `PodRequests` (v0.37.2) after the API server's defaulting: requests from
limits, sidecars (`restartPolicy: Always` init containers) counted with the app containers and with the init
containers started after them, pod-level cpu/memory/hugepages replacing the container sums, then overhead.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.kube.convert import (
    cluster_from_objects,
    node_from_k8s,
    pdb_from_k8s,
    pod_from_k8s,
    pod_group_from_k8s,
)
from gpuscale.model.errors import InputError
from gpuscale.model.pod import HostPort, PodGroupRef, PodPhase
from gpuscale.model.resources import GPU_MILLI, Resources
from gpuscale.model.selectors import LabelSelector, NodeAffinity, SelectorOperator
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator
from tests.builders import k8s_container, k8s_list, k8s_node, k8s_pod

Mi = 2**20
Gi = 2**30


def requests_of(**kw: Any) -> dict[str, int]:
    return pod_from_k8s(k8s_pod(**kw)).requests.as_dict()


def container(cpu: str | None = None, memory: str | None = None, restart_policy: str | None = None,
              **more: Any) -> dict[str, Any]:
    requests = {k: v for k, v in {"cpu": cpu, "memory": memory, **more}.items() if v is not None}
    return k8s_container(requests=requests, restart_policy=restart_policy)


# ------------------------------------------------------------------------------------------- effective requests

EFFECTIVE = [
    ("one container", {"containers": [container("100m", "128Mi")]}, {"cpu": 100, "memory": 128 * Mi}),
    ("containers add up", {"containers": [container("1", "1Gi"), container("500m", "512Mi")]},
     {"cpu": 1500, "memory": 1536 * Mi}),
    ("init larger than app", {"containers": [container("1", "1Gi")], "init_containers": [container("4", "8Gi")]},
     {"cpu": 4000, "memory": 8 * Gi}),
    ("init smaller than app", {"containers": [container("2", "2Gi")], "init_containers": [container("1", "1Gi")]},
     {"cpu": 2000, "memory": 2 * Gi}),
    ("max is per resource", {"containers": [container("1", "4Gi")], "init_containers": [container("3", "1Gi")]},
     {"cpu": 3000, "memory": 4 * Gi}),
    ("init containers do not add up", {"containers": [container("1")],
                                       "init_containers": [container("2"), container("3")]}, {"cpu": 3000}),
    ("sidecar runs with the app", {"containers": [container("1")], "init_containers": [container("1", None, "Always")]},
     {"cpu": 2000}),
    ("sidecar runs during later init containers",
     {"containers": [container("1")], "init_containers": [container("1", None, "Always"), container("2")]},
     {"cpu": 3000}),
    ("init before the sidecar runs alone",
     {"containers": [container("1")], "init_containers": [container("2"), container("1", None, "Always")]},
     {"cpu": 2000}),
    ("sidecars accumulate",
     {"containers": [container("1")],
      "init_containers": [container("1", None, "Always"), container("1", None, "Always"), container("3")]},
     {"cpu": 5000}),
    ("restartPolicy other than Always is a plain init container",
     {"containers": [container("1")], "init_containers": [container("1", None, "OnFailure")]}, {"cpu": 1000}),
    ("overhead is added", {"containers": [container("1", "1Gi")], "overhead": {"cpu": "250m", "memory": "120Mi"}},
     {"cpu": 1250, "memory": Gi + 120 * Mi}),
    ("overhead after the init max", {"containers": [container("1")], "init_containers": [container("4")],
                                     "overhead": {"cpu": "100m"}}, {"cpu": 4100}),
    ("requests default from limits", {"containers": [k8s_container(limits={"cpu": "2", "nvidia.com/gpu": "1"})]},
     {"cpu": 2000, "nvidia.com/gpu": 1}),
    ("explicit requests win over limits",
     {"containers": [k8s_container(requests={"cpu": "500m"}, limits={"cpu": "2", "memory": "1Gi"})]},
     {"cpu": 500, "memory": Gi}),
    ("init limits default too",
     {"containers": [container("1")], "init_containers": [k8s_container(limits={"cpu": "3"})]}, {"cpu": 3000}),
    ("pod-level requests replace the sums", {"containers": [container("1", "1Gi"), container("1", "1Gi")],
                                             "resources": {"requests": {"cpu": "4"}}},
     {"cpu": 4000, "memory": 2 * Gi}),
    ("pod-level requests only for cpu, memory, hugepages",
     {"containers": [container("1", None, None, **{"nvidia.com/gpu": "1"})],
      "resources": {"requests": {"memory": "2Gi", "hugepages-2Mi": "4Mi", "nvidia.com/gpu": "4"}}},
     {"cpu": 1000, "memory": 2 * Gi, "hugepages-2Mi": 4 * Mi, "nvidia.com/gpu": 1}),
    ("pod-level limits default requests from containers, else from the limit",
     {"containers": [container("1")], "resources": {"limits": {"cpu": "4", "memory": "8Gi"}}},
     {"cpu": 1000, "memory": 8 * Gi}),
    ("pod-level requests plus overhead", {"containers": [container("1")], "resources": {"requests": {"cpu": "2"}},
                                          "overhead": {"cpu": "1"}}, {"cpu": 3000}),
    ("extended resources are kept", {"containers": [container("1", None, None, **{
        "nvidia.com/mig-1g.10gb": "2", "amd.com/gpu": "1", "example.com/unknown": "3"})]},
     {"cpu": 1000, "nvidia.com/mig-1g.10gb": 2, "amd.com/gpu": 1, "example.com/unknown": 3}),
    ("cpu rounds up to a millicore", {"containers": [container("0.5m", "1.5")]}, {"cpu": 1, "memory": 2}),
    ("JSON numbers", {"containers": [k8s_container(requests={"cpu": 0.25, "memory": 1024, "nvidia.com/gpu": 1})]},
     {"cpu": 250, "memory": 1024, "nvidia.com/gpu": 1}),
    ("null is zero", {"containers": [k8s_container(requests={"cpu": None, "memory": "1Gi"})]}, {"memory": Gi}),
    ("zero is dropped", {"containers": [container("0", "0")]}, {}),
]


@pytest.mark.parametrize(("spec", "expected"), [(s, e) for _, s, e in EFFECTIVE], ids=[n for n, _, _ in EFFECTIVE])
def test_effective_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert requests_of(**spec) == expected


def test_gpu_milli_annotation_adds_fractional_gpu_demand() -> None:
    pod = pod_from_k8s(k8s_pod(annotations={"gpuscale.io/gpu-milli": "250"}))
    assert pod.requests.get(GPU_MILLI) == 250


# -------------------------------------------------------------------------------------------------- constraints

def test_tolerations() -> None:
    pod = pod_from_k8s(k8s_pod(tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "ml"},
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]))
    assert pod.constraints.tolerations == (
        Toleration(key="nvidia.com/gpu", operator=TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE),
        Toleration(key="dedicated", operator=TolerationOperator.EQUAL, value="ml"),
        Toleration(operator=TolerationOperator.EXISTS),
        Toleration(key="node.kubernetes.io/not-ready", operator=TolerationOperator.EXISTS,
                   effect=TaintEffect.NO_EXECUTE, toleration_seconds=300),
    )


def test_node_affinity_and_selector() -> None:
    pod = pod_from_k8s(k8s_pod(nodeSelector={"tier": "gpu"}, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu-count", "operator": "Gt", "values": ["4"]},
                                  {"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            {},
        ]}}}))
    affinity = pod.constraints.affinity
    assert affinity.node_selector == (("tier", "gpu"),)
    assert affinity.required_terms is not None
    first, second, empty = affinity.required_terms
    assert [(r.key, r.operator, r.values) for r in first.match_expressions] == [
        ("gpu-count", SelectorOperator.GT, ("4",)), ("zone", SelectorOperator.IN, ("a", "b"))]
    assert [(r.key, r.values) for r in second.match_fields] == [("metadata.name", ("n1",))]
    assert not empty.match_expressions and not empty.match_fields
    assert affinity.matches("n1", {"tier": "gpu"})
    assert not affinity.matches("n2", {"tier": "gpu"})


def test_affinity_without_required_terms_is_no_constraint() -> None:
    assert pod_from_k8s(k8s_pod()).constraints.affinity == NodeAffinity()
    pod = pod_from_k8s(k8s_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": []}}}))
    assert pod.constraints.affinity.required_terms == ()  # present but empty: matches nothing


def test_pod_affinity_terms() -> None:
    pod = pod_from_k8s(k8s_pod(affinity={
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"},
            {"topologyKey": "topology.kubernetes.io/zone", "namespaceSelector": {}},
        ]},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {}, "topologyKey": "topology.kubernetes.io/zone", "namespaces": ["db"]},
        ]},
    }))
    host, zone = pod.constraints.pod_anti_affinity
    assert host.selector == LabelSelector(match_labels=(("app", "web"),))
    assert not host.all_namespaces and host.namespaces == ()
    assert zone.selector == LabelSelector(nothing=True)  # no labelSelector: selects no pod
    assert zone.all_namespaces
    (affinity,) = pod.constraints.pod_affinity
    assert affinity.selector == LabelSelector()  # {}: every pod
    assert affinity.namespaces == ("db",)


_SPREAD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}


def test_spread_constraints_keep_do_not_schedule_ones_with_match_label_keys_merged() -> None:
    from gpuscale.model.pod import TopologySpreadConstraint
    from gpuscale.model.selectors import Requirement, SelectorOperator
    pod = pod_from_k8s(k8s_pod(labels={"app": "web", "pod-template-hash": "h"}, topologySpreadConstraints=[
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3,
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash", "absent"],
         "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]))
    assert pod.constraints.topology_spread == (
        TopologySpreadConstraint(
            max_skew=2, topology_key="zone", match_label_keys=("pod-template-hash", "absent"), min_domains=3,
            selector=LabelSelector(match_labels=(("app", "web"),), match_expressions=(
                Requirement(key="pod-template-hash", operator=SelectorOperator.IN, values=("h",)),)),
            node_affinity_policy="Ignore", node_taints_policy="Honor"),
        TopologySpreadConstraint(max_skew=1, topology_key="rack", selector=LabelSelector(nothing=True)))
    assert pod.constraints.unsupported == ()


@pytest.mark.parametrize(("spec", "unsupported"), [
    ({}, ()),
    ({"topologySpreadConstraints": [_SPREAD]},
     ()),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]},
     ()),
    ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}, ()),
    ({"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}, ()),
    ({"volumes": [{"name": "cfg", "configMap": {"name": "c"}}]}, ()),
    ({"containers": [k8s_container(ports=[{"containerPort": 80, "hostPort": 8080}])]}, ()),
    ({"containers": [k8s_container(ports=[{"containerPort": 80}])]}, ()),
    ({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}, ()),
])
def test_unsupported_constraints_are_named(spec: dict[str, Any], unsupported: tuple[str, ...]) -> None:
    assert pod_from_k8s(k8s_pod(**spec)).constraints.unsupported == unsupported


@pytest.mark.parametrize(("volumes", "local"), [
    ([], False),
    ([{"name": "h", "hostPath": {"path": "/data"}}], True),
    ([{"name": "e", "emptyDir": {}}], True),
    ([{"name": "e", "emptyDir": {"sizeLimit": "1Gi"}}], True),
    ([{"name": "m", "emptyDir": {"medium": "Memory"}}], False),
    ([{"name": "c", "configMap": {"name": "x"}}], False),
])
def test_local_storage(volumes: list[dict[str, Any]], local: bool) -> None:
    assert pod_from_k8s(k8s_pod(volumes=volumes)).local_storage is local


@pytest.mark.parametrize(("labels", "annotations", "group"), [
    ({}, {}, None),
    ({"kueue.x-k8s.io/pod-group-name": "g"}, {"kueue.x-k8s.io/pod-group-total-count": "4"},
     PodGroupRef(key="ml/g", source="kueue", min_member=4)),
    ({"kueue.x-k8s.io/pod-group-name": "g"}, {}, PodGroupRef(key="ml/g", source="kueue")),
    ({}, {"scheduling.k8s.io/group-name": "v"}, PodGroupRef(key="ml/v", source="volcano")),
    ({"scheduling.x-k8s.io/pod-group": "c"}, {}, PodGroupRef(key="ml/c", source="coscheduling")),
    ({"pod-group.scheduling.sigs.k8s.io": "old"}, {}, PodGroupRef(key="ml/old", source="coscheduling")),
])
def test_gang_membership(labels: dict[str, str], annotations: dict[str, str], group: PodGroupRef | None) -> None:
    assert pod_from_k8s(k8s_pod("w-0", "ml", labels=labels, annotations=annotations)).group == group


def test_pod_status_and_metadata() -> None:
    obj = k8s_pod("x", "ml", nodeName="n1", priority=1000, schedulingGates=[{"name": "wait"}],
                  status={"phase": "Running", "nominatedNodeName": "n2", "conditions": [
                      {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
    obj["metadata"].update(creationTimestamp="2024-01-01T00:00:00Z", deletionTimestamp="2024-01-01T00:01:00Z",
                           ownerReferences=[{"kind": "ReplicaSet", "name": "rs", "controller": False},
                                            {"kind": "Job", "name": "train", "controller": True}])
    pod = pod_from_k8s(obj)
    assert pod.key == "ml/x"
    assert pod.node_name == "n1" and pod.phase is PodPhase.RUNNING and pod.priority == 1000
    assert pod.scheduling_gated and pod.unschedulable and pod.deleting
    assert pod.nominated_node == "n2"
    assert pod.created_s == 1704067200.0
    assert pod.owner is not None and (pod.owner.kind, pod.owner.name) == ("Job", "train")


def test_namespace_defaults_to_default() -> None:
    assert pod_from_k8s(k8s_pod(namespace=None)).namespace == "default"


# -------------------------------------------------------------------------------------------------------- nodes

def test_node() -> None:
    node = node_from_k8s(k8s_node(
        "gpu-1", allocatable={"cpu": "95500m", "memory": "1000Gi", "nvidia.com/gpu": "8", "pods": "110"},
        capacity={"cpu": "96", "memory": "1024Gi", "nvidia.com/gpu": "8", "pods": "110"},
        labels={"tier": "gpu"}, unschedulable=True,
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "spot", "effect": "PreferNoSchedule"}]))
    assert node.allocatable == Resources.of({"cpu": 95500, "memory": 1000 * Gi, "nvidia.com/gpu": 8, "pods": 110})
    assert node.capacity.get("cpu") == 96000
    assert node.labels == {"tier": "gpu", "kubernetes.io/hostname": "gpu-1"}  # hostname defaults to the name
    assert node.taints == (Taint(key="nvidia.com/gpu", value="present", effect=TaintEffect.NO_SCHEDULE),
                           Taint(key="spot", effect=TaintEffect.PREFER_NO_SCHEDULE))
    assert node.unschedulable and node.ready


def test_node_allocatable_falls_back_to_capacity_and_readiness() -> None:
    obj = k8s_node("n1", ready="False")
    del obj["status"]["allocatable"]
    node = node_from_k8s(obj)
    assert node.allocatable == node.capacity
    assert not node.ready
    assert node_from_k8s(k8s_node("n2", labels={"kubernetes.io/hostname": "custom"})).labels[
        "kubernetes.io/hostname"] == "custom"


# ---------------------------------------------------------------------------------------------- PDBs and groups

def test_pdb() -> None:
    pdb = pdb_from_k8s({"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "ml"},
                        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "x"}}},
                        "status": {"disruptionsAllowed": 1}})
    assert (pdb.key, pdb.disruptions_allowed, pdb.min_available, pdb.max_unavailable) == ("ml/b", 1, "2", None)
    assert pdb.covers("ml", {"app": "x"}) and not pdb.covers("ml", {"app": "y"})
    no_status = pdb_from_k8s({"kind": "PodDisruptionBudget", "metadata": {"name": "b"},
                              "spec": {"maxUnavailable": "10%", "selector": {}}})
    assert no_status.disruptions_allowed == 0  # unknown until the controller computes it: the safe answer
    assert no_status.covers("default", {"any": "pod"})
    assert not pdb_from_k8s({"kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {}}).covers(
        "default", {})  # a null selector selects nothing


def test_pod_group() -> None:
    group = pod_group_from_k8s({"kind": "PodGroup", "metadata": {"name": "g", "namespace": "ml"},
                                "spec": {"minMember": 4}})
    assert (group.key, group.min_member) == ("ml/g", 4)


def test_cluster_from_nested_lists_counts_other_kinds() -> None:
    cluster = cluster_from_objects([
        k8s_list(k8s_node("n1"), k8s_pod("a")),
        {"kind": "PodList", "items": [k8s_pod("b")]},
        {"kind": "Service", "metadata": {"name": "s"}},
        {"kind": "Service", "metadata": {"name": "t"}},
        None,
        {"kind": "PodGroup", "metadata": {"name": "g"}, "spec": {"minMember": 2}},
    ])
    assert [n.name for n in cluster.nodes] == ["n1"]
    assert [p.name for p in cluster.pods] == ["a", "b"]
    assert [g.key for g in cluster.pod_groups] == ["default/g"]
    assert cluster.other_kinds == {"Service": 2}


# --------------------------------------------------------------------------------------------------- bad input

def _pod_with(**spec: Any) -> dict[str, Any]:
    """Pod `default/x` with `spec` fields set verbatim (malformed values included)."""
    obj = k8s_pod("x")
    obj["spec"].update(spec)
    return obj


def _affinity_term(expression: dict[str, Any] | None = None, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if expression is not None:
        term["matchExpressions"] = [expression]
    if fields is not None:
        term["matchFields"] = [fields]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


_TERM0 = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
_ANTI0 = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"

BAD_PODS = [
    # object, field path, problem fragment
    (_pod_with(containers=[k8s_container(requests={"cpu": "1 core"})]), "spec.containers[0].resources.requests.cpu",
     "regular expression"),
    (_pod_with(containers=[k8s_container(requests={"memory": "1KB"})]),
     "spec.containers[0].resources.requests.memory", "regular expression"),
    (_pod_with(containers=[k8s_container(requests={"memory": "1K"})]),
     "spec.containers[0].resources.requests.memory", "suffix"),
    (_pod_with(containers=[k8s_container(limits={"nvidia.com/gpu": "-1"})]),
     "spec.containers[0].resources.limits.nvidia.com/gpu", "greater than or equal to 0"),
    (_pod_with(containers=[k8s_container(requests={"cpu": "-0.1m"})]), "spec.containers[0].resources.requests.cpu",
     "greater than or equal to 0"),  # rounds to -1, not to 0
    (_pod_with(containers=[k8s_container(requests={"cpu": float("nan")})]),
     "spec.containers[0].resources.requests.cpu", "regular expression"),
    (_pod_with(containers=[{"name": "c", "resources": {"requests": "lots"}}]), "spec.containers[0].resources.requests",
     "expected object"),
    (_pod_with(overhead={"cpu": "x"}), "spec.overhead.cpu", "regular expression"),
    (_pod_with(initContainers=[k8s_container(requests={"cpu": "1ki"})]),
     "spec.initContainers[0].resources.requests.cpu", "suffix"),
    (_pod_with(resources={"requests": {"cpu": "?"}}), "spec.resources.requests.cpu", "regular expression"),
    (_pod_with(containers=[]), "spec.containers", "at least one container"),
    (_pod_with(containers="c"), "spec.containers", "expected list"),
    (_pod_with(containers=["c"]), "spec.containers[0]", "expected an object"),
    (_pod_with(initContainers=[7]), "spec.initContainers[0]", "expected an object"),
    ({**k8s_pod("x"), "spec": None}, "spec", "required"),
    ({"kind": "Pod", "metadata": {"namespace": "default"}, "spec": {}}, "metadata.name", "required"),
    ({**k8s_pod("x"), "metadata": {"name": "x", "labels": {"a": 1}}}, "metadata.labels.a", "expected a string"),
    ({**k8s_pod("x"), "metadata": {"name": "x", "annotations": []}}, "metadata.annotations", "expected object"),
    (_pod_with(tolerations=[{"key": "k", "operator": "In"}]), "spec.tolerations[0].operator", "unknown operator"),
    (_pod_with(tolerations=[{"key": "k", "effect": "NoWay"}]), "spec.tolerations[0].effect", "unknown effect"),
    (_pod_with(tolerations=[{"key": 5}]), "spec.tolerations[0].key", "expected string"),
    (_pod_with(tolerations=["k"]), "spec.tolerations[0]", "expected an object"),
    (_pod_with(tolerations={"key": "k"}), "spec.tolerations", "expected list"),
    (_pod_with(nodeSelector={"tier": 1}), "spec.nodeSelector.tier", "expected a string"),
    (_pod_with(affinity=_affinity_term({"key": "zone", "operator": "Near", "values": ["a"]})),
     f"{_TERM0}.matchExpressions[0].operator", "unknown operator 'Near'"),
    (_pod_with(affinity=_affinity_term({"key": "zone", "operator": "In"})),
     f"{_TERM0}.matchExpressions[0].values", "non-empty"),
    (_pod_with(affinity=_affinity_term({"key": "zone", "operator": "Exists", "values": ["a"]})),
     f"{_TERM0}.matchExpressions[0].values", "must be empty"),
    (_pod_with(affinity=_affinity_term({"key": "gpus", "operator": "Gt", "values": ["eight"]})),
     f"{_TERM0}.matchExpressions[0].values[0]", "must be an integer"),
    (_pod_with(affinity=_affinity_term({"key": "gpus", "operator": "Gt", "values": ["1_000"]})),
     f"{_TERM0}.matchExpressions[0].values[0]", "must be an integer"),
    (_pod_with(affinity=_affinity_term({"key": "gpus", "operator": "Lt", "values": ["1", "2"]})),
     f"{_TERM0}.matchExpressions[0].values", "exactly one value"),
    (_pod_with(affinity=_affinity_term({"operator": "Exists"})), f"{_TERM0}.matchExpressions[0].key", "required"),
    (_pod_with(affinity=_affinity_term({"key": "zone", "operator": "In", "values": [1]})),
     f"{_TERM0}.matchExpressions[0].values", "expected strings"),
    (_pod_with(affinity=_affinity_term(fields={"key": "metadata.uid", "operator": "In", "values": ["u"]})),
     f"{_TERM0}.matchFields[0].key", "only metadata.name"),
    (_pod_with(affinity=_affinity_term(fields={"key": "metadata.name", "operator": "Exists"})),
     f"{_TERM0}.matchFields[0].operator", "valid: In, NotIn"),
    (_pod_with(affinity=_affinity_term(fields={"key": "metadata.name", "operator": "In", "values": ["a", "b"]})),
     f"{_TERM0}.matchFields[0].values", "exactly one value"),
    (_pod_with(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": ["zone"]}}}), f"{_TERM0[:-3]}[0]", "expected an object"),
    (_pod_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}}]}}), f"{_ANTI0}.topologyKey", "required"),
    (_pod_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": "app=web", "topologyKey": "zone"}]}}), f"{_ANTI0}.labelSelector", "expected an object"),
    (_pod_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
         "topologyKey": "zone"}]}}), f"{_ANTI0}.labelSelector.matchExpressions[0].operator", "unknown operator 'Gt'"),
    (_pod_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": 1}}, "topologyKey": "zone"}]}}),
     f"{_ANTI0}.labelSelector.matchLabels.app", "expected a string"),
    (_pod_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "namespaceSelector": {"matchLabels": {"team": "a"}}}]}}),
     f"{_ANTI0}.namespaceSelector", "only an empty namespaceSelector"),
    (_pod_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["x"]}}),
     _ANTI0, "expected an object"),
    (_pod_with(volumes=["data"]), "spec.volumes[0]", "expected an object"),
    (_pod_with(volumes=[{"name": "e", "emptyDir": {"medium": 1}}]), "spec.volumes[0].emptyDir.medium",
     "expected string"),
    (_pod_with(containers=[k8s_container(ports=[8080])]), "spec.containers[0].ports[0]", "expected an object"),
    (_pod_with(topologySpreadConstraints=["zone"]), "spec.topologySpreadConstraints[0]", "expected an object"),
    (_pod_with(topologySpreadConstraints=[{"topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
     "spec.topologySpreadConstraints[0].maxSkew", "greater than zero"),
    (_pod_with(topologySpreadConstraints=[{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]),
     "spec.topologySpreadConstraints[0].topologyKey", "required"),
    (_pod_with(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone"}]),
     "spec.topologySpreadConstraints[0].whenUnsatisfiable", "must be DoNotSchedule or ScheduleAnyway"),
    (_pod_with(topologySpreadConstraints=[{**_SPREAD, "minDomains": 0}]),
     "spec.topologySpreadConstraints[0].minDomains", "greater than zero"),
    (_pod_with(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                                           "minDomains": 2}]),
     "spec.topologySpreadConstraints[0].minDomains", "only be set with whenUnsatisfiable=DoNotSchedule"),
    (_pod_with(topologySpreadConstraints=[{**_SPREAD, "nodeTaintsPolicy": "Always"}]),
     "spec.topologySpreadConstraints[0].nodeTaintsPolicy", "must be Honor or Ignore"),
    (_pod_with(topologySpreadConstraints=[{**_SPREAD, "matchLabelKeys": ["bad key"]}]),
     "spec.topologySpreadConstraints[0].matchLabelKeys[0]", "not a label key"),
    (_pod_with(topologySpreadConstraints=[{**_SPREAD, "labelSelector": {"matchLabels": "x"}}]),
     "spec.topologySpreadConstraints[0].labelSelector.matchLabels", "expected"),
    (_pod_with(topologySpreadConstraints=[_SPREAD, _SPREAD]),
     "spec.topologySpreadConstraints[1]", "duplicate"),
    (_pod_with(priority="high"), "spec.priority", "expected int"),
    ({**k8s_pod("x"), "status": {"phase": "Sleeping"}}, "status.phase", "unknown phase"),
    ({**k8s_pod("x"), "status": {"conditions": ["Ready"]}}, "status.conditions[0]", "expected an object"),
    ({**k8s_pod("x"), "metadata": {"name": "x", "ownerReferences": ["rs"]}}, "metadata.ownerReferences[0]",
     "expected an object"),
    ({**k8s_pod("x"), "metadata": {"name": "x", "creationTimestamp": "yesterday"}}, "metadata.creationTimestamp",
     "RFC 3339"),
    (k8s_pod("x", labels={"kueue.x-k8s.io/pod-group-name": "g"},
             annotations={"kueue.x-k8s.io/pod-group-total-count": "²"}),
     "metadata.annotations.kueue.x-k8s.io/pod-group-total-count", "expected an integer"),
    (k8s_pod("x", annotations={"gpuscale.io/gpu-milli": "half"}), "metadata.annotations.gpuscale.io/gpu-milli",
     "regular expression"),
]


@pytest.mark.parametrize(("obj", "field", "problem"), BAD_PODS, ids=[f for _, f, _ in BAD_PODS])
def test_bad_pods_raise_input_error_naming_object_and_field(obj: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        pod_from_k8s(obj)
    err = caught.value
    namespace, name = obj["metadata"].get("namespace"), obj["metadata"].get("name", "<unnamed>")
    assert (err.obj, err.field) == (f"Pod {namespace}/{name}" if namespace else f"Pod {name}", field)
    assert problem in err.problem
    assert str(err).startswith(f"{err.obj}: {field}: ")


BAD_NODES = [
    (k8s_node("n1", taints=[{"key": "k", "effect": "NoScheduleAtAll"}]), "spec.taints[0].effect", "unknown effect"),
    (k8s_node("n1", taints=[{"key": "k"}]), "spec.taints[0].effect", "unknown effect ''"),
    (k8s_node("n1", taints=[{"effect": "NoSchedule"}]), "spec.taints[0].key", "required"),
    ({**k8s_node("n1"), "spec": {"taints": ["k=v:NoSchedule"]}}, "spec.taints[0]", "expected an object"),
    (k8s_node("n1", allocatable={"cpu": "eight"}, capacity={"cpu": "8"}), "status.allocatable.cpu",
     "regular expression"),
    (k8s_node("n1", capacity={"memory": "1Gii"}), "status.capacity.memory", "suffix"),
    ({**k8s_node("n1"), "spec": {"unschedulable": "yes"}}, "spec.unschedulable", "expected bool"),
    ({**k8s_node("n1"), "status": {"conditions": [None]}}, "status.conditions[0]", "expected an object"),
    ({**k8s_node("n1"), "metadata": {"name": "n1", "labels": {"gpu": True}}}, "metadata.labels.gpu",
     "expected a string"),
]


@pytest.mark.parametrize(("obj", "field", "problem"), BAD_NODES, ids=[f for _, f, _ in BAD_NODES])
def test_bad_nodes_raise_input_error_naming_object_and_field(obj: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        node_from_k8s(obj)
    assert (caught.value.obj, caught.value.field) == ("Node n1", field)
    assert problem in caught.value.problem


@pytest.mark.parametrize(("obj", "label", "field"), [
    ({"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "ml"}, "spec": {"selector": "app=x"}},
     "PodDisruptionBudget ml/b", "spec.selector"),
    ({"kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {"minAvailable": [1]}},
     "PodDisruptionBudget b", "spec.minAvailable"),
    ({"kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {},
      "status": {"disruptionsAllowed": "1"}}, "PodDisruptionBudget b", "status.disruptionsAllowed"),
    ({"kind": "PodGroup", "metadata": {"name": "g"}, "spec": {}}, "PodGroup g", "spec.minMember"),
    ({"kind": "PodGroup", "metadata": {"name": "g"}, "spec": {"minMember": 0}}, "PodGroup g", "spec.minMember"),
])
def test_bad_budgets_and_groups(obj: dict[str, Any], label: str, field: str) -> None:
    with pytest.raises(InputError) as caught:
        cluster_from_objects([obj])
    assert (caught.value.obj, caught.value.field) == (label, field)


@pytest.mark.parametrize(("obj", "label", "field"), [
    ({"kind": "PersistentVolume", "metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "lots"}}},
     "PersistentVolume pv", "spec.capacity.storage"),
    ({"kind": "PersistentVolume", "metadata": {"name": "pv"}, "spec": {"accessModes": ["ReadWriteSometimes"]}},
     "PersistentVolume pv", "spec.accessModes[0]"),
    ({"kind": "PersistentVolume", "metadata": {"name": "pv"}, "spec": {"nodeAffinity": {"required": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "Near"}]}]}}}},
     "PersistentVolume pv", "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator"),
    ({"kind": "PersistentVolume", "metadata": {"name": "pv"}, "spec": {"claimRef": {"namespace": "a"}}},
     "PersistentVolume pv", "spec.claimRef.name"),
    ({"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "ml"},
      "spec": {"resources": {"requests": {"storage": "-1Gi"}}}},
     "PersistentVolumeClaim ml/c", "spec.resources.requests.storage"),
    ({"kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {"volumeMode": "Raw"}},
     "PersistentVolumeClaim c", "spec.volumeMode"),
    ({"kind": "StorageClass", "metadata": {"name": "s"}, "volumeBindingMode": "Later"},
     "StorageClass s", "volumeBindingMode"),
    ({"kind": "StorageClass", "metadata": {"name": "s"}, "allowedTopologies": [{"matchLabelExpressions": [
        {"key": "zone", "values": []}]}]}, "StorageClass s", "allowedTopologies[0].matchLabelExpressions[0].values"),
    ({"kind": "CSINode", "metadata": {"name": "n"}, "spec": {"drivers": [{"name": "d", "allocatable": {
        "count": "two"}}]}}, "CSINode n", "spec.drivers[0].allocatable.count"),
    ({"kind": "CSINode", "metadata": {"name": "n"}, "spec": {"drivers": [{"allocatable": {"count": 2}}]}},
     "CSINode n", "spec.drivers[0].name"),
    (k8s_pod("p", volumes=[{"name": "v", "persistentVolumeClaim": {}}]), "Pod default/p",
     "spec.volumes[0].persistentVolumeClaim.claimName"),
    (k8s_pod("p", volumes=[{"name": "v", "ephemeral": {}}]), "Pod default/p",
     "spec.volumes[0].ephemeral.volumeClaimTemplate"),
])
def test_bad_storage_objects(obj: dict[str, Any], label: str, field: str) -> None:
    with pytest.raises(InputError) as caught:
        cluster_from_objects([obj])
    assert (caught.value.obj, caught.value.field) == (label, field)


def test_storage_objects_and_pod_claims() -> None:
    cluster = cluster_from_objects([
        {"kind": "PersistentVolume", "metadata": {"name": "pv", "labels": {"topology.kubernetes.io/zone": "b"}},
         "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOncePod"], "storageClassName": "fast",
                  "claimRef": {"namespace": "ml", "name": "data"}, "csi": {"driver": "d", "volumeHandle": "h"},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}]}}},
         "status": {"phase": "Bound"}},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "ml",
                                                       "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
         "spec": {"volumeName": "pv", "storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}},
        {"kind": "StorageClass", "metadata": {"name": "fast"}, "provisioner": "d",
         "volumeBindingMode": "WaitForFirstConsumer",
         "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["b"]}]}]},
        {"kind": "CSINode", "metadata": {"name": "n"},
         "spec": {"drivers": [{"name": "d", "allocatable": {"count": 2}}]}},
        k8s_pod("p", namespace="ml", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "data"}},
                                              {"name": "s", "ephemeral": {"volumeClaimTemplate": {"spec": {
                                                  "storageClassName": "fast"}}}}]),
    ])
    storage = cluster.storage
    pv, claim, cls, csi = storage.volume("pv"), storage.claim("ml/data"), storage.storage_class("fast"), \
        storage.csi_node("n")
    assert pv is not None and pv.capacity == 10 * 2**30 and pv.claim == "ml/data" and pv.csi_driver == "d"
    assert pv.affinity_matches({"topology.kubernetes.io/zone": "b"}) and not pv.affinity_matches({})
    assert claim is not None and claim.bound and claim.request == 2**30
    assert cls is not None and cls.wait_for_first_consumer and not cls.topology_allows({})
    assert csi is not None and csi.limits == {"d": 2}
    (pod,) = cluster.pods
    assert [(c.key, c.template is not None) for c in pod.constraints.claims] == [("ml/data", False), ("ml/p-s", True)]
    assert cluster_from_objects([k8s_pod("p")]).storage == type(storage)()  # dumps without them keep working


@pytest.mark.parametrize(("objects", "label", "field"), [
    ([["not", "an", "object"]], "input item 0", "kind"),
    ([k8s_pod("a"), {"metadata": {"name": "no-kind"}}], "input item 1", "kind"),
    ([{"kind": 3}], "input item 0", "kind"),
    ([{"kind": "List", "items": {"a": 1}}], "input List", "items"),
    ([{"kind": "List"}], "input List", "items"),
    ([k8s_pod("a"), k8s_pod("a")], "Pod default/a", "metadata.name"),
    ([k8s_node("n"), k8s_list(k8s_node("n"))], "Node n", "metadata.name"),
])
def test_bad_object_lists(objects: list[Any], label: str, field: str) -> None:
    with pytest.raises(InputError) as caught:
        cluster_from_objects(objects)
    assert (caught.value.obj, caught.value.field) == (label, field)


# ----------------------------------------------------------------------------------------------------- fuzzing

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["", "x", "1", "1Gi", "Always", "In", "NoSchedule", "metadata.name"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["key", "operator", "values", "effect", "matchLabels", "matchExpressions", "cpu", "x"]),
        children, max_size=3),
    max_leaves=6,
)

_RICH_POD = k8s_pod(
    "x", labels={"app": "web", "kueue.x-k8s.io/pod-group-name": "g"},
    annotations={"kueue.x-k8s.io/pod-group-total-count": "2"},
    containers=[k8s_container(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1"},
                              ports=[{"containerPort": 80}])],
    init_containers=[k8s_container(requests={"cpu": "1"}, restart_policy="Always")],
    nodeSelector={"tier": "gpu"}, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
    affinity={
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]},
    },
    volumes=[{"name": "e", "emptyDir": {}}], topologySpreadConstraints=[
        {**_SPREAD, "minDomains": 2,
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["app"], "nodeAffinityPolicy": "Honor",
         "nodeTaintsPolicy": "Ignore"}],
    overhead={"cpu": "10m"}, resources={"requests": {"cpu": "3"}},
    status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
)
_RICH_NODE = k8s_node("n1", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}], labels={"zone": "a"},
                      unschedulable=False)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += _paths(v, (*prefix, i))
    return found


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    clone = copy.deepcopy(obj)
    target = clone
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return clone


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_malformed_field_is_an_input_error_never_a_crash(data: st.DataObject) -> None:
    """Replace any subtree of a feature-rich Pod or Node with arbitrary JSON: conversion succeeds or raises
    InputError — never AttributeError, TypeError or ValueError."""
    base = data.draw(st.sampled_from([_RICH_POD, _RICH_NODE]))
    path = data.draw(st.sampled_from(_paths(base)[1:]))
    mutated = _replace(base, path, data.draw(_JSON))
    with contextlib.suppress(InputError):
        cluster_from_objects([mutated])


def test_a_pod_keeps_its_start_time_and_the_names_of_its_node_local_volumes() -> None:
    from gpuscale.kube.convert import pod_from_k8s
    from tests.builders import k8s_pod
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}},
               {"name": "host", "hostPath": {"path": "/data"}}, {"name": "cfg", "configMap": {"name": "c"}}]
    pod = pod_from_k8s(k8s_pod(volumes=volumes, status={"phase": "Running", "startTime": "2026-11-29T09:00:00Z"}))
    assert pod.local_storage and pod.local_volumes == ("scratch", "host")
    assert pod.started_s == 1795942800.0
    assert pod_from_k8s(k8s_pod()).started_s is None and pod_from_k8s(k8s_pod()).local_volumes == ()


def test_host_ports_as_kube_scheduler_reads_them() -> None:
    """App and sidecar containers' `hostPort`s, protocol TCP and host IP 0.0.0.0 by default; a plain init container's
    are left out; a host-network pod binds its `containerPort`s; a bad protocol or port is one line naming the field."""
    spec = {"hostNetwork": True,
            "containers": [k8s_container(ports=[{"containerPort": 80, "hostPort": 8080},
                                                {"containerPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}])],
            "initContainers": [{**k8s_container("side", ports=[{"containerPort": 9100, "hostPort": 9100}]),
                                "restartPolicy": "Always"},
                               k8s_container("once", ports=[{"containerPort": 1, "hostPort": 7000}])]}
    assert pod_from_k8s(k8s_pod(**spec)).constraints.host_ports == (
        HostPort(9100), HostPort(8080), HostPort(53, "UDP", "10.0.0.1"))
    assert pod_from_k8s(k8s_pod(containers=[k8s_container(ports=[{"containerPort": 80}])])).constraints.host_ports == ()
    bad = k8s_pod(containers=[k8s_container(ports=[{"containerPort": 80, "hostPort": 80, "protocol": "HTTP"}])])
    with pytest.raises(InputError, match=r"spec\.containers\[0\]\.ports\[0\]\.protocol"):
        pod_from_k8s(bad)
    big = k8s_pod(containers=[k8s_container(ports=[{"containerPort": 80, "hostPort": 70000}])])
    with pytest.raises(InputError, match=r"spec\.containers\[0\]\.ports\[0\]\.hostPort"):
        pod_from_k8s(big)
