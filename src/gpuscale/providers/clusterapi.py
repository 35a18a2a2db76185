"""`ClusterAPIProvider`: a `NodeProvider` over Cluster API, with Cluster Autoscaler's clusterapi semantics.

**Node groups** are the MachineDeployments — and the MachineSets no MachineDeployment owns, and the MachinePools where
their (feature-gated) CRD is served — that carry both
`cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size` and `…-max-size` (CA's discovery rule). Each becomes a
gpuscale pool, named by the object's `gpuscale.io/pool` annotation, else by the object's name:
- a pool of that name in the configuration gives the template (allocatable, labels, taints, GPU model, price, zones)
  — the explicit mapping;
- otherwise the template comes from CA's scale-from-zero annotations `capacity.cluster-autoscaler.kubernetes.io/
  {cpu, memory, maxPods, gpu-type, gpu-count, labels, taints}` (cpu and memory required; maxPods defaults to 110;
  labels `k=v,k2=v2`; taints `k=v:NoSchedule,…`), plus the template's labels Cluster API propagates to Nodes; DRA
  devices from `gpuscale.io/resource-slices` (JSON, as the config's `resource_slices`), else from CA's `dra-driver`
  with `gpu-count` (then no GPU extended resource unless `gpu-type` is given; docs/dra-pools.md).
The bounds always come from the min/max annotations, read again at every scale call: the annotations are the truth,
as in CA. Groups are discovered when the provider is built (`gpuscale run` start-up) and again at every `refresh`
(the controller calls it every `--pool-refresh-interval`; CA rediscovers every loop): a group created later becomes a
pool, one deleted or no longer autoscaled leaves, a pool follows its annotations. Configured pools that match no group
are left out (nothing could scale them) and logged. `--node-group-auto-discovery=clusterapi:namespace=…,clusterName=…,
<label>=<value>` specs (`AutoDiscovery`, CA's syntax) narrow the groups to those some spec allows.

**A malformed annotation** (or a duplicate pool name) puts the group out of action: at start-up it is not a pool;
later, every call for it raises, naming the object and the annotation, and its nodes and machines are left out of
`node_pools()`/`upcoming()`, so the engine neither adds nor removes anything there. `problems()` lists the messages.

**Scale-up** raises `spec.replicas` through the scale subresource, with the resourceVersion read (a concurrent
change is a 409, retried on a fresh read); an increase past the max is refused whole (a partial one could split a
gang). **Delete** annotates each node's Machine `cluster.x-k8s.io/delete-machine` and then lowers the replicas by
as many (the MachineSet controller deletes annotated machines first); it refuses to go below the min, and removes the
annotations again if the replicas write fails. A Machine already annotated or being deleted is not counted twice.
**Node → pool**: a Machine's `status.nodeRef.name`, else the Node whose `spec.providerID` equals the Machine's
`spec.providerID`; a Machine belongs to the MachineDeployment named by its `cluster.x-k8s.io/deployment-name` label,
else to the MachinePool named by `cluster.x-k8s.io/pool-name` (a MachinePool Machine), else to the MachineSet named
by `cluster.x-k8s.io/set-name`. A MachinePool's instances are also the Nodes whose providerID is in its
`spec.providerIDList`, Machine or not. **A MachinePool with no MachinePool Machines is never scaled down**: lowering
its replicas would let the infrastructure pick the instance that goes, not the node the engine chose; its pool says so
(`NodePool.scale_down_disabled`, re-read at every discovery) and `delete` refuses such a node.
**Upcoming** = replicas − machines (not being deleted)
whose Node is registered: machines still without a registered Node by name (request id `<namespace>/<machine>`),
replicas no Machine exists for yet as `<pool>#<i>`. "Registered" is the cache's last snapshot, as for kwok, so a tick
never counts a node both as upcoming and as missing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpuscale.config import GPU_PRODUCT_LABEL, PoolConfig, parse_duration
from gpuscale.engine.plan import UpcomingNode
from gpuscale.engine.state import FailureKind
from gpuscale.loop.ports import ProviderError
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.pool import NodePool
from gpuscale.model.quantity import QuantityError, to_milli, to_units
from gpuscale.model.selectors import is_label_value, label_key_problem

log = logging.getLogger(__name__)

GROUP = "cluster.x-k8s.io"
MIN_SIZE = f"{GROUP}/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE = f"{GROUP}/cluster-api-autoscaler-node-group-max-size"
DELETE_MACHINE = f"{GROUP}/delete-machine"
DEPLOYMENT_NAME_LABEL = f"{GROUP}/deployment-name"
SET_NAME_LABEL = f"{GROUP}/set-name"
POOL_NAME_LABEL = f"{GROUP}/pool-name"
"""On a MachinePool Machine: the MachinePool it belongs to."""
CAPACITY = "capacity.cluster-autoscaler.kubernetes.io/"
OPTIONS = f"{GROUP}/autoscaling-options-"
"""CA's per-node-group autoscaling options: `<prefix><option>` annotations override the policy for that group."""
_OPTIONS: Mapping[str, tuple[str, str]] = {
    "scaledownutilizationthreshold": ("scale_down_utilization_threshold", "fraction"),
    "scaledowngpuutilizationthreshold": ("scale_down_gpu_utilization_threshold", "fraction"),
    "scaledownunneededtime": ("scale_down_unneeded_time_s", "duration"),
    "scaledownunreadytime": ("scale_down_unready_time_s", "duration"),
    "maxnodeprovisiontime": ("max_node_provision_time_s", "duration"),
    "maxnodestartuptime": ("max_node_startup_time_s", "duration"),
    "ignoredaemonsetsutilization": ("ignore_daemonsets_utilization", "bool"),
    "zeroormaxnodescaling": ("zero_or_max", "bool"),
}
"""Option → the `NodePool` field it sets, and its kind: a fraction 0…1, a duration, or `true`/`false`."""
_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
             **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}
