"""Node lifecycle as the engine sees it: which pool a node belongs to and whether it is usable yet.

One start-up vocabulary (docs/decisions.md, D35): *Ready* is the Node's `Ready` condition and nothing else; *GPUs
registered* means the device plugin advertises some of the pool's GPU resources in allocatable; *usable* means Ready,
GPUs registered and no start-up taint left. The start-up chain's steps are `lifecycle.phases.Milestone`
(`node_registered`, `node_ready`, `gpu_registered`); a `NodePhase` is the stretch of that chain a node in the
snapshot is in, named after the last step it reached:
    REGISTERED   a Node object exists; its Ready condition is not True
    READY        Ready, but not usable: none of the pool's GPU resources in allocatable yet, the ResourceSlices its
                 pool's DRA drivers publish not there yet (`awaiting_slices`), or a start-up taint still on it;
                 nodes of pools without GPUs, slices or start-up taints skip READY and are USABLE on Ready
    USABLE       fully started
    DELETING     deletionTimestamp set or ToBeDeleted taint
A phase is read from each snapshot alone, and a node may move back: a usable node that goes NotReady is REGISTERED
again, one whose GPUs all fall off is READY again (`engine.health` calls such a node degraded, not starting).
Only USABLE nodes offer their real free capacity. Provider requests without a Node object yet (`Snapshot.upcoming`),
REGISTERED and READY nodes are *upcoming*: they count as their pool's template so pending pods wait for them instead
of causing another scale-up (CA #3164, #7956; Karpenter aws#6355) — whatever labels the node carries: until it is
fully started, a node counts with its pool template's labels where it lacks them (GPU feature discovery adds
`nvidia.com/gpu.product` only once the driver works), its cordon is ignored (GPU and network operators cordon a node
while they set it up, CA #7956) and so are its start-up and status taints (`StartupTaints`: the pool's, with the
policy's merged in). Then it counts as it is.

Starting is not degraded (docs/decisions.md, D29): a node whose device plugin
advertises some of the pool's GPUs but fewer than the template (a GPU fell off the bus; time-slicing replicas other
than the pool's) has registered its GPUs. It is USABLE with its real capacity, and `degraded_gpus` names what it
lacks. Whether a node runs workloads is a fact of the pods, not of the node: `engine.health` reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from enum import StrEnum

from gpuscale.engine.plan import TO_BE_DELETED_TAINT
from gpuscale.model.dra import Dra
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources, is_gpu_resource
from gpuscale.model.taints import DEFAULT_STARTUP_TAINTS, UNSCHEDULABLE_TAINT, StartupTaints


class NodePhase(StrEnum):
    """Where a Node object is on the start-up chain (the module docstring)."""

    REGISTERED = "Registered"
    """Registered, not Ready."""
    READY = "Ready"
    """Ready, not usable yet: GPUs not registered, or a start-up taint left."""
    USABLE = "Usable"
    """Ready, GPUs registered, no start-up taint left."""
    DELETING = "Deleting"


def rules_of(pool: NodePool | None) -> StartupTaints:
    return pool.startup_taints if pool is not None else DEFAULT_STARTUP_TAINTS


def as_it_will_be(node: Node, pool: NodePool | None = None) -> Node:
    """An upcoming node as pods will see it once usable: without its start-up and status taints and its cordon, with
    the pool template's labels where it has none of its own. Counting the `not-ready` taint against the pod the node
    was ordered for would order a second node (found against the real control plane); so would a label GFD adds
    later, or an operator's cordon."""
    rules = rules_of(pool)
    # the cordon's own taint goes with the cordon (the node lifecycle controller mirrors spec.unschedulable in it)
    kept = tuple(t for t in node.taints if not rules.is_startup(t.key) and not rules.is_status(t.key)
                 and t.key != UNSCHEDULABLE_TAINT.key)
    labels = node.labels
    if pool is not None:
        template = pool.template(node.name).labels
        if any(k not in labels for k in template):
            labels = {**template, **labels}
    if kept == node.taints and labels is node.labels and not node.unschedulable:
        return node
    return replace(node, taints=kept, labels=labels, unschedulable=False)


DISCOVERY_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")
"""Labels discovery daemons put on a node some time after it is up (GPU feature discovery, node feature discovery):
nobody sets them by hand, and a node may lack them for a while after its GPUs register."""


def as_it_counts(node: Node, pool: NodePool | None) -> Node:
    """A usable node as the scheduling simulation sees it: without its status taints (CA's `--status-taint`), and
    with its pool's discovery labels (`DISCOVERY_PREFIXES`) where it has none of its own yet — GFD labels a node up
    to ~20 s after its device plugin registers, and a pod selecting `nvidia.com/gpu.product` must not order another
    node meanwhile. A label of the pool that is no discovery label counts only while the node starts."""
    rules = rules_of(pool)
    taints = node.taints
    if any(rules.is_status(t.key) for t in taints):
        taints = tuple(t for t in taints if not rules.is_status(t.key))
    labels = node.labels
    if pool is not None and pool.labels:
        late = {k: v for k, v in pool.labels.items() if k not in labels and k.startswith(DISCOVERY_PREFIXES)}
        if late:
            labels = {**late, **labels}
    if taints is node.taints and labels is node.labels:
        return node
    return replace(node, taints=taints, labels=labels)


