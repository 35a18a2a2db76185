"""Where each pending pod fits now, and why not elsewhere — the logic behind `gpuscale fit`.

Pods are grouped into equivalence classes (same requests, same constraints; same labels too when inter-pod affinity
is in play), and each class is checked against every node once:
- the node-only filters (cordon, name, taints, labels) are evaluated once per *node group* — nodes that differ only in
  their hostname — unless the class's constraints name individual nodes;
- NodeResourcesFit is one vectorised comparison of the class's request vector against a (nodes × resources) matrix
  of free capacity; on nodes that share GPUs by fraction (`gpuscale.io/gpu-milli`), the GPU devices are then checked
  one by one as the engine's what-if does (`engine.placement.devices`): a fraction needs one device with room, whole
  GPUs need free devices, so totals that suffice can still fail ("node(s) didn't have 600 gpu-milli free on one GPU
  device");
- InterPodAffinity runs per node only for the nodes that passed everything else.
Cost: O(classes × (node groups + nodes × requested resources)) instead of O(pods × nodes × filters).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuscale.engine.placement.devices import GpuDevices, RequestKinds
from gpuscale.engine.scheduling import (
    FitCode,
    FitFailure,
    Topology,
    resource_failures,
    static_failures,
    summarize,
    unsupported_failures,
)
from gpuscale.engine.whatif.model import GroupKey, names_nodes_individually, node_group_key
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import EPHEMERAL_STORAGE, PODS, Resources

POOL_FITS = "fits"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodFit:
    """The fit of one pending pod: the nodes that take it now, else the reasons per node, and each pool's verdict."""

    pod: Pod
    fits: tuple[str, ...]
    reasons: Mapping[str, int]
    message: str
    pools: Mapping[str, str]


class _Capacity:
    """Free capacity of every node as an int64 matrix over the resource names that matter to this snapshot."""

    def __init__(self, nodes: Sequence[Node], cluster: Cluster, names: Sequence[str]) -> None:
        self.names = list(names)
        self.column = {n: i for i, n in enumerate(self.names)}
        used = cluster.requested_by_node()
        counts = Counter(p.node_name for p in cluster.pods if p.consumes_capacity())
        self.free = np.array(
            [[(n.allocatable.get(r) - used.get(n.name, Resources()).get(r)) for r in self.names] for n in nodes],
            dtype=np.int64,
        ).reshape(len(nodes), len(self.names))
        self.free_pods = np.array([n.allocatable.get(PODS) - counts.get(n.name, 0) for n in nodes], dtype=np.int64)
        self.kinds = RequestKinds()
        self.devices = GpuDevices.of([n.allocatable for n in nodes])
        """Free milli per GPU device of the nodes with per-device accounting, from the pods bound there."""
        if self.devices:
            row = {n.name: i for i, n in enumerate(nodes)}
            held = [(row[p.node_name], need, p) for p in cluster.pods if p.consumes_capacity()
                    and p.node_name in row and (need := self.kinds.need(p.requests)) is not None
                    and self.devices.count[row[p.node_name]]]
            if held:
                rows, needs, pods = zip(*held, strict=True)
                self.devices.load(rows, needs, pods)



def explain_fit(cluster: Cluster, pools: Sequence[NodePool] = ()) -> tuple[PodFit, ...]:
    """For every pending pod (unbound, not finished), in input order: where it fits now, or why it does not."""
    pending = cluster.pending_pods()
    nodes = cluster.nodes
    names = sorted({r for p in pending for r in p.requests.names()})
    capacity = _Capacity(nodes, cluster, names)
    groups: dict[GroupKey, list[int]] = {}
    for i, node in enumerate(nodes):
        groups.setdefault(node_group_key(node), []).append(i)
    with_affinity = any(p.constraints.pod_affinity or p.constraints.pod_anti_affinity for p in cluster.pods)
    topology = Topology(nodes, (p for p in cluster.pods if p.consumes_capacity())) if with_affinity else None
    by_class: dict[tuple[object, ...], PodFit] = {}
    results = []
    for pod in pending:
        key: tuple[object, ...] = (pod.requests, pod.constraints)
        if topology is not None:
            key = (*key, pod.namespace, tuple(sorted(pod.labels.items())))
        known = by_class.get(key)
        if known is None:
            known = by_class[key] = _explain_class(pod, nodes, groups, capacity, topology, pools)
        results.append(PodFit(pod=pod, fits=known.fits, reasons=known.reasons, message=known.message,
                              pools=known.pools))
    return tuple(results)