POOL_ANNOTATION = "gpuscale.io/pool"
RESOURCE_SLICES_ANNOTATION = "gpuscale.io/resource-slices"
"""The DRA ResourceSlices a node of the group publishes, as the pool config's `resource_slices` (a JSON list;
docs/dra-pools.md). Wins over CA's `dra-driver` + `gpu-count`, whose devices carry a `type` attribute only."""
CA_DRA_DEVICE = {"name": "gpu-{index}", "attributes": {"type": {"string": "gpu"}}}
"""The device Cluster Autoscaler's clusterapi provider puts `gpu-count` times in its scale-from-zero ResourceSlice for
the `dra-driver` annotation (`InstanceResourceSlices`)."""
MACHINE_DEPLOYMENT, MACHINE_SET, MACHINE_POOL = "MachineDeployment", "MachineSet", "MachinePool"
PLURALS = {MACHINE_DEPLOYMENT: "machinedeployments", MACHINE_SET: "machinesets", MACHINE_POOL: "machinepools"}
PROPAGATED_LABEL_DOMAINS = ("node-role.kubernetes.io", "node-restriction.kubernetes.io", "node.cluster.x-k8s.io")
"""Template labels Cluster API copies onto the Node (its metadata-propagation rules): these domains and subdomains."""


def _annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"


CLUSTER_NAME_LABEL = f"{GROUP}/cluster-name"
AUTO_DISCOVERY_FLAG = "--node-group-auto-discovery"


@dataclass(frozen=True, slots=True)
class AutoDiscovery:
    """One `--node-group-auto-discovery=clusterapi:key=value,…` spec, as CA reads it: node groups in `namespace`, of
    the Cluster `cluster_name` (`spec.clusterName`, else the `cluster.x-k8s.io/cluster-name` label), carrying every
    label of `labels`; a part not given matches every group. Several specs: a group any of them allows."""

    namespace: str | None = None
    cluster_name: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def allows(self, obj: Mapping[str, Any]) -> bool:
        meta = _meta(obj)
        labels = meta.get("labels") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.cluster_name is not None and ((obj.get("spec") or {}).get("clusterName")
                                              or labels.get(CLUSTER_NAME_LABEL)) != self.cluster_name:
            return False
        return all(labels.get(key) == value for key, value in self.labels)


def parse_auto_discovery(spec: str) -> AutoDiscovery:
    """`clusterapi:namespace=…,clusterName=…,<label>=<value>,…` (CA's syntax); `ConfigError` naming the flag."""
    discoverer, colon, rest = spec.partition(":")
    if not colon:
        raise ConfigError(AUTO_DISCOVERY_FLAG, f"{spec!r} should be clusterapi:key=value,key=value")
    if discoverer != "clusterapi":
        raise ConfigError(AUTO_DISCOVERY_FLAG, f"unsupported discoverer {discoverer!r} (only clusterapi)")
    namespace = cluster_name = None
    labels: dict[str, str] = {}
    for pair in (p for p in rest.split(",") if p):
        key, eq, value = pair.partition("=")
        if not eq or not key or "=" in value:
            raise ConfigError(AUTO_DISCOVERY_FLAG, f"{pair!r} is not key=value")
        if key == "namespace":
            namespace = value
        elif key == "clusterName":
            cluster_name = value
        else:
            problem = label_key_problem(key)
            if problem is None and not is_label_value(value):
                problem = f"{value!r} is not a label value"
            if problem is not None:
                raise ConfigError(AUTO_DISCOVERY_FLAG, problem)
            labels[key] = value
    return AutoDiscovery(namespace, cluster_name, tuple(sorted(labels.items())))


@dataclass(frozen=True, slots=True)
class GroupRef:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GroupState:
    """One node group as read now: bounds from its annotations, replicas from its spec."""

    ref: GroupRef
    min_size: int
    max_size: int
    replicas: int
    resource_version: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _ref(kind: str, obj: Mapping[str, Any]) -> GroupRef:
    meta = _meta(obj)
    return GroupRef(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))


def is_autoscaled(obj: Mapping[str, Any]) -> bool:
    annotations = _meta(obj).get("annotations") or {}
    return MIN_SIZE in annotations and MAX_SIZE in annotations


def _int_annotation(ref: GroupRef, annotations: Mapping[str, str], key: str, default: int | None = None) -> int:
    text = annotations.get(key)
    if text is None:
        if default is None:
            raise InputError(str(ref), _annotation(key), "required")
        return default
    return _whole(ref, _annotation(key), text)


