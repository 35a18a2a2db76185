"""Shared test builders: model values (`make_pod`, `make_node`, …) and Kubernetes JSON dicts (`k8s_pod`, …).

Every argument has a default, so a test states only what it is about: `make_pod(gpus=1)`, `make_node(taints=(...))`.
Quantities are written as Kubernetes writes them ("100m", "32Gi") and converted with the model's own parser.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuscale.model.node import HOSTNAME_LABEL, ZONE_LABEL, Node
from gpuscale.model.pod import HostPort, Pod, PodPhase, SchedulingConstraints, TopologySpreadConstraint
from gpuscale.model.quantity import to_milli, to_units
from gpuscale.model.resources import CPU, MEMORY, NVIDIA_GPU, PODS, Resources
from gpuscale.model.selectors import (
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    SelectorOperator,
)
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator

# ----------------------------------------------------------------------------------------------------- model values


def resources(cpu: str | int = 0, memory: str | int = 0, gpus: int = 0,
              extra: Mapping[str, int] | None = None) -> Resources:
    """A resource vector from Kubernetes quantities; `extra` holds other names in base units."""
    return Resources.of({CPU: to_milli(cpu), MEMORY: to_units(memory), NVIDIA_GPU: gpus, **(extra or {})})


def taint(key: str = "nvidia.com/gpu", value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=TaintEffect(effect))


def toleration(key: str = "", operator: str = "Equal", value: str = "", effect: str | None = None) -> Toleration:
    return Toleration(key=key, operator=TolerationOperator(operator), value=value,
                      effect=TaintEffect(effect) if effect else None)


def req(key: str, operator: str, *values: str) -> Requirement:
    """`req("zone", "In", "a", "b")`."""
    return Requirement(key=key, operator=SelectorOperator(operator), values=values)


def term(*expressions: Requirement, fields: Iterable[Requirement] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields))


def selector(labels: Mapping[str, str] | None = None, *expressions: Requirement) -> LabelSelector:
    return LabelSelector(match_labels=tuple(sorted((labels or {}).items())), match_expressions=expressions)


def pod_term(labels: Mapping[str, str] | None = None, topology_key: str = HOSTNAME_LABEL,
             namespaces: Iterable[str] = (), all_namespaces: bool = False,
             label_selector: LabelSelector | None = None) -> PodAffinityTerm:
    """A required (anti-)affinity term selecting pods with `labels` (or `label_selector`) per `topology_key`."""
    return PodAffinityTerm(selector=label_selector if label_selector is not None else selector(labels),
                           topology_key=topology_key, namespaces=tuple(namespaces), all_namespaces=all_namespaces)


def make_pod(name: str = "p", namespace: str = "default", *, cpu: str | int = "100m", memory: str | int = "128Mi",
             gpus: int = 0, extra: Mapping[str, int] | None = None,
             tolerations: Iterable[Toleration] = (), node_selector: Mapping[str, str] | None = None,
             required_terms: Iterable[NodeSelectorTerm] | None = None, node_name: str | None = None,
             anti_affinity: Iterable[PodAffinityTerm] = (), affinity: Iterable[PodAffinityTerm] = (),
             unsupported: Iterable[str] = (), labels: Mapping[str, str] | None = None,
             node: str | None = None, phase: PodPhase = PodPhase.PENDING, priority: int = 0,
             host_ports: Iterable[HostPort] = (), spread: Iterable[TopologySpreadConstraint] = (),
             deleting: bool = False) -> Pod:
    """A pod; `node` binds it, `node_name` is the user's `spec.nodeName` constraint (NodeName filter)."""
    constraints = SchedulingConstraints(
        node_name=node_name,
        affinity=NodeAffinity(node_selector=tuple(sorted((node_selector or {}).items())),
                              required_terms=None if required_terms is None else tuple(required_terms)),
        tolerations=tuple(tolerations), pod_anti_affinity=tuple(anti_affinity), pod_affinity=tuple(affinity),
        topology_spread=tuple(spread), unsupported=tuple(unsupported), host_ports=tuple(host_ports),
    )
    return Pod(namespace=namespace, name=name, uid=f"uid-{namespace}-{name}",
               requests=resources(cpu, memory, gpus, extra), constraints=constraints, node_name=node,
               phase=phase, priority=priority, labels=dict(labels or {}), deleting=deleting)


