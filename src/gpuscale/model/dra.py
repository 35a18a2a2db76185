"""Dynamic Resource Allocation (`resource.k8s.io/v1`) as kube-scheduler v1.37's DynamicResources plugin reads it:
ResourceSlices (the devices drivers publish), DeviceClasses, ResourceClaims and ResourceClaimTemplates (`Dra`, one per
snapshot), and the claims a pod references (`PodResourceClaim`).

Conventions kept by every reader and writer:
- Attribute names are **fully qualified** (`domain/name`): a name the driver published without a domain is stored
  under the driver's name, as the allocator's `lookupAttribute` and CEL's `device.attributes[domain]` resolve it.
  Capacity names stay **as written**: the allocator matches a request's `capacity.requests` names to a device's
  literally (CEL's `device.capacity[domain]` still reads an unqualified name under the driver's domain).
- Quantities (capacities, counters, capacity requests) are exact integers in **milli-units** (`model.quantity.to_milli`:
  `80Gi` of memory is `85899345920000`); a quantity finer than 1m rounds away from zero as `MilliValue()` does.
- Node selectors are `NodeSelectorTerm`s, ORed, as everywhere in `model`.

What v1.37 enables by default and is modelled here: prioritized lists (`firstAvailable`), admin access, device taints
and request tolerations, partitionable devices (shared counters, per-device node selection), consumable capacity
(`allowMultipleAllocations`, capacity request policies, `distinctAttribute`), binding conditions (`bindsToNode`, the
conditions as data), DeviceClass `extendedResourceName`. Off by default in v1.37 and not modelled (`UNSUPPORTED`): list
attribute types (`ints`, `strings`, …), derived attributes, compatibility groups, partition types, node-allocatable
resources, skipped node operations, workload (PodGroup) claims; DeviceTaintRule objects (GA, but a kind of their own)
are not read either.

`Dra` indexes the objects once; every lookup is O(1) (`slices_for_node` is O(slices that name a node by selector or
serve all nodes), which drivers keep few).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import total_ordering

from gpuscale.model.selectors import NodeSelectorTerm

UNSUPPORTED = ("list-valued device attributes", "derived attributes", "device compatibility groups",
               "partition types", "node-allocatable resources", "skipped node operations",
               "PodGroup resource claims", "DeviceTaintRules")
"""DRA features kube-scheduler v1.37 has off by default (or kinds gpuscale does not read): a slice, claim or pod using
one is reported unsupported by the reader, one line each."""

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Set by the ResourceClaim controller on a claim it generated from a template: the pod's `spec.resourceClaims` name."""
RESERVED_FOR_MAX = 256
"""`ResourceClaimReservedForMaxSize`: a claim is reserved for at most this many consumers."""


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


class TaintEffect(StrEnum):
    """`DeviceTaintEffect`; an unknown effect is read as `NONE`, as consumers must treat it."""

    NONE = "None"
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
                     r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
                     r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
                     r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?")


@total_ordering
@dataclass(frozen=True, slots=True)
class Version:
    """A `version` attribute: semantic version 2.0.0 text (`blang/semver` `Parse`, strict: no `v`, three numbers).
    Ordered by semver precedence (build metadata ignored, a pre-release before its release); equal when that
    precedence is equal, as CEL's `semver` compares."""

    text: str

    @staticmethod
    def parse(text: str) -> Version | None:
        """The version, or None when `text` is no semantic version."""
        return Version(text) if _SEMVER.fullmatch(text) else None

    def _key(self) -> tuple[int, int, int, tuple[tuple[int, int | str], ...] | None]:
        shape = _SEMVER.fullmatch(self.text)
        if shape is None:
            return (0, 0, 0, None)
        pre = shape.group(4)
        parts = None if pre is None else tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split("."))
        return int(shape.group(1)), int(shape.group(2)), int(shape.group(3)), parts

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        (a1, a2, a3, ap), (b1, b2, b3, bp) = self._key(), other._key()
        if (a1, a2, a3) != (b1, b2, b3):
            return (a1, a2, a3) < (b1, b2, b3)
        if ap is None or bp is None:
            return ap is not None and bp is None  # a pre-release precedes its release
        return ap < bp

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


