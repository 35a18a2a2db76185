"""Shared GPUs through `decide`: MIG and time-sliced pools, built from config the way users write them.

Scale-up picks the pool whose template offers the requested resource (`nvidia.com/mig-1g.10gb`, shares of a
time-sliced GPU — CA #8129); a Ready node whose MIG or shared resources have not appeared yet is upcoming (CA #8095);
scale-down measures a time-sliced node in shares. No engine code knows about sharing: the pool templates do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuscale.config import parse_config
from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import OwnerRef, Pod, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from tests.builders import make_pod, toleration

NOW = 10_000.0
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOL = toleration("nvidia.com/gpu", "Exists")
A100_80 = "NVIDIA-A100-SXM4-80GB"


def _pool(name: str, gpu: Mapping[str, Any], price: float, cpu: str = "95", memory: str = "1300Gi") -> dict[str, Any]:
    return {"name": name, "usd_per_hour": price, "max_size": 10, "taints": [GPU_TAINT], "gpu": dict(gpu),
            "allocatable": {"cpu": cpu, "memory": memory}}


CONFIG = parse_config({"pools": [
    {"name": "cpu", "usd_per_hour": 0.8, "allocatable": {"cpu": "16", "memory": "64Gi"}},
    _pool("a100-whole", {"model": A100_80, "count": 8}, 40.0),
    _pool("a100-mig", {"model": A100_80, "count": 8,
                       "sharing": {"mode": "mig", "strategy": "mixed", "layout": "all-1g.10gb"}}, 40.0),
    _pool("t4-whole", {"model": "Tesla-T4", "count": 1}, 0.54, cpu="4", memory="12Gi"),
    _pool("t4-shared", {"model": "Tesla-T4", "count": 1, "sharing": {"mode": "time-slicing", "replicas": 4}}, 0.54,
          cpu="4", memory="12Gi"),
    _pool("t4-renamed", {"model": "Tesla-T4", "count": 1,
                         "sharing": {"mode": "time-slicing", "replicas": 4, "rename_by_default": True}}, 0.6,
          cpu="4", memory="12Gi"),
]})
POOLS = {p.name: p for p in CONFIG.pools}


def pending(name: str, requests: Mapping[str, int], **kwargs: Any) -> Pod:
    pod = make_pod(name, cpu="1", memory="2Gi", extra=requests, tolerations=(GPU_TOL,), **kwargs)
    return replace(pod, unschedulable=True, created_s=NOW - 60)


def running(name: str, on: str, requests: Mapping[str, int]) -> Pod:
    pod = make_pod(name, cpu="500m", memory="1Gi", extra=requests, tolerations=(GPU_TOL,), node=on,
                   phase=PodPhase.RUNNING)
    return replace(pod, owner=OwnerRef(kind="ReplicaSet", name=f"{name}-rs"))


def pool_node(pool: str, name: str, **changes: Any) -> Node:
    """A node of `pool` as its template, Ready for a minute (well within `max_gpu_init_time`)."""
    node = replace(POOLS[pool].template(name), created_s=NOW - 300, ready_since_s=NOW - 60)
    return replace(node, **changes)


def run(pods: tuple[Pod, ...], nodes: tuple[Node, ...] = (), pools: tuple[NodePool, ...] = CONFIG.pools,
        policy: Policy | None = None) -> Plan:
    snapshot = Snapshot(cluster=Cluster(nodes=nodes, pods=pods))
    return decide(snapshot, pools, EngineState(), policy or Policy(), NOW)


def scale_ups(plan: Plan) -> dict[str, int]:
    return {s.pool: s.nodes for s in plan.scale_up}


def codes(plan: Plan) -> set[ReasonCode]:
    return {r.code for v in plan.covered for r in v.reasons}


def utilization_of(plan: Plan, node: str) -> Reason | None:
    """The UNDERUTILIZED reason scale-down gave `node`, wherever the node ended up (removed, unneeded, blocked)."""
    for item in (*plan.scale_down, *plan.unneeded, *plan.blocked):
        if item.node == node:
            return next((r for r in item.reasons if r.code is ReasonCode.UNDERUTILIZED), None)
    return None


# --- the templates config builds


def test_pool_templates_offer_what_the_device_plugin_will() -> None:
    assert POOLS["a100-mig"].allocatable.get("nvidia.com/mig-1g.10gb") == 56
    assert POOLS["a100-mig"].allocatable.get("nvidia.com/gpu") == 0
    assert POOLS["a100-mig"].gpus_per_node == 8  # physical GPUs: limits count these
    assert POOLS["t4-shared"].allocatable.get("nvidia.com/gpu") == 4
    assert POOLS["t4-renamed"].allocatable.get("nvidia.com/gpu.shared") == 4
    assert POOLS["a100-mig"].labels["nvidia.com/mig.config"] == "all-1g.10gb"
    assert POOLS["t4-shared"].labels["nvidia.com/gpu.replicas"] == "4"


# --- (a) a MIG slice scales the MIG pool, not a whole-GPU pool


def test_mig_slice_request_scales_the_mig_pool() -> None:
    plan = run((pending("infer", {"nvidia.com/mig-1g.10gb": 1}),))
    assert scale_ups(plan) == {"a100-mig": 1}
    assert plan.scale_up[0].pods == ("default/infer",)


def test_whole_gpu_request_does_not_land_on_the_mixed_mig_pool() -> None:
    plan = run((pending("train", {"nvidia.com/gpu": 1}, node_selector={"nvidia.com/gpu.product": A100_80}),))
    assert scale_ups(plan) == {"a100-whole": 1}


def test_many_slices_pack_seven_per_gpu() -> None:
    pods = tuple(pending(f"infer-{i}", {"nvidia.com/mig-1g.10gb": 1}) for i in range(57))  # 56 per node
    assert scale_ups(run(pods)) == {"a100-mig": 2}


# --- (b) two shares of a time-sliced T4 fit one node (CA #8129)


def test_two_shared_t4s_fit_one_time_sliced_node() -> None:
    plan = run((pending("notebook", {"nvidia.com/gpu": 2}),))
    assert scale_ups(plan) == {"t4-shared": 1}  # t4-whole offers 1 GPU; the pod asks for 2 shares


def test_shares_pack_replicas_per_node() -> None:
    pods = tuple(pending(f"nb-{i}", {"nvidia.com/gpu": 1}, node_selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"})
                 for i in range(6))
    assert scale_ups(run(pods)) == {"t4-shared": 2}  # 4 shares per node, not 1 GPU per pod


def test_renamed_shares_are_their_own_resource() -> None:
    plan = run((pending("nb", {"nvidia.com/gpu.shared": 3}),))
    assert scale_ups(plan) == {"t4-renamed": 1}


# --- (c) a Ready MIG node without its MIG devices yet is upcoming (CA #8095)


def test_ready_mig_node_without_mig_devices_is_upcoming() -> None:
    mig = POOLS["a100-mig"]
    starting = pool_node("a100-mig", "mig-new",
                         allocatable=mig.allocatable - Resources.of({"nvidia.com/mig-1g.10gb": 56}))
    plan = run((pending("infer", {"nvidia.com/mig-1g.10gb": 1}),), nodes=(starting,))
    assert plan.scale_up == ()
    assert codes(plan) == {ReasonCode.FITS_UPCOMING}


def test_mig_node_still_offering_whole_gpus_is_upcoming() -> None:
    """Before the MIG manager repartitions, the device plugin offers the 8 GPUs whole: the node is not usable yet."""
    mig = POOLS["a100-mig"]
    whole = mig.allocatable - Resources.of({"nvidia.com/mig-1g.10gb": 56}) + Resources.of({"nvidia.com/gpu": 8})
    starting = pool_node("a100-mig", "mig-new", allocatable=whole)
    pods = tuple(pending(f"infer-{i}", {"nvidia.com/mig-1g.10gb": 1}) for i in range(8))
    plan = run(pods, nodes=(starting,))
    assert plan.scale_up == ()
    assert codes(plan) == {ReasonCode.FITS_UPCOMING}


def test_ready_node_without_renamed_shares_is_upcoming() -> None:
    renamed = POOLS["t4-renamed"]
    starting = pool_node("t4-renamed", "t4-new",
                         allocatable=renamed.allocatable - Resources.of({"nvidia.com/gpu.shared": 4}))
    plan = run((pending("nb", {"nvidia.com/gpu.shared": 1}),), nodes=(starting,))
    assert plan.scale_up == () and codes(plan) == {ReasonCode.FITS_UPCOMING}


def test_pending_slices_beyond_the_upcoming_node_order_one_more() -> None:
    mig = POOLS["a100-mig"]
    starting = pool_node("a100-mig", "mig-new",
                         allocatable=mig.allocatable - Resources.of({"nvidia.com/mig-1g.10gb": 56}))
    pods = tuple(pending(f"infer-{i}", {"nvidia.com/mig-1g.10gb": 1}) for i in range(60))
    assert scale_ups(run(pods, nodes=(starting,))) == {"a100-mig": 1}


# --- (d) scale-down measures a time-sliced node in shares


def test_time_sliced_node_utilization_is_in_shares() -> None:
    nodes = (pool_node("t4-shared", "t4-a"), pool_node("t4-shared", "t4-b"))
    pods = (running("one", "t4-a", {"nvidia.com/gpu": 1}),
            running("two", "t4-b", {"nvidia.com/gpu": 1}), running("three", "t4-b", {"nvidia.com/gpu": 1}))
    plan = run(pods, nodes=nodes)
    quarter = utilization_of(plan, "t4-a")
    assert quarter is not None and quarter.numbers["gpu"] == 0.25  # 1 of 4 shares
    assert utilization_of(plan, "t4-b") is None  # 2 of 4 = 50 %: not strictly below the 0.5 threshold
    assert "t4-a" in plan.mark_unneeded and "t4-b" not in plan.mark_unneeded
    half = utilization_of(run(pods, nodes=nodes, policy=Policy(scale_down_gpu_utilization_threshold=0.6)), "t4-b")
    assert half is not None and half.numbers["gpu"] == 0.5  # 2 of 4 shares


def test_mig_node_utilization_counts_mig_devices() -> None:
    nodes = (pool_node("a100-mig", "mig-a"),)
    pods = tuple(running(f"infer-{i}", "mig-a", {"nvidia.com/mig-1g.10gb": 1}) for i in range(14))
    reason = utilization_of(run(pods, nodes=nodes), "mig-a")
    assert reason is not None and reason.numbers["gpu"] == 0.25  # 14 of 56 slices


def test_mig_node_that_never_gets_its_devices_times_out() -> None:
    mig = POOLS["a100-mig"]
    stuck = pool_node("a100-mig", "mig-stuck", ready_since_s=NOW - 3_600,
                      allocatable=mig.allocatable - Resources.of({"nvidia.com/mig-1g.10gb": 56}))
    plan = run((), nodes=(stuck,))
    assert [(t.node, t.reasons[0].code) for t in plan.timed_out] == [("mig-stuck", ReasonCode.GPU_INIT_TIMEOUT)]
