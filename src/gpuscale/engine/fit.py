"""Where each pending pod fits now, and why not elsewhere — the logic behind `gpuscale fit`.

Pods are grouped into equivalence classes (same requests, same constraints; same labels too when inter-pod affinity
is in play). Each class asks the engine's what-if of the cluster's nodes (`engine.whatif.rows.whatif_of`: allocatable
minus the placed pods' requests, with their topology when some pod `depends_on_placed`): `reasons` gives the nodes
that take it and the other nodes' failures in kube-scheduler's words (`engine.whatif.filters`), counted by
message. So `fit` and `decide` run the very same filters.
Cost: O(nodes × resources + pods) to build, then per class the filters' vectorised masks and counts (node-only
filters once per node group, inter-pod affinity per node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscale.engine.scheduling import FitCode, FitFailure, summarize
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import Pod, depends_on_placed, uses_claims, uses_devices
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import EPHEMERAL_STORAGE

POOL_FITS = "fits"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodFit:
    """The fit of one pending pod: the nodes that take it now, else the reasons per node, and each pool's verdict."""

    pod: Pod
    fits: tuple[str, ...]
    reasons: Mapping[str, int]
    message: str
    pools: Mapping[str, str]


def explain_fit(cluster: Cluster, pools: Sequence[NodePool] = ()) -> tuple[PodFit, ...]:
    """For every pending pod (unbound, not finished), in input order: where it fits now, or why it does not."""
    pending = cluster.pending_pods()
    nodes = cluster.nodes
    table = whatif_of(nodes, [n.allocatable for n in nodes], [p for p in cluster.pods if p.consumes_capacity()],
                      {r for p in pending for r in p.requests.names()},
                      with_topology=any(map(depends_on_placed, cluster.pods)),
                      storage=cluster.storage if any(map(uses_claims, cluster.pods)) else None)
    if any(map(uses_devices, cluster.pods)):
        table.dra = DraState.of(cluster.dra, nodes, cluster.pods_by_node(), {p.name: p for p in pools},
                                [False] * len(nodes))
    by_class: dict[tuple[object, ...], PodFit] = {}
    results = []
    for pod in pending:
        key: tuple[object, ...] = (pod.requests, pod.constraints)
        if table.depends_on_placed:
            key = (*key, pod.namespace, tuple(sorted(pod.labels.items())))
        if pod.constraints.resource_claims:  # its own claims (generated from a template, or named)
            key = (*key, pod.key, pod.uid)
        known = by_class.get(key)
        if known is None:
            known = by_class[key] = _explain_class(pod, table, pools)
        results.append(PodFit(pod=pod, fits=known.fits, reasons=known.reasons, message=known.message,
                              pools=known.pools))
    return tuple(results)


def _explain_class(pod: Pod, table: WhatIf, pools: Sequence[NodePool]) -> PodFit:
    """The what-if's verdict for the class: the nodes that take it, and the other nodes' failures (`WhatIf.explain`
    of each, summed by `WhatIf.reasons`) counted by message."""
    nodes = table.nodes
    mask, reasons = table.reasons(pod)
    fits = [nodes[i].name for i in mask.nonzero()[0].tolist()]
    message = f"fits on {len(fits)} of {len(nodes)} node(s)" if fits else (
        summarize(len(nodes), reasons) if nodes else "no nodes available to schedule pods")
    # placed pods matter (inter-pod affinity), or the devices in use and the pool's declared slices (ResourceClaims)
    with_placed = table if table.depends_on_placed or (pod.constraints.resource_claims and table.dra) else None
    return PodFit(pod=pod, fits=tuple(fits), reasons=dict(sorted(reasons.items())),
                  message=message, pools={p.name: pool_verdict(pod, p, with_placed) for p in pools})


def pool_verdict(pod: Pod, pool: NodePool, table: WhatIf | None = None) -> str:
    """Whether one new, empty node of the pool would host the pod, else the first failing filter's reasons: the
    filters (`WhatIf.explain`) on a one-row what-if of the pool's template, or on `table` extended by the template
    when placed pods matter (inter-pod affinity against the cluster's pods). Cost: one small what-if, O(resources);
    with `table`, O(its rows × resources) for the extension. A pool listing several zones hosts the pod if a node in
    one of them would (`NodePool.in_zones`); else the reasons are its first zone's."""
    offers = pool.in_zones()
    if len(offers) > 1:
        verdicts = [pool_verdict(pod, offer, table) for offer in offers]
        return POOL_FITS if POOL_FITS in verdicts else verdicts[0]
    template = pool.template()
    if table is None:
        rows = whatif_of([template], [template.allocatable], (), pod.requests.names())
    else:
        rows = table.extend([template], [template.allocatable])
    failures = rows.explain(pod, len(rows) - 1)
    return "; ".join(_worded(f, pool) for f in failures) if failures else POOL_FITS


def _worded(failure: FitFailure, pool: NodePool) -> str:
    """The scheduler's words, plus a hint when the pool's allocatable leaves out a storage resource the pod asks for
    (`ephemeral-storage`, `hugepages-*`): every real node reports them, a configured template only if told."""
    name = failure.detail
    if (failure.code is FitCode.INSUFFICIENT and (name == EPHEMERAL_STORAGE or name.startswith("hugepages-"))
            and not pool.allocatable.get(name)):
        return f"{failure.message} (the pool's allocatable does not give {name}: add it)"
    return failure.message
