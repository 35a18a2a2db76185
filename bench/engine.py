"""Benchmark: one `decide` on 5,000 nodes, 150,000 running pods and 2,000 pending pods (openb shapes).

Pools (openb node shapes): `cpu` (CPU-only), `gpu-g2` (8 GPUs), `gpu-t4` (2 × T4), `gpu-v100` (4 × V100); GPU pools
are tainted `nvidia.com/gpu=present:NoSchedule`. Running pods: openb shapes fill the nodes first (openb pods are big:
≈ 8 per node), then 3 DaemonSet pods per node and small service pods (100–250m CPU, 128–512 MiB, half tolerating the
GPU taint) bring the total to 150,000 — the many small pods real ML clusters carry. Pending pods are openb shapes,
marked Unschedulable. 20 % of openb pods carry a nodeSelector on their pool. Nodes are spread round-robin over three
zones (`topology.kubernetes.io/zone`). Prints the median `decide` time over 5 runs and pending pods/s. Run:
`.venv/bin/python bench/engine.py`.

`--spread 0.2`: the same run again with 20 % of the pending pods carrying a zone spread (`DoNotSchedule`, maxSkew 1,
over the pods of their Deployment: 20 Deployments), and the ratio of the two medians.

`--pvc-share 0.2`: the same run again in the same process with that share of the pending pods using a PVC, bound to
a PV whose node affinity holds on its pool's nodes only (VolumeBinding on every row), each pod its own claim; the two
runs alternate, and both medians are printed with their ratio, in this process's CPU seconds (what a shared machine
leaves comparable) and wall-clock.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from dataclasses import replace

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.dra import (
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceRequest,
    Dra,
    ExactDeviceRequest,
    PodResourceClaim,
    PoolRef,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpuscale.model.node import ZONE_LABEL, Node
from gpuscale.model.pod import OwnerRef, Pod, PodPhase, SchedulingConstraints, TopologySpreadConstraint
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import LabelSelector, NodeAffinity, NodeSelectorTerm, Requirement, SelectorOperator
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator
from gpuscale.model.volumes import PersistentVolume, PersistentVolumeClaim, PodClaim, Storage, StorageClass
from gpuscale.sim.openb import OpenbNode, bundled, read_nodes, read_pods, to_model_pod

GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect=TaintEffect.NO_SCHEDULE)
TOLERATE = (Toleration(key="nvidia.com/gpu", operator=TolerationOperator.EXISTS),)
PRICES = {"cpu": 1.2, "gpu-g2": 24.0, "gpu-t4": 1.1, "gpu-v100": 12.2}
SHARE = {"cpu": 0.2, "gpu-g2": 0.45, "gpu-t4": 0.25, "gpu-v100": 0.1}
ZONES = ("zone-0", "zone-1", "zone-2")
DEPLOYMENTS = 20


def pools_from_openb() -> dict[str, NodePool]:
    shapes: dict[str, OpenbNode] = {}
    for node in read_nodes(bundled("openb_node_list_all_node.csv")):
        name = {"": "cpu", "G2": "gpu-g2", "T4": "gpu-t4", "V100M16": "gpu-v100"}.get(node.model)
        if name and name not in shapes:
            shapes[name] = node
    pools = {}
    for name, shape in shapes.items():
        labels = {"nvidia.com/gpu.product": shape.model} if shape.model else {}
        pools[name] = NodePool(name=name, allocatable=shape.allocatable(), labels=labels,
                               taints=(GPU_TAINT,) if shape.gpus else (), gpu_model=shape.model or None,
                               gpus_per_node=shape.gpus, usd_per_hour=PRICES[name], max_size=5000, zones=ZONES)
    return pools


def build(n_nodes: int, n_running: int, n_pending: int, seed: int) -> tuple[Cluster, list[NodePool]]:
    rng = random.Random(seed)
    pools = pools_from_openb()
    nodes: list[Node] = []
    for name, pool in sorted(pools.items()):
        for k in range(int(n_nodes * SHARE[name])):
            template = pool.template(f"{name}-{k:05d}")
            nodes.append(replace(template, created_s=0.0, labels={**template.labels, ZONE_LABEL: ZONES[k % 3]}))
    shapes = read_pods(bundled("openb_pod_list_default.csv"))
    free = [n.allocatable for n in nodes]
    rows_of = {name: [i for i, n in enumerate(nodes) if n.pool == name] for name in pools}
    cursor = dict.fromkeys(pools, 0)
    pods: list[Pod] = []
    owner = OwnerRef(kind="ReplicaSet", name="rs")
    gpu_pools = ["gpu-g2", "gpu-t4", "gpu-v100"]
    for i in range(n_running + n_pending):
        shape = shapes[rng.randrange(len(shapes))]
        gpu = shape.num_gpu > 0
        selector: tuple[tuple[str, str], ...] = ()
        target = rng.choice(gpu_pools) if gpu else "cpu"
        if rng.random() < 0.2:
            selector = (("gpuscale.io/pool", target),)
        pod = replace(to_model_pod(replace(shape, name=f"pod-{i:06d}")), owner=owner, created_s=0.0,
                      constraints=SchedulingConstraints(affinity=NodeAffinity(node_selector=selector),
                                                        tolerations=TOLERATE if gpu else ()))
        if i < n_running:
            rows = rows_of[target]
            for _ in range(3):  # first fit along a moving cursor: fills nodes in order without quadratic scans
                if cursor[target] >= len(rows):
                    break
                j = rows[cursor[target]]
                if not pod.requests.shortfalls(free[j]) and free[j].get("pods") > 0:
                    free[j] = free[j] - pod.requests - Resources.of(pods=1)
                    pod = replace(pod, node_name=nodes[j].name, phase=PodPhase.RUNNING)
                    break
                cursor[target] += 1
            if pod.node_name is None:
                continue
        else:
            pod = replace(pod, unschedulable=True)
        pods.append(pod)
    everything = (Toleration(operator=TolerationOperator.EXISTS),)
    daemon = OwnerRef(kind="DaemonSet", name="node-agent")
    for j, node in enumerate(nodes):
        for k in range(3):
            requests = Resources.of(cpu=100, memory=128 * 2**20)
            free[j] = free[j] - requests - Resources.of(pods=1)
            pods.append(Pod(namespace="kube-system", name=f"agent-{k}-{node.name}", requests=requests,
                            node_name=node.name, phase=PodPhase.RUNNING, owner=daemon, created_s=0.0,
                            constraints=SchedulingConstraints(tolerations=everything)))
    small = 0
    target_total = n_running + n_pending
    j = 0
    while len(pods) < target_total and small < 10 * target_total:
        small += 1
        tolerates = rng.random() < 0.5
        j = (j + 1) % len(nodes)
        if nodes[j].taints and not tolerates:
            continue
        requests = Resources.of(cpu=rng.choice([100, 150, 200, 250]), memory=rng.choice([128, 256, 512]) * 2**20)
        if requests.shortfalls(free[j]) or free[j].get("pods") < 1:
            continue
        free[j] = free[j] - requests - Resources.of(pods=1)
        pods.append(Pod(namespace="svc", name=f"svc-{small:06d}", requests=requests, node_name=nodes[j].name,
                        phase=PodPhase.RUNNING, owner=owner, created_s=0.0,
                        constraints=SchedulingConstraints(tolerations=TOLERATE if tolerates else ())))
    return Cluster(nodes=tuple(nodes), pods=tuple(pods)), list(pools.values())


def with_spread(cluster: Cluster, fraction: float, seed: int) -> Cluster:
    """The cluster with `fraction` of its pending pods in one of `DEPLOYMENTS` Deployments (label `app`) spread over
    zones: `DoNotSchedule`, maxSkew 1, selecting the pods of their Deployment."""
    rng = random.Random(seed)
    pods = []
    for pod in cluster.pods:
        if pod.node_name is None and rng.random() < fraction:
            app = f"web-{rng.randrange(DEPLOYMENTS)}"
            spread = TopologySpreadConstraint(max_skew=1, topology_key=ZONE_LABEL,
                                              selector=LabelSelector(match_labels=(("app", app),)))
            pod = replace(pod, labels={**pod.labels, "app": app},
                          constraints=replace(pod.constraints, topology_spread=(spread,)))
        pods.append(pod)
    return Cluster(nodes=cluster.nodes, pods=tuple(pods))


def with_claims(cluster: Cluster, share: float, seed: int) -> Cluster:
    """`share` of the pending pods each using its own PVC, bound to a PV whose node affinity holds on the nodes of
    the pool the pod's shape goes to (GPU pods: a GPU pool; others: `cpu`)."""
    rng = random.Random(seed)
    pvs: list[PersistentVolume] = []
    claims: list[PersistentVolumeClaim] = []
    pods = list(cluster.pods)
    gpu_pools = ["gpu-g2", "gpu-t4", "gpu-v100"]
    for i, pod in enumerate(pods):
        if pod.node_name is not None or rng.random() >= share:
            continue
        pool = rng.choice(gpu_pools) if pod.requests.gpu_count() else "cpu"
        name = f"data-{pod.name}"
        affinity = (NodeSelectorTerm(match_expressions=(
            Requirement(key="gpuscale.io/pool", operator=SelectorOperator.IN, values=(pool,)),)),)
        pvs.append(PersistentVolume(name=name, capacity=2**34, access_modes=frozenset({"ReadWriteOnce"}),
                                    node_affinity=affinity, storage_class="zonal", claim=f"{pod.namespace}/{name}",
                                    phase="Bound", csi_driver="csi.example.com", csi_handle=name))
        claims.append(PersistentVolumeClaim(namespace=pod.namespace, name=name, storage_class="zonal",
                                            volume_name=name, bind_completed=True, request=2**30, phase="Bound"))
        pods[i] = replace(pod, constraints=replace(pod.constraints, claims=(PodClaim(pod.namespace, name),)))
    storage = Storage(volumes=tuple(pvs), claims=tuple(claims), classes=(StorageClass(
        name="zonal", provisioner="csi.example.com", wait_for_first_consumer=True),))
    return replace(cluster, pods=tuple(pods), storage=storage)


