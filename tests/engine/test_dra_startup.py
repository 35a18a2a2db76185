"""A node of a pool that declares DRA ResourceSlices (`resource_slices` in the pool config) is upcoming until its
drivers publish them, as a node waits for its GPUs to register: Ready without its slices it is READY (counts as its
pool's template, so pods wait for it instead of ordering a second node), and it times out after
`max_gpu_init_time` naming the drivers whose slices are missing."""

from __future__ import annotations

from dataclasses import replace

from gpuscale.config import parse_config
from gpuscale.engine.decide import decide
from gpuscale.engine.nodes import NodePhase, awaiting_slices, phase, slices_published
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.dra import Dra, PoolRef, ResourceSlice
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from tests.fakes import T0, node_of, owned_pod

DRIVER = "gpu.nvidia.com"
CONFIG = {"pools": [{
    "name": "h100", "max_size": 4, "allocatable": {"cpu": 96, "memory": "1Ti"},
    "resource_slices": [{"driver": DRIVER, "count": 8, "device": {
        "name": "gpu-{index}",
        "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": "{index}"}},
        "capacity": {"memory": "80Gi"}}}]}]}
H100: NodePool = parse_config(CONFIG).pools[0]


def _node(name: str = "h100-1") -> Node:
    return replace(node_of(H100, name, created_s=T0 - 60), ready_since_s=T0 - 60)


def _published(node: str, count: int = 1, have: int = 1) -> Dra:
    """`have` of the `count` slices of the node's pool."""
    return Dra(slices=tuple(ResourceSlice(name=f"{node}-{i}", driver=DRIVER, node_name=node,
                                          pool=PoolRef(name=node, generation=1, resource_slice_count=count))
                            for i in range(have)))


def _decide(node: Node, dra: Dra, now: float = T0, store: IncrementalStore | None = None) -> Plan:
    pods = (owned_pod("train-0", namespace="ml", cpu=8000, owner="Job"),)
    return decide(Snapshot(cluster=Cluster(nodes=(node,), pods=pods, dra=dra)), (H100,), EngineState(), Policy(),
                  now, store)


def test_template_slices_are_the_pools_devices_named_for_the_node() -> None:
    (one,) = H100.template_slices("h100-7")
    assert (one.name, one.node_name, one.pool) == (f"h100-7-{DRIVER}", "h100-7", PoolRef(name="h100-7"))
    assert [d.name for d in one.devices] == [f"gpu-{i}" for i in range(8)]
    assert one.devices[3].attributes == {f"{DRIVER}/productName": "NVIDIA H100 80GB HBM3", f"{DRIVER}/index": 3}
    assert one.devices[0].capacity[f"{DRIVER}/memory"].value_milli == 80 * 2**30 * 1000
    assert H100.dra_drivers == {DRIVER}


def test_a_ready_node_without_its_slices_is_starting_and_usable_once_its_pool_is_complete() -> None:
    node = _node()
    assert not slices_published(node.name, H100, Dra())
    assert awaiting_slices((node,), {}, {"h100": H100}, Dra()) == {node.name}
    assert phase(node, H100, slices=False) is NodePhase.READY
    assert not slices_published(node.name, H100, _published(node.name, count=2, have=1))  # incomplete pool
    assert not slices_published(node.name, H100, _published("other"))  # another node's
    assert slices_published(node.name, H100, _published(node.name, count=2, have=2))
    assert awaiting_slices((node,), {}, {"h100": H100}, _published(node.name)) == frozenset()
    assert awaiting_slices((replace(node, ready=False),), {}, {"h100": H100}, Dra()) == frozenset()  # REGISTERED


def test_no_second_node_while_the_slices_are_missing_and_a_time_out_names_them() -> None:
    plan = _decide(_node(), Dra())
    assert plan.scale_up == ()
    assert {r.code for v in plan.covered for r in v.reasons} == {ReasonCode.FITS_UPCOMING}
    late = _decide(_node(), Dra(), now=T0 + 3600)
    (item,) = late.timed_out
    assert item.reasons[0].code is ReasonCode.GPU_INIT_TIMEOUT
    assert "ResourceSlices not published" in item.reasons[0].message
    assert f"still lacks: ResourceSlices published ({DRIVER})" in item.reasons[0].message
    assert _decide(_node(), _published("h100-1"), now=T0 + 3600).timed_out == ()


def test_memo_and_no_memo_agree_when_only_the_slices_change() -> None:
    memo = IncrementalStore()
    node = _node()  # the very same node object throughout: only the snapshot's slices change
    for dra in (Dra(), Dra(), _published(node.name), _published(node.name, count=2, have=1), Dra(),
                _published(node.name)):
        late = T0 + 3600
        with_memo = _decide(node, dra, now=late, store=memo)
        without = _decide(node, dra, now=late)
        assert with_memo.timed_out == without.timed_out
        assert with_memo.scale_up == without.scale_up
        assert with_memo.covered == without.covered


