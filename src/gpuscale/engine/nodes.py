"""Node lifecycle as the engine sees it: which pool a node belongs to and whether it is usable yet.

Phases (one transition table; each edge's trigger in the comment):
    REQUESTED  → REGISTERED   a Node object appears (kubelet registered)
    REGISTERED → READY        condition Ready=True, but none of the pool's GPU resources in allocatable yet
    READY      → USABLE       the device plugin advertises the pool's GPUs (driver and device plugin registered);
                              nodes of pools without GPUs skip READY and become USABLE on Ready
    any        → DELETING     deletionTimestamp set or ToBeDeleted taint
Only USABLE nodes offer their real free capacity. REQUESTED, REGISTERED and READY nodes are *upcoming*: they count as
their pool's template so pending pods wait for them instead of causing another scale-up (CA #3164, #7956;
Karpenter aws#6355) — whatever labels the node carries.

Starting is not degraded (docs/decisions.md, "Starting, usable and degraded nodes"): a node whose device plugin
advertises some of the pool's GPUs but fewer than the template (a GPU fell off the bus; time-slicing replicas other
than the pool's) has registered its GPUs. It is USABLE with its real capacity, and `degraded_gpus` names what it
lacks. Whether a node runs workloads is a fact of the pods, not of the node: `engine.health` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum

from gpuscale.engine.plan import TO_BE_DELETED_TAINT
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources, is_gpu_resource


class NodePhase(StrEnum):
    REQUESTED = "Requested"
    REGISTERED = "Registered"
    READY = "ReadyGpuPending"
    USABLE = "Usable"
    DELETING = "Deleting"


ALLOWED = {
    NodePhase.REQUESTED: {NodePhase.REGISTERED, NodePhase.DELETING},  # registration, or cancelled / timed out
    NodePhase.REGISTERED: {NodePhase.READY, NodePhase.USABLE, NodePhase.DELETING},  # Ready (with or without GPUs)
    NodePhase.READY: {NodePhase.USABLE, NodePhase.DELETING},  # device plugin registers, or GPU init times out
    NodePhase.USABLE: {NodePhase.DELETING},  # scale-down
    NodePhase.DELETING: set(),
}


STARTUP_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized"})
"""Taints a node carries only while it starts (node lifecycle controller, cloud controller manager)."""
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"


def as_it_will_be(node: Node) -> Node:
    """An upcoming node as pods will see it once usable: without its start-up taints. Counting the `not-ready` taint
    against the pod the node was ordered for would order a second node (found against the real control plane)."""
    kept = tuple(t for t in node.taints
                 if t.key not in STARTUP_TAINTS and not t.key.startswith(STARTUP_TAINT_PREFIX))
    return node if kept == node.taints else replace(node, taints=kept)


def pool_of(node: Node, node_pools: Mapping[str, str]) -> str | None:
    """The provider's answer first, then the node's pool labels."""
    return node_pools.get(node.name) or node.pool


def _gpu_items(pool: NodePool) -> tuple[tuple[str, int], ...]:
    return tuple((n, a) for n, a in pool.allocatable.items if is_gpu_resource(n))


def missing_gpus(node: Node, pool: NodePool | None) -> Resources:
    """GPU resources the pool's template offers that the node does not (yet) advertise in allocatable."""
    if pool is None:
        return Resources()
    have = dict(node.allocatable.items)
    return Resources.of({n: a - have.get(n, 0) for n, a in _gpu_items(pool) if a > have.get(n, 0)})


def phase(node: Node, pool: NodePool | None, ready: NodePhase | None = None) -> NodePhase:
    """`ready`: the phase `gpu_phase(node, pool)` gives, when the caller knows it (it depends on the pool and the
    node's allocatable only)."""
    if node.deleting or any(t.key == TO_BE_DELETED_TAINT for t in node.taints):
        return NodePhase.DELETING
    if not node.ready:
        return NodePhase.REGISTERED
    return ready if ready is not None else gpu_phase(node, pool)


def gpu_phase(node: Node, pool: NodePool | None) -> NodePhase:
    """The phase of a Ready node that is not being deleted: READY while none of the GPU resources the pool promises
    is in its allocatable, else USABLE (all of them, or some: then the node is degraded, not starting)."""
    if pool is None:
        return NodePhase.USABLE
    wanted = _gpu_items(pool)
    if not wanted:
        return NodePhase.USABLE
    have = dict(node.allocatable.items)
    return NodePhase.USABLE if any(have.get(n, 0) > 0 for n, _ in wanted) else NodePhase.READY


def degraded_gpus(node: Node, pool: NodePool | None) -> Resources:
    """GPU resources a node that registered its GPUs advertises below its pool's template (empty: not degraded, or
    still starting: a node advertising none of them is READY, not degraded)."""
    if pool is None or gpu_phase(node, pool) is not NodePhase.USABLE:
        return Resources()
    return missing_gpus(node, pool)


def usable_capacity(node: Node, pool: NodePool | None) -> Resources:
    """What the node will offer once usable: its allocatable, raised to the template's for a node still starting."""
    if pool is None or phase(node, pool) is NodePhase.USABLE:
        return node.allocatable
    return node.allocatable.max(pool.allocatable)
