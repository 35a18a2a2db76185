"""The volume side of a what-if: each pod's claims resolved against the snapshot's storage objects (`PodVolumes`, as
kube-scheduler's volume PreFilters read them), and the state placements change (`VolumeState`: the pods using each
claim, the volumes attached per row, the PVs and nodes claims were assumed to in this what-if).

The filters (`whatif.filters`: VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone) ask
`VolumeState.failures`-style helpers here; `WhatIf.place`/`unplace` keep the state, `fork` copies it, `extend` adds
rows without CSINode limits (a new node's drivers are not known before it registers).

Costs: resolving a pod's claims O(claims + PVs of the claims' classes), once per constraints (cached); a row's check
O(claims), VolumeBinding's O(claims × PVs of the class) for unbound claims; place/unplace O(claims).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from gpuscale.engine.scheduling import UNBOUND_IMMEDIATE, FitCode, FitFailure
from gpuscale.model.node import HOSTNAME_LABEL, Node
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.volumes import (
    GA_LABEL,
    NO_PROVISIONER,
    READ_WRITE_ONCE_POD,
    VOLUME_ZONE_LABELS,
    PersistentVolume,
    PersistentVolumeClaim,
    PodClaim,
    Storage,
)


@dataclass(frozen=True, slots=True, eq=False)
class PodVolumes:
    """A pod's claims as the volume plugins see them before any node is looked at."""

    prefilter: str | None = None
    """A PreFilter's rejection (every node fails with it), or None."""
    keys: tuple[str, ...] = ()
    """Every claim the pod uses (`namespace/name`), in volume order."""
    rwop: tuple[str, ...] = ()
    """Its named claims with the ReadWriteOncePod access mode (VolumeRestrictions)."""
    bound: tuple[PersistentVolume, ...] = ()
    """The PVs of its fully bound claims (VolumeBinding checks their node affinity)."""
    missing_pv: bool = False
    """A bound ephemeral claim whose PV does not exist (VolumeBinding's `ErrReasonPVNotExist`)."""
    delayed: tuple[PersistentVolumeClaim, ...] = ()
    """Unbound claims of WaitForFirstConsumer classes, smallest request first (VolumeBinding binds or provisions)."""
    zones: tuple[tuple[str, frozenset[str]], ...] = ()
    """The bound PVs' zone and region labels (VolumeZone)."""
    attach: tuple[tuple[str, str], ...] = ()
    """(unique volume name, CSI driver) of each volume NodeVolumeLimits counts."""


NO_VOLUMES = PodVolumes()


@lru_cache(maxsize=4096)
def without_claims(constraints: SchedulingConstraints) -> SchedulingConstraints:
    """The constraints without their claims: what every filter but the volume filters reads (the node-only filters'
    cache, the pool verdicts and scale-up's classes key on it; the claims' part is `VolumeState.placement_key`)."""
    return replace(constraints, claims=())


def _claim_of(claim: PodClaim, storage: Storage) -> PersistentVolumeClaim | None:
    """The claim object: the PVC if it exists, else a generic ephemeral volume's claim as its controller will create
    it (the template's class, or the default class)."""
    found = storage.claim(claim.key)
    if found is not None or claim.template is None:
        return found
    template = claim.template
    return template if template.storage_class else replace(template, storage_class=storage.default_class())


def _attachment(pvc: PersistentVolumeClaim, storage: Storage) -> tuple[str, str] | None:
    """NodeVolumeLimits' (unique name, driver) of a claim: its PV's CSI driver and handle, else (unbound, or the PV
    gone) its class's provisioner and the claim; None when not a counted (CSI) volume."""
    if pvc.volume_name and (pv := storage.volume(pvc.volume_name)) is not None:
        if pv.csi_driver and pv.csi_handle:
            return f"{pv.csi_driver}/{pv.csi_handle}", pv.csi_driver
        return None
    cls = storage.storage_class(pvc.storage_class) if pvc.storage_class else None
    if cls is None or not cls.provisioner:
        return None
    return f"{cls.provisioner}/claim:{pvc.key}", cls.provisioner


