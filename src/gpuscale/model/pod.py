"""Pods as the scheduler and the autoscaler see them: effective requests, constraints, priority, ownership, group.

`requests` are the pod's effective requests as kube-scheduler computes them (`computePodResourceRequest`): the larger
of the app containers' sum (sidecar init containers with `restartPolicy: Always` included) and the largest init
container (plus the sidecars started before it), plus `spec.overhead`. The `pods` slot is not in `requests`: fitting a
pod always adds one to the node's pod count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial

from gpuscale.model.dra import PodResourceClaim
from gpuscale.model.frozen import quick_init
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import LabelSelector, NodeAffinity, PodAffinityTerm
from gpuscale.model.taints import Toleration
from gpuscale.model.volumes import PodClaim


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL_PHASES = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})
"""Phases of a pod that has finished and holds no capacity."""
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""Set by the kubelet on the API object of a static pod (its mirror)."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class OwnerRef:
    kind: str
    name: str
    controller: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGroupRef:
    """Membership of a gang: `key` is `namespace/name` of the group; `min_member` when the pods or a PodGroup say it."""

    key: str
    source: str
    """`kueue`, `volcano` or `coscheduling`: whose label or annotation named the group."""
    min_member: int | None = None


ANY_HOST_IP = "0.0.0.0"
"""The host IP a port binds to when the pod names none; it conflicts with the same port on every IP."""


@quick_init
@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    """One `hostPort` of a container (`ports[].hostPort` > 0), defaults applied as kube-scheduler's `HostPortInfo`
    does: protocol TCP, host IP 0.0.0.0 (the IP text as given: kube-scheduler compares strings)."""

    port: int
    protocol: str = "TCP"
    host_ip: str = ANY_HOST_IP

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, and the same host IP or either one 0.0.0.0 (`HostPortInfo.CheckConflict`)."""
        return (self.port == other.port and self.protocol == other.protocol
                and (self.host_ip == other.host_ip or ANY_HOST_IP in (self.host_ip, other.host_ip)))


