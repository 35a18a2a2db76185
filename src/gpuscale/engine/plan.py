"""The input and output of one decision: `Snapshot` in, `Plan` out. Every plan item carries its reasons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.engine.reasons import Reason
from gpuscale.engine.state import EngineState
from gpuscale.model.cluster import Cluster
from gpuscale.model.frozen import quick_init

DELETION_CANDIDATE_TAINT = "DeletionCandidateOfClusterAutoscaler"
"""PreferNoSchedule taint on unneeded nodes; its value is the Unix time since which the node is unneeded."""
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
"""NoSchedule taint put on a node right before it is drained and deleted."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class UpcomingNode:
    """A node requested from the provider that has not registered as a Node object yet."""

    pool: str
    request_id: str
    requested_s: float
    zone: str | None = None
    """The zone it was requested in, when the pool lists several (None: its first)."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """What one decision reads: the cluster as observed, plus what the provider knows that the API does not."""

    cluster: Cluster
    upcoming: tuple[UpcomingNode, ...] = ()
    node_pools: Mapping[str, str] = field(default_factory=dict)
    """Node name → pool, as the provider knows it; nodes absent here fall back to their pool labels."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUp:
    pool: str
    nodes: int
    pods: tuple[str, ...]
    """`namespace/name` of the pods this scale-up is for (empty for a warm-capacity buffer)."""
    reasons: tuple[Reason, ...]
    zone: str | None = None
    """The zone to create the nodes in, for a pool listing several (`NodePool.in_zones`); None: the pool's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Removal:
    """A node to remove now: taint it `ToBeDeleted`, cordon, evict `evict` (empty for an empty node), delete."""

    node: str
    pool: str
    evict: tuple[str, ...]
    reasons: tuple[Reason, ...]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeVerdict:
    """A node that is not removed now (blocked, or unneeded but waiting), with why."""

    node: str
    reasons: tuple[Reason, ...]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PodVerdict:
    """A pending pod no scale-up covers, or one that existing / upcoming capacity covers, with why."""

    pod: str
    reasons: tuple[Reason, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedOut:
    """An upcoming node that did not become usable in time: give it back to the provider and back the pool off."""

    pool: str
    node: str | None
    request_id: str | None
    reasons: tuple[Reason, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    scale_up: tuple[ScaleUp, ...] = ()
    scale_down: tuple[Removal, ...] = ()
    blocked: tuple[NodeVerdict, ...] = ()
    """Underutilized nodes that cannot be removed, and why."""
    unneeded: tuple[NodeVerdict, ...] = ()
    """Nodes that could go but have not been unneeded long enough (or wait for a parallelism slot)."""
    mark_unneeded: Mapping[str, float] = field(default_factory=dict)
    """Node → since (Unix s): write the `DeletionCandidateOfClusterAutoscaler` taint (new or changed)."""
    clear_unneeded: tuple[str, ...] = ()
    """Nodes whose deletion-candidate taint must go: they are needed again."""
    unplaceable: tuple[PodVerdict, ...] = ()
    covered: tuple[PodVerdict, ...] = ()
    """Pending pods that existing or upcoming capacity will take: no scale-up needed for them."""
    nominate: tuple[tuple[str, str], ...] = ()
    """(pod `namespace/name`, node): covered pods this decision expects on a registered node that is still starting,
    with no `status.nominatedNodeName` yet. The loop writes the node there (KEP-5278, `Policy.nominate_pods`), so
    kube-scheduler keeps that node's room for them against newer pods of equal or lower priority."""
    waiting: tuple[PodVerdict, ...] = ()
    """Pending pods not acted on yet (batching delay, scheduling gates, expendable priority)."""
    timed_out: tuple[TimedOut, ...] = ()
    degraded: tuple[NodeVerdict, ...] = ()
    """Nodes that have been usable and lack GPUs or readiness (engine.health): reported, never timed out."""
    malformed: tuple[PodVerdict, ...] = ()
    """Objects (pods by `namespace/name`, nodes as `node/NAME`) whose protection annotation does not parse and was
    read the safe way while it kept a node: the loop puts a Warning event on each."""
    next_at_s: float | None = None
    """When this plan next matters (Unix s): the earliest time at which deciding again on the same snapshot, with
    `state`, could plan differently — a pool's backoff ends, an unneeded node has waited its time, a recheck or a
    protection ends, a batching delay runs out, an upcoming node reaches a deadline (each stage says its own; `decide`
    takes the first). `now` when this decision changed the engine state; None when only a change of the snapshot can
    change the plan. A caller that skips quiet decisions (the twin) decides again at this time or on a change."""
    state: EngineState = field(default_factory=EngineState)


def earliest(*times: float | None) -> float | None:
    """The earliest of `times`, ignoring None (None if every one is): how stages combine their next-matters times."""
    return min((t for t in times if t is not None), default=None)