def with_devices(cluster: Cluster, share: float, seed: int) -> tuple[Cluster, Cluster]:
    """A ResourceSlice per GPU node (one device per GPU), a DeviceClass and a one-device claim template; the cluster
    with them but no pod using them, and with `share` of the pending pods (GPU pods, drawn at random; all of them if
    fewer) asking a device through the template besides their GPUs."""
    driver = "gpu.example.com"
    slices = tuple(ResourceSlice(name=f"{n.name}-gpus", driver=driver, pool=PoolRef(name=n.name), node_name=n.name,
                                 devices=tuple(Device(name=f"gpu-{i}") for i in range(n.allocatable.gpu_count())))
                   for n in cluster.nodes if n.allocatable.gpu_count())
    one = ClaimSpec(requests=(DeviceRequest(name="gpu", exactly=ExactDeviceRequest(device_class_name="gpu")),))
    dra = Dra(slices=slices, classes=(DeviceClass(name="gpu", selectors=(f"device.driver == '{driver}'",)),),
              templates=(ResourceClaimTemplate(namespace="default", name="one-gpu", spec=one),))
    pending = cluster.pending_pods()
    gpu_pods = [p.key for p in pending if p.requests.gpu_count()]
    random.Random(seed).shuffle(gpu_pods)
    chosen = set(gpu_pods[: round(share * len(pending))])
    ref = (PodResourceClaim(name="gpu", template_name="one-gpu"),)
    pods = [replace(p, constraints=replace(p.constraints, resource_claims=ref)) if p.key in chosen else p
            for p in cluster.pods]
    return replace(cluster, dra=dra), replace(cluster, pods=tuple(pods), dra=dra)


