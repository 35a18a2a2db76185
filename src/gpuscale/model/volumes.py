"""Storage as kube-scheduler's volume plugins read it: PersistentVolumes, PersistentVolumeClaims, StorageClasses,
CSINodes (`Storage`, one per snapshot), and the claims a pod references (`PodClaim`).

`Storage` indexes the objects once (by name, claims by `namespace/name`, PVs by class); every lookup is O(1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuscale.model.selectors import LabelSelector, NodeSelectorTerm

READ_WRITE_ONCE_POD = "ReadWriteOncePod"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
VOLUME_ZONE_LABELS = ("failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
                      "topology.kubernetes.io/zone", "topology.kubernetes.io/region")
"""The PV labels VolumeZone matches against the node's, in its order."""
GA_LABEL = {"failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
            "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region"}


@dataclass(frozen=True, slots=True, kw_only=True)
class PersistentVolume:
    name: str
    capacity: int = 0
    """`spec.capacity.storage` in bytes."""
    access_modes: frozenset[str] = frozenset()
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    """`spec.nodeAffinity.required.nodeSelectorTerms` (ORed); None: any node."""
    storage_class: str = ""
    claim: str | None = None
    """`spec.claimRef` as `namespace/name`; None: not reserved for a claim."""
    phase: str = "Pending"
    csi_driver: str | None = None
    csi_handle: str | None = None
    volume_mode: str = "Filesystem"
    labels: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False

    def affinity_matches(self, labels: Mapping[str, str]) -> bool:
        """`volume.CheckNodeAffinity`: the node's labels (never its name) against the required terms."""
        return self.node_affinity is None or any(t.matches("", labels) for t in self.node_affinity)


@dataclass(frozen=True, slots=True, kw_only=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    storage_class: str = ""
    """The class kube-scheduler reads (`GetPersistentVolumeClaimClass`: the beta annotation, else
    `spec.storageClassName`); "" for none."""
    volume_name: str = ""
    bind_completed: bool = False
    """The PV controller's `pv.kubernetes.io/bind-completed` annotation: with `volume_name`, the claim is bound."""
    access_modes: frozenset[str] = frozenset()
    request: int = 0
    """`spec.resources.requests.storage` in bytes."""
    volume_mode: str = "Filesystem"
    selector: LabelSelector | None = None
    phase: str = "Pending"
    deleting: bool = False
    selected_node: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Fully bound, as the scheduler's volume binder tells it (`isPVCFullyBound`)."""
        return bool(self.volume_name) and self.bind_completed


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageClass:
    name: str
    provisioner: str = ""
    wait_for_first_consumer: bool = False
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()
    """ORed terms of ANDed `(key, values)` label expressions; empty: every node."""
    default: bool = False
    created_s: float = 0.0

    def topology_allows(self, labels: Mapping[str, str]) -> bool:
        """`MatchTopologySelectorTerms`: no term matches every node."""
        return not self.allowed_topologies or any(
            all(labels.get(key) in values for key, values in term) for term in self.allowed_topologies)


@dataclass(frozen=True, slots=True, kw_only=True)
class CSINode:
    name: str
    limits: Mapping[str, int] = field(default_factory=dict)
    """Per driver, `spec.drivers[].allocatable.count` (drivers without a count have no entry)."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A claim a pod's volume references: `persistentVolumeClaim.claimName`, or the generic ephemeral volume's claim
    `<pod>-<volume>` with its template (a claim of the template's class, the default class if it names none)."""

    namespace: str
    name: str
    template: PersistentVolumeClaim | None = None
    """The ephemeral volume's claim as the ephemeral volume controller would create it; None: a named PVC."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Storage:
    """A snapshot's storage objects, indexed. Cost O(objects) to build; lookups O(1)."""

    volumes: tuple[PersistentVolume, ...] = ()
    claims: tuple[PersistentVolumeClaim, ...] = ()
    classes: tuple[StorageClass, ...] = ()
    csi_nodes: tuple[CSINode, ...] = ()
    _index: list[object] = field(default_factory=list, compare=False, repr=False)

    def _built(self) -> tuple[dict[str, PersistentVolume], dict[str, PersistentVolumeClaim],
                              dict[str, StorageClass], dict[str, CSINode], dict[str, list[PersistentVolume]]]:
        if not self._index:
            by_class: dict[str, list[PersistentVolume]] = {}
            for pv in self.volumes:
                by_class.setdefault(pv.storage_class, []).append(pv)
            self._index.append(({v.name: v for v in self.volumes}, {c.key: c for c in self.claims},
                                {c.name: c for c in self.classes}, {n.name: n for n in self.csi_nodes}, by_class))
        return self._index[0]  # type: ignore[return-value]

    def volume(self, name: str) -> PersistentVolume | None:
        return self._built()[0].get(name)

    def claim(self, key: str) -> PersistentVolumeClaim | None:
        return self._built()[1].get(key)

    def storage_class(self, name: str) -> StorageClass | None:
        return self._built()[2].get(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self._built()[3].get(name)

    def volumes_of_class(self, name: str) -> list[PersistentVolume]:
        return self._built()[4].get(name, [])

    def default_class(self) -> str:
        """The default StorageClass as the DefaultStorageClass admission picks it (the newest marked default, then
        by name); "" when none is marked."""
        marked = [c for c in self.classes if c.default]
        return max(marked, key=lambda c: (c.created_s, c.name)).name if marked else ""

    def __bool__(self) -> bool:
        return bool(self.volumes or self.claims or self.classes or self.csi_nodes)
