"""The twin's storage: StorageClasses, PersistentVolumes and PersistentVolumeClaims, with the PV controller and the
provisioner that bind them.

`SimStorage` holds the objects `SimCluster.snapshot` hands the engine (`Cluster.storage`, the same values a real
cluster's dump gives) and the twin's scheduler reads (`engine.whatif.volumes.VolumeState`). It does what the control
plane does to them:
- a claim of an `Immediate` class is provisioned when it is created, in one of the class's allowed zones (else one of
  the cluster's zones), picked by a hash of the claim's key (an external provisioner picks among the allowed
  topologies; a hash keeps runs reproducible and claims spread over the zones);
- a claim of a `WaitForFirstConsumer` class is provisioned when the scheduler binds its first pod (VolumeBinding's
  PreBind: the `selected-node` annotation, then the provisioner creates the volume in that node's zone); the PV's
  node affinity names the zone, so every later pod of the claim — a restarted job's among them — goes there;
- a dynamically provisioned PV is deleted with its claim (`reclaimPolicy: Delete`); pre-bound PVs (datasets) stay.
Provisioning takes no time here (a real CSI driver takes seconds; the pod waits in PreBind meanwhile).

Every change calls `on_change` (the cluster bumps its version and tells the scheduler). `snapshot` is O(objects)
after a change, O(1) otherwise (the same `Storage` object while nothing changed).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import replace

from gpuscale.model.node import ZONE_LABEL, Node
from gpuscale.model.pod import Pod
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator
from gpuscale.model.volumes import PersistentVolume, PersistentVolumeClaim, Storage, StorageClass

BOUND = "Bound"


def zone_affinity(zone: str | None) -> tuple[NodeSelectorTerm, ...] | None:
    """A PV's required node affinity to one zone (None: any node), as a zonal CSI driver writes it."""
    if zone is None:
        return None
    return (NodeSelectorTerm(match_expressions=(
        Requirement(key=ZONE_LABEL, operator=SelectorOperator.IN, values=(zone,)),)),)


def bound_pair(pv: PersistentVolume, claim: PersistentVolumeClaim) -> tuple[PersistentVolume, PersistentVolumeClaim]:
    """The PV and the claim as the PV controller leaves them once bound to each other."""
    return (replace(pv, claim=claim.key, phase=BOUND),
            replace(claim, volume_name=pv.name, bind_completed=True, phase=BOUND))


class SimStorage:
    def __init__(self, zones: Iterable[str] = ()) -> None:
        self.classes: dict[str, StorageClass] = {}
        self.volumes: dict[str, PersistentVolume] = {}
        self.claims: dict[str, PersistentVolumeClaim] = {}
        self.zones = tuple(sorted(set(zones)))
        """The cluster's zones: where an `Immediate` claim of a class without allowed topologies may go."""
        self.on_change: Callable[[], None] = lambda: None
        self._provisioned: set[str] = set()
        """PVs the provisioner created (deleted with their claim)."""
        self._snapshot: Storage | None = None

    def __bool__(self) -> bool:
        return bool(self.classes or self.volumes or self.claims)

    def snapshot(self) -> Storage:
        if self._snapshot is None:
            self._snapshot = Storage(volumes=tuple(self.volumes.values()), claims=tuple(self.claims.values()),
                                     classes=tuple(self.classes.values()))
        return self._snapshot

    def _changed(self) -> None:
        self._snapshot = None
        self.on_change()

    # --------------------------------------------------------------------------------------------- set-up
    def add_class(self, storage_class: StorageClass) -> None:
        self.classes[storage_class.name] = storage_class
        self._changed()

    def add_bound(self, pv: PersistentVolume, claim: PersistentVolumeClaim) -> None:
        """A pre-provisioned volume bound to its claim (a dataset's)."""
        self.volumes[pv.name], self.claims[claim.key] = bound_pair(pv, claim)
        self._changed()

    # ------------------------------------------------------------------------------------------- controllers
    def create_claim(self, claim: PersistentVolumeClaim) -> None:
        """A workload creates its claim (nothing if it exists: a requeued job keeps its claims)."""
        if claim.key in self.claims:
            return
        self.claims[claim.key] = claim
        cls = self.classes.get(claim.storage_class)
        if cls is not None and not cls.wait_for_first_consumer:
            allowed = sorted({v for term in cls.allowed_topologies for key, values in term if key == ZONE_LABEL
                              for v in values}) or list(self.zones)
            zone = allowed[zlib.crc32(claim.key.encode()) % len(allowed)] if allowed else None
            self._provision(claim, cls, zone)
        self._changed()

    def delete_claim(self, key: str) -> None:
        claim = self.claims.pop(key, None)
        if claim is None:
            return
        if claim.volume_name in self._provisioned:
            self._provisioned.discard(claim.volume_name)
            self.volumes.pop(claim.volume_name, None)
        self._changed()

    def bind_for(self, pod: Pod, node: Node) -> None:
        """The scheduler binds `pod` to `node`: its unbound `WaitForFirstConsumer` claims are provisioned in the
        node's zone (VolumeBinding's PreBind, then the provisioner and the PV controller). O(claims)."""
        changed = False
        for ref in pod.constraints.claims:
            claim = self.claims.get(ref.key)
            if claim is None or claim.bound:
                continue
            cls = self.classes.get(claim.storage_class)
            if cls is None or not cls.wait_for_first_consumer:
                continue
            self._provision(replace(claim, selected_node=node.name), cls, node.zone)
            changed = True
        if changed:
            self._changed()

    def _provision(self, claim: PersistentVolumeClaim, cls: StorageClass, zone: str | None) -> None:
        pv = PersistentVolume(name=f"pvc-{claim.namespace}-{claim.name}", capacity=claim.request,
                              access_modes=claim.access_modes, node_affinity=zone_affinity(zone),
                              storage_class=cls.name, csi_driver=cls.provisioner or None,
                              csi_handle=f"{claim.namespace}-{claim.name}", volume_mode=claim.volume_mode)
        self.volumes[pv.name], self.claims[claim.key] = bound_pair(pv, claim)
        self._provisioned.add(pv.name)