AttributeValue = str | int | bool | Version


def attribute_json(value: AttributeValue) -> dict[str, object]:
    """A device attribute as the API writes it (`DeviceAttribute`: one of `bool`, `int`, `version`, `string`)."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.text}
    return {"string": value}
"""A device attribute's typed value (`DeviceAttribute`: exactly one of string, int, bool, version)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityRange:
    """`CapacityRequestPolicyRange`, milli-units; `max_milli`/`step_milli` None when not given."""

    min_milli: int
    max_milli: int | None = None
    step_milli: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPolicy:
    """`CapacityRequestPolicy` (consumable capacity): what a request that names no amount consumes, and which amounts
    are valid (`valid_values` sorted ascending, or `valid_range`; neither: any amount up to the capacity)."""

    default_milli: int | None = None
    valid_values_milli: tuple[int, ...] = ()
    valid_range: CapacityRange | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceCapacity:
    value_milli: int
    request_policy: CapacityPolicy | None = None
    """Only meaningful on a device that `allow_multiple_allocations`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceToleration:
    """`DeviceToleration`: `operator` Equal (default) or Exists; `effect` "" tolerates every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """As `resourceclaim.ToleratesTaint` (the node toleration's rule): the effect (if given) and key (if given)
        match, then Exists matches any value and Equal the same value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterConsumption:
    """`DeviceCounterConsumption`: counters (milli-units) a device takes from one of its pool's shared counter sets."""

    counter_set: str
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterSet:
    """`CounterSet` of a slice's `sharedCounters`: counter name → available amount in milli-units."""

    name: str
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    """Fully qualified name → value."""
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    """Name as written → capacity."""
    consumes_counters: tuple[CounterConsumption, ...] = ()
    node_name: str | None = None
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    all_nodes: bool = False
    """Per-device node selection: set only in a slice with `per_device_node_selection`."""
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool = False
    """Consumable capacity: several claims may share the device, each consuming part of its capacity."""


NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
"""NVIDIA's DRA driver: it publishes each whole GPU as a device of `type` "gpu" (MIG partitions: "mig")."""


def is_whole_gpu(driver: str, device: Device) -> bool:
    """Whether a device is one whole GPU, as the twin's GPU-hours count GPUs: a device of NVIDIA's DRA driver whose
    `type` attribute is "gpu" or absent. MIG partitions and other drivers' devices are not."""
    kind = device.attributes.get(f"{NVIDIA_GPU_DRIVER}/type")
    return driver == NVIDIA_GPU_DRIVER and kind in (None, "gpu")