def _median_decide(cluster: Cluster, pools: list[NodePool], runs: int) -> tuple[float, list[float], object]:
    times = []
    plan = None
    for _ in range(runs):
        start = time.perf_counter()
        plan = decide(Snapshot(cluster=cluster), pools, EngineState(), Policy(), now=3600.0)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, plan


def _paired(first: Cluster, second: Cluster, pools: list[NodePool], runs: int) -> tuple[list[float], ...]:
    """`decide` on `first` then `second`, `runs` times in turn: wall-clock and this process's CPU seconds of each (on
    a machine other jobs share, CPU time is what the ratio can trust; alternating spreads the load over both)."""
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for side, cluster in enumerate((first, second)):
            start, start_cpu = time.perf_counter(), time.process_time()
            decide(Snapshot(cluster=cluster), pools, EngineState(), Policy(), now=3600.0)
            wall[side].append(time.perf_counter() - start)
            cpu[side].append(time.process_time() - start_cpu)
    return (*wall, *cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--running", type=int, default=150_000)
    parser.add_argument("--pending", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spread", type=float, default=0.0,
                        help="also time the run with this fraction of the pending pods spread over zones")
    parser.add_argument("--pvc-share", type=float, default=0.0,
                        help="also time the run with this share of the pending pods using a bound PVC")
    parser.add_argument("--dra-share", type=float, default=0.0,
                        help="also time the run with a ResourceSlice per GPU node and this share of the pending pods "
                             "asking a device through a ResourceClaimTemplate")
    args = parser.parse_args()
    start = time.perf_counter()
    cluster, pools = build(args.nodes, args.running, args.pending, seed=11)
    built = time.perf_counter() - start
    running = sum(1 for p in cluster.pods if p.node_name)
    times = []
    plan = None
    for _ in range(args.runs):
        start = time.perf_counter()
        plan = decide(Snapshot(cluster=cluster), pools, EngineState(), Policy(), now=3600.0)
        times.append(time.perf_counter() - start)
    assert plan is not None
    median = statistics.median(times)
    print(f"machine: {platform.machine()} python {platform.python_version()}; cluster built in {built:.1f}s")
    print(f"nodes={len(cluster.nodes)} running={running} pending={len(cluster.pending_pods())} pools={len(pools)}")
    print(f"plan: scale_up={[(s.pool, s.nodes) for s in plan.scale_up]} covered={len(plan.covered)} "
          f"unplaceable={len(plan.unplaceable)} removals={len(plan.scale_down)}")
    print(f"decide median={median:.3f}s (runs: {', '.join(f'{t:.3f}' for t in times)})")
    print(f"pending pods/s={len(cluster.pending_pods()) / median:,.0f}")
    # The control loop keeps an IncrementalStore across ticks; with the snapshot's objects unchanged (a quiet tick),
    # every per-node fact and per-GPU state comes from it. Same plan, by construction and checked here.
    memo = IncrementalStore()
    warm = []
    for _ in range(args.runs + 1):
        start = time.perf_counter()
        memo_plan = decide(Snapshot(cluster=cluster), pools, EngineState(), Policy(), now=3600.0, store=memo)
        warm.append(time.perf_counter() - start)
    assert memo_plan == plan, "a memo changed the plan"
    print(f"decide with a memo: first {warm[0]:.3f}s, then median={statistics.median(warm[1:]):.3f}s "
          f"(runs: {', '.join(f'{t:.3f}' for t in warm[1:])}); same plan")
    if args.spread > 0:
        spread = with_spread(cluster, args.spread, seed=12)
        count = sum(1 for p in spread.pods if p.constraints.topology_spread)
        base, base_times, _ = _median_decide(cluster, pools, args.runs)  # again, next to the spread run
        spread_median, spread_times, spread_plan = _median_decide(spread, pools, args.runs)
        assert spread_plan is not None
        print(f"spread: {count} of {len(spread.pending_pods())} pending pods carry a zone spread; plan: scale_up="
              f"{[(s.pool, s.nodes) for s in spread_plan.scale_up]} covered={len(spread_plan.covered)} "
              f"unplaceable={len(spread_plan.unplaceable)}")
        print(f"decide without spread median={base:.3f}s (runs: {', '.join(f'{t:.3f}' for t in base_times)})")
        print(f"decide with spread median={spread_median:.3f}s (runs: {', '.join(f'{t:.3f}' for t in spread_times)})"
              f"; ratio {spread_median / base:.2f}")
    if args.pvc_share:
        claimed = with_claims(cluster, args.pvc_share, seed=12)
        users = sum(1 for p in claimed.pods if p.constraints.claims)
        _, _, plan_pvc = _median_decide(claimed, pools, 1)
        base_wall, pvc_wall, base_cpu, pvc_cpu = _paired(cluster, claimed, pools, args.runs)
        wall = statistics.median(pvc_wall) / statistics.median(base_wall)
        cpu = statistics.median(pvc_cpu) / statistics.median(base_cpu)
        print(f"PVCs: {users} pending pods with a bound PVC; plan: "
              f"scale_up={[(s.pool, s.nodes) for s in plan_pvc.scale_up]}")  # type: ignore[attr-defined]
        print(f"decide CPU s median without={statistics.median(base_cpu):.3f} with={statistics.median(pvc_cpu):.3f} "
              f"ratio={cpu:.2f}; wall s median without={statistics.median(base_wall):.3f} "
              f"with={statistics.median(pvc_wall):.3f} ratio={wall:.2f} (runs alternate; CPU with: "
              f"{', '.join(f'{t:.3f}' for t in pvc_cpu)}; without: {', '.join(f'{t:.3f}' for t in base_cpu)})")

    if args.dra_share:
        _time_devices(cluster, pools, args.dra_share, args.runs)


def _time_devices(cluster: Cluster, pools: list[NodePool], share: float, runs: int) -> None:
    base, claimed = with_devices(cluster, share, seed=13)
    users = sum(1 for p in claimed.pods if p.constraints.resource_claims)
    _, _, plan = _median_decide(claimed, pools, 1)
    base_wall, dra_wall, base_cpu, dra_cpu = _paired(base, claimed, pools, runs)
    print(f"DRA: {len(base.dra.slices)} ResourceSlices, {users} pending pods with a ResourceClaim; plan: "
          f"scale_up={[(s.pool, s.nodes) for s in plan.scale_up]}")  # type: ignore[attr-defined]
    print(f"decide CPU s median without claims={statistics.median(base_cpu):.3f} "
          f"with={statistics.median(dra_cpu):.3f} ratio={statistics.median(dra_cpu) / statistics.median(base_cpu):.2f}"
          f"; wall ratio={statistics.median(dra_wall) / statistics.median(base_wall):.2f} (runs alternate)")


if __name__ == "__main__":
    main()
