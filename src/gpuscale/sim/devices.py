"""The twin's Dynamic Resource Allocation objects: DeviceClasses, ResourceClaimTemplates, ResourceClaims and the
ResourceSlices its nodes publish, with the controllers that change them.

`SimDra` holds what `SimCluster.snapshot` hands the engine (`Cluster.dra`, the values a real cluster's dump or the
controller's cache give) and the twin's scheduler reads (`engine.whatif.dra.DraState`). It does what the control
plane does to them:
- the ResourceClaim controller: a pod created with a `resourceClaimTemplateName` gets its claim at once, named
  `<pod>-<entry>`, owned by the pod and named in its `status.resourceClaimStatuses` (`pod_created`); the claim goes
  with its pod (`pod_gone`, garbage collection of the owned claim);
- the scheduler's Reserve and PreBind: the allocation it found is written on the claim with the pod in `reservedFor`
  (`reserve`);
- the ResourceClaim controller again when a pod ends or is evicted: its `reservedFor` entry is removed, and a claim
  no pod reserves any more is deallocated (its devices are free), as kube-controller-manager does (`pod_gone`);
- the DRA drivers' kubelet plugins: a node's slices are published when its driver starts (`publish`, at the start-up
  chain's step, `sim.cloud`) and removed with the node (`unpublish`).
Claims are created, reserved and released instantly (the controllers take milliseconds to seconds).

Every change calls `on_change` (the cluster bumps its version and tells the scheduler). `snapshot` is O(objects)
after a change, O(1) otherwise (the same `Dra` while nothing changed). A scenario without DRA leaves this empty,
and its snapshots carry no DRA objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from gpuscale.model.dra import (
    Allocation,
    ConsumerRef,
    Device,
    DeviceClass,
    Dra,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    claim_from_template,
    is_whole_gpu,
)
from gpuscale.model.pod import Pod


class SimDra:
    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.slices: dict[str, tuple[ResourceSlice, ...]] = {}
        """Node name → the slices its drivers published."""
        self.on_change: Callable[[], None] = lambda: None
        self._snapshot: Dra | None = None

    def __bool__(self) -> bool:
        return bool(self.classes or self.templates or self.claims or self.slices)

    def snapshot(self) -> Dra:
        if self._snapshot is None:
            self._snapshot = Dra(slices=tuple(s for held in self.slices.values() for s in held),
                                 classes=tuple(self.classes.values()), claims=tuple(self.claims.values()),
                                 templates=tuple(self.templates.values()))
        return self._snapshot

    def _changed(self) -> None:
        self._snapshot = None
        self.on_change()

    # --------------------------------------------------------------------------------------------- objects
    def add_class(self, device_class: DeviceClass) -> None:
        self.classes[device_class.name] = device_class
        self._changed()

    def add_template(self, template: ResourceClaimTemplate) -> None:
        """A workload's ResourceClaimTemplate (nothing if it exists: a requeued job keeps it)."""
        if template.key not in self.templates:
            self.templates[template.key] = template
            self._changed()

    def add_claim(self, claim: ResourceClaim) -> None:
        """A workload's own claim, shared by its pods (nothing if it exists)."""
        if claim.key not in self.claims:
            self.claims[claim.key] = claim
            self._changed()

    def delete(self, key: str) -> None:
        """A workload's template or claim (`namespace/name`) is deleted with it."""
        if self.templates.pop(key, None) is not None or self.claims.pop(key, None) is not None:
            self._changed()

    # ----------------------------------------------------------------------------------------- controllers
    def pod_created(self, pod: Pod) -> Pod:
        """The ResourceClaim controller: the pod's template claims created (`<pod>-<entry>`) and named in its status;
        the pod as it is then. A template that does not exist leaves the entry unnamed (the pod waits, as in
        Kubernetes). O(claims of the pod)."""
        statuses: dict[str, str | None] = dict(pod.claim_statuses)
        for ref in pod.constraints.resource_claims:
            if ref.template_name is None or ref.name in statuses:
                continue
            template = self.templates.get(f"{pod.namespace}/{ref.template_name}")
            if template is None:
                continue
            claim = replace(claim_from_template(template, pod.name, pod.uid, ref.name), uid=f"{pod.uid}-{ref.name}",
                            pod_claim_name=ref.name)
            self.claims[claim.key] = claim
            statuses[ref.name] = claim.name
        if len(statuses) == len(pod.claim_statuses):
            return pod
        self._changed()
        return replace(pod, claim_statuses=statuses)

    def claims_of(self, pod: Pod) -> list[ResourceClaim]:
        """The pod's claims that exist, in `spec.resourceClaims` order."""
        out = []
        for ref in pod.constraints.resource_claims:
            name = ref.claim_name if ref.claim_name is not None else pod.claim_statuses.get(ref.name)
            if name is not None and (claim := self.claims.get(f"{pod.namespace}/{name}")) is not None:
                out.append(claim)
        return out

    def reserve(self, pod: Pod, allocations: Mapping[str, Allocation]) -> None:
        """The scheduler binds `pod`: `allocations` (claim key → allocation, for its claims it allocated) written on
        the claims, and every claim of the pod reserved for it. O(claims of the pod)."""
        consumer = ConsumerRef(name=pod.name, uid=pod.uid)
        changed = False
        for claim in self.claims_of(pod):
            allocation = allocations.get(claim.key, claim.allocation)
            reserved = claim.reserved_for if claim.reserved_for_pod(pod.uid) else (*claim.reserved_for, consumer)
            if allocation is not claim.allocation or reserved is not claim.reserved_for:
                self.claims[claim.key] = replace(claim, allocation=allocation, reserved_for=reserved)
                changed = True
        if changed:
            self._changed()

    def pod_gone(self, pod: Pod) -> None:
        """The pod ended, was evicted or deleted: its `reservedFor` entries removed, a claim reserved for no pod
        deallocated, and the claims generated for it deleted (they are owned by the pod). O(claims of the pod)."""
        if not pod.constraints.resource_claims:
            return
        changed = False
        for claim in self.claims_of(pod):
            if claim.owner_pod_uid == pod.uid:
                del self.claims[claim.key]
                changed = True
                continue
            if not claim.reserved_for_pod(pod.uid):
                continue
            left = tuple(c for c in claim.reserved_for if c.uid != pod.uid)
            self.claims[claim.key] = replace(claim, reserved_for=left,
                                             allocation=claim.allocation if left else None)
            changed = True
        if changed:
            self._changed()

    def gpus_held(self, pod: Pod) -> int:
        """Whole GPUs (`model.dra.is_whole_gpu`) allocated to the claims `pod` holds: the claims made for it, and a
        shared claim for the pod it was first reserved for (its other users hold none of it, so a claim's GPUs count
        once; when that pod goes the rest of the claim's time is not counted). O(devices of its claims)."""
        held = 0
        for claim in self.claims_of(pod):
            mine = claim.owner_pod_uid == pod.uid or (claim.reserved_for and claim.reserved_for[0].uid == pod.uid)
            if claim.allocation is None or not mine:
                continue
            for allocated in claim.allocation.devices:
                device = self._device(allocated.driver, allocated.pool, allocated.device)
                held += device is not None and is_whole_gpu(allocated.driver, device)
        return held

    def _device(self, driver: str, pool: str, name: str) -> Device | None:
        """The published device `driver/pool/name`: the twin's nodes publish one pool per driver named after the node
        (`NodePool.template_slices`), so it is among that node's slices."""
        for s in self.slices.get(pool, ()):
            if s.driver == driver:
                device = next((d for d in s.devices if d.name == name), None)
                if device is not None:
                    return device
        return None

    # --------------------------------------------------------------------------------------------- drivers
    def publish(self, node: str, slices: tuple[ResourceSlice, ...]) -> None:
        """The node's DRA drivers published its slices."""
        if slices:
            self.slices[node] = slices
            self._changed()

    def unpublish(self, node: str) -> None:
        """The node is gone: its slices go with it."""
        if self.slices.pop(node, None) is not None:
            self._changed()