def _explain_class(pod: Pod, nodes: Sequence[Node], groups: Mapping[GroupKey, list[int]],
                   capacity: _Capacity, topology: Topology | None, pools: Sequence[NodePool]) -> PodFit:
    static_ok = np.zeros(len(nodes), dtype=bool)
    reasons: Counter[str] = Counter()
    per_node = names_nodes_individually(pod.constraints)
    for members in groups.values():
        if per_node:
            for i in members:
                failures = static_failures(pod.constraints, nodes[i])
                if failures:
                    reasons.update(f.message for f in failures)
                else:
                    static_ok[i] = True
            continue
        failures = static_failures(pod.constraints, nodes[members[0]])
        if failures:
            for f in failures:
                reasons[f.message] += len(members)
        else:
            static_ok[members] = True
    request = np.array([pod.requests.get(r) for r in capacity.names], dtype=np.int64)
    columns = np.flatnonzero(request > 0)
    short = capacity.free[:, columns] < request[columns]
    too_many = capacity.free_pods < 1
    candidates = static_ok & ~short.any(axis=1) & ~too_many
    need = capacity.kinds.need(pod.requests)
    if need is not None and capacity.devices and candidates.any():
        rows = np.flatnonzero(candidates)
        lacking = rows[~capacity.devices.fits(need, rows)]  # rows without devices pass
        if len(lacking):
            candidates[lacking] = False
            detail = (f"{need.milli} gpu-milli free on one GPU device" if need.fractional
                      else f"{need.count} whole GPU device(s) free")
            reasons[FitFailure(FitCode.GPU_DEVICES, detail).message] += len(lacking)
    full = int((static_ok & too_many).sum())
    if full:
        reasons[FitFailure(FitCode.TOO_MANY_PODS).message] += full
    for j, column in enumerate(columns.tolist()):
        short_here = int((static_ok & short[:, j]).sum())
        if short_here:
            reasons[FitFailure(FitCode.INSUFFICIENT, capacity.names[column]).message] += short_here
    fits = []
    unsupported = unsupported_failures(pod.constraints)
    for index in np.flatnonzero(candidates).tolist():
        node = nodes[index]
        failures = topology.failures(pod, node) if topology is not None else ()
        failures = failures or unsupported
        if failures:
            reasons.update(f.message for f in failures)
        else:
            fits.append(node.name)
    message = f"fits on {len(fits)} of {len(nodes)} node(s)" if fits else (
        summarize(len(nodes), reasons) if nodes else "no nodes available to schedule pods")
    return PodFit(pod=pod, fits=tuple(fits), reasons=dict(sorted(reasons.items())),
                  message=message, pools={p.name: pool_verdict(pod, p, topology) for p in pools})


def pool_verdict(pod: Pod, pool: NodePool, topology: Topology | None = None) -> str:
    """Whether one new, empty node of the pool would host the pod, else the first reason it would not."""
    template = pool.template()
    failures = static_failures(pod.constraints, template) or resource_failures(
        pod.requests, template.allocatable, template.allocatable.get(PODS))
    if not failures and topology is not None:
        failures = topology.failures(pod, template)
    failures = failures or unsupported_failures(pod.constraints)
    return "; ".join(_worded(f, pool) for f in failures) if failures else POOL_FITS


def _worded(failure: FitFailure, pool: NodePool) -> str:
    """The scheduler's words, plus a hint when the pool's allocatable leaves out a storage resource the pod asks for
    (`ephemeral-storage`, `hugepages-*`): every real node reports them, a configured template only if told."""
    name = failure.detail
    if (failure.code is FitCode.INSUFFICIENT and (name == EPHEMERAL_STORAGE or name.startswith("hugepages-"))
            and not pool.allocatable.get(name)):
        return f"{failure.message} (the pool's allocatable does not give {name}: add it)"
    return failure.message