def whole_gpus(slices: Iterable[ResourceSlice]) -> tuple[Device, ...]:
    """The whole GPUs (`is_whole_gpu`) among the slices' devices."""
    return tuple(d for s in slices for d in s.devices if is_whole_gpu(s.driver, d))


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRef:
    """`ResourcePool` of a slice: the pool's name, the generation the slice belongs to, and how many slices the pool
    has in that generation."""

    name: str
    generation: int = 0
    resource_slice_count: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceSlice:
    """One ResourceSlice. Exactly one of `node_name`, `node_selector`, `all_nodes`, `per_device_node_selection` says
    which nodes may use its devices (a slice with only `shared_counters` names one too)."""

    name: str
    driver: str
    pool: PoolRef
    node_name: str | None = None
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    unsupported: tuple[str, ...] = ()
    """What the slice uses that gpuscale does not model (`UNSUPPORTED`): those fields are left out of its devices."""

    def serves(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether a node may use some device of this slice (`GatherPools`' relevance: its node name, all nodes, its
        node selector, or, with per-device node selection, any device's)."""
        if self.node_name is not None or self.all_nodes or self.node_selector is not None:
            return _node_matches(self.node_name, self.all_nodes, self.node_selector, node_name, labels)
        if self.per_device_node_selection:
            return any(_node_matches(d.node_name, d.all_nodes, d.node_selector, node_name, labels)
                       for d in self.devices)
        return False


def _node_matches(want_name: str | None, all_nodes: bool, selector: tuple[NodeSelectorTerm, ...] | None,
                  node_name: str, labels: Mapping[str, str]) -> bool:
    """`NodeMatches`: the node name, else all nodes, else the selector (terms ORed), else no node."""
    if want_name:
        return want_name == node_name
    if all_nodes:
        return True
    return selector is not None and any(t.matches(node_name, labels) for t in selector)


def device_serves(device: Device, node_name: str, labels: Mapping[str, str]) -> bool:
    """Whether a device of a per-device-node-selection slice may be used on the node."""
    return _node_matches(device.node_name, device.all_nodes, device.node_selector, node_name, labels)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions, ANDed with the request's own."""
    extended_resource_name: str | None = None
    """The extended resource (`example.com/gpu`) pods may request to get a device of this class."""
    created_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ExactDeviceRequest:
    """`ExactDeviceRequest` (also the body of a `DeviceSubRequest`, which adds its name)."""

    device_class_name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions, ANDed."""
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    """Devices wanted in ExactCount mode (ignored in All mode)."""
    admin_access: bool = False
    """The devices are not reserved: they may be in use, and stay free for others."""
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, int] = field(default_factory=dict)
    """Consumable capacity asked per device: capacity name (as the device writes it) → milli-units."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSubRequest(ExactDeviceRequest):
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRequest:
    """A claim's request: `exactly`, or `first_available` (subrequests tried in order; the first that can be
    allocated is used, and a result names it `request/subrequest`)."""

    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceConstraint:
    """`matchAttribute`: every device of the named requests (all requests when empty) has the same value of the
    attribute; `distinctAttribute`: pairwise different values."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimSpec:
    """`ResourceClaimSpec.devices` (opaque configuration is not read: it does not change allocation)."""

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatedDevice:
    """`DeviceRequestAllocationResult`: the device given to a request (`request` or `request/subrequest`)."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    """Set for a share of a device that allows multiple allocations."""
    consumed_capacity: Mapping[str, int] = field(default_factory=dict)
    """Milli-units of each capacity this share consumes."""

    @property
    def device_id(self) -> tuple[str, str, str]:
        """`DeviceID`: driver, pool, device."""
        return self.driver, self.pool, self.device


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    devices: tuple[AllocatedDevice, ...] = ()
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    """The nodes the allocation may be used on; None: every node (devices that serve all nodes)."""

    def allows(self, node_name: str, labels: Mapping[str, str]) -> bool:
        return self.node_selector is None or any(t.matches(node_name, labels) for t in self.node_selector)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerRef:
    """`ResourceClaimConsumerReference` in `status.reservedFor` (a pod: resource `pods`)."""

    resource: str = "pods"
    name: str = ""
    uid: str = ""
    api_group: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    spec: ClaimSpec = field(default_factory=ClaimSpec)
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False
    owner_pod_uid: str | None = None
    """The UID of the controller owner when it is a Pod (a claim generated from a template is owned by its pod)."""
    pod_claim_name: str | None = None
    """`resource.kubernetes.io/pod-claim-name`: the pod's `spec.resourceClaims` entry a generated claim is for."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reserved_for_pod(self, uid: str) -> bool:
        return any(c.resource == "pods" and not c.api_group and c.uid == uid for c in self.reserved_for)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec = field(default_factory=ClaimSpec)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResourceClaim:
    """One entry of a pod's `spec.resourceClaims`: it names a claim, or a template the ResourceClaim controller makes a
    claim from (named in the pod's `status.resourceClaimStatuses`, `Pod.claim_statuses`)."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """A pool's newest generation: its slices (by name) and whether all `resource_slice_count` of them are present."""

    driver: str
    name: str
    generation: int
    slices: tuple[ResourceSlice, ...]

    @property
    def complete(self) -> bool:
        return len(self.slices) == self.slices[0].pool.resource_slice_count


@dataclass(frozen=True, slots=True, kw_only=True)
class _Index:
    classes: dict[str, DeviceClass]
    claims: dict[str, ResourceClaim]
    templates: dict[str, ResourceClaimTemplate]
    by_node: dict[str, tuple[ResourceSlice, ...]]
    selected: tuple[ResourceSlice, ...]
    pools: dict[tuple[str, str], Pool]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dra:
    """A snapshot's DRA objects, indexed. Cost O(objects) to build; lookups O(1)."""

    slices: tuple[ResourceSlice, ...] = ()
    classes: tuple[DeviceClass, ...] = ()
    claims: tuple[ResourceClaim, ...] = ()
    templates: tuple[ResourceClaimTemplate, ...] = ()
    _index: list[_Index] = field(default_factory=list, init=False, compare=False, repr=False)
    """Built on first use; not an argument, so `dataclasses.replace` makes a copy with its own index."""

    def _built(self) -> _Index:
        if not self._index:
            self._index.append(_build(self))
        return self._index[0]

    def device_class(self, name: str) -> DeviceClass | None:
        return self._built().classes.get(name)

    def claim(self, key: str) -> ResourceClaim | None:
        """By `namespace/name`."""
        return self._built().claims.get(key)

    def template(self, key: str) -> ResourceClaimTemplate | None:
        """By `namespace/name`."""
        return self._built().templates.get(key)

    def node_slices(self, node_name: str) -> tuple[ResourceSlice, ...]:
        """The slices that name this node (`spec.nodeName`), by slice name."""
        return self._built().by_node.get(node_name, ())

    def selected_slices(self) -> tuple[ResourceSlice, ...]:
        """The slices that name no node: by node selector, for all nodes, or per device; by slice name."""
        return self._built().selected

    def slices_for_node(self, node_name: str, labels: Mapping[str, str]) -> tuple[ResourceSlice, ...]:
        """Every slice a node may use a device of (`ResourceSlice.serves`), of any generation: its own, then the
        selected ones that serve it."""
        own = self.node_slices(node_name)
        chosen = tuple(s for s in self.selected_slices() if s.serves(node_name, labels))
        return own + chosen if chosen else own

    def pool(self, driver: str, name: str) -> Pool | None:
        """The pool's newest generation across all slices (to tell completeness and obsolete generations)."""
        return self._built().pools.get((driver, name))

    def unsupported(self) -> tuple[str, ...]:
        """What the slices use that gpuscale does not model (`UNSUPPORTED`), one line per slice and feature."""
        return tuple(f"ResourceSlice {s.name}: {what}" for s in self.slices for what in s.unsupported)

    def __bool__(self) -> bool:
        return bool(self.slices or self.classes or self.claims or self.templates)


def _build(dra: Dra) -> _Index:
    by_node: dict[str, list[ResourceSlice]] = {}
    selected: list[ResourceSlice] = []
    newest: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in sorted(dra.slices, key=lambda s: s.name):
        if s.node_name:
            by_node.setdefault(s.node_name, []).append(s)
        else:
            selected.append(s)
        held = newest.get(key := (s.driver, s.pool.name))
        if held is None or s.pool.generation > held[0].pool.generation:
            newest[key] = [s]
        elif s.pool.generation == held[0].pool.generation:
            held.append(s)
    pools = {key: Pool(driver=key[0], name=key[1], generation=held[0].pool.generation, slices=tuple(held))
             for key, held in newest.items()}
    return _Index(classes={c.name: c for c in dra.classes}, claims={c.key: c for c in dra.claims},
                  templates={t.key: t for t in dra.templates},
                  by_node={name: tuple(held) for name, held in by_node.items()}, selected=tuple(selected),
                  pools=pools)


def claim_from_template(template: ResourceClaimTemplate, pod_name: str, pod_uid: str,
                        pod_claim: str) -> ResourceClaim:
    """The claim the ResourceClaim controller will create for a pod from a template: the template's spec, owned by the
    pod, not allocated. Its name is a stand-in (`<pod>-<claim>`; the controller adds a random suffix)."""
    return ResourceClaim(namespace=template.namespace, name=f"{pod_name}-{pod_claim}", spec=template.spec,
                         owner_pod_uid=pod_uid)
