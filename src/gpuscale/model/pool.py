"""Node pools: the template of the node a scale-up would add, with its price, bounds and zones.

A pool's `template()` is the Node object a new member would register as, with its GPUs already in allocatable: it is
what the scheduler will see once the node is Ready and its device plugin has registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpuscale.model.dra import PoolRef, ResourceSlice, whole_gpus
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.resources import Resources
from gpuscale.model.taints import DEFAULT_STARTUP_TAINTS, StartupTaints, Taint

OS_LABEL, ARCH_LABEL = "kubernetes.io/os", "kubernetes.io/arch"
_BETA = {OS_LABEL: "beta.kubernetes.io/os", ARCH_LABEL: "beta.kubernetes.io/arch"}
_DEFAULTS = {OS_LABEL: "linux", ARCH_LABEL: "amd64"}
"""What the kubelet puts on every node it registers, as a template assumes it unless the pool's `labels` say
otherwise (Cluster Autoscaler's generic labels): an Arm pool (Grace Hopper, say) sets `kubernetes.io/arch: arm64`.
The deprecated `beta.kubernetes.io/*` twins follow the stable labels, as the kubelet still sets them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePool:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    gpu_model: str | None = None
    gpus_per_node: int = 0
    usd_per_hour: float = 0.0
    min_size: int = 0
    max_size: int = 1000
    zones: tuple[str, ...] = ()
    max_node_provision_time_s: float | None = None
    """This pool's own provisioning deadline (big GPU hosts boot slower); `None` uses the policy's."""
    max_node_startup_time_s: float | None = None
    """This pool's own deadline for a registered node to become Ready (CA's MaxNodeStartupTime); `None`: the policy's
    startup time, else this pool's provisioning deadline."""
    scale_down_utilization_threshold: float | None = None
    """This pool's own scale-down options (CA's per-node-group autoscaling options), each `None` for the policy's:
    the utilization below which a node of it is underutilized (non-GPU nodes), the same for GPU nodes, how long a Ready
    node must stay unneeded (for GPU nodes too: it replaces the policy's GPU unneeded time) and a not-Ready one."""
    scale_down_gpu_utilization_threshold: float | None = None
    scale_down_unneeded_time_s: float | None = None
    scale_down_unready_time_s: float | None = None
    ignore_daemonsets_utilization: bool | None = None
    """Whether DaemonSet pods are left out of its nodes' utilization; `None`: as the policy says."""
    scale_down_lost_gpu_minutes_per_hour: float | None = None
    """Its own lost-work budget for moving checkpointed GPU jobs (engine/checkpoint.py); `None`: the policy's."""
    scale_down_disabled: str | None = None
    """Why no node of this pool is ever scaled down (turned off in the configuration, or a provider that cannot remove
    a chosen node of it), or `None`: its nodes may go."""
    startup_taints: StartupTaints = DEFAULT_STARTUP_TAINTS
    """The taints its nodes carry only while they start, and status taints (engine.nodes); the policy's merged in
    (`Policy.startup_taints`) with this pool's own."""
    node_repair: bool = False
    """Drain and replace its degraded nodes (engine.repair), at most `max_nodes_under_repair` at once."""
    max_nodes_under_repair: int = 1
    zone: str | None = None
    """Set on the per-zone offers of a pool listing several zones (`in_zones`): the one zone a new node of this offer
    is created in. None: the pool itself (its template in its first zone)."""
    resource_slices: tuple[ResourceSlice, ...] = ()
    """The DRA ResourceSlices a node of this pool publishes once its drivers run (scale from zero for pods with
    ResourceClaims): `node_name` unset, pool names placeholders; `template_slices` gives them for one node."""
    zero_or_max: bool = False
    """Cluster Autoscaler's ZeroOrMaxNodeScaling: the pool grows straight to `max_size` in one step and shrinks only as
    a whole, once every node of it can go — for multi-host GPU slices (an NVLink domain, a TPU-like slice) that work
    only whole. A scale-up that a limit would cut short is not made at all; nodes still starting when one of them times
    out are all rolled back."""

    def own_utilization(self) -> bool:
        """Whether this pool has options of its own for how its nodes' utilization is judged (a threshold, or
        DaemonSet pods left out or in)."""
        return (self.scale_down_utilization_threshold is not None
                or self.scale_down_gpu_utilization_threshold is not None
                or self.ignore_daemonsets_utilization is not None)

    @property
    def key(self) -> str:
        """The offer's name: the pool's, or `pool/zone` for a per-zone offer (`in_zones`)."""
        return self.name if self.zone is None else f"{self.name}/{self.zone}"

    def in_zones(self) -> tuple[NodePool, ...]:
        """What a scale-up may add of this pool: one offer per zone when it lists several (each a copy whose `zone`
        is set: its template in that zone), else the pool itself. Limits still count per pool (by name)."""
        if len(self.zones) < 2 or self.zone is not None:
            return (self,)
        return tuple(replace(self, zone=zone) for zone in self.zones)

    def template(self, name: str | None = None, zone: str | None = None) -> Node:
        """A node of this pool as it will look once Ready with GPUs registered, named `name` (unique per what-if), in
        `zone` (default: the offer's zone, else the pool's first)."""
        name = name or f"template-{self.name}"
        zone = zone or self.zone
        labels = {**self.labels, POOL_LABEL: self.name, "kubernetes.io/hostname": name}
        for key, default in _DEFAULTS.items():
            value = labels.setdefault(key, default)
            labels.setdefault(_BETA[key], value)
        if (zone or self.zones) and "topology.kubernetes.io/zone" not in labels:
            labels["topology.kubernetes.io/zone"] = zone or self.zones[0]
        return Node(name=name, allocatable=self.allocatable, capacity=self.allocatable, labels=labels,
                    taints=self.taints, ready=True)

    @property
    def dra_drivers(self) -> frozenset[str]:
        """The DRA drivers whose ResourceSlices a node of this pool publishes."""
        return frozenset(s.driver for s in self.resource_slices)

    def template_slices(self, node_name: str) -> tuple[ResourceSlice, ...]:
        """`resource_slices` as node `node_name` will publish them: for that node, one pool per driver named after
        the node (as NVIDIA's DRA driver and Cluster Autoscaler's scale-from-zero templates name it), generation 0,
        counting that driver's slices; slice names `<node>-<driver>` (`-<i>` from the second on)."""
        if not self.resource_slices:
            return ()
        counts: dict[str, int] = {}
        for s in self.resource_slices:
            counts[s.driver] = counts.get(s.driver, 0) + 1
        seen: dict[str, int] = {}
        out = []
        for s in self.resource_slices:
            i = seen[s.driver] = seen.get(s.driver, -1) + 1
            out.append(replace(s, name=f"{node_name}-{s.driver}" + (f"-{i}" if i else ""), node_name=node_name,
                               pool=PoolRef(name=node_name, generation=0, resource_slice_count=counts[s.driver])))
        return tuple(out)

    def node_gpus(self) -> int:
        """GPUs one node of this pool has, as reports count them: `gpus_per_node` (its `gpu` section), else the whole
        GPUs its declared ResourceSlices publish (`model.dra.whole_gpus`: NVIDIA's DRA driver's devices of type
        "gpu")."""
        return self.gpus_per_node or len(whole_gpus(self.resource_slices))

    def is_gpu_pool(self) -> bool:
        return self.allocatable.gpu_count() > 0
