"""The ports of the control loop: what `loop.tick` needs from the outside world, as Protocols in one file.

The digital twin (`sim/`) and the real controller (`kube/`, `providers/`) each implement these; the loop never knows
which it talks to. Side effects happen only behind these ports. Two error types cross them:
- `NotSynced` — the reader could not give a complete view (cache not synced, a list failed): the loop does nothing
  this tick, because acting on a partial view removes nodes that are in use and adds nodes that are not needed;
- `ProviderError` — the provider refused a scale-up, typed by `FailureKind` so the pool backs off and the next
  decision falls back to another pool.
Any other exception from a port is "trouble": the tick records it in its report and carries on with the next action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Protocol

from gpuscale.engine.plan import UpcomingNode
from gpuscale.engine.state import FailureKind
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import GpuscaleError


class NotSynced(GpuscaleError):
    """The cluster view is partial (informer caches not synced, a list call failed): do not act on it."""


class ProviderError(GpuscaleError):
    """A scale-up the provider refused. `kind` says how the pool backs off: a stockout (capacity unavailable in the
    pool's zones) and a quota error both mean "try another pool"; `OTHER` is anything else the provider reported."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")


class EvictionOutcome(StrEnum):
    EVICTED = "Evicted"
    """The Eviction API accepted it (HTTP 201): the pod terminates gracefully."""
    BLOCKED_BY_PDB = "BlockedByPDB"
    """HTTP 429: a PodDisruptionBudget allows no disruption now. Retry later; never force."""
    GONE = "Gone"
    """HTTP 404: the pod no longer exists — as good as evicted."""
    FAILED = "Failed"
    """Any other answer: retry later."""


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Clock(Protocol):
    def now(self) -> float:
        """Unix seconds. The loop reads it once per tick; the twin's clock is virtual."""
        ...


class ClusterReader(Protocol):
    def snapshot(self) -> Cluster:
        """The whole cluster as last observed. Raises `NotSynced` if any part of it could not be read."""
        ...


class ClusterWriter(Protocol):
    """The writes the autoscaler makes on Nodes and Pods. Each call is idempotent: writing what is there is a no-op."""

    def set_deletion_candidate(self, node: str, since_s: float) -> None:
        """Taint `DeletionCandidateOfClusterAutoscaler=<since, Unix s>:PreferNoSchedule` (replacing an older one)."""
        ...

    def clear_deletion_candidate(self, node: str) -> None:
        """Remove the `DeletionCandidateOfClusterAutoscaler` taint if present."""
        ...

    def mark_to_be_deleted(self, node: str, now_s: float) -> None:
        """Taint `ToBeDeletedByClusterAutoscaler=<now, Unix s>:NoSchedule` and cordon the node."""
        ...

    def unmark_to_be_deleted(self, node: str) -> None:
        """Undo `mark_to_be_deleted`: remove the taint and uncordon."""
        ...

    def evict(self, pod_key: str) -> EvictionOutcome:
        """Evict `namespace/name` through the Eviction API (PDBs respected). Never deletes the pod directly."""
        ...

    def nominate(self, pod_key: str, node: str) -> bool:
        """Write `status.nominatedNodeName: node` on the pending pod `namespace/name` if it is still unbound and
        nominated nowhere (KEP-5278: a component never overwrites another's nomination). True if written."""
        ...

    def clear_nomination(self, pod_key: str, node: str) -> bool:
        """Remove the pod's `status.nominatedNodeName` if it still names `node` and the pod is unbound (the component
        that nominated is the one that clears). True if cleared."""
        ...


class NodeProvider(Protocol):
    """The cloud side: node pools that grow and shrink. Node names are Kubernetes Node names."""

    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        """Request `count` more nodes in `pool` (in `zone`, one of the pool's zones, when the decision names one:
        `ScaleUp.zone`; None: where the provider puts them); returns one request id per node requested.
        Raises `ProviderError` when the provider refuses (stockout, quota, other)."""
        ...

    def delete(self, nodes: Sequence[str]) -> None:
        """Delete these registered nodes and shrink their pools accordingly."""
        ...

    def cancel(self, request_ids: Sequence[str]) -> None:
        """Give back requested nodes that never registered."""
        ...

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        """Nodes requested but not registered as Node objects yet."""
        ...

    def node_pools(self) -> Mapping[str, str]:
        """Node name → pool, for every node the provider manages. The loop keeps the mapping in its snapshot as it
        is, without a copy: a provider never changes a mapping it returned (it returns another one)."""
        ...


class EventSink(Protocol):
    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        """Record a Kubernetes Event on an object (`Pod` `ns/name`, `Node` `name`, `ConfigMap` `ns/name`)."""
        ...
