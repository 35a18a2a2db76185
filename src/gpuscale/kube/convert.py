"""Kubernetes objects (as `kubectl get -o json` prints them) → gpuscale model values.

Pure conversion: no API calls. Every malformed field raises `InputError` naming the object (`Pod ns/name`) and the
field path, so the CLI can print one line and exit 2. Unknown resource names are kept; unknown kinds are counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpuscale.model.cluster import Cluster, PodGroupSpec
from gpuscale.model.errors import InputError
from gpuscale.model.node import HOSTNAME_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import OwnerRef, Pod, PodGroupRef, PodPhase, SchedulingConstraints
from gpuscale.model.quantity import QuantityError, to_milli, to_units
from gpuscale.model.resources import CPU, GPU_MILLI, Resources
from gpuscale.model.selectors import (
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    SelectorOperator,
)
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator

GPU_MILLI_ANNOTATION = "gpuscale.io/gpu-milli"
"""Fractional GPU request on one GPU, in thousandths (openb `gpu_milli`); alternative to the extended resource."""

# Gang membership, as each system spells it.
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
POD_GROUP_KINDS = {"PodGroup"}
KNOWN_KINDS = {"Pod", "Node", "PodDisruptionBudget", *POD_GROUP_KINDS}
MILLI_RESOURCES = {CPU, GPU_MILLI}


class _Ctx:
    """The object being converted, for error messages."""

    def __init__(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "<unnamed>") if isinstance(meta, Mapping) else "<unnamed>"
        ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        self.label = f"{kind} {ns}/{name}" if ns else f"{kind} {name}"

    def fail(self, field: str, problem: str) -> InputError:
        return InputError(self.label, field, problem)


def _get(ctx: _Ctx, obj: Any, path: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """Walk a dotted path; a present value of the wrong JSON type is an error, a missing one the default."""
    value = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            raise ctx.fail(path, "expected an object")
        value = value.get(part)
        if value is None:
            return default
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ctx.fail(path, f"expected {names.replace('str', 'string').replace('dict', 'object')}, got {value!r}")
    return value


def _str_map(ctx: _Ctx, obj: Any, path: str) -> dict[str, str]:
    raw = _get(ctx, obj, path, dict, {})
    bad = [k for k, v in raw.items() if not isinstance(v, str)]
    if bad:
        raise ctx.fail(f"{path}.{bad[0]}", "expected a string value")
    return dict(raw)


def parse_resources(ctx: _Ctx, raw: Any, path: str) -> Resources:
    """A ResourceList: CPU and milli-GPU to thousandths (rounded up), every other name to whole units."""
    if raw is None:
        return Resources()
    if not isinstance(raw, Mapping):
        raise ctx.fail(path, "expected an object of resource quantities")
    amounts: dict[str, int] = {}
    for name, text in raw.items():
        try:
            amount = to_milli(text) if name in MILLI_RESOURCES else to_units(text)
        except QuantityError as err:
            raise ctx.fail(f"{path}.{name}", str(err)) from None
        if amount < 0:
            raise ctx.fail(f"{path}.{name}", f"must be greater than or equal to 0, got {text!r}")
        amounts[name] = amount
    return Resources.of(amounts)


def _timestamp(ctx: _Ctx, obj: Mapping[str, Any], path: str) -> float | None:
    text = _get(ctx, obj, path, str)
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ctx.fail(path, f"not an RFC 3339 time: {text!r}") from None


# ---------------------------------------------------------------------------------------------------------- selectors

def _requirement(ctx: _Ctx, raw: Any, path: str, node_selector: bool) -> Requirement:
    if not isinstance(raw, Mapping):
        raise ctx.fail(path, "expected an object")
    key = _get(ctx, raw, "key", str)
    if not key:
        raise ctx.fail(f"{path}.key", "required")
    op_text = _get(ctx, raw, "operator", str, "")
    allowed = list(SelectorOperator) if node_selector else [o for o in SelectorOperator if o not in ("Gt", "Lt")]
    if op_text not in allowed:
        raise ctx.fail(f"{path}.operator", f"unknown operator {op_text!r} (valid: {', '.join(allowed)})")
    op = SelectorOperator(op_text)
    values = tuple(_get(ctx, raw, "values", list, []))
    if not all(isinstance(v, str) for v in values):
        raise ctx.fail(f"{path}.values", "expected strings")
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        raise ctx.fail(f"{path}.values", f"must be non-empty for operator {op}")
    if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        raise ctx.fail(f"{path}.values", f"must be empty for operator {op}")
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        if len(values) != 1:
            raise ctx.fail(f"{path}.values", f"must have exactly one value for operator {op}")
        try:
            int(values[0], 10)
        except ValueError:
            raise ctx.fail(f"{path}.values[0]", f"must be an integer for operator {op}, got {values[0]!r}") from None
    return Requirement(key=key, operator=op, values=values)


def _requirements(ctx: _Ctx, raw: Any, path: str, node_selector: bool) -> tuple[Requirement, ...]:
    items = _get(ctx, {"v": raw}, "v", list, []) if raw is not None else []
    return tuple(_requirement(ctx, r, f"{path}[{i}]", node_selector) for i, r in enumerate(items))


def _label_selector(ctx: _Ctx, raw: Any, path: str) -> LabelSelector:
    if raw is None:
        return LabelSelector(nothing=True)
    labels = _str_map(ctx, raw, "matchLabels") if isinstance(raw, Mapping) else {}
    exprs = _requirements(ctx, raw.get("matchExpressions"), f"{path}.matchExpressions", False)
    return LabelSelector(match_labels=tuple(sorted(labels.items())), match_expressions=exprs)


def _pod_terms(ctx: _Ctx, raw: Any, path: str) -> tuple[PodAffinityTerm, ...]:
    terms = []
    for i, t in enumerate(raw or ()):
        where = f"{path}[{i}]"
        topology_key = _get(ctx, t, "topologyKey", str, "")
        if not topology_key:
            raise ctx.fail(f"{where}.topologyKey", "required")
        ns_selector = _get(ctx, t, "namespaceSelector", dict)
        if ns_selector and (ns_selector.get("matchLabels") or ns_selector.get("matchExpressions")):
            raise ctx.fail(f"{where}.namespaceSelector", "only an empty namespaceSelector ({} = all namespaces) is "
                                                          "supported without Namespace objects")
        terms.append(PodAffinityTerm(
            selector=_label_selector(ctx, t.get("labelSelector"), f"{where}.labelSelector"),
            topology_key=topology_key,
            namespaces=tuple(_get(ctx, t, "namespaces", list, [])),
            all_namespaces=ns_selector is not None,
        ))
    return tuple(terms)


# -------------------------------------------------------------------------------------------------------------- pods

def _tolerations(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    result = []
    for i, t in enumerate(_get(ctx, spec, "tolerations", list, [])):
        where = f"spec.tolerations[{i}]"
        op_text = _get(ctx, t, "operator", str, "") or "Equal"
        if op_text not in ("Equal", "Exists"):
            raise ctx.fail(f"{where}.operator", f"unknown operator {op_text!r} (valid: Equal, Exists)")
        effect_text = _get(ctx, t, "effect", str, "")
        if effect_text and effect_text not in TaintEffect.__members__.values():
            raise ctx.fail(f"{where}.effect", f"unknown effect {effect_text!r}")
        result.append(Toleration(
            key=_get(ctx, t, "key", str, ""), operator=TolerationOperator(op_text),
            value=_get(ctx, t, "value", str, ""),
            effect=TaintEffect(effect_text) if effect_text else None,
            toleration_seconds=_get(ctx, t, "tolerationSeconds", int),
        ))
    return tuple(result)


def _container_requests(ctx: _Ctx, container: Mapping[str, Any], path: str) -> Resources:
    """Requests, defaulted from limits where a request is absent (the API server's defaulting)."""
    limits = parse_resources(ctx, _get(ctx, container, "resources.limits", dict), f"{path}.resources.limits")
    requests = parse_resources(ctx, _get(ctx, container, "resources.requests", dict), f"{path}.resources.requests")
    have = set(requests.names())
    return requests + Resources.of({n: a for n, a in limits.items if n not in have})


def effective_requests(ctx: _Ctx, spec: Mapping[str, Any]) -> Resources:
    """kube-scheduler's pod request: max(app + sidecars, each init + sidecars before it) + overhead."""
    containers = _get(ctx, spec, "containers", list, [])
    if not containers:
        raise ctx.fail("spec.containers", "must have at least one container")
    total = Resources()
    for i, c in enumerate(containers):
        total = total + _container_requests(ctx, c, f"spec.containers[{i}]")
    sidecars = Resources()
    init_peak = Resources()
    for i, c in enumerate(_get(ctx, spec, "initContainers", list, [])):
        req = _container_requests(ctx, c, f"spec.initContainers[{i}]")
        if _get(ctx, c, "restartPolicy", str) == "Always":
            total = total + req
            sidecars = sidecars + req
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(req + sidecars)
    result = total.max(init_peak)
    pod_level = parse_resources(ctx, _get(ctx, spec, "resources.requests", dict), "spec.resources.requests")
    if pod_level:
        # Pod-level resources (PodLevelResources) replace the container sums for the names they set.
        result = Resources.of({**result.as_dict(), **pod_level.as_dict()})
    return result + parse_resources(ctx, _get(ctx, spec, "overhead", dict), "spec.overhead")


def _node_affinity(ctx: _Ctx, spec: Mapping[str, Any]) -> NodeAffinity:
    selector = _str_map(ctx, spec, "nodeSelector")
    required = _get(ctx, spec, "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", dict)
    terms = None
    if required is not None:
        path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        raw_terms = _get(ctx, required, "nodeSelectorTerms", list, [])
        terms = tuple(
            NodeSelectorTerm(
                match_expressions=_requirements(ctx, t.get("matchExpressions"), f"{path}[{i}].matchExpressions", True),
                match_fields=_fields(ctx, t.get("matchFields"), f"{path}[{i}].matchFields"),
            )
            for i, t in enumerate(raw_terms)
        )
    return NodeAffinity(node_selector=tuple(sorted(selector.items())), required_terms=terms)


def _fields(ctx: _Ctx, raw: Any, path: str) -> tuple[Requirement, ...]:
    reqs = _requirements(ctx, raw, path, True)
    for i, r in enumerate(reqs):
        if r.key != "metadata.name":
            raise ctx.fail(f"{path}[{i}].key", f"not a supported field selector: {r.key!r} (only metadata.name)")
    return reqs


def _unsupported(spec: Mapping[str, Any]) -> tuple[str, ...]:
    found = []
    if any(c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
           for c in spec.get("topologySpreadConstraints") or ()):
        found.append("topologySpreadConstraints with whenUnsatisfiable=DoNotSchedule")
    if any("persistentVolumeClaim" in v or "ephemeral" in v for v in spec.get("volumes") or ()):
        found.append("volume topology (persistent volume claims)")
    if any(p.get("hostPort") for c in spec.get("containers") or () for p in c.get("ports") or ()):
        found.append("host ports")
    if spec.get("resourceClaims"):
        found.append("dynamic resource allocation (resourceClaims)")
    return tuple(found)


def _uses_local_storage(spec: Mapping[str, Any]) -> bool:
    for v in spec.get("volumes") or ():
        if "hostPath" in v:
            return True
        empty_dir = v.get("emptyDir")
        if empty_dir is not None and (empty_dir or {}).get("medium") != "Memory":
            return True
    return False


def _group(ctx: _Ctx, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> PodGroupRef | None:
    if KUEUE_GROUP_LABEL in labels:
        total = annotations.get(KUEUE_TOTAL_ANNOTATION)
        if total is not None and not total.isdigit():
            raise ctx.fail(f"metadata.annotations.{KUEUE_TOTAL_ANNOTATION}", f"expected an integer, got {total!r}")
        return PodGroupRef(key=f"{namespace}/{labels[KUEUE_GROUP_LABEL]}", source="kueue",
                           min_member=int(total) if total else None)
    if VOLCANO_GROUP_ANNOTATION in annotations:
        return PodGroupRef(key=f"{namespace}/{annotations[VOLCANO_GROUP_ANNOTATION]}", source="volcano")
    for label in COSCHEDULING_GROUP_LABELS:
        if label in labels:
            return PodGroupRef(key=f"{namespace}/{labels[label]}", source="coscheduling")
    return None


def pod_from_k8s(obj: Mapping[str, Any]) -> Pod:
    ctx = _Ctx("Pod", obj)
    meta = _get(ctx, obj, "metadata", dict, {})
    name = _get(ctx, meta, "name", str)
    if not name:
        raise ctx.fail("metadata.name", "required")
    namespace = _get(ctx, meta, "namespace", str, "default")
    spec = _get(ctx, obj, "spec", dict)
    if spec is None:
        raise ctx.fail("spec", "required")
    labels = _str_map(ctx, meta, "labels")
    annotations = _str_map(ctx, meta, "annotations")
    requests = effective_requests(ctx, spec)
    if GPU_MILLI_ANNOTATION in annotations:
        try:
            milli = to_units(annotations[GPU_MILLI_ANNOTATION])
        except QuantityError as err:
            raise ctx.fail(f"metadata.annotations.{GPU_MILLI_ANNOTATION}", str(err)) from None
        requests = requests + Resources.of({GPU_MILLI: milli})
    affinity = _get(ctx, spec, "affinity", dict, {})
    anti = _pod_terms(ctx, _get(ctx, affinity, "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution", list),
                      "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    pod_aff = _pod_terms(ctx, _get(ctx, affinity, "podAffinity.requiredDuringSchedulingIgnoredDuringExecution", list),
                         "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    constraints = SchedulingConstraints(
        affinity=_node_affinity(ctx, spec), tolerations=_tolerations(ctx, spec),
        pod_anti_affinity=anti, pod_affinity=pod_aff, unsupported=_unsupported(spec),
    )
    status = _get(ctx, obj, "status", dict, {})
    phase_text = _get(ctx, status, "phase", str, "Pending")
    if phase_text not in PodPhase.__members__.values():
        raise ctx.fail("status.phase", f"unknown phase {phase_text!r}")
    conditions = _get(ctx, status, "conditions", list, [])
    unschedulable = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                        and c.get("reason") == "Unschedulable" for c in conditions)
    owner = next((o for o in _get(ctx, meta, "ownerReferences", list, []) if o.get("controller")), None)
    return Pod(
        namespace=namespace, name=name, uid=_get(ctx, meta, "uid", str, ""), requests=requests,
        constraints=constraints, node_name=_get(ctx, spec, "nodeName", str) or None,
        phase=PodPhase(phase_text), priority=_get(ctx, spec, "priority", int, 0), labels=labels,
        annotations=annotations,
        owner=OwnerRef(kind=str(owner.get("kind", "")), name=str(owner.get("name", ""))) if owner else None,
        group=_group(ctx, namespace, labels, annotations), unschedulable=unschedulable,
        scheduling_gated=bool(_get(ctx, spec, "schedulingGates", list, [])),
        nominated_node=_get(ctx, status, "nominatedNodeName", str) or None,
        created_s=_timestamp(ctx, meta, "creationTimestamp"),
        deleting=_get(ctx, meta, "deletionTimestamp", str) is not None,
        local_storage=_uses_local_storage(spec),
    )


# ------------------------------------------------------------------------------------------------------------- nodes

def _taints(ctx: _Ctx, raw: Any, path: str) -> tuple[Taint, ...]:
    result = []
    for i, t in enumerate(raw or ()):
        effect = _get(ctx, t, "effect", str, "")
        if effect not in TaintEffect.__members__.values():
            raise ctx.fail(f"{path}[{i}].effect", f"unknown effect {effect!r} (valid: NoSchedule, PreferNoSchedule, "
                                                  "NoExecute)")
        key = _get(ctx, t, "key", str, "")
        if not key:
            raise ctx.fail(f"{path}[{i}].key", "required")
        result.append(Taint(key=key, value=_get(ctx, t, "value", str, ""), effect=TaintEffect(effect),
                            time_added=_get(ctx, t, "timeAdded", str)))
    return tuple(result)


def node_from_k8s(obj: Mapping[str, Any]) -> Node:
    ctx = _Ctx("Node", obj)
    meta = _get(ctx, obj, "metadata", dict, {})
    name = _get(ctx, meta, "name", str)
    if not name:
        raise ctx.fail("metadata.name", "required")
    spec = _get(ctx, obj, "spec", dict, {})
    status = _get(ctx, obj, "status", dict, {})
    capacity = parse_resources(ctx, status.get("capacity"), "status.capacity")
    allocatable = parse_resources(ctx, status.get("allocatable"), "status.allocatable") if status.get(
        "allocatable") is not None else capacity
    labels = _str_map(ctx, meta, "labels")
    labels.setdefault(HOSTNAME_LABEL, name)
    conditions = _get(ctx, status, "conditions", list, [])
    return Node(
        name=name, allocatable=allocatable, capacity=capacity, labels=labels,
        annotations=_str_map(ctx, meta, "annotations"), taints=_taints(ctx, spec.get("taints"), "spec.taints"),
        unschedulable=bool(_get(ctx, spec, "unschedulable", bool, False)),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        created_s=_timestamp(ctx, meta, "creationTimestamp"), provider_id=_get(ctx, spec, "providerID", str, ""),
        deleting=_get(ctx, meta, "deletionTimestamp", str) is not None,
    )


def pdb_from_k8s(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    ctx = _Ctx("PodDisruptionBudget", obj)
    meta = _get(ctx, obj, "metadata", dict, {})
    spec = _get(ctx, obj, "spec", dict, {})
    selector = spec.get("selector")
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    allowed = _get(ctx, obj, "status.disruptionsAllowed", int)
    if allowed is None:
        # No status yet (a hand-written file): a budget with maxUnavailable 0 / minAvailable 100% allows nothing;
        # anything else is unknown until the disruption controller computes it, so assume the safe answer.
        allowed = 0
    return PodDisruptionBudget(
        namespace=_get(ctx, meta, "namespace", str, "default"), name=_get(ctx, meta, "name", str, ""),
        selector=_label_selector(ctx, selector, "spec.selector"),
        disruptions_allowed=allowed,
        min_available=None if min_available is None else str(min_available),
        max_unavailable=None if max_unavailable is None else str(max_unavailable),
    )


def pod_group_from_k8s(obj: Mapping[str, Any]) -> PodGroupSpec:
    ctx = _Ctx("PodGroup", obj)
    meta = _get(ctx, obj, "metadata", dict, {})
    min_member = _get(ctx, obj, "spec.minMember", int)
    if min_member is None or min_member < 1:
        raise ctx.fail("spec.minMember", "required, at least 1")
    return PodGroupSpec(key=f"{_get(ctx, meta, 'namespace', str, 'default')}/{_get(ctx, meta, 'name', str, '')}",
                        min_member=min_member)


def cluster_from_objects(objects: Iterable[Any], source: str = "input") -> Cluster:
    """Convert a flat sequence of objects (items of a `v1 List`, or YAML documents) into a `Cluster`."""
    nodes: list[Node] = []
    pods: list[Pod] = []
    pdbs: list[PodDisruptionBudget] = []
    groups: list[PodGroupSpec] = []
    other: dict[str, int] = {}
    for i, obj in enumerate(objects):
        if obj is None:
            continue
        if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
            raise InputError(f"{source} item {i}", "kind", "expected a Kubernetes object with a kind")
        kind = obj["kind"]
        if kind == "List" or kind.endswith("List"):
            nested = cluster_from_objects(_items(obj, source), source)
            nodes += nested.nodes
            pods += nested.pods
            pdbs += nested.pdbs
            groups += nested.pod_groups
            for k, n in nested.other_kinds.items():
                other[k] = other.get(k, 0) + n
        elif kind == "Pod":
            pods.append(pod_from_k8s(obj))
        elif kind == "Node":
            nodes.append(node_from_k8s(obj))
        elif kind == "PodDisruptionBudget":
            pdbs.append(pdb_from_k8s(obj))
        elif kind in POD_GROUP_KINDS:
            groups.append(pod_group_from_k8s(obj))
        else:
            other[kind] = other.get(kind, 0) + 1
    _check_unique("Node", [n.name for n in nodes])
    _check_unique("Pod", [p.key for p in pods])
    return Cluster(nodes=tuple(nodes), pods=tuple(pods), pdbs=tuple(pdbs), pod_groups=tuple(groups),
                   other_kinds=other)


def _items(obj: Mapping[str, Any], source: str) -> list[Any]:
    items = obj.get("items")
    if not isinstance(items, list):
        raise InputError(f"{source} {obj.get('kind')}", "items", "expected a list")
    return items


def _check_unique(kind: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputError(f"{kind} {name}", "metadata.name", "appears twice in the input")
        seen.add(name)
