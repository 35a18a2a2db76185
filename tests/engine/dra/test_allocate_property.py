"""Property: the allocator finds an allocation exactly when one exists, as a brute-force search over device subsets
says (small nodes: up to 6 devices, 2 claims of up to 2 requests, exact counts, "All" devices, `firstAvailable`,
in-use devices and a `matchAttribute` constraint); and what it returns is an allocation. A claim asking "All" devices
under a constraint its devices break is an error in kube (the devices are given, not chosen): the property expects
that error where no allocation exists."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpuscale.engine.dra.allocate import Allocated, Allocator, FailureKind, InUse
from gpuscale.model.dra import AllocationMode, Device, DeviceRequest, Dra, ResourceClaim
from tests.engine.dra.builders import DRIVER, GPU_CLASS, claim, first_available, gpu, node_slice, request

NO_LABELS: dict[str, str] = {}
"""One labels object: the allocator keeps a node's pools per labels object."""
MODEL = f'device.attributes["{DRIVER}"].model == "%s"'
NUMA = f"{DRIVER}/numa"


@st.composite
def devices(draw: st.DrawFn) -> tuple[Device, ...]:
    n = draw(st.integers(0, 6))
    found = []
    for i in range(n):
        numa = draw(st.sampled_from([0, 1, None]))
        extra = {} if numa is None else {"numa": numa}
        found.append(gpu(f"d{i}", model=draw(st.sampled_from(["A", "B"])), index=i, **extra))
    return tuple(found)


def selectors(draw: st.DrawFn) -> tuple[str, ...]:
    model = draw(st.sampled_from([None, "A", "B"]))
    return () if model is None else (MODEL % model,)


@st.composite
def requests(draw: st.DrawFn, name: str) -> DeviceRequest:
    kind = draw(st.sampled_from(["exact", "all", "first"]))
    if kind == "exact":
        return request(name, count=draw(st.integers(1, 3)), selectors=selectors(draw))
    if kind == "all":
        return request(name, mode=AllocationMode.ALL, selectors=selectors(draw))
    subs = [(f"s{i}", draw(st.integers(1, 3)), selectors(draw)) for i in range(draw(st.integers(1, 2)))]
    return first_available(name, *subs)


@st.composite
def claims(draw: st.DrawFn) -> list[ResourceClaim]:
    found = []
    for c in range(draw(st.integers(1, 2))):
        reqs = [draw(requests(f"r{i}")) for i in range(draw(st.integers(1, 2)))]
        match = None
        if draw(st.booleans()):
            names = draw(st.sampled_from([(), (reqs[0].name,), tuple(r.name for r in reqs)]))
            match = (NUMA, names)
        found.append(claim(f"c{c}", *reqs, match=match))
    return found


def _selected(device: Device, selector: tuple[str, ...]) -> bool:
    return all(device.attributes[f"{DRIVER}/model"] == s.split('"')[-2] for s in selector)


ALL = -1
"""The count of a request for all matching devices."""


def _alternatives(r: DeviceRequest) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """(result name, base name, count, selectors) per way to satisfy the request."""
    if r.exactly is not None:
        count = ALL if r.exactly.allocation_mode is AllocationMode.ALL else r.exactly.count
        return [(r.name, r.name, count, r.exactly.selectors)]
    return [(f"{r.name}/{s.name}", r.name, s.count, s.selectors) for s in r.first_available]


Taken = list[list[tuple[str, Device]]]


def allocations(pod_claims: Sequence[ResourceClaim], node: Sequence[Device], free: Sequence[Device]) -> Iterator[Taken]:
    """Every assignment of distinct free devices to every request of every claim that keeps selectors and
    constraints ("All": every matching device of the node, at least one, all free)."""
    requests_ = [(ci, r) for ci, c in enumerate(pod_claims) for r in c.spec.requests]
    for choice in itertools.product(*(_alternatives(r) for _, r in requests_)):
        yield from _assign(pod_claims, requests_, list(choice), (node, free), 0, [[] for _ in pod_claims], set())