def startup_taints_left(node: Node, pool: NodePool | None) -> tuple[str, ...]:
    return rules_of(pool).startup_of(node.taints) if node.taints else ()


def still_lacks(node: Node, pool: NodePool | None, slices: bool = True) -> tuple[str, ...]:
    """What a node not fully started still lacks, for a time-out's reason: Ready, GPUs, ResourceSlices (`slices`:
    published, as `phase` takes it), start-up taints gone."""
    lacks = [] if node.ready else ["Ready"]
    have = dict(node.allocatable.items)
    missing = missing_gpus(node, pool)
    if missing:
        lacks.append("GPUs registered (" + ", ".join(f"{n} {have.get(n, 0)} of {have.get(n, 0) + a}"
                                                     for n, a in missing.items) + ")")
    if not slices and pool is not None:
        lacks.append("ResourceSlices published (" + ", ".join(sorted(pool.dra_drivers)) + ")")
    left = startup_taints_left(node, pool)
    if left:
        lacks.append("start-up taints gone (" + ", ".join(left) + ")")
    return tuple(lacks)


def with_policy_taints(pools: Iterable[NodePool], startup: StartupTaints) -> tuple[NodePool, ...]:
    """The pools with the policy's start-up and status taints merged into each pool's own (the very same pool
    objects where that adds nothing)."""
    out = []
    for pool in pools:
        merged = pool.startup_taints.merged(startup)
        out.append(pool if merged is pool.startup_taints else replace(pool, startup_taints=merged))
    return tuple(out)


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


def phase(node: Node, pool: NodePool | None, gpus: bool | None = None, slices: bool = True) -> NodePhase:
    """`gpus`: `gpus_registered(node, pool)`, when the caller knows it (it depends on the pool and the node's
    allocatable only). `slices`: whether the ResourceSlices of its pool's DRA drivers are published (False for the
    nodes `awaiting_slices` names). A Ready node with its GPUs but a start-up taint left, or without its slices, is
    READY: not fully started."""
    if node.deleting or any(t.key == TO_BE_DELETED_TAINT for t in node.taints):
        return NodePhase.DELETING
    if not node.ready:
        return NodePhase.REGISTERED
    if not (gpus if gpus is not None else gpus_registered(node, pool)):
        return NodePhase.READY
    if not slices:
        return NodePhase.READY
    if node.taints and startup_taints_left(node, pool):
        return NodePhase.READY
    return NodePhase.USABLE


def gpus_registered(node: Node, pool: NodePool | None) -> bool:
    """Whether the device plugin advertises the node's GPUs: some of the GPU resources the pool promises are in its
    allocatable (all of them, or some: then the node is degraded, not starting), or the pool promises none."""
    if pool is None:
        return True
    wanted = _gpu_items(pool)
    if not wanted:
        return True
    have = dict(node.allocatable.items)
    return any(have.get(n, 0) > 0 for n, _ in wanted)


def degraded_gpus(node: Node, pool: NodePool | None) -> Resources:
    """GPU resources a node that registered its GPUs advertises below its pool's template (empty: not degraded, or
    still starting: a node advertising none of them has not registered its GPUs, and is not degraded)."""
    if pool is None or not gpus_registered(node, pool):
        return Resources()
    return missing_gpus(node, pool)


def usable_capacity(node: Node, pool: NodePool | None) -> Resources:
    """What the node will offer once usable: its allocatable, raised to the template's for a node still starting."""
    if pool is None or phase(node, pool) is NodePhase.USABLE:
        return node.allocatable
    return node.allocatable.max(pool.allocatable)


def slices_published(node: str, pool: NodePool, dra: Dra) -> bool:
    """Whether every DRA driver the pool's template publishes has a complete pool of ResourceSlices for the node
    (`Dra.node_slices`: its own slices; a pool some of whose slices are missing is not usable, as the scheduler's
    allocator skips incomplete pools). True when the pool declares no slices."""
    if not pool.resource_slices:
        return True
    own = dra.node_slices(node)
    for driver in pool.dra_drivers:
        held = [s for s in own if s.driver == driver]
        if not held:
            return False
        whole = dra.pool(driver, held[0].pool.name)
        if whole is None or not whole.complete:
            return False
    return True


def awaiting_slices(nodes: Iterable[Node], node_pools: Mapping[str, str], pools: Mapping[str, NodePool],
                    dra: Dra) -> frozenset[str]:
    """The Ready nodes of pools that declare ResourceSlices (`NodePool.resource_slices`) whose slices are not
    published yet: they stay upcoming (`phase` READY) until their DRA drivers publish them, as a node waits for its
    GPUs to register. O(nodes) when some pool declares slices, O(pools) otherwise."""
    with_slices = {name: p for name, p in pools.items() if p.resource_slices}
    if not with_slices:
        return frozenset()
    out = []
    for node in nodes:
        name = pool_of(node, node_pools)
        pool = with_slices.get(name) if name else None
        if pool is not None and node.ready and not slices_published(node.name, pool, dra):
            out.append(node.name)
    return frozenset(out)


def phase_in(node: Node, pool: NodePool | None, dra: Dra) -> NodePhase:
    """`phase` with the node's DRA slices looked up in the snapshot's `dra` (for callers that judge a node alone,
    not through a decision's facts)."""
    return phase(node, pool, slices=pool is None or slices_published(node.name, pool, dra))
