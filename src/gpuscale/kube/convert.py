"""Kubernetes objects (as `kubectl get -o json` prints them) → gpuscale model values.

Pure conversion: no API calls. Every malformed field raises `InputError` naming the object (`Pod ns/name`) and the
field path, so the CLI can print one line and exit 2. Unknown resource names are kept; unknown kinds are counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from gpuscale.inputs.files import excerpt
from gpuscale.model.cluster import Cluster, PodGroupSpec
from gpuscale.model.dra import Dra, PodResourceClaim
from gpuscale.model.errors import InputError
from gpuscale.model.node import HOSTNAME_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import (
    ANY_HOST_IP,
    DO_NOT_SCHEDULE,
    HONOR,
    IGNORE,
    SCHEDULE_ANYWAY,
    HostPort,
    OwnerRef,
    Pod,
    PodGroupRef,
    PodPhase,
    SchedulingConstraints,
    TopologySpreadConstraint,
)
from gpuscale.model.quantity import QuantityError, parse_quantity, to_milli, to_units
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, Resources
from gpuscale.model.selectors import (
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    SelectorOperator,
    is_label_value,
    label_key_problem,
    parse_int64,
)
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator
from gpuscale.model.volumes import (
    BETA_CLASS_ANNOTATION,
    BIND_COMPLETED_ANNOTATION,
    DEFAULT_CLASS_ANNOTATION,
    SELECTED_NODE_ANNOTATION,
    CSINode,
    PersistentVolume,
    PersistentVolumeClaim,
    PodClaim,
    Storage,
    StorageClass,
)

GPU_MILLI_ANNOTATION = "gpuscale.io/gpu-milli"
"""Fractional GPU request on one GPU, in thousandths (openb `gpu_milli`); alternative to the extended resource."""

# Gang membership, as each system spells it.
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
POD_GROUP_KINDS = {"PodGroup"}
STORAGE_KINDS = {"PersistentVolume", "PersistentVolumeClaim", "StorageClass", "CSINode"}
DRA_KINDS = {"ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"}
KNOWN_KINDS = {"Pod", "Node", "PodDisruptionBudget", *POD_GROUP_KINDS, *STORAGE_KINDS, *DRA_KINDS}
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


def _join(at: str, path: str) -> str:
    return f"{at}.{path}" if at else path


def _get(ctx: _Ctx, obj: Any, path: str, kind: type | tuple[type, ...], default: Any = None, at: str = "") -> Any:
    """Walk a dotted path; a present value of the wrong JSON type is an error, a missing one the default.

    `at` is where `obj` itself sits in the object (`spec.tolerations[0]`), so errors name the full field path.
    """
    value = obj
    for part in path.split(".") if "." in path else (path,):
        # `type(...) is dict` first: the JSON decoder's dicts skip the (slow) ABC check — measurable on 100,000 pods.
        if type(value) is not dict and not isinstance(value, Mapping):
            raise ctx.fail(_join(at, path), "expected an object")
        value = value.get(part)
        if value is None:
            return default
    if not isinstance(value, kind) or (type(value) is bool and kind is not bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        names = names.replace("str", "string").replace("dict", "object")
        raise ctx.fail(_join(at, path), f"expected {names}, got {excerpt(value)}")
    return value


_INT32 = 2**31 - 1


def _int32(ctx: _Ctx, obj: Any, path: str, default: int, at: str = "") -> int:
    """An int32 field (pod priority, …): beyond ±2^31 the API server refuses the object."""
    value: int = _get(ctx, obj, path, int, default, at)
    if not -_INT32 - 1 <= value <= _INT32:
        raise ctx.fail(_join(at, path), f"must fit in int32 (-2147483648 to 2147483647), got {excerpt(value)}")
    return value


def _objects(ctx: _Ctx, obj: Any, path: str, at: str = "") -> list[Mapping[str, Any]]:
    """A list of objects at `path` (empty when absent); any item that is not an object is an error."""
    items = _get(ctx, obj, path, list, [], at)
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ctx.fail(f"{_join(at, path)}[{i}]", f"expected an object, got {excerpt(item)}")
    return list(items)


def _str_map(ctx: _Ctx, obj: Any, path: str, at: str = "") -> dict[str, str]:
    raw = _get(ctx, obj, path, dict, {}, at)
    bad = [k for k, v in raw.items() if not isinstance(v, str)]
    if bad:
        raise ctx.fail(f"{_join(at, path)}.{str(bad[0])[:80]}", "expected a string value")
    return dict(raw)


@lru_cache(maxsize=65536)
def _label_problem(key: str, value: str) -> str | None:
    """Why `key: value` is no label (label keys and values repeat across a cluster: each pair is checked once)."""
    problem = label_key_problem(key)
    if problem is not None:
        return problem
    return None if is_label_value(value) else (f"{excerpt(value)} is not a label value (at most 63 of "
                                               "[-A-Za-z0-9_.], alphanumeric at both ends)")


def _labels(ctx: _Ctx, meta: Any) -> dict[str, str]:
    """`metadata.labels`, every key and value checked by the API server's label syntax."""
    found = _str_map(ctx, meta, "labels", at="metadata")
    for key, value in found.items():
        problem = _label_problem(key, value) if type(key) is str else f"{excerpt(key)} is not a string"
        if problem is not None:
            raise ctx.fail(f"metadata.labels.{str(key)[:80]}", problem)
    return found


@lru_cache(maxsize=4096)
def _amount(milli: bool, whole: bool, text: str) -> int:
    """Quantities repeat (`100m`, `256Mi`, `8`) across a cluster's objects: parse each distinct text once. A text that
    raises is not cached (lru_cache caches results only)."""
    return _convert(milli, whole, text)


