"""DRA objects (`resource.k8s.io/v1`, as `kubectl get -o json` prints them) → `model.dra` values.

Pure conversion, as `kube.convert`: a malformed field raises `InputError` naming the object and the field path
(`ResourceSlice gpu-a: spec.devices[0].attributes.gpu.example.com/memory.int: expected int, got 'x'`), so the CLI
prints one line and exits 2. Unknown fields are ignored. What the API server would have refused is refused (a request
with both `exactly` and `firstAvailable`, an attribute with two values, a version that is no semantic version);
what v1.37 keeps off by default (list-valued attributes, …) is left out of the device and named in `Dra.unsupported`.

Attribute names are stored fully qualified (a name without a domain gets the slice's driver); capacity names as
written (the allocator matches a request's capacity names to them literally).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuscale.inputs.files import excerpt
from gpuscale.kube.convert import _Ctx, _get, _join, _named, _objects, _selector_terms, _str_map
from gpuscale.model.dra import (
    POD_CLAIM_NAME_ANNOTATION,
    AllocatedDevice,
    Allocation,
    AllocationMode,
    AttributeValue,
    CapacityPolicy,
    CapacityRange,
    ClaimSpec,
    ConsumerRef,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    DeviceTaint,
    DeviceToleration,
    ExactDeviceRequest,
    PoolRef,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    TaintEffect,
    Version,
)
from gpuscale.model.quantity import QuantityError, to_milli

_ATTRIBUTE_TYPES = (("int", int), ("bool", bool), ("string", str), ("version", str))
_LIST_TYPES = ("ints", "bools", "strings", "versions")
_OFF_DEVICE_FIELDS = (("compatibilityGroups", "device compatibility groups"),
                      ("nodeAllocatableResources", "node-allocatable resources"))


def _qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _milli(ctx: _Ctx, raw: Any, path: str, at: str = "") -> int | None:
    """A quantity in milli-units, or None when absent."""
    text = _get(ctx, raw, path, (str, int, float), at=at)
    if text is None:
        return None
    try:
        return to_milli(text)
    except QuantityError as err:
        raise ctx.fail(_join(at, path), str(err)) from None


def _quantity(ctx: _Ctx, text: Any, where: str) -> int:
    """A quantity (text or JSON number) in milli-units."""
    if not isinstance(text, (str, int, float)) or isinstance(text, bool):
        raise ctx.fail(where, f"expected a quantity, got {excerpt(text)}")
    try:
        return to_milli(text)
    except QuantityError as err:
        raise ctx.fail(where, str(err)) from None


def _quantities(ctx: _Ctx, raw: Any, path: str, at: str) -> dict[str, int]:
    """A map of name → quantity (names may hold dots: read without walking a dotted path)."""
    return {name: _quantity(ctx, q, f"{_join(at, path)}.{name}") for name, q in _dict(ctx, raw, path, at).items()}


def _dict(ctx: _Ctx, raw: Any, path: str, at: str) -> dict[str, Any]:
    found: dict[str, Any] = _get(ctx, raw, path, dict, {}, at=at)
    for key in found:
        if not isinstance(key, str):
            raise ctx.fail(f"{_join(at, path)}.{str(key)[:80]}", f"expected a string key, got {excerpt(key)}")
    return found


def _bool(ctx: _Ctx, raw: Any, path: str, at: str) -> bool:
    return bool(_get(ctx, raw, path, bool, False, at=at))


def _strings(ctx: _Ctx, raw: Any, path: str, at: str) -> tuple[str, ...]:
    items = _get(ctx, raw, path, list, [], at=at)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ctx.fail(f"{_join(at, path)}[{i}]", f"expected string, got {excerpt(item)}")
    return tuple(items)


def _required_str(ctx: _Ctx, raw: Any, path: str, at: str) -> str:
    value = _get(ctx, raw, path, str, "", at=at)
    if not value:
        raise ctx.fail(_join(at, path), "required")
    return str(value)


# --------------------------------------------------------------------------------------------------------- slices

def _attribute(ctx: _Ctx, raw: Any, where: str) -> AttributeValue | None:
    """One `DeviceAttribute`: exactly one value; None when it holds only a list (off by default in v1.37)."""
    if not isinstance(raw, Mapping):
        raise ctx.fail(where, f"expected an object, got {excerpt(raw)}")
    present = [key for key, _ in _ATTRIBUTE_TYPES if raw.get(key) is not None]
    lists = [key for key in _LIST_TYPES if raw.get(key) is not None]
    if len(present) + len(lists) != 1:
        raise ctx.fail(where, "exactly one of int, bool, string or version is required")
    if lists:
        return None
    key = present[0]
    value = _get(ctx, raw, key, dict(_ATTRIBUTE_TYPES)[key], at=where)
    if key == "version":
        version = Version.parse(value)
        if version is None:
            raise ctx.fail(f"{where}.version", f"must be a semantic version, got {excerpt(value)}")
        return version
    return value  # type: ignore[no-any-return]


def _capacity(ctx: _Ctx, raw: Any, where: str) -> DeviceCapacity:
    if not isinstance(raw, Mapping) or raw.get("value") is None:
        raise ctx.fail(f"{where}.value", "required")
    value = _quantity(ctx, raw["value"], f"{where}.value")
    policy_raw = _get(ctx, raw, "requestPolicy", dict, at=where)
    policy = None
    if policy_raw is not None:
        at = f"{where}.requestPolicy"
        values = []
        for i, v in enumerate(_get(ctx, policy_raw, "validValues", list, [], at=at)):
            values.append(_quantity(ctx, v, f"{at}.validValues[{i}]"))
        range_raw = _get(ctx, policy_raw, "validRange", dict, at=at)
        valid_range = None
        if range_raw is not None:
            low = _milli(ctx, range_raw, "min", at=f"{at}.validRange")
            if low is None:
                raise ctx.fail(f"{at}.validRange.min", "required")
            valid_range = CapacityRange(min_milli=low, max_milli=_milli(ctx, range_raw, "max", at=f"{at}.validRange"),
                                        step_milli=_milli(ctx, range_raw, "step", at=f"{at}.validRange"))
        policy = CapacityPolicy(default_milli=_milli(ctx, policy_raw, "default", at=at),
                                valid_values_milli=tuple(sorted(values)), valid_range=valid_range)
    return DeviceCapacity(value_milli=value, request_policy=policy)


def _counters(ctx: _Ctx, raw: Any, where: str) -> dict[str, int]:
    found = {}
    for name, counter in _dict(ctx, raw, "counters", where).items():
        if not isinstance(counter, Mapping) or counter.get("value") is None:
            raise ctx.fail(f"{where}.counters.{name}.value", "required")
        found[name] = _quantity(ctx, counter["value"], f"{where}.counters.{name}.value")
    return found


def _taint(ctx: _Ctx, raw: Mapping[str, Any], where: str) -> DeviceTaint:
    effect = _get(ctx, raw, "effect", str, "None", at=where)
    return DeviceTaint(key=_required_str(ctx, raw, "key", where), value=_get(ctx, raw, "value", str, "", at=where),
                       effect=TaintEffect(effect) if effect in TaintEffect.__members__.values() else TaintEffect.NONE)


def _node_selector(ctx: _Ctx, raw: Any, at: str) -> tuple[Any, ...] | None:
    selector = _get(ctx, raw, "nodeSelector", dict, at=at)
    return None if selector is None else _selector_terms(ctx, selector, _join(at, "nodeSelector"))


def _device(ctx: _Ctx, raw: Mapping[str, Any], where: str, driver: str, off: list[str]) -> Device:
    attributes: dict[str, AttributeValue] = {}
    # the names without a domain first: a fully qualified twin wins, as `lookupAttribute` tries it first
    for name, value in sorted(_dict(ctx, raw, "attributes", where).items(), key=lambda item: "/" in item[0]):
        attribute = _attribute(ctx, value, f"{where}.attributes.{name}")
        if attribute is None:
            off.append("list-valued device attributes")
        else:
            attributes[_qualified(name, driver)] = attribute
    capacity = {_qualified(name, driver): _capacity(ctx, value, f"{where}.capacity.{name}")
                for name, value in _dict(ctx, raw, "capacity", where).items()}
    consumes = []
    for i, c in enumerate(_objects(ctx, raw, "consumesCounters", at=where)):
        at = f"{where}.consumesCounters[{i}]"
        consumes.append(CounterConsumption(counter_set=_required_str(ctx, c, "counterSet", at),
                                           counters=_counters(ctx, c, at)))
        if c.get("compatibilityGroups"):
            off.append("device compatibility groups")
    off += [what for key, what in _OFF_DEVICE_FIELDS if raw.get(key)]
    return Device(
        name=_required_str(ctx, raw, "name", where), attributes=attributes, capacity=capacity,
        consumes_counters=tuple(consumes), node_name=_get(ctx, raw, "nodeName", str, at=where) or None,
        node_selector=_node_selector(ctx, raw, where), all_nodes=_bool(ctx, raw, "allNodes", where),
        taints=tuple(_taint(ctx, t, f"{where}.taints[{i}]") for i, t in enumerate(_objects(ctx, raw, "taints",
                                                                                            at=where))),
        binds_to_node=_bool(ctx, raw, "bindsToNode", where),
        binding_conditions=_strings(ctx, raw, "bindingConditions", where),
        binding_failure_conditions=_strings(ctx, raw, "bindingFailureConditions", where),
        allow_multiple_allocations=_bool(ctx, raw, "allowMultipleAllocations", where))


def resource_slice_from_k8s(obj: Mapping[str, Any]) -> ResourceSlice:
    """A ResourceSlice; what it uses that gpuscale does not model is named in its `unsupported`."""
    ctx = _Ctx("ResourceSlice", obj)
    _, name = _named(ctx, obj)
    spec = _get(ctx, obj, "spec", dict)
    if spec is None:
        raise ctx.fail("spec", "required")
    driver = _required_str(ctx, spec, "driver", "spec")
    pool = _get(ctx, spec, "pool", dict, at="spec")
    if pool is None:
        raise ctx.fail("spec.pool", "required")
    count = _get(ctx, pool, "resourceSliceCount", int, 0, at="spec.pool")
    if count < 1:
        raise ctx.fail("spec.pool.resourceSliceCount", f"must be greater than zero, got {excerpt(count)}")
    node_name = _get(ctx, spec, "nodeName", str, at="spec") or None
    selector = _node_selector(ctx, spec, "spec")
    all_nodes, per_device = _bool(ctx, spec, "allNodes", "spec"), _bool(ctx, spec, "perDeviceNodeSelection", "spec")
    counter_sets = tuple(CounterSet(name=_required_str(ctx, c, "name", f"spec.sharedCounters[{i}]"),
                                    counters=_counters(ctx, c, f"spec.sharedCounters[{i}]"))
                         for i, c in enumerate(_objects(ctx, spec, "sharedCounters", at="spec")))
    if sum((node_name is not None, selector is not None, all_nodes, per_device)) != 1 and not counter_sets:
        raise ctx.fail("spec", "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required")
    found: list[str] = []
    devices = tuple(_device(ctx, d, f"spec.devices[{i}]", driver, found)
                    for i, d in enumerate(_objects(ctx, spec, "devices", at="spec")))
    found += [what for key, what in (("partitionTypeAttribute", "partition types"),
                                      ("skipNodeOperations", "skipped node operations")) if spec.get(key)]
    return ResourceSlice(
        name=name, driver=driver,
        pool=PoolRef(name=_required_str(ctx, pool, "name", "spec.pool"),
                     generation=_get(ctx, pool, "generation", int, 0, at="spec.pool"), resource_slice_count=count),
        node_name=node_name, node_selector=selector, all_nodes=all_nodes, per_device_node_selection=per_device,
        devices=devices, shared_counters=counter_sets, unsupported=tuple(dict.fromkeys(found)))


def device_class_from_k8s(obj: Mapping[str, Any]) -> DeviceClass:
    ctx = _Ctx("DeviceClass", obj)
    meta, name = _named(ctx, obj)
    spec = _get(ctx, obj, "spec", dict, {})
    return DeviceClass(name=name, selectors=_selectors(ctx, spec, "spec"),
                       extended_resource_name=_get(ctx, spec, "extendedResourceName", str, at="spec") or None,
                       created_s=_created(ctx, meta))


def _created(ctx: _Ctx, meta: Mapping[str, Any]) -> float:
    text = _get(ctx, meta, "creationTimestamp", (str, datetime), at="metadata")
    if isinstance(text, datetime):
        return text.timestamp()
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else 0.0
    except ValueError:
        raise ctx.fail("metadata.creationTimestamp", f"not an RFC 3339 time: {excerpt(text)}") from None


# --------------------------------------------------------------------------------------------------------- claims

def _selectors(ctx: _Ctx, raw: Any, at: str) -> tuple[str, ...]:
    found = []
    for i, s in enumerate(_objects(ctx, raw, "selectors", at=at)):
        found.append(_required_str(ctx, s, "cel.expression", f"{_join(at, 'selectors')}[{i}]"))
    return tuple(found)


def _tolerations(ctx: _Ctx, raw: Any, at: str) -> tuple[DeviceToleration, ...]:
    found = []
    for i, t in enumerate(_objects(ctx, raw, "tolerations", at=at)):
        where = f"{_join(at, 'tolerations')}[{i}]"
        operator = _get(ctx, t, "operator", str, "", at=where) or "Equal"
        if operator not in ("Equal", "Exists"):
            raise ctx.fail(f"{where}.operator", f"unknown operator {excerpt(operator)} (valid: Equal, Exists)")
        found.append(DeviceToleration(key=_get(ctx, t, "key", str, "", at=where), operator=operator,
                                      value=_get(ctx, t, "value", str, "", at=where),
                                      effect=_get(ctx, t, "effect", str, "", at=where),
                                      toleration_seconds=_get(ctx, t, "tolerationSeconds", int, at=where)))
    return tuple(found)


def _exact(ctx: _Ctx, raw: Mapping[str, Any], at: str) -> dict[str, Any]:
    """The fields an `exactly` request and a subrequest share, as keyword arguments."""
    mode = _get(ctx, raw, "allocationMode", str, "", at=at) or "ExactCount"
    if mode not in AllocationMode.__members__.values():
        raise ctx.fail(_join(at, "allocationMode"), f"unknown allocation mode {excerpt(mode)} (valid: ExactCount, "
                                                    "All)")
    count = _get(ctx, raw, "count", int, 1, at=at)
    if mode == AllocationMode.EXACT_COUNT and count < 1:
        raise ctx.fail(_join(at, "count"), f"must be greater than zero, got {excerpt(count)}")
    capacity = _get(ctx, raw, "capacity", dict, {}, at=at)
    requests = _quantities(ctx, capacity, "requests", _join(at, "capacity"))
    return {"device_class_name": _required_str(ctx, raw, "deviceClassName", at),
            "selectors": _selectors(ctx, raw, at), "allocation_mode": AllocationMode(mode), "count": count,
            "tolerations": _tolerations(ctx, raw, at), "capacity_requests": requests}


def _request(ctx: _Ctx, raw: Mapping[str, Any], where: str) -> DeviceRequest:
    name = _required_str(ctx, raw, "name", where)
    exactly = _get(ctx, raw, "exactly", dict, at=where)
    subs = _objects(ctx, raw, "firstAvailable", at=where)
    if (exactly is None) == (not subs):
        raise ctx.fail(where, "exactly one of exactly or firstAvailable is required")
    if exactly is not None:
        return DeviceRequest(name=name, exactly=ExactDeviceRequest(
            **_exact(ctx, exactly, f"{where}.exactly"), admin_access=_bool(ctx, exactly, "adminAccess",
                                                                           f"{where}.exactly")))
    return DeviceRequest(name=name, first_available=tuple(
        DeviceSubRequest(name=_required_str(ctx, s, "name", f"{where}.firstAvailable[{i}]"),
                         **_exact(ctx, s, f"{where}.firstAvailable[{i}]"))
        for i, s in enumerate(subs)))


def _claim_spec(ctx: _Ctx, spec: Mapping[str, Any], at: str) -> ClaimSpec:
    devices = _get(ctx, spec, "devices", dict, {}, at=at)
    at = _join(at, "devices")
    requests = tuple(_request(ctx, r, f"{at}.requests[{i}]") for i, r in enumerate(_objects(ctx, devices, "requests",
                                                                                             at=at)))
    constraints = []
    for i, c in enumerate(_objects(ctx, devices, "constraints", at=at)):
        where = f"{at}.constraints[{i}]"
        constraints.append(DeviceConstraint(
            requests=_strings(ctx, c, "requests", where),
            match_attribute=_get(ctx, c, "matchAttribute", str, at=where) or None,
            distinct_attribute=_get(ctx, c, "distinctAttribute", str, at=where) or None))
    return ClaimSpec(requests=requests, constraints=tuple(constraints))


def _allocation(ctx: _Ctx, raw: Mapping[str, Any]) -> Allocation:
    at = "status.allocation"
    results = []
    for i, r in enumerate(_objects(ctx, raw, "devices.results", at=at)):
        where = f"{at}.devices.results[{i}]"
        consumed = _quantities(ctx, r, "consumedCapacity", where)
        results.append(AllocatedDevice(
            request=_required_str(ctx, r, "request", where), driver=_required_str(ctx, r, "driver", where),
            pool=_required_str(ctx, r, "pool", where), device=_required_str(ctx, r, "device", where),
            admin_access=_bool(ctx, r, "adminAccess", where),
            share_id=_get(ctx, r, "shareID", str, at=where) or None, consumed_capacity=consumed))
    return Allocation(devices=tuple(results), node_selector=_node_selector(ctx, raw, at))


def resource_claim_from_k8s(obj: Mapping[str, Any]) -> ResourceClaim:
    ctx = _Ctx("ResourceClaim", obj)
    meta, name = _named(ctx, obj)
    status = _get(ctx, obj, "status", dict, {})
    allocation = _get(ctx, status, "allocation", dict, at="status")
    reserved = tuple(ConsumerRef(resource=_get(ctx, r, "resource", str, "", at=f"status.reservedFor[{i}]"),
                                 name=_get(ctx, r, "name", str, "", at=f"status.reservedFor[{i}]"),
                                 uid=_get(ctx, r, "uid", str, "", at=f"status.reservedFor[{i}]"),
                                 api_group=_get(ctx, r, "apiGroup", str, "", at=f"status.reservedFor[{i}]"))
                     for i, r in enumerate(_objects(ctx, status, "reservedFor", at="status")))
    owner = next((o for o in _objects(ctx, meta, "ownerReferences", at="metadata")
                  if o.get("controller") and o.get("kind") == "Pod" and o.get("apiVersion") == "v1"), None)
    return ResourceClaim(
        namespace=_get(ctx, meta, "namespace", str, "default", at="metadata"), name=name,
        uid=_get(ctx, meta, "uid", str, "", at="metadata"),
        spec=_claim_spec(ctx, _get(ctx, obj, "spec", dict, {}), "spec"),
        allocation=None if allocation is None else _allocation(ctx, allocation), reserved_for=reserved,
        deleting=_get(ctx, meta, "deletionTimestamp", (str, datetime), at="metadata") is not None,
        owner_pod_uid=str(owner.get("uid", "")) if owner else None,
        pod_claim_name=_str_map(ctx, meta, "annotations", at="metadata").get(POD_CLAIM_NAME_ANNOTATION))


def resource_claim_template_from_k8s(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    ctx = _Ctx("ResourceClaimTemplate", obj)
    meta, name = _named(ctx, obj)
    spec = _get(ctx, obj, "spec.spec", dict, {})
    return ResourceClaimTemplate(namespace=_get(ctx, meta, "namespace", str, "default", at="metadata"), name=name,
                                 spec=_claim_spec(ctx, spec, "spec.spec"))


DRA_CONVERT: dict[str, Any] = {"ResourceSlice": resource_slice_from_k8s, "DeviceClass": device_class_from_k8s,
                               "ResourceClaim": resource_claim_from_k8s,
                               "ResourceClaimTemplate": resource_claim_template_from_k8s}
"""The reader of each DRA kind."""