HONOR = "Honor"
IGNORE = "Ignore"
"""`nodeAffinityPolicy` / `nodeTaintsPolicy` values (`NodeInclusionPolicy`)."""
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
"""`whenUnsatisfiable` values."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologySpreadConstraint:
    """One `topologySpreadConstraints` entry as PodTopologySpread reads it.

    `selector` is the `labelSelector` with `matchLabelKeys` merged in from the pod's own labels (`key In (value)` for
    each key the pod has), as the API server and kube-scheduler merge them; a nil `labelSelector` stays nil (selects
    nothing). An empty selector (`{}`) counts no pod, but the pod matches it itself (upstream's `selector.Empty()`).
    """

    max_skew: int
    topology_key: str
    selector: LabelSelector
    when_unsatisfiable: str = DO_NOT_SCHEDULE
    match_label_keys: tuple[str, ...] = ()
    min_domains: int = 1
    """`minDomains` (default 1): with fewer eligible domains, the global minimum counts as 0."""
    node_affinity_policy: str = HONOR
    """Honor: only nodes the pod's nodeSelector/required node affinity admit count as domains; Ignore: all."""
    node_taints_policy: str = IGNORE
    """Honor: only nodes whose NoSchedule/NoExecute taints the pod tolerates count as domains; Ignore: all."""

    def counts_pods(self) -> bool:
        """Whether the selector can count placed pods (upstream skips counting for an empty selector)."""
        s = self.selector
        return not s.nothing and bool(s.match_labels or s.match_expressions)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulingConstraints:
    """Everything that decides *where* a pod may go, hashable so pods can be grouped into equivalence classes."""

    node_name: str | None = None
    """`spec.nodeName` set by the user before scheduling (NodeName filter)."""
    affinity: NodeAffinity = field(default_factory=NodeAffinity)
    tolerations: tuple[Toleration, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    """The `DoNotSchedule` topology spread constraints, in order (the only ones that filter; `ScheduleAnyway` ones
    score only and are not kept)."""
    unsupported: tuple[str, ...] = ()
    """Constraints gpuscale does not model, by description; a pod carrying any is never reported as fitting."""
    host_ports: tuple[HostPort, ...] = ()
    """The host ports of the pod's containers and sidecar (restartable init) containers (NodePorts filter)."""
    claims: tuple[PodClaim, ...] = ()
    """The PersistentVolumeClaims its volumes use (named, and generic ephemeral volumes' claims), in volume order
    (the volume filters: VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone)."""
    resource_claims: tuple[PodResourceClaim, ...] = ()
    """`spec.resourceClaims`, in order (DynamicResources): each names a ResourceClaim or a ResourceClaimTemplate; the
    claim made from a template is named in `Pod.claim_statuses`."""
    _hash: int = field(default=-1, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        """The hash a frozen dataclass has, kept once computed: pods are grouped by their constraints many times per
        decision, and these nest tuples of dataclasses (-1 is never a hash, so it marks "not yet")."""
        if self._hash == -1:
            object.__setattr__(self, "_hash", hash((self.node_name, self.affinity, self.tolerations,
                                                    self.pod_anti_affinity, self.pod_affinity, self.topology_spread,
                                                    self.unsupported, self.host_ports, self.claims,
                                                    self.resource_claims)))
        return self._hash

    def __reduce__(self) -> tuple[Callable[[], SchedulingConstraints], tuple[()]]:
        # without the kept hash: another process hashes strings differently
        return partial(SchedulingConstraints, node_name=self.node_name, affinity=self.affinity,
                       tolerations=self.tolerations, pod_anti_affinity=self.pod_anti_affinity,
                       pod_affinity=self.pod_affinity, topology_spread=self.topology_spread,
                       unsupported=self.unsupported, host_ports=self.host_ports, claims=self.claims,
                       resource_claims=self.resource_claims), ()


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    namespace: str
    name: str
    uid: str = ""
    requests: Resources
    constraints: SchedulingConstraints = field(default_factory=SchedulingConstraints)
    node_name: str | None = None
    """The node the pod is bound to (`spec.nodeName` after binding); `None` while unbound."""
    phase: PodPhase = PodPhase.PENDING
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner: OwnerRef | None = None
    group: PodGroupRef | None = None
    unschedulable: bool = False
    """Condition `PodScheduled=False` with reason `Unschedulable`: the scheduler tried and found no node."""
    scheduling_gated: bool = False
    nominated_node: str | None = None
    created_s: float | None = None
    deleting: bool = False
    local_storage: bool = False
    """Uses node-local storage (hostPath, or an emptyDir not backed by memory): cannot be moved without losing it."""
    local_volumes: tuple[str, ...] = ()
    """The names of those volumes (CA's `safe-to-evict-local-volumes` lists the ones that may be lost)."""
    started_s: float | None = None
    """`status.startTime`: when the kubelet started the pod (a do-not-disrupt duration counts from it)."""
    image_bytes: int = 0
    claim_statuses: Mapping[str, str | None] = field(default_factory=dict)
    """`status.resourceClaimStatuses`: a `spec.resourceClaims` name → the ResourceClaim generated for it from its
    template (None: the controller decided none was needed). A template claim with no entry is not created yet."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def is_bound(self) -> bool:
        return self.node_name is not None

    def is_terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def is_mirror(self) -> bool:
        """A static pod's mirror: the kubelet runs it from a file on the node, so it goes with its node."""
        return MIRROR_ANNOTATION in self.annotations

    def of_daemonset(self) -> bool:
        """Owned by a DaemonSet: it runs on every node and goes with its node."""
        return self.owner is not None and self.owner.kind == "DaemonSet"

    def consumes_capacity(self) -> bool:
        """Bound and not finished: the pod holds its requests on its node."""
        return self.node_name is not None and not self.is_terminal()

    def __hash__(self) -> int:
        return hash((self.namespace, self.name, self.uid))


def depends_on_placed(pod: Pod) -> bool:
    """Whether where this pod may go depends on the pods already placed (inter-pod affinity or anti-affinity terms,
    `DoNotSchedule` topology spread): the one predicate the engine, `fit` and the indexes ask (a filter that reads
    placed pods extends it here). A pod without it is still affected by placed pods' anti-affinity
    (`engine.scheduling.Topology.relevant`).

    Host ports are not in it: the ports a pod asks are part of its constraints (pods of one shape ask the same
    ports), and every what-if keeps the ports in use per node (`engine.scheduling.HostPorts`), so pods of one shape
    stay alike; the shortcuts that assume a placement changes only its row's free capacity check the ports too
    (`WhatIf.fits_row`). Counting them here would send every cluster with a host-network DaemonSet down the
    per-pod path.

    Claims are not in it either: whether placing other pods changes a pod's volume verdicts depends on who else uses
    its claims and on the storage objects, which a pod alone does not tell; the what-if's volume state answers it
    (`engine.whatif.volumes.VolumeState.reads_placed`, and `placement_key` for which pods with claims are alike)."""
    c = pod.constraints
    return bool(c.pod_affinity or c.pod_anti_affinity or c.topology_spread)


def uses_claims(pod: Pod) -> bool:
    """Whether the pod's volumes use PersistentVolumeClaims: the volume filters then read the claims, and the claims
    of the pods placed (ReadWriteOncePod users, volumes attached per node)."""
    return bool(pod.constraints.claims)


def uses_devices(pod: Pod) -> bool:
    """Whether the pod references ResourceClaims (`spec.resourceClaims`): DynamicResources then allocates devices for
    them, against the devices the claims of the pods placed hold."""
    return bool(pod.constraints.resource_claims)