def _subsets(node: Sequence[Device], free: Sequence[Device], used: set[str], count: int,
             selector: tuple[str, ...]) -> Iterator[tuple[Device, ...]]:
    if count == ALL:
        every = tuple(d for d in node if _selected(d, selector))
        if every and all(d in free and d.name not in used for d in every):
            yield every
        return
    eligible = [d for d in free if d.name not in used and _selected(d, selector)]
    yield from itertools.combinations(eligible, count)


def _assign(pod_claims, requests_, choice, devices_, k, taken, used):  # type: ignore[no-untyped-def]
    if k == len(requests_):
        if all(_keeps(c, taken[i]) for i, c in enumerate(pod_claims)):
            yield [list(t) for t in taken]
        return
    ci = requests_[k][0]
    name, _, count, selector = choice[k]
    for subset in _subsets(*devices_, used, count, selector):
        taken[ci].extend((name, d) for d in subset)
        yield from _assign(pod_claims, requests_, choice, devices_, k + 1, taken, used | {d.name for d in subset})
        del taken[ci][len(taken[ci]) - len(subset):]


def _keeps(c: ResourceClaim, taken: list[tuple[str, Device]]) -> bool:
    for constraint in c.spec.constraints:
        names = set(constraint.requests)
        values = [d.attributes.get(NUMA) for name, d in taken if not names or name.split("/")[0] in names]
        if any(v is None for v in values) or len(set(values)) > 1:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(devices(), claims(), st.data())
def test_allocates_iff_brute_force_finds_one(node_devices: tuple[Device, ...], pod_claims: list[ResourceClaim],
                                             data: st.DataObject) -> None:
    used_names = data.draw(st.sets(st.sampled_from([d.name for d in node_devices])) if node_devices else st.just(set()))
    dra = Dra(slices=(node_slice("n1", *node_devices),), classes=(GPU_CLASS,))
    used = InUse(devices=frozenset((DRIVER, "n1", n) for n in used_names))
    free = [d for d in node_devices if d.name not in used_names]
    exists = next(allocations(pod_claims, node_devices, free), None) is not None
    result = Allocator(dra).allocate("n1", {}, pod_claims, used)
    event("an allocation exists" if exists else "none exists")
    if not exists:
        assert not isinstance(result, Allocated)
        all_under_constraint = any(c.spec.constraints and any(
            r.exactly is not None and r.exactly.allocation_mode is AllocationMode.ALL for r in c.spec.requests)
            for c in pod_claims)
        assert result.kind is FailureKind.UNSCHEDULABLE or all_under_constraint, result
        return
    assert isinstance(result, Allocated), result
    by_name = {d.name: d for d in node_devices}
    got = [[(r.request, by_name[r.device]) for r in a.devices] for a in result.allocations]
    names = [d.name for taken in got for _, d in taken]
    assert len(names) == len(set(names)) and not set(names) & used_names
    for c, taken in zip(pod_claims, got, strict=True):
        assert _keeps(c, taken)
        for r in c.spec.requests:
            mine = [(n, d) for n, d in taken if n.split("/")[0] == r.name]
            assert any((len(mine) == count or count == ALL) and all(n == name and _selected(d, sel) for n, d in mine)
                       for name, _, count, sel in _alternatives(r))


@settings(max_examples=100, deadline=None)
@given(devices(), st.lists(claims(), min_size=1, max_size=3), st.data())
def test_a_kept_outcome_is_the_outcome(node_devices: tuple[Device, ...], pods: list[list[ResourceClaim]],
                                       data: st.DataObject) -> None:
    """One allocator asked about several pods and in-use states answers as a fresh allocator does each time."""
    dra = Dra(slices=(node_slice("n1", *node_devices),), classes=(GPU_CLASS,))
    kept = Allocator(dra)
    names = [d.name for d in node_devices]
    for _ in range(6):
        pod = data.draw(st.sampled_from(pods))
        used_names = data.draw(st.sets(st.sampled_from(names)) if names else st.just(set()))
        used = InUse(devices=frozenset((DRIVER, "n1", n) for n in used_names))
        assert kept.allocate("n1", NO_LABELS, pod, used) == Allocator(dra).allocate("n1", NO_LABELS, pod, used)
