"""gpuscale's allocator against kube-scheduler v1.37.2's own (k8s.io/dynamic-resource-allocation/structured v0.37.2,
built by scripts/allocref.sh from the Go module cache): on random small nodes and pods (exact counts, "All",
`firstAvailable`, `matchAttribute`, devices in use), the same devices for the same requests, or the same failure
(unschedulable, or an error with the same words)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuscale.engine.dra.allocate import Allocated, Allocator, FailureKind, InUse
from gpuscale.model.dra import (
    AllocationMode,
    ClaimSpec,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceTaint,
    DeviceToleration,
    Dra,
    ExactDeviceRequest,
    PoolRef,
    ResourceClaim,
    ResourceSlice,
    TaintEffect,
    Version,
    attribute_json,
)
from gpuscale.model.quantity import to_milli
from tests.engine.dra.builders import DRIVER, GPU_CLASS, node_slice
from tests.engine.dra.test_allocate_property import NO_LABELS, claims, devices

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def allocref() -> Iterator[subprocess.Popen[str]]:
    if shutil.which("go") is None:
        pytest.skip("go is not installed: scripts/allocref.sh builds kube-scheduler's allocator with it")
    built = subprocess.run(["bash", str(ROOT / "scripts" / "allocref.sh")], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip("scripts/allocref.sh could not build from the Go module cache (run scripts/k8s-binaries.sh, or "
                    f"CELREF_GOPROXY=…): {built.stderr[-300:]}")
    process = subprocess.Popen([built.stdout.strip().splitlines()[-1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    yield process
    assert process.stdin is not None
    process.stdin.close()
    process.wait()



def _device(d: Device) -> dict[str, object]:
    device: dict[str, object] = {"name": d.name, "attributes": {k: attribute_json(v) for k, v in d.attributes.items()},
                                 "capacity": {k: {"value": f"{c.value_milli}m"} for k, c in d.capacity.items()}}
    if d.taints:
        device["taints"] = [{"key": t.key, "effect": str(t.effect)} for t in d.taints]
    if d.allow_multiple_allocations:
        device["allowMultipleAllocations"] = True
    if d.consumes_counters:
        device["consumesCounters"] = [{"counterSet": c.counter_set,
                                       "counters": {k: {"value": f"{v}m"} for k, v in c.counters.items()}}
                                      for c in d.consumes_counters]
    return device


def _slice(s: ResourceSlice) -> dict[str, object]:
    spec: dict[str, object] = {
        "driver": s.driver, "devices": [_device(d) for d in s.devices],
        "pool": {"name": s.pool.name, "generation": s.pool.generation,
                 "resourceSliceCount": s.pool.resource_slice_count}}
    if s.node_name:
        spec["nodeName"] = s.node_name
    if s.all_nodes:
        spec["allNodes"] = True
    if s.shared_counters:
        spec["sharedCounters"] = [{"name": c.name, "counters": {k: {"value": f"{v}m"} for k, v in c.counters.items()}}
                                  for c in s.shared_counters]
    return {"metadata": {"name": s.name}, "spec": spec}


def _exact(body: ExactDeviceRequest) -> dict[str, object]:
    exact: dict[str, object] = {"deviceClassName": body.device_class_name, "allocationMode": str(body.allocation_mode),
                                "count": body.count, "selectors": [{"cel": {"expression": e}} for e in body.selectors]}
    if body.admin_access:
        exact["adminAccess"] = True
    if body.tolerations:
        exact["tolerations"] = [{"key": t.key, "operator": t.operator} for t in body.tolerations]
    if body.capacity_requests:
        exact["capacity"] = {"requests": {k: f"{v}m" for k, v in body.capacity_requests.items()}}
    return exact


def _request(r: DeviceRequest) -> dict[str, object]:
    if r.exactly is not None:
        return {"name": r.name, "exactly": _exact(r.exactly)}
    return {"name": r.name, "firstAvailable": [{"name": s.name, **_exact(s)} for s in r.first_available]}


def _claim(c: ResourceClaim) -> dict[str, object]:
    constraints = [{"requests": list(k.requests), "matchAttribute": k.match_attribute}
                   for k in c.spec.constraints if k.match_attribute]
    return {"metadata": {"namespace": c.namespace, "name": c.name, "uid": f"uid-{c.name}"},
            "spec": {"devices": {"requests": [_request(r) for r in c.spec.requests], "constraints": constraints}}}


def _class(c: DeviceClass) -> dict[str, object]:
    return {"metadata": {"name": c.name}, "spec": {"selectors": [{"cel": {"expression": e}} for e in c.selectors]}}


def kube(process: subprocess.Popen[str], dra: Dra, pod: list[ResourceClaim], used: set[str]) -> dict[str, object]:
    line = json.dumps({"node": {"name": "n1", "labels": {}}, "slices": [_slice(s) for s in dra.slices],
                       "classes": [_class(c) for c in dra.classes], "claims": [_claim(c) for c in pod],
                       "allocated": [[DRIVER, "n1", n] for n in sorted(used)]})
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()
    answer: dict[str, object] = json.loads(process.stdout.readline())
    return answer


def assert_same_as_kube(process: subprocess.Popen[str], dra: Dra, pod: list[ResourceClaim], used: set[str]) -> None:
    """gpuscale's allocator and kube's, on node n1 with `used` devices taken: the very same devices per request, or
    the same failure (unschedulable or error) in the same words."""
    ours = Allocator(dra).allocate("n1", NO_LABELS, pod, InUse(devices=frozenset((DRIVER, "n1", n) for n in used)))
    theirs = kube(process, dra, pod, used)
    kind, said = next(iter(theirs.items()))
    event(f"kube-scheduler: {kind}" + (f" ({str(said).split(': ')[-1][:40]})" if kind != "allocations" else ""))
    if isinstance(ours, Allocated):
        got = [[{"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device} for r in a.devices]
               for a in ours.allocations]
        assert theirs == {"allocations": got}
    elif ours.kind is FailureKind.UNSCHEDULABLE:
        assert theirs == {"unschedulable": ours.message}
    else:
        assert theirs == {"error": ours.message}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(devices(), claims(), st.data())
def test_the_same_devices_as_kube_scheduler(allocref: subprocess.Popen[str], node_devices: tuple[Device, ...],
                                             pod: list[ResourceClaim], data: st.DataObject) -> None:
    used = data.draw(st.sets(st.sampled_from([d.name for d in node_devices])) if node_devices else st.just(set()))
    dra = Dra(slices=(node_slice("n1", *node_devices),), classes=(GPU_CLASS,))
    assert_same_as_kube(allocref, dra, pod, used)


MODEL = f'device.attributes["{DRIVER}"].model == "%s"'
MEMORY = f"{DRIVER}/memory"


@st.composite
def rich_devices(draw: st.DrawFn) -> tuple[Device, ...]:
    """Devices that may lack the attribute a selector reads (a CEL runtime error), carry a NoSchedule taint, or
    allow multiple allocations of their memory."""
    found = []
    for i in range(draw(st.integers(0, 5))):
        attributes: dict[str, str | int | bool | Version] = {f"{DRIVER}/index": i}
        if draw(st.integers(0, 9)) > 0:
            attributes[f"{DRIVER}/model"] = draw(st.sampled_from(["A", "B"]))
        if draw(st.booleans()):
            attributes[f"{DRIVER}/numa"] = draw(st.integers(0, 1))
        taints = (DeviceTaint(key="t", effect=TaintEffect.NO_SCHEDULE),) if draw(st.integers(0, 4)) == 0 else ()
        found.append(Device(name=f"d{i}", attributes=attributes, taints=taints,
                            allow_multiple_allocations=draw(st.integers(0, 3)) == 0,
                            capacity={MEMORY: DeviceCapacity(value_milli=to_milli("80Gi"))}))
    return tuple(found)


@st.composite
def rich_claims(draw: st.DrawFn) -> list[ResourceClaim]:
    found = []
    for c in range(draw(st.integers(1, 2))):
        requests = []
        for r in range(draw(st.integers(1, 2))):
            model = draw(st.sampled_from([None, "A", "B"]))
            requests.append(DeviceRequest(name=f"r{r}", exactly=ExactDeviceRequest(
                device_class_name="gpu", selectors=() if model is None else (MODEL % model,),
                count=draw(st.integers(1, 3)), admin_access=draw(st.integers(0, 4)) == 0,
                allocation_mode=AllocationMode.ALL if draw(st.integers(0, 5)) == 0 else AllocationMode.EXACT_COUNT,
                tolerations=(DeviceToleration(key="t", operator="Exists"),) if draw(st.booleans()) else (),
                capacity_requests={MEMORY: to_milli(draw(st.sampled_from(["10Gi", "50Gi"])))}
                if draw(st.booleans()) else {})))
        constraints = (DeviceConstraint(match_attribute=f"{DRIVER}/numa"),) if draw(st.booleans()) else ()
        found.append(ResourceClaim(namespace="default", name=f"c{c}",
                                   spec=ClaimSpec(requests=tuple(requests), constraints=constraints)))
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rich_devices(), rich_claims(), st.data())
def test_taints_admin_access_shares_and_cel_errors_as_kube_scheduler(
        allocref: subprocess.Popen[str], node_devices: tuple[Device, ...], pod: list[ResourceClaim],
        data: st.DataObject) -> None:
    exclusive = [d.name for d in node_devices if not d.allow_multiple_allocations]
    used = data.draw(st.sets(st.sampled_from(exclusive)) if exclusive else st.just(set()))
    dra = Dra(slices=(node_slice("n1", *node_devices),), classes=(GPU_CLASS,))
    assert_same_as_kube(allocref, dra, pod, used)



@st.composite
def pools(draw: st.DrawFn) -> tuple[ResourceSlice, ...]:
    """A node-local pool of one to three slices (generations 0 and 1, counted 1 or 2 per generation: complete,
    incomplete, obsolete; device names may repeat: an invalid pool), maybe a counter slice its devices consume from,
    and maybe a slice for all nodes."""
    slices = []
    counted = draw(st.booleans())
    for k in range(draw(st.integers(1, 3))):
        generation = draw(st.sampled_from([0, 0, 0, 1]))
        count = draw(st.sampled_from([1, 1, 1, 2]))
        devices_ = []
        for _ in range(draw(st.integers(0, 3))):
            consumes = (CounterConsumption(counter_set="cs", counters={"mem": draw(st.sampled_from([1000, 2000]))}),) \
                if counted else ()
            name = f"d{draw(st.integers(0, 5))}" if draw(st.integers(0, 5)) == 0 else f"d{k}{len(devices_)}"
            devices_.append(Device(name=name, consumes_counters=consumes,
                                   attributes={f"{DRIVER}/model": draw(st.sampled_from(["A", "B"]))}))
        slices.append(ResourceSlice(name=f"s{k}", driver=DRIVER, node_name="n1",
                                    pool=PoolRef(name="n1", generation=generation, resource_slice_count=count),
                                    devices=tuple(devices_)))
    if counted:
        newest = slices[-1].pool
        slices.append(ResourceSlice(name="counters", driver=DRIVER, node_name="n1", pool=newest,
                                    shared_counters=(CounterSet(name="cs", counters={"mem": 3000}),)))
    if draw(st.booleans()):
        slices.append(ResourceSlice(name="everywhere", driver=DRIVER, all_nodes=True, pool=PoolRef(name="shared"),
                                    devices=tuple(Device(name=f"e{i}", attributes={f"{DRIVER}/model": "A"})
                                                  for i in range(draw(st.integers(0, 2))))))
    names = {s.name for s in slices}
    assert len(names) == len(slices)
    return tuple(slices)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pools(), claims(), st.data())
def test_pools_generations_counters_as_kube_scheduler(allocref: subprocess.Popen[str],
                                                      slices: tuple[ResourceSlice, ...], pod: list[ResourceClaim],
                                                      data: st.DataObject) -> None:
    dra = Dra(slices=slices, classes=(GPU_CLASS,))
    names = sorted({d.name for s in slices if s.node_name for d in s.devices})
    used = data.draw(st.sets(st.sampled_from(names)) if names else st.just(set()))
    assert_same_as_kube(allocref, dra, pod, used)
