"""Cluster Autoscaler's `--balance-similar-node-groups`: a scale-up of N nodes split over the pools similar to the one
the expanders chose, to keep their sizes even (one pool per zone, the usual layout).

Similar, as CA's `processors/nodegroupset` compares two node groups' templates:
- the same resources, counted ones (GPUs, GPU milli, MIG slices, pods, extended resources) in equal amounts, cpu,
  memory, ephemeral storage and hugepages within `MAX_ALLOCATABLE_DIFFERENCE_RATIO` (CA's allocatable and free
  tolerance: a template is empty, so its free is its allocatable);
- the same labels, but the ones that differ between node groups by nature (`IGNORED_LABELS`: hostname, zone and
  region, CA's basic list, the node group labels its provider comparators leave out, gpuscale's pool label);
- the same taints, and the same GPU model (what gpuscale's per-model GPU limit counts).

The split is CA's `BalanceScaleUpBetweenGroups`: each node in turn goes to the smallest group (by its current size,
upcoming nodes included) that still has headroom under every limit with the nodes given so far counted
(`engine.limits.headroom`), so no group passes its `max_size` and no cluster limit is passed.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscale.engine.limits import Totals, headroom
from gpuscale.engine.policy import Limits
from gpuscale.model.node import HOSTNAME_LABEL, LEGACY_ZONE_LABEL, POOL_LABEL, ZONE_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import CPU, MEMORY

MAX_ALLOCATABLE_DIFFERENCE_RATIO = 0.05
"""How far a measured resource (cpu, memory, storage) may differ between similar groups (CA's
MaxAllocatableDifferenceRatio and MaxFreeDifferenceRatio)."""

_MEASURED_PREFIXES = ("hugepages-",)
_MEASURED = frozenset({CPU, MEMORY, "ephemeral-storage"})

IGNORED_LABELS = frozenset({
    HOSTNAME_LABEL, ZONE_LABEL, LEGACY_ZONE_LABEL,
    "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/fluentd-ds-ready", "kops.k8s.io/instancegroup",  # CA's BasicIgnoredLabels
    "topology.gke.io/zone", "cloud.google.com/gke-nodepool",  # its GCE/GKE comparators
    "alpha.eksctl.io/nodegroup-name", "eks.amazonaws.com/nodegroup", "k8s.amazonaws.com/eniConfig",
    "topology.ebs.csi.aws.com/zone", "karpenter.k8s.aws/placement-group-id",  # its AWS comparator
    "agentpool", "kubernetes.azure.com/agentpool", "kubernetes.azure.com/node-image-version",
    "kubernetes.azure.com/nodepool-type", "kubernetes.azure.com/consolidated-additional-properties",
    "topology.disk.csi.azure.com/zone",  # its Azure comparator
    POOL_LABEL,
})
"""Labels left out of the comparison: they name the node, its zone or its node group."""


def _measured(name: str) -> bool:
    return name in _MEASURED or name.startswith(_MEASURED_PREFIXES)


def _within(a: int, b: int, ratio: float) -> bool:
    larger, smaller = max(a, b), min(a, b)
    return larger - smaller <= larger * ratio


def similar(a: NodePool, b: NodePool) -> bool:
    """Whether two pools' new nodes are alike enough to balance between (the module docstring's rules). O(resources
    + labels + taints)."""
    left, right = dict(a.allocatable.items), dict(b.allocatable.items)
    if left.keys() != right.keys() or a.gpu_model != b.gpu_model or set(a.taints) != set(b.taints):
        return False
    for name, amount in left.items():
        other = right[name]
        if not (_within(amount, other, MAX_ALLOCATABLE_DIFFERENCE_RATIO) if _measured(name) else amount == other):
            return False
    labels_a = {k: v for k, v in a.template().labels.items() if k not in IGNORED_LABELS}
    labels_b = {k: v for k, v in b.template().labels.items() if k not in IGNORED_LABELS}
    return labels_a == labels_b


def balance(groups: Sequence[NodePool], nodes: int, totals: Totals, limits: Limits,
            max_per_scale_up: int) -> list[tuple[NodePool, int]]:
    """`nodes` new nodes over `groups` (similar pools, the chosen one first), each to the smallest group (current size
    plus what it got; ties to the earlier group) that still has headroom with the nodes given so far counted
    (`engine.limits.headroom`: its max size and every cluster limit, shared by the groups). The groups that get any,
    with how many, in `groups` order; fewer than `nodes` in all only when no group has headroom left.
    O(nodes × groups × limits)."""
    sizes = totals.nodes_by_pool or {}
    current = [sizes.get(g.name, 0) for g in groups]
    added = [0] * len(groups)
    running = totals
    for _ in range(nodes):
        open_ = [i for i, g in enumerate(groups)
                 if added[i] < max_per_scale_up and headroom(g, running, limits, max_per_scale_up).nodes >= 1]
        if not open_:
            break
        smallest = min(open_, key=lambda i: (current[i] + added[i], i))
        added[smallest] += 1
        running = running.add(groups[smallest], 1)
    return [(g, n) for g, n in zip(groups, added, strict=True) if n > 0]
