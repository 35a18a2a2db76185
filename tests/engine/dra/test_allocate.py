"""The structured allocator, rule by rule, against what kube-scheduler v1.37's allocator does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.engine.dra import search as search_module
from gpuscale.engine.dra.allocate import (
    CANNOT_ALLOCATE,
    INVALID_POOLS,
    TIMED_OUT,
    Allocated,
    AllocationFailure,
    Allocator,
    FailureKind,
    InUse,
    allocate,
    in_use,
)
from gpuscale.model.dra import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    CapacityPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
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
)
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator
from tests.engine.dra.builders import (
    DRIVER,
    GPU_CLASS,
    claim,
    first_available,
    gpu,
    node_slice,
    request,
)

LABELS = {"kubernetes.io/hostname": "n1"}
NODE_ONLY = (NodeSelectorTerm(match_fields=(Requirement(key="metadata.name", operator=SelectorOperator.IN,
                                                        values=("n1",)),)),)


def dra(*slices: ResourceSlice, classes: tuple[DeviceClass, ...] = (GPU_CLASS,)) -> Dra:
    return Dra(slices=slices, classes=classes)


NOTHING = InUse()


def run(d: Dra, *claims_: ResourceClaim, used: InUse = NOTHING, node: str = "n1",
        labels: dict[str, str] | None = None) -> Allocated | AllocationFailure:
    return Allocator(d).allocate(node, labels if labels is not None else LABELS, claims_, used)


def devices(result: Allocated | AllocationFailure, index: int = 0) -> list[tuple[str, str]]:
    assert isinstance(result, Allocated), result
    return [(r.request, r.device) for r in result.allocations[index].devices]


EIGHT = node_slice("n1", *(gpu(f"gpu-{i}", index=i) for i in range(8)))


def test_exact_count_takes_the_first_devices_in_slice_order() -> None:
    result = run(dra(EIGHT), claim("c", request(count=2)))
    assert devices(result) == [("gpu", "gpu-0"), ("gpu", "gpu-1")]
    assert isinstance(result, Allocated)
    assert result.allocations[0].node_selector == NODE_ONLY


def test_too_few_devices_cannot_allocate() -> None:
    assert run(dra(EIGHT), claim("c", request(count=9))) == \
        AllocationFailure(kind=FailureKind.UNSCHEDULABLE, message=CANNOT_ALLOCATE)


def test_devices_in_use_are_not_given_again() -> None:
    used = InUse(devices=frozenset({(DRIVER, "n1", f"gpu-{i}") for i in range(7)}))
    assert devices(run(dra(EIGHT), claim(), used=used)) == [("gpu", "gpu-7")]
    assert run(dra(EIGHT), claim("c", request(count=2)), used=used).kind is FailureKind.UNSCHEDULABLE


def test_claims_of_one_pod_count_for_each_other() -> None:
    result = run(dra(EIGHT), claim("a", request(count=5)), claim("b", request(count=3)))
    assert [d for _, d in devices(result, 1)] == ["gpu-5", "gpu-6", "gpu-7"]
    assert run(dra(EIGHT), claim("a", request(count=5)), claim("b", request(count=4))).kind is \
        FailureKind.UNSCHEDULABLE


def test_other_nodes_slices_are_not_used() -> None:
    assert run(dra(node_slice("n2", gpu("gpu-0"))), claim()).kind is FailureKind.UNSCHEDULABLE


def test_request_and_class_selectors_are_anded() -> None:
    h100 = DeviceClass(name="h100", selectors=(f'device.attributes["{DRIVER}"].model == "H100"',))
    s = node_slice("n1", gpu("a", model="A100"), gpu("b", model="H100", index=1), gpu("c", model="H100", index=2))
    above_one = (f'device.attributes["{DRIVER}"].index > 1',)
    picked = run(dra(s, classes=(h100,)), claim("c", request(device_class="h100", selectors=above_one)))
    assert devices(picked) == [("gpu", "c")]


def test_memory_quantity_selector() -> None:
    s = node_slice("n1", gpu("small", memory="40Gi"), gpu("big", memory="80Gi", index=1))
    expr = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0'
    assert devices(run(dra(s), claim("c", request(selectors=(expr,))))) == [("gpu", "big")]


def test_missing_class_is_an_error_in_kube_words() -> None:
    result = run(dra(EIGHT), claim("c", request(device_class="nope")))
    assert result == AllocationFailure(kind=FailureKind.ERROR, message=(
        'claim default/c, request gpu: could not retrieve device class nope: deviceclass.resource.k8s.io "nope" '
        "not found"))


def test_cel_runtime_error_aborts_with_claim_selector_and_device() -> None:
    result = run(dra(EIGHT), claim("c", request(selectors=(f'device.attributes["{DRIVER}"].missing == 1',))))
    assert isinstance(result, AllocationFailure) and result.kind is FailureKind.ERROR
    assert result.message.startswith(f"claim default/c: selector #0 on device {DRIVER}/n1/gpu-0: CEL runtime error: "
                                     "no such key: missing. consider using CEL optional chaining")


def test_class_cel_error_names_the_class() -> None:
    broken = DeviceClass(name="broken", selectors=("device.attributes[\"x.com\"].y",))
    result = run(dra(EIGHT, classes=(broken,)), claim("c", request(device_class="broken")))
    assert isinstance(result, AllocationFailure)
    assert result.message.startswith(f"class broken: selector #0 on device {DRIVER}/n1/gpu-0: CEL runtime error: "
                                     "no such key: y")


def test_cel_compile_error() -> None:
    result = run(dra(EIGHT), claim("c", request(selectors=("device.driver ==",))))
    assert isinstance(result, AllocationFailure) and result.kind is FailureKind.ERROR
    assert result.message.startswith("claim default/c: selector #0: CEL compile error: compilation failed: ERROR:")


def test_a_device_kube_never_reaches_raises_no_error() -> None:
    s = node_slice("n1", gpu("gpu-0"), Device(name="odd"))
    expr = f'device.attributes["{DRIVER}"].model == "H100"'
    assert devices(run(dra(s), claim("c", request(selectors=(expr,))))) == [("gpu", "gpu-0")]
    assert run(dra(s), claim("c", request(count=2, selectors=(expr,)))).kind is FailureKind.ERROR


def test_all_mode_takes_every_matching_device_and_needs_one() -> None:
    s = node_slice("n1", gpu("a"), gpu("b", model="A100"), gpu("c"))
    expr = f'device.attributes["{DRIVER}"].model == "H100"'
    all_h100 = claim("c", request(mode=AllocationMode.ALL, selectors=(expr,)))
    assert devices(run(dra(s), all_h100)) == [("gpu", "a"), ("gpu", "c")]
    used = InUse(devices=frozenset({(DRIVER, "n1", "c")}))
    assert run(dra(s), all_h100, used=used).kind is FailureKind.UNSCHEDULABLE
    none = claim("c", request(mode=AllocationMode.ALL, selectors=('device.driver == "other"',)))
    assert run(dra(s), none).kind is FailureKind.UNSCHEDULABLE


def test_all_mode_on_an_incomplete_pool_is_an_error() -> None:
    part = node_slice("n1", gpu("a"), count=2)
    result = run(dra(part), claim("c", request(mode=AllocationMode.ALL)))
    assert result == AllocationFailure(kind=FailureKind.ERROR, message=(
        f"claim default/c, request gpu: asks for all devices, but resource pool {DRIVER}/n1 is currently being "
        "updated"))


def test_incomplete_pools_are_not_allocated_from() -> None:
    part = node_slice("n1", gpu("a"), count=2)
    assert run(dra(part), claim()).kind is FailureKind.UNSCHEDULABLE
    other_half = ResourceSlice(name="rest", driver=DRIVER, pool=PoolRef(name="n1", resource_slice_count=2),
                               node_name="n2", devices=(gpu("b"),))
    assert devices(run(dra(part, other_half), claim())) == [("gpu", "a")]  # complete cluster-wide


def test_only_the_newest_generation_counts() -> None:
    old = node_slice("n1", gpu("old"), generation=1, name="s-old")
    new = node_slice("n1", gpu("new"), generation=2, name="s-new")
    assert devices(run(dra(old, new), claim())) == [("gpu", "new")]


def test_duplicate_device_names_make_the_pool_invalid() -> None:
    a = node_slice("n1", gpu("x"), count=2, name="a")
    b = node_slice("n1", gpu("x"), count=2, name="b")
    assert run(dra(a, b), claim()) == AllocationFailure(kind=FailureKind.UNSCHEDULABLE, message=INVALID_POOLS)


def test_selector_slices_serve_matching_nodes_without_pinning_them_to_one() -> None:
    zone = (NodeSelectorTerm(match_expressions=(Requirement(key="zone", operator=SelectorOperator.IN,
                                                            values=("a",)),)),)
    shared = ResourceSlice(name="net", driver=DRIVER, pool=PoolRef(name="fabric"), node_selector=zone,
                           devices=(gpu("nic"),))
    result = run(dra(shared), claim(), labels={"zone": "a"})
    assert isinstance(result, Allocated) and result.allocations[0].node_selector == zone
    assert run(dra(shared), claim(), labels={"zone": "b"}).kind is FailureKind.UNSCHEDULABLE
    everywhere = ResourceSlice(name="all", driver=DRIVER, pool=PoolRef(name="p"), all_nodes=True, devices=(gpu("d"),))
    result = run(dra(everywhere), claim())
    assert isinstance(result, Allocated) and result.allocations[0].node_selector is None


def test_first_available_tries_subrequests_in_order() -> None:
    big = f'device.attributes["{DRIVER}"].model == "B200"'
    fa = first_available("gpu", ("b200", 1, (big,)), ("two-h100", 2, ()))
    assert devices(run(dra(EIGHT), claim("c", fa))) == [("gpu/two-h100", "gpu-0"), ("gpu/two-h100", "gpu-1")]
    s = node_slice("n1", gpu("x", model="B200"))
    assert devices(run(dra(s), claim("c", fa))) == [("gpu/b200", "x")]


def test_first_available_backtracks_when_a_later_request_fails() -> None:
    fa = first_available("a", ("many", 7, ()), ("few", 1, ()))
    result = run(dra(EIGHT), claim("c", fa, request("b", count=6)))
    assert [r for r, _ in devices(result)] == ["a/few"] + ["b"] * 6


def test_match_attribute_across_requests() -> None:
    s = node_slice("n1", gpu("a", numa=0), gpu("b", numa=1), gpu("c", numa=1, index=2))
    c = claim("c", request("x"), request("y"), match=(f"{DRIVER}/numa", ("x", "y")))
    assert devices(run(dra(s), c)) == [("x", "b"), ("y", "c")]


def test_match_attribute_a_device_without_it_fails() -> None:
    s = node_slice("n1", gpu("a"), gpu("b", index=1))
    c = claim("c", request(count=2), match=(f"{DRIVER}/numa", ()))
    assert run(dra(s), c).kind is FailureKind.UNSCHEDULABLE


def test_match_attribute_compares_versions_and_types() -> None:
    s = node_slice("n1", gpu("a", fw=Version("1.2.3")), gpu("b", fw="1.2.3", index=1), gpu("c", fw=Version("1.2.3")))
    c = claim("c", request(count=2), match=(f"{DRIVER}/fw", ()))
    assert [d for _, d in devices(run(dra(s), c))] == ["a", "c"]


def test_distinct_attribute() -> None:
    s = node_slice("n1", gpu("a", numa=0), gpu("b", numa=0, index=1), gpu("c", numa=1, index=2))
    c = claim("c", request("x"), request("y"), distinct=(f"{DRIVER}/numa", ()))
    assert devices(run(dra(s), c)) == [("x", "a"), ("y", "c")]


def test_admin_access_may_use_devices_in_use() -> None:
    used = InUse(devices=frozenset({(DRIVER, "n1", f"gpu-{i}") for i in range(8)}))
    result = run(dra(EIGHT), claim("c", request(admin=True, count=2)), used=used)
    assert isinstance(result, Allocated)
    assert [d.admin_access for d in result.allocations[0].devices] == [True, True]
    assert in_use([_allocated("c", result.allocations[0])]) == InUse()


def test_device_taints_need_a_toleration() -> None:
    taint = DeviceTaint(key="broken", effect=TaintEffect.NO_SCHEDULE)
    s = node_slice("n1", Device(name="t", taints=(taint,)), Device(name="ok"))
    assert devices(run(dra(s), claim())) == [("gpu", "ok")]
    tolerant = DeviceRequest(name="gpu", exactly=ExactDeviceRequest(
        device_class_name="gpu", tolerations=(DeviceToleration(key="broken", operator="Exists"),)))
    assert devices(run(dra(s), claim("c", tolerant))) == [("gpu", "t")]
    harmless = node_slice("n1", Device(name="t", taints=(DeviceTaint(key="k", effect=TaintEffect.NONE),)))
    assert devices(run(dra(harmless), claim())) == [("gpu", "t")]


def test_shared_counters_partition_a_gpu() -> None:
    counters = CounterSet(name="gpu-0", counters={"memory": 80_000})
    def part(name: str, memory: int) -> Device:
        return Device(name=name, consumes_counters=(CounterConsumption(counter_set="gpu-0",
                                                                      counters={"memory": memory}),))
    pool = PoolRef(name="n1", resource_slice_count=2)
    s = ResourceSlice(name="s", driver=DRIVER, pool=pool, node_name="n1",
                      devices=(part("whole", 80_000), part("half-a", 40_000), part("half-b", 40_000)))
    sets = ResourceSlice(name="counters", driver=DRIVER, pool=pool, node_name="n1", shared_counters=(counters,))
    assert [d for _, d in devices(run(dra(s, sets), claim("c", request(count=2))))] == ["half-a", "half-b"]
    used = InUse(devices=frozenset({(DRIVER, "n1", "half-a")}))
    assert [d for _, d in devices(run(dra(s, sets), claim(), used=used))] == ["half-b"]
    assert run(dra(s, sets), claim("c", request(count=2)), used=used).kind is FailureKind.UNSCHEDULABLE
    alone = ResourceSlice(name="s", driver=DRIVER, pool=PoolRef(name="n1"), node_name="n1", devices=s.devices)
    assert run(dra(alone), claim()) == AllocationFailure(kind=FailureKind.UNSCHEDULABLE, message=INVALID_POOLS)


def test_consumable_capacity_shares_a_device() -> None:
    shared = Device(name="s", allow_multiple_allocations=True,
                    capacity={f"{DRIVER}/memory": DeviceCapacity(value_milli=80_000,
                                                                 request_policy=CapacityPolicy(default_milli=10_000))})
    s = node_slice("n1", shared)
    result = run(dra(s), claim("a"), claim("b"))
    assert isinstance(result, Allocated)
    shares = [a.devices[0] for a in result.allocations]
    assert [d.device for d in shares] == ["s", "s"]
    assert all(d.consumed_capacity == {f"{DRIVER}/memory": 10_000} for d in shares)
    assert len({d.share_id for d in shares}) == 2
    held = in_use([_allocated("a", result.allocations[0])])
    assert held.shared == {(DRIVER, "n1", "s"): {f"{DRIVER}/memory": 10_000}}
    seven = InUse(shared={(DRIVER, "n1", "s"): {f"{DRIVER}/memory": 70_000}})
    assert isinstance(run(dra(s), claim("a"), used=seven), Allocated)
    assert run(dra(s), claim("a"), claim("b"), used=seven).kind is FailureKind.UNSCHEDULABLE


def test_more_than_32_devices_is_an_error() -> None:
    result = run(dra(EIGHT), claim("c", request(count=33)))
    assert result == AllocationFailure(kind=FailureKind.ERROR,
                                       message="claim default/c, request gpu: adding 33 devices exceeds the claim "
                                               "limit of 32, with 0 already accounted for")
    second = run(dra(EIGHT), claim("c", request("a", count=30), request("b", count=3)))
    assert isinstance(second, AllocationFailure)
    assert second.message == "claim default/c, request b: adding 3 devices exceeds the claim limit of 32, with 30 " \
        "already accounted for"


def test_in_use_reads_allocated_claims() -> None:
    allocation = Allocation(devices=(AllocatedDevice(request="gpu", driver=DRIVER, pool="n1", device="gpu-3"),))
    assert in_use([_allocated("x", allocation), claim("y")]) == InUse(devices=frozenset({(DRIVER, "n1", "gpu-3")}))


def test_module_allocate_keeps_one_allocator_per_dra() -> None:
    d = dra(EIGHT)
    assert allocate("n1", LABELS, d, [claim()], InUse()) == run(d, claim())


def _allocated(name: str, allocation: Allocation) -> ResourceClaim:
    return replace(claim(name), allocation=allocation)


def test_outcomes_are_kept_per_spec_and_devices_in_use_but_errors_name_each_claim() -> None:
    allocator = Allocator(dra(EIGHT))
    spec_claim = claim("a", request(count=8))
    assert isinstance(allocator.allocate("n1", LABELS, [spec_claim], NOTHING), Allocated)
    one_taken = InUse(devices=frozenset({(DRIVER, "n1", "gpu-0")}))
    assert allocator.allocate("n1", LABELS, [spec_claim], one_taken).kind is FailureKind.UNSCHEDULABLE
    same_spec = replace(spec_claim, name="b")
    assert allocator.allocate("n1", LABELS, [same_spec], one_taken).kind is FailureKind.UNSCHEDULABLE
    other_node_taken = InUse(devices=frozenset({(DRIVER, "n2", "gpu-0")}))
    assert isinstance(allocator.allocate("n1", LABELS, [same_spec], other_node_taken), Allocated)
    broken = request(selectors=('device.attributes["x.com"].y',))
    first = allocator.allocate("n1", LABELS, [claim("x", broken)], NOTHING)
    second = allocator.allocate("n1", LABELS, [replace(claim("x", broken), name="y")], NOTHING)
    assert isinstance(first, AllocationFailure) and isinstance(second, AllocationFailure)
    assert first.message.startswith("claim default/x:") and second.message.startswith("claim default/y:")


def test_a_search_past_its_budget_times_out_as_kube_scheduler_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "STEP_BUDGET", 10_000)
    thirty = node_slice("n1", *(gpu(f"gpu-{i}", index=i) for i in range(30)))
    # Every 10 of 30 devices for x leave 20 for y's 21: kube tries them all (its counts check passes).
    result = run(dra(thirty), claim("c", request("x", count=10), request("y", count=21)))
    assert result == AllocationFailure(kind=FailureKind.ERROR, message=TIMED_OUT)
    assert isinstance(run(dra(thirty), claim("c", request("x", count=10), request("y", count=20))), Allocated)


def test_in_use_plus_and_minus_an_allocation() -> None:
    result = run(dra(EIGHT), claim("c", request(count=2)))
    assert isinstance(result, Allocated)
    held = NOTHING.plus(result.allocations)
    assert held.devices == {(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")}
    assert devices(run(dra(EIGHT), claim("d", request(count=2)), used=held)) == [("gpu", "gpu-2"), ("gpu", "gpu-3")]
    assert held.minus(result.allocations) == NOTHING


def test_a_constraint_naming_a_subrequest_applies_to_it_only() -> None:
    s = node_slice("n1", gpu("a", numa=0), gpu("b", numa=1, index=1), gpu("c", numa=1, index=2))
    fa = first_available("x", ("one", 1, ()))
    c = claim("c", fa, request("y"), match=(f"{DRIVER}/numa", ("x/one", "y")))
    assert devices(run(dra(s), c)) == [("x/one", "b"), ("y", "c")]
    unnamed = claim("c", fa, request("y"), match=(f"{DRIVER}/numa", ("x/other", "y")))
    assert devices(run(dra(s), unnamed)) == [("x/one", "a"), ("y", "b")]


def test_distinct_attribute_compares_every_device_added() -> None:
    s = node_slice("n1", gpu("a", numa=0), gpu("b", numa=1, index=1), gpu("c", numa=0, index=2))
    assert run(dra(s), claim("c", request("x", count=3), distinct=(f"{DRIVER}/numa", ()))).kind is \
        FailureKind.UNSCHEDULABLE
    assert [d for _, d in devices(run(dra(s), claim("c", request("x", count=2),
                                                    distinct=(f"{DRIVER}/numa", ()))))] == ["a", "b"]


def test_node_selectors_of_the_allocated_slices_are_merged() -> None:
    def term(key: str) -> tuple[NodeSelectorTerm, ...]:
        return (NodeSelectorTerm(match_expressions=(Requirement(key=key, operator=SelectorOperator.EXISTS),)),)
    a = ResourceSlice(name="a", driver=DRIVER, pool=PoolRef(name="p"), node_selector=term("rack"),
                      devices=(gpu("x"),))
    b = ResourceSlice(name="b", driver="nic.example.com", pool=PoolRef(name="q"), node_selector=term("fabric"),
                      devices=(Device(name="y"),))
    nic = DeviceClass(name="nic", selectors=('device.driver == "nic.example.com"',))
    result = run(dra(a, b, classes=(GPU_CLASS, nic)), claim("c", request("g"), request("n", device_class="nic")),
                 labels={"rack": "1", "fabric": "1"})
    assert isinstance(result, Allocated)
    selector = result.allocations[0].node_selector
    assert selector is not None and [r.key for r in selector[0].match_expressions] == ["rack", "fabric"]


def test_counters_of_a_device_refused_for_its_taint_are_given_back() -> None:
    counters = CounterSet(name="gpu-0", counters={"memory": 80_000})
    taint = DeviceTaint(key="broken", effect=TaintEffect.NO_SCHEDULE)
    whole = [CounterConsumption(counter_set="gpu-0", counters={"memory": 80_000})]
    pool = PoolRef(name="n1", resource_slice_count=2)
    s = ResourceSlice(name="s", driver=DRIVER, pool=pool, node_name="n1", devices=(
        Device(name="tainted", consumes_counters=tuple(whole), taints=(taint,)),
        Device(name="clean", consumes_counters=tuple(whole))))
    sets = ResourceSlice(name="counters", driver=DRIVER, pool=pool, node_name="n1", shared_counters=(counters,))
    assert devices(run(dra(s, sets), claim())) == [("gpu", "clean")]


def test_a_timed_out_search_names_its_node_in_the_filters_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """DynamicResources' Filter words a timeout `node <name>: timed out trying to allocate devices` (the allocator
    itself only says it timed out)."""
    from gpuscale.engine.whatif.dra import DraState, PodDevices
    from gpuscale.model.node import Node
    from gpuscale.model.resources import Resources

    monkeypatch.setattr(search_module, "STEP_BUDGET", 10_000)
    thirty = dra(node_slice("n1", *(gpu(f"gpu-{i}", index=i) for i in range(30))))
    hard = claim("c", request("x", count=10), request("y", count=21))
    state = DraState.of(thirty, (), {}, {}, ())
    outcome = state.verdict(PodDevices(claims=(hard,)), Node(name="n1", labels=LABELS, allocatable=Resources()))
    assert outcome == AllocationFailure(kind=FailureKind.ERROR, message=f"node n1: {TIMED_OUT}")
