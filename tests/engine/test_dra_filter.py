"""DynamicResources on the what-if (`whatif.dra`, `filters.DynamicResources`): PreFilter rejections in
kube-scheduler's words, claims allocated per row beside the devices in use, claims allocated in one what-if counting
for each other, shared claims pinning their users, template rows taking their pool's declared slices, scale-up from
zero and scale-down releasing the claims of the pods it moves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuscale.config import parse_config
from gpuscale.engine.decide import decide
from gpuscale.engine.fit import explain_fit
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.cluster import Cluster
from gpuscale.model.dra import (
    AllocatedDevice,
    Allocation,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceRequest,
    Dra,
    ExactDeviceRequest,
    PodResourceClaim,
    PoolRef,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator
from tests.builders import make_node, make_pod
from tests.engine.test_scaledown import node as sd_node
from tests.engine.test_scaledown import pod as sd_pod
from tests.engine.test_scaledown import removed, run
from tests.fakes import T0, owned_pod

DRIVER = "gpu.example.com"
GPU_CLASS = DeviceClass(name="gpu", selectors=(f"device.driver == '{DRIVER}'",))
ONE_GPU = ClaimSpec(requests=(DeviceRequest(name="gpu", exactly=ExactDeviceRequest(device_class_name="gpu")),))
TEMPLATE = ResourceClaimTemplate(namespace="default", name="one-gpu", spec=ONE_GPU)


def gpus(node: str, count: int) -> ResourceSlice:
    return ResourceSlice(name=f"{node}-gpus", driver=DRIVER, pool=PoolRef(name=node), node_name=node,
                         devices=tuple(Device(name=f"gpu-{i}") for i in range(count)))


def with_template(p: Pod, entry: str = "gpu", template: str = "one-gpu") -> Pod:
    ref = PodResourceClaim(name=entry, template_name=template)
    return replace(p, constraints=replace(p.constraints, resource_claims=(ref,)))


def with_claim(p: Pod, claim: str) -> Pod:
    ref = PodResourceClaim(name="shared", claim_name=claim)
    return replace(p, constraints=replace(p.constraints, resource_claims=(ref,)))


def on_node(node: str, device: str = "gpu-0") -> Allocation:
    return Allocation(devices=(AllocatedDevice(request="gpu", driver=DRIVER, pool=node, device=device),),
                      node_selector=(NodeSelectorTerm(match_fields=(Requirement(
                          key="metadata.name", operator=SelectorOperator.IN, values=(node,)),)),))


def table_of(nodes: list[Node], dra: Dra, placed: tuple[Pod, ...] = ()):  # type: ignore[no-untyped-def]
    table = whatif_of(nodes, [n.allocatable for n in nodes], placed)
    by_node: dict[str, list[Pod]] = {}
    for p in placed:
        by_node.setdefault(p.node_name or "", []).append(p)
    table.dra = DraState.of(dra, nodes, by_node, {}, [False] * len(nodes))
    return table


def test_a_pod_fits_where_its_claim_can_be_allocated_and_the_others_say_why_not() -> None:
    nodes = (make_node("a"), make_node("b"))
    dra = Dra(slices=(gpus("a", 1),), classes=(GPU_CLASS,), templates=(TEMPLATE,))
    (fit,) = explain_fit(Cluster(nodes=nodes, pods=(with_template(make_pod("p")),), dra=dra))
    assert fit.fits == ("a",)
    bare = explain_fit(Cluster(nodes=nodes[1:], pods=(with_template(make_pod("p")),), dra=dra))[0]
    assert bare.fits == () and bare.reasons == {"cannot allocate all claims": 1}
    assert bare.message == "0/1 nodes are available: 1 cannot allocate all claims."


def test_prefilter_rejections_are_said_once_in_kube_schedulers_words() -> None:
    nodes = (make_node("a"), make_node("b"))
    cases = [
        (with_template(make_pod("p"), template="missing"), 'pod "default/p": ResourceClaim not created yet'),
        (with_claim(make_pod("p"), "nope"), 'could not find ResourceClaim "default/nope"'),
        (replace(with_template(make_pod("p")), claim_statuses={"gpu": "p-gpu-x"}),
         'could not find ResourceClaim "default/p-gpu-x"'),
    ]
    other = ResourceClaim(namespace="default", name="theirs", spec=ONE_GPU, owner_pod_uid="someone-else")
    gone = ResourceClaim(namespace="default", name="gone", spec=ONE_GPU, deleting=True)
    no_class = ResourceClaim(namespace="default", name="odd", spec=ClaimSpec(requests=(DeviceRequest(
        name="gpu", exactly=ExactDeviceRequest(device_class_name="tpu")),)))
    cases += [
        (replace(with_template(make_pod("p")), uid="u1", claim_statuses={"gpu": "theirs"}),
         "ResourceClaim default/theirs was not created for Pod default/p (Pod is not owner)"),
        (with_claim(make_pod("p"), "gone"), 'resourceclaim "gone" is being deleted'),
        (with_claim(make_pod("p"), "odd"), "request gpu: device class tpu does not exist"),
    ]
    dra = Dra(slices=(gpus("a", 2),), classes=(GPU_CLASS,), templates=(TEMPLATE,), claims=(other, gone, no_class))
    for pod, message in cases:
        (fit,) = explain_fit(Cluster(nodes=nodes, pods=(pod,), dra=dra))
        assert fit.fits == () and fit.reasons == {message: 2}
        assert fit.message == f"0/2 nodes are available: {message}."


def test_a_selector_failing_at_run_time_ends_the_attempt_with_kube_schedulers_error() -> None:
    """kube-scheduler's DynamicResources returns an Error status when a selector fails on a device it reaches; the
    framework stops the attempt at once (`findNodesThatPassFilters`): the pod is not bound even where its claim could
    be allocated (node "fits": its device has the attribute), and its verdict is that one error, not a count per
    node (reason SchedulerError: tests/e2e/dra_messages.txt, case cel-missing-attribute)."""
    nosuch = f'device.attributes["{DRIVER}"].nosuch == "x"'
    spec = ClaimSpec(requests=(DeviceRequest(name="gpu", exactly=ExactDeviceRequest(device_class_name="gpu",
                                                                                    selectors=(nosuch,))),))
    has = ResourceSlice(name="fits-gpus", driver=DRIVER, pool=PoolRef(name="fits"), node_name="fits",
                        devices=(Device(name="gpu-0", attributes={f"{DRIVER}/nosuch": "x"}),))
    nodes = (make_node("fits"), make_node("small", cpu=0.1), make_node("lacks"), make_node("bare"))
    dra = Dra(slices=(has, gpus("small", 1), gpus("lacks", 2)), classes=(GPU_CLASS,),
              templates=(ResourceClaimTemplate(namespace="default", name="one-gpu", spec=spec),))
    pod = with_template(make_pod("p", cpu=1))
    (fit,) = explain_fit(Cluster(nodes=nodes, pods=(pod,), dra=dra))
    kube = next(line for line in (Path(__file__).parents[1] / "e2e" / "dra_messages.txt").read_text().splitlines()
                if line.startswith("cel-missing-attribute\t"))  # the real scheduler's words, names as placeholders
    error = kube.partition("\tSchedulerError: ")[2].replace("<ns>/<claim>", "default/p-gpu").replace(
        "gpu.nvidia.com/<node>/<device>", f"{DRIVER}/lacks/gpu-0")
    assert (fit.fits, fit.message, list(fit.reasons)) == ((), error, [error])
    (alone,) = explain_fit(Cluster(nodes=nodes[:1], pods=(pod,), dra=dra))
    assert alone.fits == ("fits",)  # the same claim on the node with the attribute alone: allocated


def test_claims_allocated_in_one_what_if_count_for_each_other() -> None:
    nodes = [make_node("a")]
    table = table_of(nodes, Dra(slices=(gpus("a", 2),), classes=(GPU_CLASS,), templates=(TEMPLATE,)))
    first, second, third = (with_template(make_pod(f"p{i}"), entry="gpu") for i in range(3))
    for pod in (first, second):
        assert table.feasible(pod)[0]
        table.place(0, pod)
    assert not table.feasible(third)[0]
    assert [f.message for f in table.explain(third, 0)] == ["cannot allocate all claims"]
    fork = table.fork()
    fork.unplace(0, first)  # its claim leaves with it: the device is free again on the fork only
    assert fork.feasible(third)[0] and not table.feasible(third)[0]


def test_devices_held_by_the_snapshots_allocated_claims_are_in_use() -> None:
    held = ResourceClaim(namespace="default", name="held", spec=ONE_GPU, allocation=on_node("a"))
    running = replace(with_claim(make_pod("r", node="a", phase=PodPhase.RUNNING), "held"))
    dra = Dra(slices=(gpus("a", 1),), classes=(GPU_CLASS,), templates=(TEMPLATE,), claims=(held,))
    table = table_of([make_node("a")], dra, (running,))
    assert not table.feasible(with_template(make_pod("p")))[0]


def test_a_shared_claim_pins_its_users_to_its_allocation() -> None:
    nodes = [make_node("a"), make_node("b")]
    shared = ResourceClaim(namespace="default", name="shared", spec=ONE_GPU, allocation=on_node("b"))
    dra = Dra(slices=(gpus("a", 1), gpus("b", 1)), classes=(GPU_CLASS,), claims=(shared,))
    table = table_of(nodes, dra)
    user = with_claim(make_pod("u"), "shared")
    assert table.feasible(user).tolist() == [False, True]
    assert [f.message for f in table.explain(user, 0)] == ["resourceclaim not available on the node"]
    # unallocated and shared: the first user's allocation pins the second
    fresh = ResourceClaim(namespace="default", name="shared", spec=ONE_GPU)
    table = table_of(nodes, replace(dra, claims=(fresh,)))
    assert table.feasible(user).tolist() == [True, True]
    table.place(1, user)
    assert table.feasible(with_claim(make_pod("v"), "shared")).tolist() == [False, True]


def _pool() -> NodePool:
    config = {"pools": [{
        "name": "gpu", "max_size": 3, "allocatable": {"cpu": 8, "memory": "32Gi"},
        "resource_slices": [{"driver": DRIVER, "count": 2, "device": {"name": "gpu-{index}"}}]}]}
    return parse_config(config).pools[0]


def test_fit_judges_a_pool_by_the_slices_it_declares() -> None:
    dra = Dra(classes=(GPU_CLASS,), templates=(TEMPLATE,))
    (fit,) = explain_fit(Cluster(nodes=(make_node("a"),), pods=(with_template(make_pod("p")),), dra=dra),
                         (_pool(), replace(_pool(), name="bare", resource_slices=())))
    assert fit.pools == {"gpu": "fits", "bare": "cannot allocate all claims"}


def test_dra_pods_scale_an_empty_pool_from_its_declared_slices() -> None:
    pool = _pool()
    pods = tuple(with_template(owned_pod(f"train-{i}", cpu=1000, owner="Job")) for i in range(3))
    dra = Dra(classes=(GPU_CLASS,), templates=(TEMPLATE,))
    plan = decide(Snapshot(cluster=Cluster(pods=pods, dra=dra)), (pool,), EngineState(), Policy(), T0)
    assert [(s.pool, s.nodes) for s in plan.scale_up] == [("gpu", 2)]  # two devices a node: 3 pods, 2 nodes
    bare = replace(pool, resource_slices=())
    plan = decide(Snapshot(cluster=Cluster(pods=pods, dra=dra)), (bare,), EngineState(), Policy(), T0)
    assert plan.scale_up == ()


def test_scale_down_moves_a_dra_pod_only_where_its_claim_can_be_allocated() -> None:
    nodes = [sd_node("a"), sd_node("b")]
    mine = ResourceClaim(namespace="default", name="mine", spec=ONE_GPU, allocation=on_node("a"),
                         owner_pod_uid="uid-w")
    worker = replace(sd_pod("w", "a"), uid="uid-w", claim_statuses={"gpu": "mine"})
    worker = with_template(worker)
    busy = sd_pod("busy", "b", cpu="3")
    dra = Dra(slices=(gpus("a", 1),), classes=(GPU_CLASS,), templates=(TEMPLATE,), claims=(mine,))
    table = table_of(nodes, dra, (worker, busy))
    kept = run(nodes, [worker, busy], table=table)
    assert "a" not in removed(kept)
    (verdict,) = [v for v in kept.blocked if v.node == "a"]
    assert verdict.reasons[0].code is ReasonCode.NO_PLACE_TO_MOVE
    assert "default/mine" in verdict.reasons[0].message
    assert "cannot allocate all claims" in verdict.reasons[0].message
    # b publishes a free device: the claim is released on a and allocated afresh on b
    dra = replace(dra, slices=(gpus("a", 1), gpus("b", 1)))
    assert "a" in removed(run(nodes, [worker, busy], table=table_of(nodes, dra, (worker, busy))))