def spread(key: str, match: Mapping[str, str] | None = None, *, max_skew: int = 1, min_domains: int = 1,
           affinity_policy: str = "Honor", taints_policy: str = "Ignore") -> TopologySpreadConstraint:
    """A `DoNotSchedule` spread constraint over `key` counting pods with labels `match` (None: a nil selector)."""
    selector = (LabelSelector(nothing=True) if match is None
                else LabelSelector(match_labels=tuple(sorted(match.items()))))
    return TopologySpreadConstraint(max_skew=max_skew, topology_key=key, selector=selector, min_domains=min_domains,
                                    node_affinity_policy=affinity_policy, node_taints_policy=taints_policy)


def make_node(name: str = "n", *, cpu: str | int = "8", memory: str | int = "32Gi", gpus: int = 0, pods: int = 110,
              extra: Mapping[str, int] | None = None, labels: Mapping[str, str] | None = None,
              zone: str | None = None, taints: Iterable[Taint] = (), unschedulable: bool = False) -> Node:
    """A Ready node with its hostname label (and `zone`, if given) set as the kubelet sets them."""
    all_labels = {HOSTNAME_LABEL: name, **({ZONE_LABEL: zone} if zone else {}), **(labels or {})}
    allocatable = resources(cpu, memory, gpus, {PODS: pods, **(extra or {})})
    return Node(name=name, allocatable=allocatable, capacity=allocatable, labels=all_labels, taints=tuple(taints),
                unschedulable=unschedulable)


# ------------------------------------------------------------------------------------------- Kubernetes JSON dicts


def k8s_container(name: str = "c", *, requests: Mapping[str, Any] | None = None,
                  limits: Mapping[str, Any] | None = None, restart_policy: str | None = None,
                  **extra: Any) -> dict[str, Any]:
    """A container; `requests`/`limits` are ResourceLists as written in a manifest."""
    resources_: dict[str, Any] = {}
    if requests is not None:
        resources_["requests"] = dict(requests)
    if limits is not None:
        resources_["limits"] = dict(limits)
    container: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources_, **extra}
    if restart_policy is not None:
        container["restartPolicy"] = restart_policy
    return container


def k8s_pod(name: str = "x", namespace: str | None = "default", *,
            containers: Iterable[Mapping[str, Any]] | None = None,
            init_containers: Iterable[Mapping[str, Any]] | None = None,
            labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
            status: Mapping[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod as `kubectl get -o json` prints it; extra keywords go into `spec` verbatim."""
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    full_spec: dict[str, Any] = {
        "containers": [dict(c) for c in containers] if containers is not None
        else [k8s_container(requests={"cpu": "100m", "memory": "128Mi"})],
        **spec,
    }
    if init_containers is not None:
        full_spec["initContainers"] = [dict(c) for c in init_containers]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": full_spec,
            "status": dict(status) if status is not None else {"phase": "Pending"}}


def k8s_node(name: str = "n1", *, allocatable: Mapping[str, Any] | None = None,
             capacity: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None,
             taints: Iterable[Mapping[str, Any]] = (), unschedulable: bool | None = None,
             ready: str = "True") -> dict[str, Any]:
    """A Node as `kubectl get -o json` prints it."""
    alloc = dict(allocatable) if allocatable is not None else {"cpu": "8", "memory": "32Gi", "pods": "110"}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": spec,
            "status": {"allocatable": alloc, "capacity": dict(capacity) if capacity is not None else alloc,
                       "conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}


def k8s_list(*items: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": [dict(i) for i in items]}
