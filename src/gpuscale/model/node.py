"""Nodes: allocatable resources, labels, taints, readiness and the bookkeeping the autoscaler writes on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.model.frozen import quick_init
from gpuscale.model.resources import Resources
from gpuscale.model.taints import Taint

HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
LEGACY_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
POOL_LABEL = "gpuscale.io/pool"
"""The pool a node belongs to, written by gpuscale's providers; other well-known pool labels are read too."""
POOL_LABELS = (POOL_LABEL, "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "karpenter.sh/nodepool",
               "kubernetes.azure.com/agentpool", "cluster.x-k8s.io/deployment-name")


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    name: str
    allocatable: Resources
    """What pods may request in total, including `pods`; from `status.allocatable` (or `capacity` if absent)."""
    capacity: Resources = field(default_factory=Resources)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    """`spec.unschedulable` (cordoned)."""
    ready: bool = True
    ready_since_s: float | None = None
    """When the Ready condition last changed (its `lastTransitionTime`), if known."""
    created_s: float | None = None
    provider_id: str = ""
    deleting: bool = False

    @property
    def pool(self) -> str | None:
        for label in POOL_LABELS:
            if label in self.labels:
                return self.labels[label]
        return None

    @property
    def zone(self) -> str | None:
        return self.labels.get(ZONE_LABEL) or self.labels.get(LEGACY_ZONE_LABEL)

    def __hash__(self) -> int:
        return hash(self.name)
