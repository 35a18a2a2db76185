"""Benchmark: the controller's WatchCache and one full loop at 5,000 nodes and 100,000 pods, on the real API server.

Starts the e2e harness's control plane (then stops the controller-manager, scheduler and kwok so nothing else writes;
bench/k8s_load.py), creates 5,000 Ready kwok-style nodes in the seed pools (3,500 cpu-general, 1,000
gpu-inference-t4, 500 gpu-training-a100; labelled `gpuscale.io/pool`), 100,000 pods bound to them with
`spec.nodeName` (20 per node; GPU pods on GPU nodes) and 200 pending pods marked `PodScheduled=False/Unschedulable`
(150 CPU pods, 50 eight-GPU A100 pods). Then, in a fresh child process (the "controller process"), it builds the
controller as `gpuscale run --dry-run` does and measures:

- initial sync: `WatchCache.start()` until every kind has listed (paged, limit 500) and converted what it listed;
- one full loop, `autoscaler.tick()`: snapshot (converted objects are reused per resourceVersion), the provider's
  node → pool map (one API list), `decide`;
- the child's RSS after sync and after the ticks, and its peak RSS.

Targets (issue 5): sync < 60 s, RSS < 1 GiB. Run: `.venv/bin/python bench/watch.py` (≈ 5 min of population here),
`--run-dir DIR` to keep etcd's data for the next run (population is skipped for what is already there), or
`--kubeconfig` to use a running API server.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from k8s_load import (
    BENCH_LABEL,
    REPO,
    api_client,
    count,
    create_many,
    current_rss_mib,
    node_body,
    peak_rss_mib,
    pod_body,
    quiet_control_plane,
    request,
)

NAMESPACES = [f"bench-{i}" for i in range(10)]
SEED = REPO / "examples" / "seed-pools" / "gpuscale.yaml"
SHARES = (("cpu-general", 0.70), ("gpu-inference-t4", 0.20), ("gpu-training-a100", 0.10))
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def bench_config() -> Any:
    from gpuscale.config import load_config
    from gpuscale.engine.policy import Limits

    config = load_config(SEED)
    pools = tuple(replace(p, max_size=10_000) for p in config.pools)
    return replace(config, pools=pools, policy=replace(config.policy, limits=Limits(), new_pod_delay_s=0.0,
                                                         new_gpu_pod_delay_s=0.0))


def _quantity(name: str, amount: int) -> str:
    return f"{amount}m" if name == "cpu" else str(amount)


def plan_nodes(n_nodes: int) -> list[tuple[str, Any]]:
    """(node name, pool) for every node, pools by SHARES."""
    pools = {p.name: p for p in bench_config().pools}
    out: list[tuple[str, Any]] = []
    for pool_name, share in SHARES:
        k = round(n_nodes * share) if pool_name != SHARES[-1][0] else n_nodes - len(out)
        out += [(f"{pool_name}-{i:05d}", pools[pool_name]) for i in range(k)]
    return out


def populate(kubeconfig: Path, n_nodes: int, n_pods: int, n_pending: int) -> dict[str, float]:
    from gpuscale.model.node import POOL_LABEL

    api = api_client(kubeconfig)
    rates: dict[str, float] = {}
    nodes = plan_nodes(n_nodes)
    have = count(api, "/api/v1/nodes", f"{BENCH_LABEL}=1")
    if have < n_nodes:
        # The seed's T4 instance type "n1-standard-4+nvidia-tesla-t4" is no valid label value.
        bodies = [node_body(name, {**{k: v.replace("+", "-") for k, v in pool.labels.items()}, POOL_LABEL: pool.name,
                                   "topology.kubernetes.io/zone": pool.zones[0]},
                            {r: _quantity(r, a) for r, a in pool.allocatable.items},
                            [GPU_TAINT] if pool.is_gpu_pool() else None) for name, pool in nodes]
        rates["nodes_per_s"] = create_many(api, lambda b: "/api/v1/nodes", bodies, what="nodes")
    per_node = n_pods // n_nodes

    def bound_pods() -> Any:
        i = 0
        for name, pool in nodes:
            for j in range(per_node):
                if i >= n_pods:
                    return
                ns = NAMESPACES[i % len(NAMESPACES)]
                gpu = pool.is_gpu_pool() and j == 0
                requests = {"cpu": "100m", "memory": "256Mi"} | ({"nvidia.com/gpu": "1"} if gpu else {})
                yield pod_body(f"svc-{i:06d}", ns, name, requests, TOLERATE if pool.is_gpu_pool() else None)
                i += 1

    def pending_pods() -> Any:
        for i in range(n_pending):
            ns = NAMESPACES[i % len(NAMESPACES)]
            if i < n_pending * 3 // 4:
                yield pod_body(f"pending-cpu-{i:04d}", ns, None, {"cpu": "1", "memory": "1Gi"})
            else:
                yield pod_body(f"pending-a100-{i:04d}", ns, None, {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                               TOLERATE, {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"})

    def pod_path(body: dict[str, Any]) -> str:
        return f"/api/v1/namespaces/{body['metadata']['namespace']}/pods"

    have = count(api, "/api/v1/pods", f"{BENCH_LABEL}=1")
    if have < n_pods + n_pending:
        rates["pods_per_s"] = create_many(api, pod_path, bound_pods(), what="pods")
        create_many(api, pod_path, pending_pods(), what="pending pods")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        unschedulable = {"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                                    "reason": "Unschedulable", "lastTransitionTime": now,
                                                    "message": "0/5000 nodes are available"}]}}
        for body in pending_pods():
            meta = body["metadata"]
            request(api, "PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                    body=unschedulable, content_type="application/merge-patch+json")
    api.close()
    return rates


def measure(kubeconfig: Path, ticks: int) -> dict[str, Any]:
    """The controller process: build, sync, tick. Prints one JSON line."""
    from gpuscale.controller import build_controller

    rss_start = current_rss_mib()
    api = api_client(kubeconfig, pool_size=8)
    controller = build_controller(api, bench_config(), dry_run=True, start_cache=False)
    t0 = time.monotonic()
    controller.cache.start()
    if not controller.cache.wait_synced(600):
        raise SystemExit(f"not synced after 600 s: {controller.cache.status()}")
    sync_s = time.monotonic() - t0
    rss_synced = current_rss_mib()
    objects = {k: v["objects"] for k, v in controller.cache.status().items()}
    tick_s, plans = [], []
    for _ in range(ticks):
        t = time.monotonic()
        report = controller.autoscaler.tick()
        tick_s.append(time.monotonic() - t)
        if not report.synced:
            raise SystemExit(f"tick not synced: {report.errors}")
        plan = report.plan
        plans.append({"scale_up": [(s.pool, s.nodes) for s in plan.scale_up] if plan else None,
                      "unplaceable": len(plan.unplaceable) if plan else None})
    t = time.monotonic()
    snapshot = controller.cache.snapshot()
    snapshot_s = time.monotonic() - t
    controller.close()
    return {"objects": objects, "sync_s": round(sync_s, 2), "first_tick_s": round(tick_s[0], 2),
            "tick_s_median_rest": round(statistics.median(tick_s[1:]), 3) if len(tick_s) > 1 else None,
            "warm_snapshot_s": round(snapshot_s, 3), "pods_in_snapshot": len(snapshot.pods),
            "rss_start_mib": round(rss_start), "rss_synced_mib": round(rss_synced),
            "rss_after_ticks_mib": round(current_rss_mib()), "peak_rss_mib": round(peak_rss_mib()),
            "plan": plans[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--ticks", type=int, default=4)
    parser.add_argument("--kubeconfig", type=Path, help="use this running API server (populated as needed)")
    parser.add_argument("--run-dir", type=Path, help="control-plane run directory; kept, and its etcd data reused "
                                                     "by the next run given the same directory")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.kubeconfig, args.ticks)))
        return
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    cp = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        cp = quiet_control_plane(NAMESPACES, args.run_dir)
        kubeconfig = cp.kubeconfig_path
        print(f"control plane: {kubeconfig}", flush=True)
    try:
        t = time.monotonic()
        rates = populate(kubeconfig, args.nodes, args.pods, args.pending)
        print(f"populated in {time.monotonic() - t:.0f} s {rates}", flush=True)
        out = subprocess.run([sys.executable, __file__, "--measure", "--kubeconfig", str(kubeconfig),
                              "--ticks", str(args.ticks)], check=True, capture_output=True, text=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(result, indent=1))
        print(f"initial sync {result['sync_s']} s (target < 60 s); controller RSS {result['rss_after_ticks_mib']} MiB, "
              f"peak {result['peak_rss_mib']} MiB (target < 1024 MiB); first tick {result['first_tick_s']} s, "
              f"later ticks {result['tick_s_median_rest']} s")
    finally:
        if cp is not None:
            cp.stop(keep_run_dir=args.run_dir is not None)


if __name__ == "__main__":
    main()
