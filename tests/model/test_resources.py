"""`gpuscale.model.resources`: immutable resource vectors in base units; any resource name is kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model.resources import Resources, is_gpu_resource


def test_of_merges_sorts_and_drops_zeros() -> None:
    r = Resources.of({"memory": 5, "cpu": 0}, cpu=100, memory=1)
    assert r.items == (("cpu", 100), ("memory", 6))
    assert Resources.of([("b", 1), ("a", 2), ("b", 3)]).items == (("a", 2), ("b", 4))
    assert not Resources.of({"cpu": 0})
    assert Resources.of() == Resources()


@pytest.mark.parametrize("name", ["nvidia.com/mig-1g.10gb", "amd.com/gpu", "example.com/fpga", "hugepages-2Mi",
                                  "unknown"])
def test_every_resource_name_is_kept_through_arithmetic(name: str) -> None:
    r = Resources.of({name: 2, "cpu": 10})
    assert r.get(name) == 2
    assert (r + r).get(name) == 4
    assert (r - Resources.of({name: 1})).get(name) == 1
    assert r.scale(3).get(name) == 6
    assert r.max(Resources.of({name: 5})).get(name) == 5
    assert name in set(r.names())
    assert r.as_dict() == {name: 2, "cpu": 10}


def test_subtraction_may_go_negative_and_drops_zeros() -> None:
    assert (Resources.of(cpu=1) - Resources.of(cpu=3)).get("cpu") == -2
    assert (Resources.of(cpu=1) - Resources.of(cpu=1)) == Resources()
    assert Resources.of(cpu=5).scale(0) == Resources()


@pytest.mark.parametrize(("request_", "free", "short"), [
    ({"cpu": 100}, {"cpu": 100}, ()),
    ({"cpu": 101}, {"cpu": 100}, ("cpu",)),
    ({"cpu": 1, "nvidia.com/gpu": 1}, {"cpu": 8}, ("nvidia.com/gpu",)),  # a resource the node lacks is short
    ({"cpu": 1, "memory": 10}, {"cpu": -5, "memory": 5}, ("cpu", "memory")),  # overcommitted node
    ({}, {}, ()),
    ({"example.com/foo": 1}, {"example.com/foo": 1}, ()),
])
def test_shortfalls(request_: dict[str, int], free: dict[str, int], short: tuple[str, ...]) -> None:
    assert Resources.of(request_).shortfalls(Resources.of(free)) == short


@pytest.mark.parametrize(("name", "gpu"), [
    ("nvidia.com/gpu", True), ("nvidia.com/mig-1g.10gb", True), ("nvidia.com/mig-3g.40gb", True),
    ("amd.com/gpu", True), ("gpu.intel.com/i915", True), ("habana.ai/gaudi", True),
    ("cpu", False), ("memory", False), ("example.com/fpga", False), ("gpuscale.io/gpu-milli", False),
])
def test_is_gpu_resource(name: str, gpu: bool) -> None:
    assert is_gpu_resource(name) is gpu


def test_gpu_count_sums_every_gpu_name() -> None:
    r = Resources.of({"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 3, "amd.com/gpu": 1, "cpu": 1000})
    assert r.gpu_count() == 6


_vectors = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x.io/y"]),
                           st.integers(min_value=-100, max_value=100)).map(Resources.of)
_requests = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x.io/y"]),
                            st.integers(min_value=0, max_value=100)).map(Resources.of)


@given(_vectors, _vectors)
def test_add_then_subtract_is_identity(a: Resources, b: Resources) -> None:
    assert (a + b) - b == a
    assert a + b == b + a


@given(_requests, _requests)
def test_max_is_elementwise_on_requests(a: Resources, b: Resources) -> None:
    m = a.max(b)
    assert m == b.max(a)
    for name in {*a.names(), *b.names()}:
        assert m.get(name) == max(a.get(name), b.get(name))
