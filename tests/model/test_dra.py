"""model/dra.py: the index (lookups, slices per node, pools and their completeness), semantic versions, tolerations."""

from __future__ import annotations

import pickle

from gpuscale.model.cluster import Cluster
from gpuscale.model.dra import (
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceTaint,
    DeviceToleration,
    Dra,
    PodResourceClaim,
    PoolRef,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    TaintEffect,
    Version,
    claim_from_template,
)
from gpuscale.model.pod import Pod, SchedulingConstraints, uses_devices
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator

GPU = "gpu.example.com"


def _slice(name: str, *, pool: str = "p", generation: int = 0, count: int = 1, node: str | None = None,
           **kw: object) -> ResourceSlice:
    return ResourceSlice(name=name, driver=GPU, pool=PoolRef(name=pool, generation=generation,
                                                             resource_slice_count=count),
                         node_name=node, devices=(Device(name=f"{name}-gpu0"),), **kw)  # type: ignore[arg-type]


def _zone(zone: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_expressions=(
        Requirement(key="zone", operator=SelectorOperator.IN, values=(zone,)),)),)


def test_empty_dra_is_falsy_and_finds_nothing() -> None:
    dra = Dra()
    assert not dra
    assert dra.device_class("gpu") is None and dra.claim("ns/c") is None and dra.template("ns/t") is None
    assert dra.node_slices("n1") == () and dra.pool(GPU, "p") is None
    assert Cluster().dra == dra


def test_lookups_by_name_and_namespace() -> None:
    claim = ResourceClaim(namespace="ns", name="c")
    template = ResourceClaimTemplate(namespace="ns", name="t")
    dra = Dra(classes=(DeviceClass(name="gpu", selectors=("true",)),), claims=(claim,), templates=(template,))
    assert dra
    assert dra.device_class("gpu") == DeviceClass(name="gpu", selectors=("true",))
    assert dra.claim("ns/c") is claim and dra.claim("other/c") is None
    assert dra.template("ns/t") is template and dra.template("ns/c") is None


def test_slices_per_node_and_by_selector() -> None:
    own_b, own_a = _slice("b", node="n1", pool="p1"), _slice("a", node="n1", pool="p2")
    other = _slice("c", node="n2", pool="p3")
    everywhere = _slice("d", pool="p4", all_nodes=True)
    zoned = _slice("e", pool="p5", node_selector=_zone("z1"))
    per_device = ResourceSlice(name="f", driver=GPU, pool=PoolRef(name="p6"), per_device_node_selection=True,
                               devices=(Device(name="x", node_name="n2"), Device(name="y", node_selector=_zone("z2"))))
    dra = Dra(slices=(own_b, other, everywhere, zoned, per_device, own_a))
    assert dra.node_slices("n1") == (own_a, own_b)  # by slice name, as the allocator sorts them
    assert dra.selected_slices() == (everywhere, zoned, per_device)
    assert dra.slices_for_node("n1", {"zone": "z1"}) == (own_a, own_b, everywhere, zoned)
    assert dra.slices_for_node("n2", {"zone": "z3"}) == (other, everywhere, per_device)
    assert dra.slices_for_node("n3", {"zone": "z2"}) == (everywhere, per_device)
    assert dra.slices_for_node("n3", {}) == (everywhere,)


def test_a_slice_naming_no_node_serves_none() -> None:
    assert not _slice("a").serves("n1", {})
    assert not ResourceSlice(name="s", driver=GPU, pool=PoolRef(name="p"), node_selector=()).serves("n1", {})


def test_pool_completeness_counts_the_newest_generation_only() -> None:
    old = [_slice(f"old{i}", generation=1, count=3, node="n1") for i in range(3)]
    new = [_slice(f"new{i}", generation=2, count=2, node="n1") for i in range(1)]
    dra = Dra(slices=(*old, *new))
    pool = dra.pool(GPU, "p")
    assert pool is not None and pool.generation == 2 and pool.slices == tuple(new) and not pool.complete
    done = Dra(slices=(*old, *new, _slice("new1", generation=2, count=2, node="n2")))
    pool = done.pool(GPU, "p")
    assert pool is not None and pool.complete and [s.name for s in pool.slices] == ["new0", "new1"]
    only_old = Dra(slices=tuple(old)).pool(GPU, "p")
    assert only_old is not None and only_old.complete and only_old.generation == 1


def test_pools_are_per_driver() -> None:
    a = _slice("a", node="n1")
    b = ResourceSlice(name="b", driver="nic.example.com", pool=PoolRef(name="p", resource_slice_count=2),
                      node_name="n1")
    dra = Dra(slices=(a, b))
    ours, theirs = dra.pool(GPU, "p"), dra.pool("nic.example.com", "p")
    assert ours is not None and ours.complete
    assert theirs is not None and not theirs.complete


def test_semantic_versions_order_by_precedence() -> None:
    assert Version.parse("v1.2.3") is None and Version.parse("1.2") is None and Version.parse("01.2.3") is None
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
               "1.0.0-rc.1", "1.0.0", "1.2.0", "1.10.0", "2.0.0"]
    versions = [Version.parse(text) for text in ordered]
    assert all(v is not None for v in versions)
    assert sorted(reversed(versions)) == versions  # type: ignore[type-var]
    assert Version("1.0.0+build.1") == Version("1.0.0") and hash(Version("1.0.0+x")) == hash(Version("1.0.0"))
    assert Version("1.0.0") != "1.0.0"


def test_device_tolerations() -> None:
    taint = DeviceTaint(key="k", value="v", effect=TaintEffect.NO_SCHEDULE)
    assert DeviceToleration(key="k", value="v").tolerates(taint)
    assert DeviceToleration(key="k", operator="Exists").tolerates(taint)
    assert DeviceToleration(operator="Exists").tolerates(taint)
    assert not DeviceToleration(key="k", value="w").tolerates(taint)
    assert not DeviceToleration(key="k", operator="Exists", effect="NoExecute").tolerates(taint)
    assert DeviceToleration(key="k", operator="Exists", effect="NoSchedule").tolerates(taint)


def test_claim_from_template_is_owned_by_the_pod() -> None:
    template = ResourceClaimTemplate(namespace="ns", name="t", spec=ClaimSpec())
    claim = claim_from_template(template, "pod", "uid-1", "gpu")
    assert claim.key == "ns/pod-gpu" and claim.owner_pod_uid == "uid-1" and claim.allocation is None


def test_pods_with_resource_claims() -> None:
    refs = (PodResourceClaim(name="gpu", template_name="t"),)
    pod = Pod(namespace="ns", name="p", requests=Resources(),
              constraints=SchedulingConstraints(resource_claims=refs), claim_statuses={"gpu": "p-gpu-x1"})
    plain = Pod(namespace="ns", name="q", requests=Resources())
    assert uses_devices(pod) and not uses_devices(plain)
    assert Cluster(pods=(pod,)).index().uses_devices and not Cluster(pods=(plain,)).index().uses_devices
    assert pod.constraints != plain.constraints and hash(pod.constraints) != hash(plain.constraints)
    copy = pickle.loads(pickle.dumps(pod.constraints))
    assert copy == pod.constraints and copy.resource_claims == refs
