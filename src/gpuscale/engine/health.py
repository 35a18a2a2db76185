"""Node health: which nodes run workloads (and so are never timed out as if still starting) and which are degraded.

A start-up rule (provisioning, start-up or GPU-initialisation deadline) judges a node that never became usable; it
deletes through the provider, with no drain. So it must never fire on a node that runs pods other than DaemonSet pods:
such a node has been usable, whatever its allocatable says now (docs/decisions.md, D29).
A node that has been usable and lacks GPUs its template promises, or went NotReady under its pods, is
*degraded*: it is reported (`degraded_verdicts`), counted with its real capacity, and never backs its pool off. Only
the opt-in repair policy (`engine.repair`) removes one, and only through the drain path. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpuscale.engine.nodes import NodePhase, degraded_gpus
from gpuscale.engine.plan import NodeVerdict
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import is_gpu_resource


def is_workload(pod: Pod) -> bool:
    """A pod that says its node has been usable: not a DaemonSet's, not a static (mirror) pod, not finished."""
    return not pod.of_daemonset() and not pod.is_mirror() and not pod.is_terminal()


def workload_count(pods: Sequence[Pod] | None) -> int:
    return sum(1 for p in pods if is_workload(p)) if pods else 0


def _gpus_text(node: Node, pool: NodePool, lacking: Mapping[str, int]) -> str:
    have = dict(node.allocatable.items)
    template = dict(pool.allocatable.items)
    return ", ".join(f"{name} {have.get(name, 0)} of {template.get(name, 0)}" for name in sorted(lacking))


def degraded_reason(node: Node, pool: NodePool | None, current: NodePhase, workloads: int) -> Reason | None:
    """Why a node is degraded, or None. `current`: its phase; `workloads`: how many non-DaemonSet pods run there."""
    if pool is None or current is NodePhase.DELETING:
        return None
    if current is NodePhase.USABLE:
        lacking = dict(degraded_gpus(node, pool).items)
        if not lacking:
            return None
        return Reason(ReasonCode.DEGRADED, f"GPUs below the pool's template: {_gpus_text(node, pool, lacking)}",
                      {"gpus_lacking": sum(lacking.values())})
    if not workloads:
        return None  # still starting, as far as the snapshot can tell
    if current is NodePhase.READY:
        lacking = {n: a for n, a in pool.allocatable.items if is_gpu_resource(n)}
        return Reason(ReasonCode.DEGRADED, f"GPUs gone while {workloads} pod(s) run there: "
                                           f"{_gpus_text(node, pool, lacking)}",
                      {"gpus_lacking": sum(lacking.values()), "pods": workloads})
    return Reason(ReasonCode.DEGRADED, f"not Ready while {workloads} pod(s) run there", {"pods": workloads})


def degraded_verdicts(candidates: Iterable[tuple[Node, NodePool | None, NodePhase]],
                      pods_by_node: Mapping[str, Sequence[Pod]]) -> tuple[NodeVerdict, ...]:
    """The degraded nodes among `candidates` (node, pool, phase), in name order, each with its reason."""
    out = []
    for node, pool, current in candidates:
        reason = degraded_reason(node, pool, current, workload_count(pods_by_node.get(node.name)))
        if reason is not None:
            out.append(NodeVerdict(node=node.name, reasons=(reason,)))
    return tuple(sorted(out, key=lambda v: v.node))
