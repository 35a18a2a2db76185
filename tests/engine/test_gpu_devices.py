"""Per-GPU accounting on nodes that share GPUs by fraction (`gpuscale.io/gpu-milli`): the table, scale-up and
scale-down reason per device, not per node total; fragmentation-aware choice with a placement policy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuscale.engine.decide import decide
from gpuscale.engine.placement.devices import DEVICE_ANNOTATION, GpuDevices, GpuNeed
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import OwnerRef, Pod, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from tests.builders import make_node, make_pod

NOW = 10_000.0
SHARED = Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 110, NVIDIA_GPU: 2, GPU_MILLI: 2000})
POOL = NodePool(name="t4x2", allocatable=SHARED, gpu_model="T4", gpus_per_node=2, usd_per_hour=1.0)


def gpu_node(name: str) -> Node:
    return replace(POOL.template(name), created_s=NOW - 3600, ready_since_s=NOW - 3600)


def share(name: str, milli: int, on: str | None = None, devices: str | None = None) -> Pod:
    pod = make_pod(name, cpu="1", memory="1Gi", extra={GPU_MILLI: milli}, node=on,
                   phase=PodPhase.RUNNING if on else PodPhase.PENDING)
    pod = replace(pod, owner=OwnerRef(kind="ReplicaSet", name="rs"), created_s=NOW - 60, unschedulable=on is None)
    if devices is not None:
        pod = replace(pod, annotations={DEVICE_ANNOTATION: devices})
    return pod


def whole(name: str, gpus: int, on: str | None = None) -> Pod:
    pod = make_pod(name, cpu="1", memory="1Gi", gpus=gpus, node=on, phase=PodPhase.RUNNING if on else PodPhase.PENDING)
    return replace(pod, owner=OwnerRef(kind="ReplicaSet", name="rs"), created_s=NOW - 60, unschedulable=on is None)


def table(placed: list[Pod], nodes: list[Node] | None = None, placement: str | None = None) -> WhatIf:
    nodes = nodes or [gpu_node("a")]
    return whatif_of(nodes, [n.allocatable for n in nodes], placed, placement=placement)


def test_a_fraction_needs_one_device_with_room_not_the_node_total() -> None:
    t = table([share("x", 600, "a"), share("y", 600, "a")])  # reconstructed on devices 0 and 1: 400 left on each
    assert t.free_of(0, GPU_MILLI) == 800
    assert t.devices is not None and sorted(t.devices.free[0].tolist()) == [400, 400]
    assert t.feasible(share("p", 400))[0]
    assert not t.feasible(share("p", 500))[0]
    assert not t.feasible(whole("w", 1))[0]  # 2 nvidia.com/gpu free in the totals, but no device is free


def test_whole_gpu_pods_take_free_devices() -> None:
    t = table([whole("w", 1, "a")])
    assert t.feasible(share("p", 1000 - 1))[0] and t.feasible(whole("v", 1))[0]
    assert not t.feasible(whole("v", 2))[0]


def test_the_device_annotation_is_honoured() -> None:
    packed = table([share("x", 400, "a", devices="1"), share("y", 500, "a", devices="1")])
    assert packed.feasible(whole("w", 1))[0]  # device 0 is free
    assert packed.devices is not None and packed.devices.free[0].tolist() == [1000, 100]
    bogus = table([share("x", 400, "a", devices="7")])  # out of range: reconstructed
    assert bogus.devices is not None and bogus.devices.free[0].tolist() == [600, 1000]


def test_reconstruction_keeps_the_total_when_best_fit_cannot_place_a_pod() -> None:
    devices = GpuDevices.of([SHARED])
    sizes = (700, 700, 600)
    devices.load([0] * 3, [GpuNeed(m, 1) for m in sizes], [share(f"p{i}", m, "a") for i, m in enumerate(sizes)])
    assert int(devices.free[0].sum()) == 0 and (devices.free[0] >= 0).all()


def test_placing_uses_the_tightest_device_and_fork_is_independent() -> None:
    t = table([share("x", 300, "a")])
    trial = t.fork()
    trial.place(0, share("p", 600))
    assert trial.devices is not None and trial.devices.free[0].tolist() == [100, 1000]
    assert t.devices is not None and t.devices.free[0].tolist() == [700, 1000]


def run(pods: list[Pod], nodes: list[Node], policy: Policy | None = None) -> Plan:
    return decide(Snapshot(cluster=Cluster(nodes=tuple(nodes), pods=tuple(pods))), [POOL], EngineState(),
                  policy or Policy(), NOW)


def test_scale_up_packs_fractions_per_device() -> None:
    pods = [share(f"p{i}", 600) for i in range(3)]  # 1,800 milli: one node by totals, two by devices
    plan = run(pods, [])
    assert [(s.pool, s.nodes) for s in plan.scale_up] == [("t4x2", 2)]
    five = run([share(f"p{i}", 400 if i < 4 else 200) for i in range(5)], [])  # 400+400+200 fill one device
    assert [(s.pool, s.nodes) for s in five.scale_up] == [("t4x2", 1)]


def test_pending_fraction_that_fits_no_device_triggers_scale_up() -> None:
    nodes = [gpu_node("a")]
    running = [share("x", 600, "a"), share("y", 600, "a")]
    plan = run([*running, share("p", 500)], nodes)
    assert [(s.pool, s.nodes) for s in plan.scale_up] == [("t4x2", 1)]
    fits = run([*running, share("p", 400)], nodes)
    assert fits.scale_up == () and {r.code for v in fits.covered for r in v.reasons} == {ReasonCode.FITS_EXISTING}


def test_scale_down_moves_only_what_fits_per_device() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    # b's devices have 400 free each (800 in total); a's two 300-milli pods fit there one per device ...
    ok = run([share("x", 300, "a"), share("y", 300, "a"), share("u", 600, "b"), share("v", 600, "b")], nodes)
    assert list(ok.mark_unneeded) == ["a"]
    # ... but a's 500 + 250 (750 ≤ 800 by totals) do not: no device of b has 500 free.
    blocked = run([share("x", 500, "a"), share("y", 250, "a"), share("u", 600, "b"), share("v", 600, "b")], nodes)
    assert blocked.mark_unneeded == {}
    reasons = {r.code for v in blocked.blocked if v.node == "a" for r in v.reasons}
    assert ReasonCode.NO_PLACE_TO_MOVE in reasons


def test_fragmentation_aware_choice_fills_the_started_device() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    placed = [share("x", 500, "b"), share("y", 500, "b", devices="1")]  # b: [500, 500]; a empty
    pending = share("p", 500)
    first_fit = table(placed, nodes)
    mask = first_fit.feasible(pending)
    assert first_fit.choose(pending, mask)[0] == 0  # CA-like: first node in order
    aware = table(placed, nodes, placement="gpuscale")
    row, gpus = aware.choose(pending, aware.feasible(pending))
    assert row == 1 and gpus is not None and len(gpus) == 1  # completes a half-used GPU instead of opening one
    fgd = table(placed, nodes, placement="fgd")  # ΔF is 0 on both: FGD leaves it to the rank
    assert fgd.choose(pending, fgd.feasible(pending))[0] == 0
    rank = np.array([5, 0])
    assert first_fit.choose(pending, mask, rank)[0] == 1


def test_cpu_only_rows_are_not_device_accounted() -> None:
    nodes = [make_node("c", cpu="8"), gpu_node("a")]
    t = table([], nodes)
    assert t.devices is not None and t.devices.count.tolist() == [0, 2]
    cpu_pod = make_pod("c1", cpu="1")
    assert t.feasible(cpu_pod).tolist() == [True, True]