def _whole(ref: GroupRef, where: str, text: Any) -> int:
    """`text` as a whole number ≥ 0, else an `InputError` naming the object and `where` it was read."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InputError(str(ref), where, f"{text!r} is not a whole number") from None
    if value < 0:
        raise InputError(str(ref), where, f"{value} is negative")
    return value


def group_state(kind: str, obj: Mapping[str, Any]) -> GroupState:
    """Bounds and replicas of an autoscaled group; `InputError` naming the object and annotation when malformed."""
    ref = _ref(kind, obj)
    annotations = _meta(obj).get("annotations") or {}
    lo = _int_annotation(ref, annotations, MIN_SIZE)
    hi = _int_annotation(ref, annotations, MAX_SIZE)
    if lo > hi:
        raise InputError(str(ref), _annotation(MIN_SIZE), f"{lo} is above the max size {hi}")
    replicas = (obj.get("spec") or {}).get("replicas")
    return GroupState(ref, lo, hi, int(replicas) if isinstance(replicas, int) else 0,
                      str(_meta(obj).get("resourceVersion", "")))


def group_options(kind: str, obj: Mapping[str, Any]) -> tuple[dict[str, float | bool], list[str]]:
    """The `NodePool` fields a group's `cluster.x-k8s.io/autoscaling-options-*` annotations set (CA's per-node-group
    options: utilization thresholds as fractions 0…1, times as Go durations or seconds, `ignoredaemonsetsutilization`
    and `zeroormaxnodescaling` as `true`/`false`), and the option annotations
    gpuscale does not know (left to the caller to report, not acted on);
    `InputError` naming the object and annotation when a known one is malformed."""
    ref = _ref(kind, obj)
    out: dict[str, float | bool] = {}
    unknown: list[str] = []
    for key, text in (_meta(obj).get("annotations") or {}).items():
        if not key.startswith(OPTIONS):
            continue
        known = _OPTIONS.get(key.removeprefix(OPTIONS))
        if known is None:
            unknown.append(key)
            continue
        field, option_kind = known
        if option_kind == "bool":  # Go's strconv.ParseBool, as CA reads it
            word = str(text).strip()
            if word not in _GO_BOOLS:
                raise InputError(str(ref), _annotation(key), f"{text!r} is not true or false")
            out[field] = _GO_BOOLS[word]
            continue
        try:
            value = parse_duration(str(text)) if option_kind == "duration" else float(str(text).strip())
        except ValueError as err:
            raise InputError(str(ref), _annotation(key), f"{text!r}: {err}") from None
        if option_kind == "fraction" and not 0.0 <= value <= 1.0:
            raise InputError(str(ref), _annotation(key), f"{text!r} is not a fraction between 0 and 1")
        out[field] = value
    return out, sorted(unknown)


def _pairs(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _labels(ref: GroupRef, annotations: Mapping[str, str]) -> dict[str, str]:
    key = CAPACITY + "labels"
    out = {}
    for pair in _pairs(annotations.get(key, "")):
        name, eq, value = pair.partition("=")
        if not eq or not name.strip():
            raise InputError(str(ref), _annotation(key), f"{pair!r} is not key=value")
        out[name.strip()] = value.strip()
    return out


def _taints(ref: GroupRef, annotations: Mapping[str, str]) -> list[dict[str, str]]:
    key = CAPACITY + "taints"
    out = []
    for item in _pairs(annotations.get(key, "")):
        head, colon, effect = item.rpartition(":")
        name, _, value = head.partition("=")
        if not colon or not name.strip() or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InputError(str(ref), _annotation(key), f"{item!r} is not key=value:NoSchedule|PreferNoSchedule|"
                                                         "NoExecute")
        out.append({"key": name.strip(), "value": value.strip(), "effect": effect})
    return out


def _propagated(labels: Mapping[str, str]) -> dict[str, str]:
    def keep(key: str) -> bool:
        prefix = key.partition("/")[0] if "/" in key else ""
        return any(prefix == d or prefix.endswith("." + d) for d in PROPAGATED_LABEL_DOMAINS)
    return {k: v for k, v in labels.items() if keep(k)}


def needs_capacity(obj: Mapping[str, Any]) -> bool:
    """Whether a group's annotations leave cpu or memory out, so the template needs the infrastructure template's
    `status.capacity`."""
    annotations = _meta(obj).get("annotations") or {}
    return CAPACITY + "cpu" not in annotations or CAPACITY + "memory" not in annotations


INFRA_CAPACITY = "infrastructure template status.capacity"


def template_pool(kind: str, obj: Mapping[str, Any], pool_name: str, min_size: int, max_size: int,
                  status: Mapping[str, Any] | None = None) -> NodePool:
    """The pool a node group's capacity annotations describe (CA's scale-from-zero template). `status`: its
    infrastructure machine template's status (CA's other source, which Cluster API's opt-in autoscaling-from-zero
    contract has infrastructure providers fill): `capacity` gives what the annotations leave out — cpu, memory,
    ephemeral storage, pods, the GPU count — and `nodeInfo` the `kubernetes.io/arch` and `kubernetes.io/os` labels;
    the annotations win where both say."""
    ref = _ref(kind, obj)
    annotations = _meta(obj).get("annotations") or {}
    capacity: Mapping[str, Any] = _mapping((status or {}).get("capacity"))
    node_info: Mapping[str, Any] = _mapping((status or {}).get("nodeInfo"))

    def read(field: str, resource: str) -> tuple[Any, str]:
        """The capacity annotation `field`, else the template's `status.capacity[resource]` (None if neither), and
        where it was read (the annotation when neither: where it belongs)."""
        key = CAPACITY + field
        if key not in annotations and resource in capacity:
            return capacity[resource], f"{INFRA_CAPACITY}.{resource}"
        return annotations.get(key), _annotation(key)

    amounts: dict[str, int | str] = {}
    # cpu and memory are required; ephemeral storage is optional, as in CA (without it pods asking for it fit no new
    # node)
    for field, resource, parse in (("cpu", "cpu", to_milli), ("memory", "memory", to_units),
                                   ("ephemeral-disk", "ephemeral-storage", to_units)):
        text, where = read(field, resource)
        if text is None:
            if resource == "ephemeral-storage":
                continue
            raise InputError(str(ref), where, "required to build the node template (scale from zero), here or in the "
                                              f"{INFRA_CAPACITY}")
        try:
            parse(str(text))
        except QuantityError as err:
            raise InputError(str(ref), where, f"{text!r}: {err}") from None
        amounts[resource] = str(text)
    text, where = read("maxPods", "pods")
    amounts["pods"] = 110 if text is None else _whole(ref, where, text)
    dra_driver = str(annotations.get(CAPACITY + "dra-driver", "")).strip()
    # with the DRA driver annotation and no gpu-type, the GPUs are devices, not an extended resource (CA's rule)
    gpu_type = str(annotations.get(CAPACITY + "gpu-type", "" if dra_driver else "nvidia.com/gpu")).strip()
    text, where = read("gpu-count", gpu_type or "nvidia.com/gpu")
    gpus = 0 if text is None else _whole(ref, where, text)
    if gpus and gpu_type:
        if "/" not in gpu_type:
            raise InputError(str(ref), _annotation(CAPACITY + "gpu-type"),
                             f"{gpu_type!r} is not an extended resource name like nvidia.com/gpu")
        amounts[gpu_type] = gpus
    template = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    labels = {**{label: str(node_info[field]) for label, field in (("kubernetes.io/arch", "architecture"),
                                                                   ("kubernetes.io/os", "operatingSystem"))
                 if node_info.get(field)},
              **_propagated(template.get("labels") or {}), **_labels(ref, annotations)}
    model = labels.get(GPU_PRODUCT_LABEL)
    raw: dict[str, Any] = {"name": pool_name, "min_size": min_size, "max_size": max_size, "labels": labels,
                           "taints": _taints(ref, annotations), "allocatable": amounts}
    if gpus and model and gpu_type:
        raw["gpu"] = {"model": model, "count": gpus, "resource": gpu_type}
    slices = _resource_slices(ref, annotations, dra_driver, gpus)
    if slices:
        raw["resource_slices"] = slices
    try:
        return PoolConfig.model_validate(raw).to_pool()
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(str(ref), f"pool {where}", first["msg"]) from None


def _resource_slices(ref: GroupRef, annotations: Mapping[str, str], dra_driver: str,
                     gpus: int) -> list[Any] | None:
    """The pool's `resource_slices`: gpuscale's annotation (a JSON list, as the config writes them), else CA's
    `dra-driver` with `gpu-count` devices of its shape, else none."""
    text = annotations.get(RESOURCE_SLICES_ANNOTATION)
    if text is not None:
        try:
            value = json.loads(text)
        except ValueError as err:
            raise InputError(str(ref), _annotation(RESOURCE_SLICES_ANNOTATION), f"not JSON: {err}") from None
        if not isinstance(value, list):
            raise InputError(str(ref), _annotation(RESOURCE_SLICES_ANNOTATION),
                             "must be a JSON list of slices ({driver, devices} or {driver, count, device})")
        return value
    if dra_driver and gpus:
        return [{"driver": dra_driver, "count": gpus, "device": CA_DRA_DEVICE}]
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pool_name_of(kind: str, obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return str((meta.get("annotations") or {}).get(POOL_ANNOTATION) or meta.get("name", ""))


class ClusterAPIProvider:
    """Node groups = autoscaled MachineDeployments / MachineSets; see the module docstring."""

    def __init__(self, api_client: client.ApiClient, configured: Sequence[NodePool], *,
                 namespace: str | None = None, version: str = "v1beta2",
                 registered: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.time, discovery: Sequence[AutoDiscovery] = ()) -> None:
        self._api = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._resources: dict[tuple[str, str], tuple[str, str] | None] = {}
        """(API group, kind) → (version, plural), from discovery (`_resource_of`)."""
        self._core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.version = version
        self.registered = registered
        self._clock = clock
        self.discovery = tuple(discovery)
        """Auto-discovery specs (`--node-group-auto-discovery`): a group is one only if some spec allows it (none:
        every autoscaled group)."""
        self._problems: dict[str, str] = {}
        self._increased: dict[str, list[float]] = {}
        self._configured = tuple(configured)
        self._ignored: set[tuple[str, str]] = set()
        """(group, annotation) of the option annotations gpuscale does not apply, logged once each."""
        self.groups: dict[str, GroupRef]
        """Pool name → its node group."""
        self.pools: tuple[NodePool, ...]
        """The pools the controller runs with: one per usable node group."""
        self.groups, self.pools = self._discover()
        self._log_groups()

    # --- discovery

    def _list(self, plural: str) -> list[dict[str, Any]]:
        body: Any
        if self.namespace:
            body = self._custom.list_namespaced_custom_object(GROUP, self.version, self.namespace, plural)
        else:
            body = self._custom.list_cluster_custom_object(GROUP, self.version, plural)
        return list(body.get("items") or [])

    def _group_objects(self) -> list[tuple[str, dict[str, Any]]]:
        try:
            objects = [(MACHINE_DEPLOYMENT, o) for o in self._list(PLURALS[MACHINE_DEPLOYMENT])]
        except ApiException as err:
            if err.status != 404:
                raise
            served = f"{GROUP}/{self.version} machinedeployments"
            raise ConfigError("--provider clusterapi", f"the API server does not serve {served}: are the Cluster API "
                                                       "CRDs installed?") from None
        for ms in self._list(PLURALS[MACHINE_SET]):
            meta = _meta(ms)
            owned = any(r.get("kind") == MACHINE_DEPLOYMENT for r in meta.get("ownerReferences") or [])
            if not owned and DEPLOYMENT_NAME_LABEL not in (meta.get("labels") or {}):
                objects.append((MACHINE_SET, ms))
        try:  # MachinePools are behind a feature gate: a server without their CRD has none
            objects += [(MACHINE_POOL, o) for o in self._list(PLURALS[MACHINE_POOL])]
        except ApiException as err:
            if err.status != 404:
                raise
        return [(k, o) for k, o in objects
                if is_autoscaled(o) and (not self.discovery or any(d.allows(o) for d in self.discovery))]

    def _discover(self) -> tuple[dict[str, GroupRef], tuple[NodePool, ...]]:
        """The node groups and their pools as the API server has them now. A group whose annotations do not parse, or
        that shares its pool name with another, is reported and left out; the problems of groups that parse, or that
        are gone, are dropped (the object is the truth, as for the bounds)."""
        by_name = {p.name: p for p in self._configured}
        found: dict[str, list[tuple[GroupRef, NodePool]]] = {}
        seen: set[str] = set()
        objects = self._group_objects()
        with_machines = self._pools_with_machines() if any(k == MACHINE_POOL for k, _ in objects) else set()
        for kind, obj in objects:
            ref, name = _ref(kind, obj), pool_name_of(kind, obj)
            seen.add(str(ref))
            try:
                state = group_state(kind, obj)
                base = by_name.get(name)
                pool = (replace(base, min_size=state.min_size, max_size=state.max_size) if base is not None
                        else template_pool(kind, obj, name, state.min_size, state.max_size,
                                           self._infra_status(ref, obj) if needs_capacity(obj) else None))
                options, unknown = group_options(kind, obj)
                pool = replace(pool, **options)  # type: ignore[arg-type]
                if kind == MACHINE_POOL and ref not in with_machines:
                    pool = replace(pool, scale_down_disabled=f"{ref} has no MachinePool Machines: gpuscale does not "
                                                             "lower its replicas without naming the instance that goes")
                for key in unknown:
                    if (str(ref), key) not in self._ignored:
                        self._ignored.add((str(ref), key))
                        log.warning("%s: %s: an option gpuscale does not apply, ignored", ref, _annotation(key))
            except InputError as err:
                self._report(str(ref), str(err))
                continue
            found.setdefault(name, []).append((ref, pool))
        groups: dict[str, GroupRef] = {}
        pools = []
        for name, entries in sorted(found.items()):
            if len(entries) > 1:
                for ref, _ in entries:
                    self._report(str(ref), f"{ref}: {_annotation(POOL_ANNOTATION)}: pool name {name!r} is also "
                                           f"claimed by {', '.join(str(r) for r, _ in entries if r != ref)}")
                continue
            ref, pool = entries[0]
            self._problems.pop(str(ref), None)
            groups[name] = ref
            pools.append(pool)
        for key in [k for k in self._problems if k not in seen]:
            del self._problems[key]
        return groups, tuple(pools)

    def _infra_status(self, ref: GroupRef, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The `status` of the group's infrastructure template (`spec.template.spec.infrastructureRef`), or None when
        it has none or cannot be read (logged once: RBAC must grant `get` on the provider's templates)."""
        infra = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("infrastructureRef") or {}
        group = infra.get("apiGroup") or str(infra.get("apiVersion", "")).partition("/")[0]
        kind, name = infra.get("kind"), infra.get("name")
        if not (group and kind and name):
            return None
        try:
            located = self._resource_of(str(group), str(kind))
            if located is None:
                raise LookupError(f"the API server serves no kind {kind} in {group}")
            version, plural = located
            body: Any = self._custom.get_namespaced_custom_object(group, version, ref.namespace, plural, name)
        except (ApiException, LookupError) as err:
            reason = err.reason if isinstance(err, ApiException) else str(err)
            if (str(ref), "infra") not in self._ignored:
                self._ignored.add((str(ref), "infra"))
                log.warning("%s: infrastructure template %s %s not read (%s): only the capacity annotations count",
                            ref, kind, name, reason)
            return None
        status = body.get("status")
        return status if isinstance(status, Mapping) else None

    def _resource_of(self, group: str, kind: str) -> tuple[str, str] | None:
        """(preferred version, plural) of `kind` in API group `group`, from the server's discovery; kept."""
        key = (group, kind)
        if key not in self._resources:
            found = None
            groups: Any = client.ApisApi(self._api).get_api_versions()
            version = next((g.preferred_version.version for g in groups.groups or []
                            if g.name == group and g.preferred_version is not None), None)
            if version:
                resources: Any = self._custom.get_api_resources(group, version)
                found = next(((version, str(r.name)) for r in resources.resources or []
                              if r.kind == kind and "/" not in str(r.name)), None)
            self._resources[key] = found
        return self._resources[key]

    def _pools_with_machines(self) -> set[GroupRef]:
        """The MachinePools some Machine belongs to (MachinePool Machines: an infrastructure provider that has them
        lets a chosen node be deleted, as in a MachineDeployment)."""
        out = set()
        for machine in self._list("machines"):
            meta = _meta(machine)
            pool = (meta.get("labels") or {}).get(POOL_NAME_LABEL)
            if pool:
                out.add(GroupRef(MACHINE_POOL, str(meta.get("namespace", "")), pool))
        return out

    def _log_groups(self) -> None:
        unmatched = sorted({p.name for p in self._configured} - set(self.groups))
        if unmatched:
            log.warning("configured pools with no Cluster API node group, left out: %s", ", ".join(unmatched))
        log.info("Cluster API node groups: %s", ", ".join(f"{p} = {r}" for p, r in sorted(self.groups.items())))

    def refresh(self) -> bool:
        """Discover the node groups again: a group created since becomes a pool, one deleted or no longer autoscaled
        leaves, a pool's template and bounds follow its annotations. True if the pools or their groups changed. A
        failed read changes nothing (the pools stay as they were, logged) and is False: the next refresh tries again,
        and every scale call reads its group anyway."""
        try:
            groups, pools = self._discover()
        except Exception as err:  # any failed read (an API error, the CRDs gone, the connection): the pools stay
            log.warning("Cluster API node groups not refreshed, kept as they were: %s", str(err).splitlines()[0])
            return False
        if groups == self.groups and pools == self.pools:
            return False
        self.groups, self.pools = groups, pools
        self._log_groups()
        return True

    def _report(self, key: str, message: str) -> None:
        if self._problems.get(key) != message:
            log.error("node group out of action: %s", message)
        self._problems[key] = message

    def problems(self) -> list[str]:
        """Why node groups are out of action (malformed annotations, duplicate pool names), one line each."""
        return sorted(self._problems.values())

    # --- reading one group now

    def _get(self, ref: GroupRef) -> dict[str, Any]:
        obj: Any = self._custom.get_namespaced_custom_object(
            GROUP, self.version, ref.namespace, PLURALS[ref.kind], ref.name)
        return dict(obj)

    def _state(self, pool: str) -> GroupState:
        ref = self.groups.get(pool)
        if ref is None:
            raise ProviderError(FailureKind.OTHER, f"pool {pool!r} is not a Cluster API node group")
        try:
            state = group_state(ref.kind, self._get(ref))
        except InputError as err:
            self._report(str(ref), str(err))
            raise ProviderError(FailureKind.OTHER, str(err)) from None
        self._problems.pop(str(ref), None)
        return state

    def _set_replicas(self, pool: str, change: Callable[[GroupState], int]) -> tuple[int, int]:
        """Write `change(state)` as the replicas through the scale subresource; retried on a 409. Returns (before,
        after)."""
        for _ in range(5):
            state = self._state(pool)
            target = change(state)
            ref = state.ref
            scale: Any = self._custom.get_namespaced_custom_object_scale(GROUP, self.version, ref.namespace,
                                                                    PLURALS[ref.kind], ref.name)
            if (scale.get("spec") or {}).get("replicas", 0) != state.replicas:
                continue  # changed between the two reads
            body = {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": ref.name, "namespace": ref.namespace,
                                 "resourceVersion": _meta(scale).get("resourceVersion")},
                    "spec": {"replicas": target}}
            try:
                self._custom.replace_namespaced_custom_object_scale(GROUP, self.version, ref.namespace,
                                                                    PLURALS[ref.kind], ref.name, body)
            except ApiException as err:
                if err.status == 409:
                    continue
                raise
            return state.replicas, target
        raise ProviderError(FailureKind.OTHER, f"{self.groups[pool]}: replicas kept changing (5 conflicts)")

    # --- NodeProvider

    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        """Raise the node group's replicas by `count`. A MachineDeployment (or MachineSet) creates its Machines in its
        one failure domain (`spec.template.spec.failureDomain`), so a scale-up that names a zone (`ScaleUp.zone`,
        only for a pool listing several) is refused: on Cluster API, configure one pool per zone, each naming its
        own MachineDeployment, and `balance_similar_node_groups` to keep them even."""
        if zone is not None:
            raise ProviderError(FailureKind.OTHER, f"{self.groups[pool]} is one failure domain: it cannot add nodes in "
                                                   f"zone {zone}; configure one pool per zone (one MachineDeployment "
                                                   "each)")

        def grow(state: GroupState) -> int:
            if state.replicas + count > state.max_size:
                raise ProviderError(FailureKind.OTHER, f"{state.ref}: size increase too large: replicas "
                                                       f"{state.replicas} + {count} > max size {state.max_size}")
            return state.replicas + count

        before, after = self._set_replicas(pool, grow)
        now = self._clock()
        self._increased.setdefault(pool, []).extend([now] * count)
        log.info("scaled %s up: replicas %d -> %d", self.groups[pool], before, after)
        return tuple(f"{pool}#{i}" for i in range(before, after))

    def delete(self, nodes: Sequence[str]) -> None:
        view = self._view()
        by_pool: dict[str, list[dict[str, Any]]] = {}
        for name in nodes:
            machine = view.machine_of_node.get(name)
            if machine is None and name in view.pool_of_bare_node:
                ref = self.groups[view.pool_of_bare_node[name]]
                raise ProviderError(FailureKind.OTHER, f"Node {name}: {ref} has no Machine for it: gpuscale does not "
                                                       "lower the replicas without naming the instance that goes")
            if machine is None:
                raise ProviderError(FailureKind.OTHER, f"Node {name}: no Machine of a Cluster API node group has it")
            if _deleting(machine):
                continue  # already ordered: counting it again would remove a second node
            by_pool.setdefault(view.pool_of_machine[_machine_key(machine)], []).append(machine)
        for pool, machines in by_pool.items():
            self._remove_machines(pool, machines, what="delete")

    def cancel(self, request_ids: Sequence[str]) -> None:
        """Give back requests that never became a registered node: a Machine without one is annotated for deletion
        and the replicas lowered; a replica no Machine exists for yet only lowers the replicas."""
        view = self._view()
        machines: dict[str, list[dict[str, Any]]] = {}
        bare: dict[str, int] = {}
        for rid in request_ids:
            machine = view.machines.get(rid)
            if machine is not None and not _deleting(machine):
                machines.setdefault(view.pool_of_machine[rid], []).append(machine)
            elif "#" in rid:
                pool = rid.rpartition("#")[0]
                bare[pool] = bare.get(pool, 0) + 1
        for pool, items in machines.items():
            self._remove_machines(pool, items, what="cancel")
        for pool, n in bare.items():
            self._shrink(pool, n, what="cancel")

    def _remove_machines(self, pool: str, machines: list[dict[str, Any]], what: str) -> None:
        state = self._state(pool)
        if state.replicas - len(machines) < state.min_size:
            raise ProviderError(FailureKind.OTHER, f"{state.ref}: unable to {what} {len(machines)} machine(s): "
                                                   f"replicas {state.replicas}, min size {state.min_size}")
        stamp = datetime.now(tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        marked = []
        try:
            for machine in machines:
                self._annotate(machine, stamp)
                marked.append(machine)
            self._shrink(pool, len(machines), what=what)
        except Exception:
            for machine in marked:  # CA's way: a failed replicas write takes the delete marks back
                self._annotate(machine, None)
            raise

    def _shrink(self, pool: str, n: int, what: str) -> None:
        def lower(state: GroupState) -> int:
            if state.replicas - n < state.min_size:
                raise ProviderError(FailureKind.OTHER, f"{state.ref}: unable to {what} {n} node(s): replicas "
                                                       f"{state.replicas}, min size {state.min_size}")
            return state.replicas - n

        before, after = self._set_replicas(pool, lower)
        log.info("scaled %s down (%s): replicas %d -> %d", self.groups[pool], what, before, after)

    def _annotate(self, machine: Mapping[str, Any], value: str | None) -> None:
        meta = _meta(machine)
        self._custom.patch_namespaced_custom_object(
            GROUP, self.version, meta["namespace"], "machines", meta["name"],
            {"metadata": {"annotations": {DELETE_MACHINE: value}}})

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        view = self._view()
        now = self._clock()
        out = []
        for pool in sorted(self.groups):
            replicas = view.replicas.get(pool)
            if replicas is None:
                continue  # out of action this tick
            live = [m for m in view.machines_of_pool.get(pool, []) if not _deleting(m)]
            waiting = [m for m in live if not self._is_registered(view.node_of_machine.get(_machine_key(m)))]
            registered = len(live) - len(waiting) + sum(
                1 for node in view.bare_nodes_of_pool.get(pool, ()) if self._is_registered(node))
            missing = max(0, replicas - registered)
            waiting.sort(key=_created)
            times = self._increased.get(pool, [])
            del times[:max(0, len(times) - missing)]  # forget requests that became nodes (oldest first)
            for machine in waiting[:missing]:
                out.append(UpcomingNode(pool=pool, request_id=_machine_key(machine),
                                        requested_s=_created(machine) or now))
            for i in range(len(waiting[:missing]), missing):
                requested = times[i] if i < len(times) else now
                out.append(UpcomingNode(pool=pool, request_id=f"{pool}#{i}", requested_s=requested))
        return tuple(out)

    def _is_registered(self, node: str | None) -> bool:
        if node is None:
            return False
        return self.registered(node) if self.registered is not None else True

    def node_pools(self) -> Mapping[str, str]:
        view = self._view()
        return {**{node: pool for node, pool in view.pool_of_bare_node.items() if pool in view.replicas},
                **{node: view.pool_of_machine[key] for key, node in view.node_of_machine.items()
                   if view.pool_of_machine.get(key) in view.replicas}}

    # --- the view: groups, machines, their nodes

    def _view(self) -> _View:
        view = _View()
        refs = {ref: pool for pool, ref in self.groups.items()}
        provider_ids: dict[str, list[str]] = {}
        """MachinePool → its `spec.providerIDList`: the instances it has, Machine or not."""
        for pool, ref in self.groups.items():
            try:
                obj = self._get(ref)
                view.replicas[pool] = group_state(ref.kind, obj).replicas
                if ref.kind == MACHINE_POOL:
                    provider_ids[pool] = [str(p) for p in (obj.get("spec") or {}).get("providerIDList") or []]
                self._problems.pop(str(ref), None)
            except InputError as err:
                self._report(str(ref), str(err))
            except ApiException as err:
                if err.status != 404:
                    raise
                self._report(str(ref), f"{ref}: not found")
        machines = self._list("machines")
        need_provider_ids = False
        for machine in machines:
            meta = _meta(machine)
            labels = meta.get("labels") or {}
            ns = str(meta.get("namespace", ""))
            owner = (GroupRef(MACHINE_DEPLOYMENT, ns, labels[DEPLOYMENT_NAME_LABEL]) if DEPLOYMENT_NAME_LABEL in labels
                     else GroupRef(MACHINE_POOL, ns, labels[POOL_NAME_LABEL]) if POOL_NAME_LABEL in labels
                     else GroupRef(MACHINE_SET, ns, labels.get(SET_NAME_LABEL, "")))
            machine_pool = refs.get(owner)
            if machine_pool is None:
                continue
            key = _machine_key(machine)
            view.machines[key] = machine
            view.pool_of_machine[key] = machine_pool
            view.machines_of_pool.setdefault(machine_pool, []).append(machine)
            node = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
            if node:
                view.node_of_machine[key] = node
            elif (machine.get("spec") or {}).get("providerID"):
                need_provider_ids = True
        if need_provider_ids or any(provider_ids.values()):
            by_provider_id = self._nodes_by_provider_id()
            for key, machine in view.machines.items():
                pid = (machine.get("spec") or {}).get("providerID")
                if key not in view.node_of_machine and pid in by_provider_id:
                    view.node_of_machine[key] = by_provider_id[pid]
            with_machine = set(view.node_of_machine.values())
            for pool, ids in provider_ids.items():  # a MachinePool's instances without a Machine: nodes all the same
                bare = [by_provider_id[p] for p in ids if p in by_provider_id and by_provider_id[p] not in with_machine]
                view.bare_nodes_of_pool[pool] = bare
                view.pool_of_bare_node.update((node, pool) for node in bare)
        view.machine_of_node = {node: view.machines[key] for key, node in view.node_of_machine.items()
                                if view.pool_of_machine[key] in view.replicas}
        return view

    def _nodes_by_provider_id(self) -> dict[str, str]:
        list_raw: Callable[..., Any] = self._core.list_node
        resp = list_raw(_preload_content=False)
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        return {str((n.get("spec") or {}).get("providerID")): _meta(n)["name"] for n in body.get("items") or []
                if (n.get("spec") or {}).get("providerID")}


class _View:
    def __init__(self) -> None:
        self.replicas: dict[str, int] = {}
        """Pool → replicas, for groups in action now."""
        self.machines: dict[str, dict[str, Any]] = {}
        self.pool_of_machine: dict[str, str] = {}
        self.machines_of_pool: dict[str, list[dict[str, Any]]] = {}
        self.node_of_machine: dict[str, str] = {}
        self.machine_of_node: dict[str, dict[str, Any]] = {}
        self.bare_nodes_of_pool: dict[str, list[str]] = {}
        """MachinePool → the Nodes of its `spec.providerIDList` no Machine has."""
        self.pool_of_bare_node: dict[str, str] = {}


def _machine_key(machine: Mapping[str, Any]) -> str:
    meta = _meta(machine)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _deleting(machine: Mapping[str, Any]) -> bool:
    meta = _meta(machine)
    return bool(meta.get("deletionTimestamp")) or DELETE_MACHINE in (meta.get("annotations") or {})


def _created(machine: Mapping[str, Any]) -> float:
    stamp = _meta(machine).get("creationTimestamp")
    if not stamp:
        return 0.0
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