def attachments(claims: Iterable[PodClaim], storage: Storage) -> list[tuple[str, str]]:
    """The counted volumes of a placed pod's claims (a claim that does not exist is not counted)."""
    found = []
    for claim in claims:
        pvc = _claim_of(claim, storage)
        if pvc is not None and (a := _attachment(pvc, storage)) is not None:
            found.append(a)
    return found


def _prefilter(claims: Sequence[PodClaim], storage: Storage) -> str | None:
    """VolumeRestrictions' then VolumeBinding's PreFilter rejections that read a claim alone."""
    for claim in claims:  # VolumeRestrictions: every named claim must exist
        if claim.template is None and storage.claim(claim.key) is None:
            return f'persistentvolumeclaim "{claim.name}" not found'
    for claim in claims:  # VolumeBinding's podHasPVCs
        pvc = _claim_of(claim, storage)
        assert pvc is not None
        if pvc.phase == "Lost":
            return f'persistentvolumeclaim "{pvc.name}" bound to non-existent persistentvolume "{pvc.volume_name}"'
        if pvc.deleting:
            return f'persistentvolumeclaim "{pvc.name}" is being deleted'
    return None


def resolve(claims: Sequence[PodClaim], storage: Storage) -> PodVolumes:
    """The pod's claims as the volume PreFilters leave them (see `PodVolumes`). O(claims)."""
    if not claims:
        return NO_VOLUMES
    if (rejected := _prefilter(claims, storage)) is not None:
        return PodVolumes(prefilter=rejected)
    pvcs = [(claim, pvc) for claim in claims if (pvc := _claim_of(claim, storage)) is not None]
    bound: list[PersistentVolume] = []
    delayed: list[PersistentVolumeClaim] = []
    missing = False
    for _, pvc in pvcs:
        if pvc.bound:
            pv = storage.volume(pvc.volume_name)
            if pv is None:
                missing = True
            else:
                bound.append(pv)
            continue
        cls = storage.storage_class(pvc.storage_class) if pvc.storage_class else None
        if cls is None or not cls.wait_for_first_consumer or pvc.volume_name:
            return PodVolumes(prefilter=UNBOUND_IMMEDIATE)
        delayed.append(pvc)
    zones: list[tuple[str, frozenset[str]]] = []
    for claim, pvc in pvcs:  # VolumeZone's PreFilter: named claims with a volume name
        if claim.template is not None or not pvc.volume_name:
            continue
        pv = storage.volume(pvc.volume_name)
        if pv is None:
            return PodVolumes(prefilter=f'persistentvolume "{pvc.volume_name}" not found')
        zones.extend((key, frozenset(pv.labels[key].split("__"))) for key in VOLUME_ZONE_LABELS if key in pv.labels)
    rwop = tuple(claim.key for claim, pvc in pvcs if claim.template is None and READ_WRITE_ONCE_POD in pvc.access_modes)
    return PodVolumes(keys=tuple(dict.fromkeys(c.key for c in claims)), rwop=rwop, bound=tuple(bound),
                      missing_pv=missing, delayed=tuple(sorted(delayed, key=lambda c: c.request)),
                      zones=tuple(zones), attach=tuple(dict.fromkeys(
                          a for _, pvc in pvcs if (a := _attachment(pvc, storage)) is not None)))


def _names_nodes(pv: PersistentVolume) -> bool:
    """Whether the PV's node affinity reads the hostname label or fields (node groups leave the hostname out)."""
    return pv.node_affinity is not None and any(
        t.match_fields or any(r.key == HOSTNAME_LABEL for r in t.match_expressions) for t in pv.node_affinity)


