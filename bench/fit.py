"""Benchmark: `gpuscale fit` logic on 1,000 nodes × 20,000 pods with openb shapes.

Nodes: 1,000 drawn from the openb all-node list (GPU nodes tainted `nvidia.com/gpu=present:NoSchedule`); pods: 20,000
drawn from `openb_pod_list_default` — GPU pods tolerate the taint, 20 % of pods carry a nodeSelector (GPU model or
CPU pool). Half the pods are bound first-fit (they hold capacity), the other half are pending and explained.
Prints the time of `explain_fit` (median of 3) and pods/s. Run: `.venv/bin/python bench/fit.py [--pending-all]`.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from dataclasses import replace

from gpuscale.engine.fit import explain_fit
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import Pod, PodPhase, SchedulingConstraints
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import NodeAffinity
from gpuscale.model.taints import Taint, TaintEffect, Toleration, TolerationOperator
from gpuscale.sim.openb import bundled, read_nodes, read_pods, to_model_node, to_model_pod

GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect=TaintEffect.NO_SCHEDULE)
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator=TolerationOperator.EXISTS,
                            effect=TaintEffect.NO_SCHEDULE)


def build(n_nodes: int, n_pods: int, bound_share: float, seed: int) -> Cluster:
    rng = random.Random(seed)
    raw_nodes = rng.sample(read_nodes(bundled("openb_node_list_all_node.csv")), n_nodes)
    nodes = []
    for n in raw_nodes:
        node = to_model_node(n, {"gpuscale.io/pool": f"gpu-{n.model.lower()}" if n.model else "cpu"})
        nodes.append(replace(node, taints=(GPU_TAINT,)) if n.gpus else node)
    shapes = read_pods(bundled("openb_pod_list_default.csv"))
    models = sorted({n.model for n in raw_nodes if n.model})
    pods: list[Pod] = []
    free = {n.name: n.allocatable for n in nodes}
    for i in range(n_pods):
        shape = shapes[rng.randrange(len(shapes))]
        pod = to_model_pod(replace(shape, name=f"pod-{i:05d}"))
        selector: tuple[tuple[str, str], ...] = ()
        if rng.random() < 0.2:
            selector = ((("nvidia.com/gpu.product", rng.choice(models)),) if shape.num_gpu
                        else (("gpuscale.io/pool", "cpu"),))
        tolerations = (GPU_TOLERATION,) if shape.num_gpu else ()
        pod = replace(pod, constraints=SchedulingConstraints(affinity=NodeAffinity(node_selector=selector),
                                                             tolerations=tolerations))
        if rng.random() < bound_share:
            for node in nodes:
                if (not (node.taints and not tolerations) and pod.constraints.affinity.matches(node.name, node.labels)
                        and not pod.requests.shortfalls(free[node.name])):
                    free[node.name] = free[node.name] - pod.requests - Resources.of(pods=1)
                    pod = replace(pod, node_name=node.name, phase=PodPhase.RUNNING, unschedulable=False)
                    break
        pods.append(pod)
    return Cluster(nodes=tuple(nodes), pods=tuple(pods))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--pending-all", action="store_true", help="no pod bound: all 20,000 are explained")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    cluster = build(args.nodes, args.pods, 0.0 if args.pending_all else 0.5, args.seed)
    pending = len(cluster.pending_pods())
    times = []
    for _ in range(3):
        start = time.perf_counter()
        results = explain_fit(cluster)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    fitting = sum(1 for r in results if r.fits)
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"nodes={args.nodes} pods={args.pods} pending={pending} fitting_now={fitting}")
    print(f"explain_fit median={median:.3f}s (runs: {', '.join(f'{t:.3f}' for t in times)})")
    print(f"pending pods/s={pending / median:,.0f}")


if __name__ == "__main__":
    main()