def _convert(milli: bool, whole: bool, text: str | int | float) -> int:
    if milli:
        return to_milli(text)
    if whole and parse_quantity(text).denominator != 1:
        raise QuantityError(f"must be a whole number (an extended resource), got {excerpt(text)}")
    return to_units(text)


def _is_extended(name: str) -> bool:
    """An extended resource (`nvidia.com/gpu`, …): the API server takes only whole amounts of it."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests.")) and name not in MILLI_RESOURCES


def parse_resources(ctx: _Ctx, raw: Any, path: str) -> Resources:
    """A ResourceList: CPU and milli-GPU to thousandths (rounded up), every other name to whole units."""
    if raw is None:
        return Resources()
    if not isinstance(raw, Mapping):
        raise ctx.fail(path, "expected an object of resource quantities")
    amounts: dict[str, int] = {}
    for name, text in raw.items():
        if text is None:
            continue  # `null` decodes to a zero Quantity
        try:
            milli, whole = name in MILLI_RESOURCES, _is_extended(name)
            amount = _amount(milli, whole, text) if type(text) is str else _convert(milli, whole, text)
        except QuantityError as err:
            raise ctx.fail(f"{path}.{name}", str(err)) from None
        if amount < 0:
            raise ctx.fail(f"{path}.{name}", f"must be greater than or equal to 0, got {excerpt(text)}")
        amounts[name] = amount
    return Resources.of(amounts)


def _timestamp(ctx: _Ctx, obj: Mapping[str, Any], path: str, at: str = "") -> float | None:
    text = _get(ctx, obj, path, (str, datetime), at=at)
    if text is None:
        return None
    if isinstance(text, datetime):  # an unquoted timestamp in YAML; Kubernetes times are UTC
        return (text if text.tzinfo else text.replace(tzinfo=UTC)).timestamp()
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ctx.fail(_join(at, path), f"not an RFC 3339 time: {excerpt(text)}") from None


# ---------------------------------------------------------------------------------------------------------- selectors

def _requirement(ctx: _Ctx, raw: Any, path: str, node_selector: bool) -> Requirement:
    if not isinstance(raw, Mapping):
        raise ctx.fail(path, "expected an object")
    key = _get(ctx, raw, "key", str, at=path)
    if not key:
        raise ctx.fail(f"{path}.key", "required")
    op_text = _get(ctx, raw, "operator", str, "", at=path)
    allowed = list(SelectorOperator) if node_selector else [o for o in SelectorOperator if o not in ("Gt", "Lt")]
    if op_text not in allowed:
        raise ctx.fail(f"{path}.operator", f"unknown operator {excerpt(op_text)} (valid: {', '.join(allowed)})")
    op = SelectorOperator(op_text)
    values = tuple(_get(ctx, raw, "values", list, [], at=path))
    if not all(isinstance(v, str) for v in values):
        raise ctx.fail(f"{path}.values", "expected strings")
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        raise ctx.fail(f"{path}.values", f"must be non-empty for operator {op}")
    if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        raise ctx.fail(f"{path}.values", f"must be empty for operator {op}")
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        if len(values) != 1:
            raise ctx.fail(f"{path}.values", f"must have exactly one value for operator {op}")
        if parse_int64(values[0]) is None:
            raise ctx.fail(f"{path}.values[0]", f"must be an integer for operator {op}, got {excerpt(values[0])}")
    return Requirement(key=key, operator=op, values=values)


def _requirements(ctx: _Ctx, raw: Any, path: str, node_selector: bool) -> tuple[Requirement, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ctx.fail(path, f"expected list, got {excerpt(raw)}")
    return tuple(_requirement(ctx, r, f"{path}[{i}]", node_selector) for i, r in enumerate(raw))


def _label_selector(ctx: _Ctx, raw: Any, path: str) -> LabelSelector:
    if raw is None:
        return LabelSelector(nothing=True)
    if not isinstance(raw, Mapping):
        raise ctx.fail(path, f"expected an object, got {excerpt(raw)}")
    labels = _str_map(ctx, raw, "matchLabels", at=path)
    exprs = _requirements(ctx, raw.get("matchExpressions"), f"{path}.matchExpressions", False)
    return LabelSelector(match_labels=tuple(sorted(labels.items())), match_expressions=exprs)


def _pod_terms(ctx: _Ctx, affinity: Any, path: str) -> tuple[PodAffinityTerm, ...]:
    terms = []
    for i, t in enumerate(_objects(ctx, affinity, path.removeprefix("spec.affinity."), at="spec.affinity")):
        where = f"{path}[{i}]"
        topology_key = _get(ctx, t, "topologyKey", str, "", at=where)
        if not topology_key:
            raise ctx.fail(f"{where}.topologyKey", "required")
        ns_selector = _get(ctx, t, "namespaceSelector", dict, at=where)
        if ns_selector and (ns_selector.get("matchLabels") or ns_selector.get("matchExpressions")):
            raise ctx.fail(f"{where}.namespaceSelector", "only an empty namespaceSelector ({} = all namespaces) is "
                                                          "supported without Namespace objects")
        namespaces = _get(ctx, t, "namespaces", list, [], at=where)
        if not all(isinstance(n, str) for n in namespaces):
            raise ctx.fail(f"{where}.namespaces", "expected strings")
        terms.append(PodAffinityTerm(
            selector=_label_selector(ctx, t.get("labelSelector"), f"{where}.labelSelector"),
            topology_key=topology_key,
            namespaces=tuple(namespaces),
            all_namespaces=ns_selector is not None,
        ))
    return tuple(terms)


# -------------------------------------------------------------------------------------------------------------- pods

def _tolerations(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    result = []
    for i, t in enumerate(_objects(ctx, spec, "tolerations", at="spec")):
        where = f"spec.tolerations[{i}]"
        op_text = _get(ctx, t, "operator", str, "", at=where) or "Equal"
        if op_text not in ("Equal", "Exists"):
            raise ctx.fail(f"{where}.operator", f"unknown operator {excerpt(op_text)} (valid: Equal, Exists)")
        effect_text = _get(ctx, t, "effect", str, "", at=where)
        if effect_text and effect_text not in TaintEffect.__members__.values():
            raise ctx.fail(f"{where}.effect", f"unknown effect {excerpt(effect_text)}")
        result.append(Toleration(
            key=_get(ctx, t, "key", str, "", at=where), operator=TolerationOperator(op_text),
            value=_get(ctx, t, "value", str, "", at=where),
            effect=TaintEffect(effect_text) if effect_text else None,
            toleration_seconds=_get(ctx, t, "tolerationSeconds", int, at=where),
        ))
    return tuple(result)


def _container_requests(ctx: _Ctx, container: Mapping[str, Any], path: str) -> Resources:
    """Requests, defaulted from limits where a request is absent (the API server's defaulting)."""
    limits = parse_resources(ctx, _get(ctx, container, "resources.limits", dict, at=path), f"{path}.resources.limits")
    requests = parse_resources(ctx, _get(ctx, container, "resources.requests", dict, at=path),
                               f"{path}.resources.requests")
    have = set(requests.names())
    return requests + Resources.of({n: a for n, a in limits.items if n not in have})


def _is_pod_level_resource(name: str) -> bool:
    """Names pod-level resources may set (component-helpers `IsSupportedPodLevelResource`)."""
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def effective_requests(ctx: _Ctx, spec: Mapping[str, Any]) -> Resources:
    """kube-scheduler's pod request: max(app + sidecars, each init + sidecars before it), pod-level requests in place
    of that for the names they set, plus overhead (component-helpers `PodRequests`)."""
    containers = _objects(ctx, spec, "containers", at="spec")
    if not containers:
        raise ctx.fail("spec.containers", "must have at least one container")
    total = Resources()
    for i, c in enumerate(containers):
        total = total + _container_requests(ctx, c, f"spec.containers[{i}]")
    sidecars = Resources()
    init_peak = Resources()
    for i, c in enumerate(_objects(ctx, spec, "initContainers", at="spec")):
        req = _container_requests(ctx, c, f"spec.initContainers[{i}]")
        if _get(ctx, c, "restartPolicy", str, at=f"spec.initContainers[{i}]") == "Always":
            total = total + req
            sidecars = sidecars + req
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(req + sidecars)
    result = total.max(init_peak)
    pod_requests = parse_resources(ctx, _get(ctx, spec, "resources.requests", dict, at="spec"),
                                   "spec.resources.requests")
    pod_limits = parse_resources(ctx, _get(ctx, spec, "resources.limits", dict, at="spec"), "spec.resources.limits")
    pod_level = {n: a for n, a in pod_requests.items if _is_pod_level_resource(n)}
    for name, limit in pod_limits.items:
        # API defaulting (v1.37 `DefaultPodLevelResources` at create): a pod-level limit without a request defaults
        # the request to the containers' aggregate for cpu/memory when they request any, else to the limit.
        if _is_pod_level_resource(name) and name not in pod_requests.as_dict():
            aggregate = result.get(name) if name in (CPU, MEMORY) else 0
            pod_level[name] = aggregate or limit
    if pod_level:
        # Pod-level resources (PodLevelResources) replace the container sums for the names they set.
        result = Resources.of({**result.as_dict(), **pod_level})
    return result + parse_resources(ctx, _get(ctx, spec, "overhead", dict, at="spec"), "spec.overhead")



def _named(ctx: _Ctx, obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """An object's `metadata` and its `metadata.name`, which every object read here must have."""
    meta = _get(ctx, obj, "metadata", dict, {})
    name = _get(ctx, meta, "name", str, "", at="metadata")
    if not name:
        raise ctx.fail("metadata.name", "required")
    return meta, name

def _node_affinity(ctx: _Ctx, spec: Mapping[str, Any]) -> NodeAffinity:
    selector = _str_map(ctx, spec, "nodeSelector", at="spec")
    required_path = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _get(ctx, spec, required_path, dict, at="spec")
    terms = None
    if required is not None:
        terms = _selector_terms(ctx, required, f"spec.{required_path}")
    return NodeAffinity(node_selector=tuple(sorted(selector.items())), required_terms=terms)


def _selector_terms(ctx: _Ctx, selector: Mapping[str, Any], at: str) -> tuple[NodeSelectorTerm, ...]:
    """A NodeSelector's `nodeSelectorTerms` (`at` is where the selector sits: a pod's required node affinity, a
    PersistentVolume's `spec.nodeAffinity.required`)."""
    path = f"{at}.nodeSelectorTerms"
    return tuple(
        NodeSelectorTerm(
            match_expressions=_requirements(ctx, t.get("matchExpressions"), f"{path}[{i}].matchExpressions", True),
            match_fields=_fields(ctx, t.get("matchFields"), f"{path}[{i}].matchFields"),
        )
        for i, t in enumerate(_objects(ctx, selector, "nodeSelectorTerms", at=at))
    )


def _fields(ctx: _Ctx, raw: Any, path: str) -> tuple[Requirement, ...]:
    reqs = _requirements(ctx, raw, path, True)
    for i, r in enumerate(reqs):
        # As API validation and component-helpers `nodeSelectorRequirementsAsFieldSelector` have it.
        if r.key != "metadata.name":
            raise ctx.fail(f"{path}[{i}].key", f"not a supported field selector: {excerpt(r.key)} (only metadata.name)")
        if r.operator not in (SelectorOperator.IN, SelectorOperator.NOT_IN):
            raise ctx.fail(f"{path}[{i}].operator", f"unknown operator {excerpt(r.operator.value)} for a field "
                                                     "selector (valid: In, NotIn)")
        if len(r.values) != 1:
            raise ctx.fail(f"{path}[{i}].values", "must have exactly one value for a field selector")
    return reqs


def _spread_constraint(ctx: _Ctx, raw: Mapping[str, Any], where: str,
                       labels: Mapping[str, str]) -> TopologySpreadConstraint:
    """One `topologySpreadConstraints` entry, validated as the API server validates it, `matchLabelKeys` merged into
    its selector from the pod's labels (as the API server and kube-scheduler merge them)."""
    max_skew = _int32(ctx, raw, "maxSkew", 0, at=where)
    if max_skew <= 0:
        raise ctx.fail(f"{where}.maxSkew", "required, and must be greater than zero")
    key = _get(ctx, raw, "topologyKey", str, "", at=where)
    if not key:
        raise ctx.fail(f"{where}.topologyKey", "required")
    if (problem := label_key_problem(key)) is not None:
        raise ctx.fail(f"{where}.topologyKey", problem)
    when = _get(ctx, raw, "whenUnsatisfiable", str, "", at=where)
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise ctx.fail(f"{where}.whenUnsatisfiable", f"must be {DO_NOT_SCHEDULE} or {SCHEDULE_ANYWAY}, got "
                                                     f"{excerpt(when) if when else 'nothing'}")
    min_domains = _get(ctx, raw, "minDomains", int, at=where)
    if min_domains is not None:
        if not 0 < min_domains <= _INT32:
            raise ctx.fail(f"{where}.minDomains", f"must be greater than zero, got {excerpt(min_domains)}")
        if when != DO_NOT_SCHEDULE:
            raise ctx.fail(f"{where}.minDomains", f"can only be set with whenUnsatisfiable={DO_NOT_SCHEDULE}")
    policies = []
    for field in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        policy = _get(ctx, raw, field, str, at=where)
        if policy is not None and policy not in (HONOR, IGNORE):
            raise ctx.fail(f"{where}.{field}", f"must be {HONOR} or {IGNORE}, got {excerpt(policy)}")
        policies.append(policy)
    keys = _get(ctx, raw, "matchLabelKeys", list, [], at=where)
    for i, k in enumerate(keys):
        problem = label_key_problem(k) if isinstance(k, str) else "expected a string"
        if problem is not None:
            raise ctx.fail(f"{where}.matchLabelKeys[{i}]", problem)
    selector = _label_selector(ctx, raw.get("labelSelector"), f"{where}.labelSelector")
    merged = [Requirement(key=k, operator=SelectorOperator.IN, values=(labels[k],)) for k in keys if k in labels]
    if merged and not selector.nothing:
        extra = tuple(r for r in merged if r not in selector.match_expressions)
        selector = LabelSelector(match_labels=selector.match_labels,
                                 match_expressions=selector.match_expressions + extra)
    return TopologySpreadConstraint(
        max_skew=max_skew, topology_key=key, selector=selector, when_unsatisfiable=when,
        match_label_keys=tuple(keys), min_domains=min_domains if min_domains is not None else 1,
        node_affinity_policy=policies[0] or HONOR, node_taints_policy=policies[1] or IGNORE)


def _topology_spread(ctx: _Ctx, spec: Mapping[str, Any],
                     labels: Mapping[str, str]) -> tuple[TopologySpreadConstraint, ...]:
    """The pod's `DoNotSchedule` spread constraints (what PodTopologySpread filters on); `ScheduleAnyway` ones are
    validated and left out (they only score)."""
    found: list[TopologySpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(_objects(ctx, spec, "topologySpreadConstraints", at="spec")):
        where = f"spec.topologySpreadConstraints[{i}]"
        constraint = _spread_constraint(ctx, raw, where, labels)
        pair = (constraint.topology_key, constraint.when_unsatisfiable)
        if pair in seen:
            raise ctx.fail(where, f"duplicate {{topologyKey: {excerpt(pair[0])}, whenUnsatisfiable: {pair[1]}}}")
        seen.add(pair)
        if constraint.when_unsatisfiable == DO_NOT_SCHEDULE:
            found.append(constraint)
    return tuple(found)


def pod_resource_claims(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[PodResourceClaim, ...]:
    """`spec.resourceClaims`: each entry names a claim or a template, not both (as the API server validates)."""
    found = []
    for i, c in enumerate(_objects(ctx, spec, "resourceClaims", at="spec")):
        where = f"spec.resourceClaims[{i}]"
        claim = _get(ctx, c, "resourceClaimName", str, at=where) or None
        template = _get(ctx, c, "resourceClaimTemplateName", str, at=where) or None
        if (claim is None) == (template is None):
            raise ctx.fail(where, "exactly one of resourceClaimName or resourceClaimTemplateName is required")
        name = _get(ctx, c, "name", str, "", at=where)
        if not name:
            raise ctx.fail(f"{where}.name", "required")
        found.append(PodResourceClaim(name=name, claim_name=claim, template_name=template))
    return tuple(found)


def pod_claim_statuses(ctx: _Ctx, status: Mapping[str, Any]) -> dict[str, str | None]:
    """`status.resourceClaimStatuses`: a claim's name → the generated ResourceClaim (None: none was needed)."""
    found: dict[str, str | None] = {}
    for i, s in enumerate(_objects(ctx, status, "resourceClaimStatuses", at="status")):
        where = f"status.resourceClaimStatuses[{i}]"
        found[_get(ctx, s, "name", str, "", at=where)] = _get(ctx, s, "resourceClaimName", str, at=where) or None
    return found


def _unsupported(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """What the pod asks that gpuscale does not model, one line each."""
    found = []
    if spec.get("schedulingGroup"):  # PodGroup (workload) ResourceClaims: off by default in v1.37
        found.append("PodGroup resource claims (schedulingGroup)")
    return tuple(found)


_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _host_ports(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """The host ports of the containers and the sidecar (`restartPolicy: Always`) init containers, as kube-scheduler
    reads them (`GetHostPorts`): `hostPort` > 0, protocol default TCP, host IP default 0.0.0.0. On a host-network pod
    a port without `hostPort` binds its `containerPort` on the host (the API server's defaulting)."""
    host_network = _get(ctx, spec, "hostNetwork", bool, False, at="spec")
    found: list[HostPort] = []
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(_objects(ctx, spec, kind, at="spec")):
            at = f"spec.{kind}[{i}]"
            if kind == "initContainers" and _get(ctx, c, "restartPolicy", str, at=at) != "Always":
                continue
            for j, p in enumerate(_objects(ctx, c, "ports", at=at)):
                where = f"{at}.ports[{j}]"
                port = _int32(ctx, p, "hostPort", 0, at=where)
                if not port and host_network:
                    port = _int32(ctx, p, "containerPort", 0, at=where)
                if port <= 0:
                    continue
                if port > 65535:
                    raise ctx.fail(f"{where}.hostPort", f"must be a port number (1 to 65535), got {port}")
                protocol = _get(ctx, p, "protocol", str, "TCP", at=where) or "TCP"
                if protocol not in _PROTOCOLS:
                    raise ctx.fail(f"{where}.protocol", f"must be TCP, UDP or SCTP, got {excerpt(protocol)}")
                found.append(HostPort(port=port, protocol=protocol,
                                      host_ip=_get(ctx, p, "hostIP", str, "", at=where) or ANY_HOST_IP))
    return tuple(found)


def _claims(ctx: _Ctx, namespace: str, pod_name: str, spec: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The claims of the pod's volumes, in volume order: `persistentVolumeClaim.claimName`, and each generic ephemeral
    volume's claim `<pod>-<volume>` with its template (`spec.volumes[].ephemeral.volumeClaimTemplate`)."""
    found = []
    for i, v in enumerate(_objects(ctx, spec, "volumes", at="spec")):
        where = f"spec.volumes[{i}]"
        if "persistentVolumeClaim" in v:
            claim = _get(ctx, v, "persistentVolumeClaim.claimName", str, "", at=where)
            if not claim:
                raise ctx.fail(f"{where}.persistentVolumeClaim.claimName", "required")
            found.append(PodClaim(namespace, claim))
        elif "ephemeral" in v:
            volume = _get(ctx, v, "name", str, "", at=where)
            if not volume:
                raise ctx.fail(f"{where}.name", "required")
            template = _get(ctx, v, "ephemeral.volumeClaimTemplate", dict, at=where)
            if template is None:
                raise ctx.fail(f"{where}.ephemeral.volumeClaimTemplate", "required")
            name = f"{pod_name}-{volume}"
            claim_spec = _get(ctx, template, "spec", dict, {}, at=f"{where}.ephemeral.volumeClaimTemplate")
            found.append(PodClaim(namespace, name, _claim_spec(ctx, namespace, name, claim_spec, {},
                                                              f"{where}.ephemeral.volumeClaimTemplate.spec")))
    return tuple(found)


def _local_volumes(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The pod's node-local volumes (hostPath, or an emptyDir not backed by memory), by name."""
    found = []
    for i, v in enumerate(_objects(ctx, spec, "volumes", at="spec")):
        local = "hostPath" in v or ("emptyDir" in v and _get(ctx, v, "emptyDir.medium", str, "",
                                                             at=f"spec.volumes[{i}]") != "Memory")
        if local:
            found.append(str(v.get("name", "")))
    return tuple(found)


def _group(ctx: _Ctx, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> PodGroupRef | None:
    if KUEUE_GROUP_LABEL in labels:
        total = annotations.get(KUEUE_TOTAL_ANNOTATION)
        count = None if total is None else parse_int64(total)
        if total is not None and (count is None or not 1 <= count <= _INT32):
            raise ctx.fail(f"metadata.annotations.{KUEUE_TOTAL_ANNOTATION}",
                           f"expected an integer gang size of at least 1 (an int32), got {excerpt(total)}")
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
    meta, name = _named(ctx, obj)
    namespace = _get(ctx, meta, "namespace", str, "default", at="metadata")
    spec = _get(ctx, obj, "spec", dict)
    if spec is None:
        raise ctx.fail("spec", "required")
    labels = _labels(ctx, meta)
    annotations = _str_map(ctx, meta, "annotations", at="metadata")
    requests = effective_requests(ctx, spec)
    if GPU_MILLI_ANNOTATION in annotations:
        try:
            milli = to_units(annotations[GPU_MILLI_ANNOTATION])
        except QuantityError as err:
            raise ctx.fail(f"metadata.annotations.{GPU_MILLI_ANNOTATION}", str(err)) from None
        requests = requests + Resources.of({GPU_MILLI: milli})
    affinity = _get(ctx, spec, "affinity", dict, {}, at="spec")
    anti = _pod_terms(ctx, affinity, "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    pod_aff = _pod_terms(ctx, affinity, "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    constraints = SchedulingConstraints(
        affinity=_node_affinity(ctx, spec), tolerations=_tolerations(ctx, spec),
        pod_anti_affinity=anti, pod_affinity=pod_aff, topology_spread=_topology_spread(ctx, spec, labels),
        unsupported=_unsupported(ctx, spec), host_ports=_host_ports(ctx, spec),
        claims=_claims(ctx, namespace, name, spec), resource_claims=pod_resource_claims(ctx, spec),
    )
    status = _get(ctx, obj, "status", dict, {})
    phase_text = _get(ctx, status, "phase", str, "Pending", at="status")
    if phase_text not in PodPhase.__members__.values():
        raise ctx.fail("status.phase", f"unknown phase {excerpt(phase_text)}")
    conditions = _objects(ctx, status, "conditions", at="status")
    unschedulable = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                        and c.get("reason") == "Unschedulable" for c in conditions)
    owner = next((o for o in _objects(ctx, meta, "ownerReferences", at="metadata") if o.get("controller")), None)
    local = _local_volumes(ctx, spec)
    return Pod(
        namespace=namespace, name=name, uid=_get(ctx, meta, "uid", str, "", at="metadata"), requests=requests,
        constraints=constraints, node_name=_get(ctx, spec, "nodeName", str, at="spec") or None,
        phase=PodPhase(phase_text), priority=_int32(ctx, spec, "priority", 0, at="spec"), labels=labels,
        annotations=annotations,
        owner=OwnerRef(kind=str(owner.get("kind", "")), name=str(owner.get("name", ""))) if owner else None,
        group=_group(ctx, namespace, labels, annotations), unschedulable=unschedulable,
        scheduling_gated=bool(_get(ctx, spec, "schedulingGates", list, [], at="spec")),
        nominated_node=_get(ctx, status, "nominatedNodeName", str, at="status") or None,
        created_s=_timestamp(ctx, meta, "creationTimestamp", at="metadata"),
        deleting=_get(ctx, meta, "deletionTimestamp", (str, datetime), at="metadata") is not None,
        local_storage=bool(local), local_volumes=local,
        started_s=_timestamp(ctx, status, "startTime", at="status"), claim_statuses=pod_claim_statuses(ctx, status),
    )


# ------------------------------------------------------------------------------------------------------------- nodes

def _taints(ctx: _Ctx, spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    result = []
    for i, t in enumerate(_objects(ctx, spec, "taints", at="spec")):
        where = f"spec.taints[{i}]"
        effect = _get(ctx, t, "effect", str, "", at=where)
        if effect not in TaintEffect.__members__.values():
            raise ctx.fail(f"{where}.effect", f"unknown effect {excerpt(effect)} (valid: NoSchedule, PreferNoSchedule, "
                                              "NoExecute)")
        key = _get(ctx, t, "key", str, "", at=where)
        if not key:
            raise ctx.fail(f"{where}.key", "required")
        time_added = _get(ctx, t, "timeAdded", (str, datetime), at=where)
        result.append(Taint(key=key, value=_get(ctx, t, "value", str, "", at=where), effect=TaintEffect(effect),
                            time_added=time_added.isoformat() if isinstance(time_added, datetime) else time_added))
    return tuple(result)


NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/network-unavailable"})


def node_from_k8s(obj: Mapping[str, Any]) -> Node:
    ctx = _Ctx("Node", obj)
    meta, name = _named(ctx, obj)
    spec = _get(ctx, obj, "spec", dict, {})
    status = _get(ctx, obj, "status", dict, {})
    capacity = parse_resources(ctx, status.get("capacity"), "status.capacity")
    allocatable = parse_resources(ctx, status.get("allocatable"), "status.allocatable") if status.get(
        "allocatable") is not None else capacity
    labels = _labels(ctx, meta)
    labels.setdefault(HOSTNAME_LABEL, name)
    conditions = _objects(ctx, status, "conditions", at="status")
    taints = _taints(ctx, spec)
    # Ready as Cluster Autoscaler reads it (`GetReadinessState`): the Ready condition, unless the node still carries
    # a not-ready / network-unavailable taint. The node lifecycle controller lifts those taints only after the
    # condition turns True, and can lag (seen after an API server restart): a node counted usable while pods cannot
    # land on it yet made its pending pod order a second node.
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) and not any(
        t.key in NOT_READY_TAINTS for t in taints)
    return Node(
        name=name, allocatable=allocatable, capacity=capacity, labels=labels,
        annotations=_str_map(ctx, meta, "annotations", at="metadata"), taints=taints,
        unschedulable=bool(_get(ctx, spec, "unschedulable", bool, False, at="spec")),
        ready=ready,
        ready_since_s=next((_timestamp(ctx, c, "lastTransitionTime", at=f"status.conditions[{i}]")
                            for i, c in enumerate(conditions) if c.get("type") == "Ready"), None),
        created_s=_timestamp(ctx, meta, "creationTimestamp", at="metadata"),
        provider_id=_get(ctx, spec, "providerID", str, "", at="spec"),
        deleting=_get(ctx, meta, "deletionTimestamp", (str, datetime), at="metadata") is not None,
    )


_PERCENT = re.compile(r"[0-9]+%")


def _int_or_percent_problem(value: Any) -> str | None:
    """Why `value` is no PDB `minAvailable`/`maxUnavailable` (an int32 ≥ 0 or a percentage 0–100 %), or None."""
    if type(value) is int:
        return None if 0 <= value <= _INT32 else f"must be between 0 and 2147483647, got {excerpt(value)}"
    if isinstance(value, str) and _PERCENT.fullmatch(value):
        return None if int(value[:-1]) <= 100 else f"a percentage must be between 0% and 100%, got {excerpt(value)}"
    return f"expected an integer or a percentage like 50%, got {excerpt(value)}"


def pdb_from_k8s(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    ctx = _Ctx("PodDisruptionBudget", obj)
    meta = _get(ctx, obj, "metadata", dict, {})
    spec = _get(ctx, obj, "spec", dict, {})
    selector = spec.get("selector")
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    allowed = _get(ctx, obj, "status.disruptionsAllowed", int)
    for field, value in (("spec.minAvailable", min_available), ("spec.maxUnavailable", max_unavailable)):
        problem = None if value is None else _int_or_percent_problem(value)
        if problem is not None:
            raise ctx.fail(field, problem)
    if allowed is None:
        # No status yet (a hand-written file): a budget with maxUnavailable 0 / minAvailable 100% allows nothing;
        # anything else is unknown until the disruption controller computes it, so assume the safe answer.
        allowed = 0
    return PodDisruptionBudget(
        namespace=_get(ctx, meta, "namespace", str, "default", at="metadata"),
        name=_get(ctx, meta, "name", str, "", at="metadata"),
        selector=_label_selector(ctx, selector, "spec.selector"),
        disruptions_allowed=allowed,
        min_available=None if min_available is None else str(min_available),
        max_unavailable=None if max_unavailable is None else str(max_unavailable),
    )


def pod_group_from_k8s(obj: Mapping[str, Any]) -> PodGroupSpec:
    ctx = _Ctx("PodGroup", obj)
    meta = _get(ctx, obj, "metadata", dict, {})
    min_member = _get(ctx, obj, "spec.minMember", int)
    if min_member is None or not 1 <= min_member <= _INT32:
        raise ctx.fail("spec.minMember", f"required, at least 1 (an int32), got {excerpt(min_member)}")
    namespace = _get(ctx, meta, "namespace", str, "default", at="metadata")
    return PodGroupSpec(key=f"{namespace}/{_get(ctx, meta, 'name', str, '', at='metadata')}", min_member=min_member)


# ----------------------------------------------------------------------------------------------------------- storage

_ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
_VOLUME_MODES = ("Filesystem", "Block")


def _access_modes(ctx: _Ctx, raw: Mapping[str, Any], at: str) -> frozenset[str]:
    modes = _get(ctx, raw, "accessModes", list, [], at=at)
    for i, mode in enumerate(modes):
        if mode not in _ACCESS_MODES:
            raise ctx.fail(f"{_join(at, 'accessModes')}[{i}]",
                           f"unknown access mode {excerpt(mode)} (valid: {', '.join(_ACCESS_MODES)})")
    return frozenset(modes)


def _volume_mode(ctx: _Ctx, raw: Mapping[str, Any], at: str) -> str:
    mode = _get(ctx, raw, "volumeMode", str, "Filesystem", at=at)
    if mode not in _VOLUME_MODES:
        raise ctx.fail(_join(at, "volumeMode"), f"unknown volume mode {excerpt(mode)} (valid: Filesystem, Block)")
    return str(mode)


def _storage_amount(ctx: _Ctx, raw: Mapping[str, Any], path: str, at: str) -> int:
    text = _get(ctx, raw, path, (str, int, float), at=at)
    if text is None:
        return 0
    try:
        amount = to_units(text)
    except QuantityError as err:
        raise ctx.fail(_join(at, path), str(err)) from None
    if amount < 0:
        raise ctx.fail(_join(at, path), f"must be greater than or equal to 0, got {excerpt(text)}")
    return amount


def _claim_spec(ctx: _Ctx, namespace: str, name: str, spec: Mapping[str, Any], annotations: Mapping[str, str],
                at: str) -> PersistentVolumeClaim:
    """A claim's spec (of a PVC, or of an ephemeral volume's template)."""
    selector = _get(ctx, spec, "selector", dict, at=at)
    return PersistentVolumeClaim(
        namespace=namespace, name=name,
        storage_class=annotations.get(BETA_CLASS_ANNOTATION) or _get(ctx, spec, "storageClassName", str, "", at=at),
        volume_name=_get(ctx, spec, "volumeName", str, "", at=at), access_modes=_access_modes(ctx, spec, at),
        request=_storage_amount(ctx, spec, "resources.requests.storage", at), volume_mode=_volume_mode(ctx, spec, at),
        selector=None if selector is None else _label_selector(ctx, selector, _join(at, "selector")),
        bind_completed=BIND_COMPLETED_ANNOTATION in annotations,
        selected_node=annotations.get(SELECTED_NODE_ANNOTATION))


def pvc_from_k8s(obj: Mapping[str, Any]) -> PersistentVolumeClaim:
    ctx = _Ctx("PersistentVolumeClaim", obj)
    meta, name = _named(ctx, obj)
    namespace = _get(ctx, meta, "namespace", str, "default", at="metadata")
    annotations = _str_map(ctx, meta, "annotations", at="metadata")
    claim = _claim_spec(ctx, namespace, name, _get(ctx, obj, "spec", dict, {}), annotations, "spec")
    return replace(claim, phase=_get(ctx, obj, "status.phase", str, "Pending"),
                   deleting=_get(ctx, meta, "deletionTimestamp", (str, datetime), at="metadata") is not None)


def pv_from_k8s(obj: Mapping[str, Any]) -> PersistentVolume:
    ctx = _Ctx("PersistentVolume", obj)
    meta, name = _named(ctx, obj)
    spec = _get(ctx, obj, "spec", dict, {})
    annotations = _str_map(ctx, meta, "annotations", at="metadata")
    terms = None
    required = _get(ctx, spec, "nodeAffinity.required", dict, at="spec")
    if required is not None:
        terms = _selector_terms(ctx, required, "spec.nodeAffinity.required")
    claim_ref = _get(ctx, spec, "claimRef", dict, at="spec")
    claim = None
    if claim_ref is not None:
        ref_name = _get(ctx, claim_ref, "name", str, "", at="spec.claimRef")
        if not ref_name:
            raise ctx.fail("spec.claimRef.name", "required")
        claim = f"{_get(ctx, claim_ref, 'namespace', str, 'default', at='spec.claimRef')}/{ref_name}"
    csi = _get(ctx, spec, "csi", dict, at="spec")
    return PersistentVolume(
        name=name, capacity=_storage_amount(ctx, spec, "capacity.storage", "spec"),
        access_modes=_access_modes(ctx, spec, "spec"), node_affinity=terms,
        storage_class=(annotations.get(BETA_CLASS_ANNOTATION)
                       or _get(ctx, spec, "storageClassName", str, "", at="spec")),
        claim=claim, phase=_get(ctx, obj, "status.phase", str, "Pending"),
        csi_driver=None if csi is None else _get(ctx, csi, "driver", str, "", at="spec.csi") or None,
        csi_handle=None if csi is None else _get(ctx, csi, "volumeHandle", str, "", at="spec.csi") or None,
        volume_mode=_volume_mode(ctx, spec, "spec"), labels=_labels(ctx, meta),
        deleting=_get(ctx, meta, "deletionTimestamp", (str, datetime), at="metadata") is not None)


def storage_class_from_k8s(obj: Mapping[str, Any]) -> StorageClass:
    ctx = _Ctx("StorageClass", obj)
    meta, name = _named(ctx, obj)
    mode = _get(ctx, obj, "volumeBindingMode", str, "Immediate")
    if mode not in ("Immediate", "WaitForFirstConsumer"):
        raise ctx.fail("volumeBindingMode", f"unknown binding mode {excerpt(mode)} (valid: Immediate, "
                                            "WaitForFirstConsumer)")
    terms = []
    for i, term in enumerate(_objects(ctx, obj, "allowedTopologies")):
        exprs = []
        for j, e in enumerate(_objects(ctx, term, "matchLabelExpressions", at=f"allowedTopologies[{i}]")):
            where = f"allowedTopologies[{i}].matchLabelExpressions[{j}]"
            key = _get(ctx, e, "key", str, "", at=where)
            values = _get(ctx, e, "values", list, [], at=where)
            if not key:
                raise ctx.fail(f"{where}.key", "required")
            if not values or not all(isinstance(v, str) for v in values):
                raise ctx.fail(f"{where}.values", "expected a non-empty list of strings")
            exprs.append((key, frozenset(values)))
        terms.append(tuple(exprs))
    annotations = _str_map(ctx, meta, "annotations", at="metadata")
    return StorageClass(name=name, provisioner=_get(ctx, obj, "provisioner", str, ""),
                        wait_for_first_consumer=mode == "WaitForFirstConsumer", allowed_topologies=tuple(terms),
                        default=annotations.get(DEFAULT_CLASS_ANNOTATION) == "true",
                        created_s=_timestamp(ctx, meta, "creationTimestamp", at="metadata") or 0.0)


def csi_node_from_k8s(obj: Mapping[str, Any]) -> CSINode:
    ctx = _Ctx("CSINode", obj)
    _, name = _named(ctx, obj)
    limits = {}
    for i, d in enumerate(_objects(ctx, obj, "spec.drivers")):
        where = f"spec.drivers[{i}]"
        driver = _get(ctx, d, "name", str, "", at=where)
        if not driver:
            raise ctx.fail(f"{where}.name", "required")
        count = _get(ctx, d, "allocatable.count", int, at=where)
        if count is not None:
            if count < 0:
                raise ctx.fail(f"{where}.allocatable.count", f"must be greater than or equal to 0, got {count}")
            limits[driver] = count
    return CSINode(name=name, limits=limits)


def cluster_from_objects(objects: Iterable[Any], source: str = "input") -> Cluster:
    """Convert a flat sequence of objects (items of a `v1 List`, or YAML documents) into a `Cluster`."""
    from gpuscale.kube.convert_dra import DRA_CONVERT  # it reads fields with this module's helpers

    nodes: list[Node] = []
    pods: list[Pod] = []
    pdbs: list[PodDisruptionBudget] = []
    groups: list[PodGroupSpec] = []
    kept: dict[str, list[Any]] = {kind: [] for kind in (*STORAGE_KINDS, *DRA_KINDS)}
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
            for kind_name, nested_items in _kept(nested).items():
                kept[kind_name] += nested_items
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
        elif kind in STORAGE_KINDS:
            kept[kind].append(_STORAGE_CONVERT[kind](obj))
        elif kind in DRA_KINDS:
            kept[kind].append(DRA_CONVERT[kind](obj))
        else:
            other[kind] = other.get(kind, 0) + 1
    _check_unique("Node", [n.name for n in nodes])
    _check_unique("Pod", [p.key for p in pods])
    for kind, items in kept.items():
        _check_unique(kind, [getattr(o, "key", None) or o.name for o in items])
    return Cluster(nodes=tuple(nodes), pods=tuple(pods), pdbs=tuple(pdbs), pod_groups=tuple(groups),
                   storage=Storage(volumes=tuple(kept["PersistentVolume"]),
                                   claims=tuple(kept["PersistentVolumeClaim"]),
                                   classes=tuple(kept["StorageClass"]), csi_nodes=tuple(kept["CSINode"])),
                   dra=Dra(slices=tuple(kept["ResourceSlice"]), classes=tuple(kept["DeviceClass"]),
                           claims=tuple(kept["ResourceClaim"]), templates=tuple(kept["ResourceClaimTemplate"])),
                   other_kinds=other)


def _kept(cluster: Cluster) -> dict[str, tuple[Any, ...]]:
    """A cluster's storage and DRA objects by kind."""
    s, d = cluster.storage, cluster.dra
    return {"PersistentVolume": s.volumes, "PersistentVolumeClaim": s.claims, "StorageClass": s.classes,
            "CSINode": s.csi_nodes, "ResourceSlice": d.slices, "DeviceClass": d.classes, "ResourceClaim": d.claims,
            "ResourceClaimTemplate": d.templates}


_STORAGE_CONVERT: dict[str, Any] = {"PersistentVolume": pv_from_k8s, "PersistentVolumeClaim": pvc_from_k8s,
                                    "StorageClass": storage_class_from_k8s, "CSINode": csi_node_from_k8s}


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