def _matching(claim: PersistentVolumeClaim, storage: Storage, labels: Mapping[str, str], excluded: set[str],
              taken: Mapping[str, str]) -> PersistentVolume | None:
    """`FindMatchingVolume` on a node: the PV reserved for the claim if its node affinity holds (else none), or the
    smallest available PV of the claim's class that fits it there. O(PVs of the class)."""
    best: PersistentVolume | None = None
    for pv in storage.volumes_of_class(claim.storage_class):
        if (pv.name in excluded or pv.capacity < claim.request or pv.volume_mode != claim.volume_mode
                or pv.deleting):
            continue
        fits_node = pv.affinity_matches(labels)
        if pv.claim == claim.key or taken.get(pv.name) == claim.key:
            return pv if fits_node else None
        if pv.phase != "Available" or pv.claim is not None or pv.name in taken:
            continue
        if claim.selector is not None and not claim.selector.matches(pv.labels):
            continue
        if not fits_node or not claim.access_modes <= pv.access_modes:
            continue
        if best is None or pv.capacity < best.capacity:
            best = pv
    return best


@dataclass(slots=True)
class VolumeState:
    """What placements change of the volume filters' view (see the module docstring). Copied by `copy` (O(claims in
    use + rows with attachments)); the storage, the per-row limits and the resolved claims are shared."""

    storage: Storage
    limits: list[Mapping[str, int] | None]
    """Per row, the node's CSINode attach limits per driver (None: no CSINode, no limit)."""
    resolved: dict[SchedulingConstraints, PodVolumes] = field(default_factory=dict)
    users: dict[str, int] = field(default_factory=dict)
    """Placed pods using each claim."""
    attached: dict[int, dict[str, int]] = field(default_factory=dict)
    """Per row with a limit, the placed pods using each counted volume (unique name → pods)."""
    drivers: dict[str, str] = field(default_factory=dict)
    """Each counted volume's driver."""
    taken: dict[str, str] = field(default_factory=dict)
    """PVs this what-if bound to a claim (PV name → claim key), as the scheduler's assume cache does."""
    selected: dict[str, int] = field(default_factory=dict)
    """Claims this what-if provisioned on a row (claim key → row)."""
    _named: dict[PodVolumes, bool] = field(default_factory=dict)
    """`per_row`'s PV part per resolved pod (shared by copies)."""
    has_limits: bool = False
    """Whether some row has a CSINode attach limit (NodeVolumeLimits then reads the volumes attached per row)."""

    @staticmethod
    def of(storage: Storage, nodes: Sequence[Node], by_node: Mapping[str, Sequence[Pod]]) -> VolumeState:
        """The state of the placed pods: O(nodes + placed pods)."""
        limits: list[Mapping[str, int] | None] = []
        for node in nodes:
            csi = storage.csi_node(node.name)
            limits.append(csi.limits if csi is not None and csi.limits else None)
        state = VolumeState(storage, limits, has_limits=any(limit is not None for limit in limits))
        row_of = {node.name: i for i, node in enumerate(nodes)}
        for name, pods in by_node.items():
            row = row_of.get(name, -1)
            for pod in pods:
                if pod.constraints.claims:
                    state.add(pod, row)
        return state

    def copy(self) -> VolumeState:
        return VolumeState(self.storage, self.limits, self.resolved, dict(self.users),
                           {row: dict(a) for row, a in self.attached.items()}, self.drivers, dict(self.taken),
                           dict(self.selected), self._named, self.has_limits)

    def extended(self, rows: int) -> VolumeState:
        """A copy with `rows` more rows (no limits: template nodes)."""
        state = self.copy()
        state.limits = [*self.limits, *([None] * rows)]
        return state

    def volumes_of(self, pod: Pod) -> PodVolumes:
        c = pod.constraints
        if not c.claims:
            return NO_VOLUMES
        found = self.resolved.get(c)
        if found is None:
            found = self.resolved[c] = resolve(c.claims, self.storage)
        return found

    def add(self, pod: Pod, row: int, node: Node | None = None) -> None:
        """A pod using its claims on `row` (-1: a node outside the rows); with `node`, its unbound claims are bound
        or provisioned there as the scheduler's Reserve assumes them."""
        for key in dict.fromkeys(c.key for c in pod.constraints.claims):
            self.users[key] = self.users.get(key, 0) + 1
        if 0 <= row < len(self.limits) and self.limits[row] is not None:
            held = self.attached.setdefault(row, {})
            for unique, driver in attachments(pod.constraints.claims, self.storage):
                held[unique] = held.get(unique, 0) + 1
                self.drivers[unique] = driver
        if node is not None:
            self._assume(self.volumes_of(pod), row, node)

    def _assume(self, volumes: PodVolumes, row: int, node: Node) -> None:
        chosen: set[str] = set()
        for claim in volumes.delayed:
            if claim.key in self.selected or claim.selected_node is not None:
                continue
            pv = _matching(claim, self.storage, node.labels, chosen, self.taken)
            if pv is not None:
                chosen.add(pv.name)
                self.taken[pv.name] = claim.key
            else:
                self.selected[claim.key] = row

    def remove(self, pod: Pod, row: int) -> None:
        """The pod no longer uses its claims on `row` (what `add` did; a claim no pod uses any more loses the PV or
        node it was assumed to)."""
        for key in dict.fromkeys(c.key for c in pod.constraints.claims):
            left = self.users.get(key, 0) - 1
            if left > 0:
                self.users[key] = left
                continue
            self.users.pop(key, None)
            self.selected.pop(key, None)
            for pv in [pv for pv, claim in self.taken.items() if claim == key]:
                del self.taken[pv]
        held = self.attached.get(row)
        if held is not None:
            for unique, _ in attachments(pod.constraints.claims, self.storage):
                left = held.get(unique, 0) - 1
                if left > 0:
                    held[unique] = left
                else:
                    held.pop(unique, None)

    def _private(self, volumes: PodVolumes, shared: Collection[str]) -> bool:
        """Whether no other pod can use the pod's claims in this what-if: none is in `shared` (the claims more than
        one of the pods to place use) nor used by a placed pod."""
        users = self.users
        return not any(key in shared or users.get(key, 0) for key in volumes.keys)

    def placement_key(self, pod: Pod, shared: Collection[str]) -> object:
        """What of the pod's claims the volume filters read: pods whose constraints are equal but for their claims,
        and whose keys are equal, get the same verdict from VolumeRestrictions, NodeVolumeLimits, VolumeBinding and
        VolumeZone on every row, now and after any placement of pods other than themselves — so scale-up may treat
        them as one equivalence class (the claims themselves when that does not hold).

        Claims no other pod uses (`_private`: not in `shared`, not used by a placed pod) are interchangeable by what
        the filters read of them: a bound claim by its PV's node affinity and zone labels (VolumeBinding, VolumeZone),
        an unbound WaitForFirstConsumer claim by its class and selected node when its class has no PV to bind
        (provisioned: the class's allowed topologies), and each by the CSI driver of its volume (NodeVolumeLimits: a
        volume no other pod uses is one new attachment on any row); a ReadWriteOncePod claim no one else uses passes
        VolumeRestrictions everywhere. Otherwise (a claim shared, an unbound claim of a class with PVs, which
        placements take) the claims themselves. O(claims)."""
        volumes = self.volumes_of(pod)
        if volumes.prefilter is not None:
            return volumes.prefilter  # the same rejection on every row
        if volumes.missing_pv or not self._private(volumes, shared) or any(
                self.storage.volumes_of_class(c.storage_class) for c in volumes.delayed):
            return ("claims", volumes.keys)
        return ("alike", tuple(pv.node_affinity for pv in volumes.bound), volumes.zones,
                tuple((c.storage_class, c.selected_node) for c in volumes.delayed),
                tuple(sorted(driver for _, driver in volumes.attach)))

    def reads_placed(self, pod: Pod, shared: Collection[str]) -> bool:
        """Whether placing other pods may change the pod's volume verdicts on rows other than theirs: a claim another
        pod may use (`shared`, or a placed pod's) that is ReadWriteOncePod or unbound, or an unbound claim of a class
        with PVs to bind (placements take them). Attach limits are not in it: a placement attaches volumes on its own
        row only (the class masks check those rows again, `within_limits`). O(claims)."""
        volumes = self.volumes_of(pod)
        if volumes.prefilter is not None or not (volumes.rwop or volumes.delayed):
            return False
        return not self._private(volumes, shared) or any(
            self.storage.volumes_of_class(c.storage_class) for c in volumes.delayed)

    # ------------------------------------------------------------------------------------------------- the filters
    def per_row(self, volumes: PodVolumes) -> bool:
        """Whether VolumeBinding's verdict may differ between rows of one node group: a PV it reads names hostnames
        or fields (a local PV), or a claim is assumed onto a node. O(claims), the PVs' part cached."""
        if any(c.key in self.selected or c.selected_node is not None for c in volumes.delayed):
            return True
        known = self._named.get(volumes)
        if known is None:
            pvs = [*volumes.bound,
                   *(pv for c in volumes.delayed for pv in self.storage.volumes_of_class(c.storage_class))]
            known = self._named[volumes] = any(_names_nodes(pv) for pv in pvs)
        return known

    def restrictions(self, volumes: PodVolumes) -> bool:
        """VolumeRestrictions: no ReadWriteOncePod claim of the pod is in use (the same verdict on every row)."""
        users = self.users
        return not any(users.get(key, 0) for key in volumes.rwop)

    def within_limits(self, volumes: PodVolumes, row: int) -> bool:
        """NodeVolumeLimits: per driver, the volumes attached to the row plus the pod's new ones within the limit."""
        limits = self.limits[row] if row < len(self.limits) else None
        if not volumes.attach or limits is None:
            return True
        held = self.attached.get(row, {})
        new: dict[str, int] = {}
        for unique, driver in volumes.attach:
            if unique not in held:
                new[driver] = new.get(driver, 0) + 1
        for driver, count in new.items():
            limit = limits.get(driver)
            if limit is not None:
                current = sum(1 for unique in held if self.drivers.get(unique) == driver)
                if current + count > limit:
                    return False
        return True

    def binding(self, volumes: PodVolumes, row: int, node: Node) -> tuple[FitFailure, ...]:
        """VolumeBinding's Filter (`FindPodVolumes`): bound PVs' node affinity, then the unbound claims bound to an
        available PV or provisioned (the class's provisioner and allowed topologies)."""
        labels = node.labels
        failures: list[FitFailure] = []
        if any(not pv.affinity_matches(labels) for pv in volumes.bound):
            failures.append(FitFailure(FitCode.VOLUME_NODE_CONFLICT))
        if volumes.delayed and not self._unbound_satisfied(volumes.delayed, row, node):
            failures.append(FitFailure(FitCode.VOLUME_BIND_CONFLICT))
        if volumes.missing_pv:
            failures.append(FitFailure(FitCode.VOLUME_PV_MISSING))
        return tuple(failures)

    def _unbound_satisfied(self, delayed: Sequence[PersistentVolumeClaim], row: int, node: Node) -> bool:
        provision: list[PersistentVolumeClaim] = []
        matching: list[PersistentVolumeClaim] = []
        for claim in delayed:
            here = self.selected.get(claim.key)
            chosen_node = claim.selected_node
            if (here is not None and here != row) or (chosen_node is not None and chosen_node != node.name):
                return False
            (provision if here is not None or chosen_node is not None else matching).append(claim)
        chosen: set[str] = set()
        for claim in matching:
            pv = _matching(claim, self.storage, node.labels, chosen, self.taken)
            if pv is None:
                provision.append(claim)
            else:
                chosen.add(pv.name)
        for claim in provision:
            cls = self.storage.storage_class(claim.storage_class)
            if (cls is None or not cls.provisioner or cls.provisioner == NO_PROVISIONER
                    or not cls.topology_allows(node.labels)):
                return False
        return True

    @staticmethod
    def zone(volumes: PodVolumes, node: Node) -> bool:
        """VolumeZone: a node with zone or region labels must carry each bound PV's values."""
        labels = node.labels
        if not volumes.zones or not any(key in labels for key in VOLUME_ZONE_LABELS):
            return True
        for key, values in volumes.zones:
            value = labels.get(key)
            if value is None:
                value = labels.get(GA_LABEL.get(key, key))
            if value is None or value not in values:
                return False
        return True
