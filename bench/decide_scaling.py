"""Benchmark: what a decision costs as the cluster grows while the change between decisions stays one object.

Runs `bench/twin.py`'s scenario for `--hours` simulated hours and keeps the last decision's inputs, like
`bench/decide_floor.py`. That cluster is then copied 1, 2 and 4 times over (each copy's nodes and bound pods renamed;
the pending pods, pools and upcoming nodes once), and each size is decided `--repeats` times with the loop's memo, one
object replaced before each decision as the twin would hand it over (a new pod object bound where the old one was, or
with `--change node` a node with its DeletionCandidate taint set or cleared), with the change hint
(`Cluster.changes`). Prints the CPU per decision at each size and the fit `fixed + per node`: the part of a decision
that follows the cluster's size rather than its change.
Run: `PYTHONPATH=. .venv/bin/python bench/decide_scaling.py [--hours 7] [--repeats 300] [--change pod|node]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace

from bench.decide_floor import _Last
from bench.twin import scenario

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Snapshot
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Changes, Cluster
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named

HOSTNAME = "kubernetes.io/hostname"


def copied(snapshot: Snapshot, copies: int) -> Snapshot:
    """The snapshot's nodes and bound pods `copies` times over (copy j's names end in `-xj`)."""
    cluster = snapshot.cluster
    nodes, pods, pools = list(cluster.nodes), list(cluster.pods), dict(snapshot.node_pools)
    for j in range(1, copies):
        suffix = f"-x{j}"
        for node in cluster.nodes:
            labels = {**node.labels, **({HOSTNAME: node.name + suffix} if HOSTNAME in node.labels else {})}
            nodes.append(replace(node, name=node.name + suffix, labels=labels))
            if node.name in snapshot.node_pools:
                pools[node.name + suffix] = snapshot.node_pools[node.name]
        pods.extend(replace(p, name=p.name + suffix, uid=p.uid + suffix, node_name=p.node_name + suffix)
                    for p in cluster.pods if p.node_name is not None)
    return Snapshot(cluster=Cluster(nodes=tuple(nodes), pods=tuple(pods), pdbs=cluster.pdbs,
                                    pod_groups=cluster.pod_groups),
                    upcoming=snapshot.upcoming, node_pools=pools)


def per_decision(snapshot: Snapshot, last: _Last, repeats: int, change: str) -> float:
    """Mean CPU seconds of a decision on `snapshot` with one object replaced before each (a fresh memo, warmed once)."""
    _, pools, state, policy, now = last.args
    memo = IncrementalStore()
    decide(snapshot, pools, state, policy, now, store=memo)
    cluster = snapshot.cluster
    nodes, pods = list(cluster.nodes), list(cluster.pods)
    bound = [i for i, p in enumerate(pods) if p.node_name is not None]
    nodes_before, pods_before = cluster.nodes, cluster.pods
    spent = 0.0
    for r in range(repeats):
        if change == "node":
            i = (r * 7919) % len(nodes)
            old_node = nodes[i]
            taints = tuple(t for t in old_node.taints if t.key != DELETION_CANDIDATE_TAINT)
            if taints == old_node.taints:
                taints += (Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(now)),
                                 effect=TaintEffect.PREFER_NO_SCHEDULE),)
            nodes[i] = replace(old_node, taints=taints)
            changes = Changes(nodes_before=nodes_before, nodes_left=(old_node,), nodes_came=(nodes[i],),
                              pods_before=pods_before, pods_left=(), pods_came=())
        else:
            i = bound[(r * 7919) % len(bound)]
            old_pod = pods[i]
            pods[i] = replace(old_pod)
            changes = Changes(nodes_before=nodes_before, nodes_left=(), nodes_came=(), pods_before=pods_before,
                              pods_left=(old_pod,), pods_came=(pods[i],))
        nodes_before, pods_before = tuple(nodes), tuple(pods)
        now_snapshot = Snapshot(cluster=Cluster(nodes=nodes_before, pods=pods_before, pdbs=cluster.pdbs,
                                                pod_groups=cluster.pod_groups, changes=changes),
                                upcoming=snapshot.upcoming, node_pools=snapshot.node_pools)
        started = time.process_time()
        decide(now_snapshot, pools, state, policy, now + 10 * (r + 1), store=memo)
        spent += time.process_time() - started
    return spent / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=7.0)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--change", choices=("pod", "node"), default="pod")
    args = parser.parse_args()
    setup, config = parse_scenario(scenario(args.hours / 24, 1000), "bench")
    last = _Last()
    simulate(setup, policy_named("gpuscale", config), decide=last)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()} python {platform.python_version()}, {os.cpu_count()} CPUs, load {load}")
    sizes: list[tuple[int, float]] = []
    for copies in (1, 2, 4):
        snapshot = copied(last.args[0], copies)
        cost = per_decision(snapshot, last, args.repeats, args.change)
        sizes.append((len(snapshot.cluster.nodes), cost))
        print(f"x{copies}: {len(snapshot.cluster.nodes):,} nodes, {len(snapshot.cluster.pods):,} pods: "
              f"{1000 * cost:.3f} ms per decision (one {args.change} replaced each time, mean of {args.repeats})")
    (n1, c1), (n4, c4) = sizes[0], sizes[-1]
    slope = (c4 - c1) / (n4 - n1)
    print(f"fit: {1000 * (c1 - slope * n1):.3f} ms fixed + {1e6 * slope:.2f} µs per node")


if __name__ == "__main__":
    main()