def _claiming(product: str) -> Cluster:
    """A pending pod whose template asks one GPU of `product`, its DeviceClass and template, no node at all."""
    from gpuscale.kube.convert import cluster_from_objects

    selector = f'device.attributes["{DRIVER}"].productName == "{product}"'
    return cluster_from_objects([
        {"kind": "DeviceClass", "apiVersion": "resource.k8s.io/v1", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
        {"kind": "ResourceClaimTemplate", "apiVersion": "resource.k8s.io/v1",
         "metadata": {"name": "one", "namespace": "ml"},
         "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
             "deviceClassName": "gpu", "selectors": [{"cel": {"expression": selector}}]}}]}}}},
        {"kind": "Pod", "metadata": {"name": "train", "namespace": "ml", "uid": "u1"},
         "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}],
                  "containers": [{"name": "c", "resources": {"requests": {"cpu": "8"}}}]},
         "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable"}]}},
    ])


def test_a_claim_scales_the_pool_whose_template_devices_satisfy_it_from_zero() -> None:
    a100 = parse_config({"pools": [{**CONFIG["pools"][0], "name": "a100", "resource_slices": [
        {"driver": DRIVER, "count": 8, "device": {"name": "gpu-{index}", "attributes": {
            "productName": {"string": "NVIDIA A100-SXM4-40GB"}}}}]}]}).pools[0]
    pools = (a100, H100)
    plan = decide(Snapshot(cluster=_claiming("NVIDIA H100 80GB HBM3")), pools, EngineState(), Policy(), T0)
    assert [(s.pool, s.nodes) for s in plan.scale_up] == [("h100", 1)]
    nowhere = decide(Snapshot(cluster=_claiming("NVIDIA B200")), pools, EngineState(), Policy(), T0)
    assert nowhere.scale_up == () and [v.pod for v in nowhere.unplaceable] == ["ml/train"]


def test_a_claim_no_template_satisfies_says_so_in_the_schedulers_words() -> None:
    """As a taint or a GPU count a pool's node would not satisfy: the pool named with DynamicResources' words on its
    node, not its limits (which leave room for three more nodes here)."""
    nowhere = decide(Snapshot(cluster=_claiming("NVIDIA B200")), (H100,), EngineState(), Policy(), T0)
    (verdict,) = nowhere.unplaceable
    assert [(r.code, r.message) for r in verdict.reasons] == [
        (ReasonCode.NO_POOL_FITS, "no scale-up: h100: cannot allocate all claims")]
    from gpuscale.engine.fit import explain_fit

    (fit,) = explain_fit(_claiming("NVIDIA B200"), (H100,))
    assert fit.pools == {"h100": "cannot allocate all claims"}  # `gpuscale fit` / `explain` say the same
    bare = replace(H100, name="bare", resource_slices=())  # declares no devices: its nodes publish none
    both = decide(Snapshot(cluster=_claiming("NVIDIA H100 80GB HBM3")), (bare, H100), EngineState(), Policy(), T0)
    assert ([(s.pool, s.nodes) for s in both.scale_up], both.unplaceable) == ([("h100", 1)], ())
    plan = decide(Snapshot(cluster=_claiming("NVIDIA H100 80GB HBM3")), (bare,), EngineState(), Policy(), T0)
    assert [r.message for v in plan.unplaceable for r in v.reasons] == ["no scale-up: bare: cannot allocate all claims"]


def test_a_claims_runtime_error_on_a_pools_devices_is_the_schedulers_error() -> None:
    """A selector that fails at run time on the pool's devices (an attribute they lack, read without `has`): the
    attempt's error as kube-scheduler words it, naming the claim and the device."""
    cluster = _claiming("x")
    (template,) = cluster.dra.templates
    broken = replace(template.spec.requests[0].exactly, selectors=(f'device.attributes["{DRIVER}"].nosuch == "x"',))
    spec = replace(template.spec, requests=(replace(template.spec.requests[0], exactly=broken),))
    cluster = replace(cluster, dra=replace(cluster.dra, templates=(replace(template, spec=spec),)))
    (verdict,) = decide(Snapshot(cluster=cluster), (H100,), EngineState(), Policy(), T0).unplaceable
    (reason,) = verdict.reasons
    assert reason.message == (
        'no scale-up: h100: running "DynamicResources" filter plugin: claim ml/train-gpu: selector #0 on device '
        f"{DRIVER}/template-h100/gpu-0: CEL runtime error: no such key: nosuch. consider using CEL optional chaining "
        "(.? followed by orValue()) or guarding the check with has() for optional fields"), reason


def test_status_and_provisioning_requests_see_a_node_without_its_slices_as_starting() -> None:
    from gpuscale.engine.provreq import usable_table
    from gpuscale.kube.status import ReportedState, node_states

    for dra, state, rows in ((Dra(), ReportedState.UNREADY_GPU, 0), (_published("h100-1"), ReportedState.USABLE, 1)):
        snapshot = Snapshot(cluster=Cluster(nodes=(_node(),), dra=dra))
        assert node_states(snapshot, {"h100": H100})["h100"] == {state: 1}
        assert len(usable_table(snapshot.cluster, {"h100": H100}, {}).nodes) == rows
