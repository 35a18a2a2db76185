"""A scenario's topology spread and volumes: the `storage` section (StorageClasses, datasets) and, on a workload
(`training`, `batch`, each of `services`), `topologySpreadConstraints` and `volumes` (docs/twin.md).

The spread constraints are a pod spec's own (Kubernetes' field names and defaults, validated as the API server does),
plus `selectOwnPods: true` for a selector of the workload's own pods (`job-name` of a job, `app` of a service);
`matchLabelKeys` are merged from the pods' labels as the API server merges them. A workload's volume is a claim of its
own (`claim: per-job` or `per-pod`, of a declared class) or a dataset's claim (`dataset: NAME`): each dataset is a
pre-provisioned PV (in its `zone`, if it names one) bound to a claim of that name in every namespace whose workloads
use it. `apply_*` turn the parsed sections into constraints and claim templates; a bad entry is one `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gpuscale.inputs.strict import StrictModel, unique_names
from gpuscale.model.errors import ConfigError
from gpuscale.model.node import ZONE_LABEL
from gpuscale.model.pod import DO_NOT_SCHEDULE, SchedulingConstraints, TopologySpreadConstraint
from gpuscale.model.quantity import QuantityError, to_units
from gpuscale.model.selectors import LabelSelector, Requirement, SelectorOperator, label_key_problem
from gpuscale.model.volumes import PersistentVolume, PersistentVolumeClaim, PodClaim, StorageClass
from gpuscale.sim.storage import zone_affinity
from gpuscale.sim.workloads import PER_JOB, PER_POD, ClaimTemplate

_INT32 = 2**31 - 1
AccessMode = Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]


class _Strict(StrictModel):
    """Unknown keys refused (`gpuscale.inputs.strict`)."""


def _size(text: str | int) -> int:
    try:
        amount = to_units(text)
    except QuantityError as err:
        raise ValueError(str(err)) from None
    if amount < 0:
        raise ValueError(f"must be at least 0, got {text}")
    return amount


class ExpressionConfig(_Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _valued(self) -> ExpressionConfig:
        if (problem := label_key_problem(self.key)) is not None:
            raise ValueError(f"key: {problem}")
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: must be non-empty for operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: must be empty for operator {self.operator}")
        return self


class SelectorConfig(_Strict):
    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: tuple[ExpressionConfig, ...] = ()

    def selector(self) -> LabelSelector:
        return LabelSelector(match_labels=tuple(sorted(self.matchLabels.items())), match_expressions=tuple(
            Requirement(key=e.key, operator=SelectorOperator(e.operator), values=e.values)
            for e in self.matchExpressions))

    def label_keys(self) -> set[str]:
        return set(self.matchLabels) | {e.key for e in self.matchExpressions}


class SpreadConfig(_Strict):
    """One `topologySpreadConstraints` entry (Kubernetes' fields), or `selectOwnPods` instead of `labelSelector`."""

    maxSkew: int = Field(ge=1, le=_INT32)
    topologyKey: str
    whenUnsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    labelSelector: SelectorConfig | None = None
    selectOwnPods: bool = False
    matchLabelKeys: tuple[str, ...] = ()
    minDomains: int | None = Field(default=None, ge=1, le=_INT32)
    nodeAffinityPolicy: Literal["Honor", "Ignore"] = "Honor"
    nodeTaintsPolicy: Literal["Honor", "Ignore"] = "Ignore"

    @model_validator(mode="after")
    def _valid(self) -> SpreadConfig:
        if (problem := label_key_problem(self.topologyKey)) is not None:
            raise ValueError(f"topologyKey: {problem}")
        if self.minDomains is not None and self.whenUnsatisfiable != DO_NOT_SCHEDULE:
            raise ValueError(f"minDomains: can only be set with whenUnsatisfiable={DO_NOT_SCHEDULE}")
        if self.selectOwnPods and self.labelSelector is not None:
            raise ValueError("selectOwnPods: give either it or labelSelector, not both")
        for key in self.matchLabelKeys:
            if (problem := label_key_problem(key)) is not None:
                raise ValueError(f"matchLabelKeys: {key!r}: {problem}")
            if self.labelSelector is not None and key in self.labelSelector.label_keys():
                raise ValueError(f"matchLabelKeys: {key!r} is also in labelSelector (the API server refuses it)")
        return self

    def constraint(self, own: Mapping[str, str], labels: Mapping[str, str]) -> TopologySpreadConstraint:
        """The constraint for pods labelled `labels` (`own`: the labels that select the workload's pods)."""
        if self.selectOwnPods:
            selector = LabelSelector(match_labels=tuple(sorted(own.items())))
        elif self.labelSelector is not None:
            selector = self.labelSelector.selector()
        else:
            selector = LabelSelector(nothing=True)  # a nil selector, as in Kubernetes: it counts no pod
        merged = tuple(Requirement(key=k, operator=SelectorOperator.IN, values=(labels[k],))
                       for k in self.matchLabelKeys if k in labels)
        if merged and not selector.nothing:
            selector = replace(selector, match_expressions=selector.match_expressions + merged)
        return TopologySpreadConstraint(
            max_skew=self.maxSkew, topology_key=self.topologyKey, selector=selector,
            when_unsatisfiable=self.whenUnsatisfiable, match_label_keys=self.matchLabelKeys,
            min_domains=self.minDomains or 1, node_affinity_policy=self.nodeAffinityPolicy,
            node_taints_policy=self.nodeTaintsPolicy)


class VolumeConfig(_Strict):
    """A volume of a workload's pods: `claim: per-job | per-pod` of `storageClassName`, or `dataset: NAME`."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    claim: Literal["per-job", "per-pod"] | None = None
    dataset: str | None = None
    storageClassName: str | None = None
    size: str | int = "0"
    accessModes: tuple[AccessMode, ...] = ("ReadWriteOnce",)

    @field_validator("size")
    @classmethod
    def _sized(cls, text: str | int) -> str | int:
        _size(text)
        return text

    @model_validator(mode="after")
    def _one(self) -> VolumeConfig:
        if (self.claim is None) == (self.dataset is None):
            raise ValueError("give exactly one of claim (per-job, per-pod) and dataset")
        if self.claim is not None and not self.storageClassName:
            raise ValueError("storageClassName: required with claim")
        if self.dataset is not None and self.storageClassName is not None:
            raise ValueError("storageClassName: a dataset's claim is bound already (set it on the dataset)")
        return self


class StorageClassConfig(_Strict):
    name: str = Field(min_length=1, max_length=253)
    provisioner: str = Field(min_length=1)
    volumeBindingMode: Literal["Immediate", "WaitForFirstConsumer"] = "Immediate"
    allowedZones: tuple[str, ...] = ()
    """`allowedTopologies` as one term on the zone label: the zones the class provisions in (empty: any)."""


class DatasetConfig(_Strict):
    name: str = Field(min_length=1, max_length=253)
    zone: str | None = None
    """The zone its PV is in (node affinity); None: reachable from every node (NFS-like)."""
    size: str | int = "1Ti"
    accessModes: tuple[AccessMode, ...] = ("ReadOnlyMany",)
    storageClassName: str = ""

    @field_validator("size")
    @classmethod
    def _sized(cls, text: str | int) -> str | int:
        _size(text)
        return text


class StorageConfig(_Strict):
    classes: tuple[StorageClassConfig, ...] = ()
    datasets: tuple[DatasetConfig, ...] = ()


class WorkloadVolumes(_Strict):
    """What a workload section may add to its pods (mixed into `TrainingConfig`, `BatchConfig`, `ServiceConfig`)."""

    topologySpreadConstraints: tuple[SpreadConfig, ...] = ()
    volumes: tuple[VolumeConfig, ...] = ()


# ----------------------------------------------------------------------------------------------------- checking
def check_storage(storage: StorageConfig | None, zones: set[str], where: str) -> None:
    """Unique names; every zone named is some pool's."""
    if storage is None:
        return
    unique_names((c.name for c in storage.classes), lambda i: f"{where}.classes.{i}.name")
    unique_names((d.name for d in storage.datasets), lambda i: f"{where}.datasets.{i}.name")
    named = [(f"classes.{i}.allowedZones", z) for i, c in enumerate(storage.classes) for z in c.allowedZones]
    named += [(f"datasets.{i}.zone", d.zone) for i, d in enumerate(storage.datasets) if d.zone is not None]
    for at, zone in named:
        if zone not in zones:
            raise ConfigError(f"{where}.{at}",
                              f"zone {zone!r} is no pool's (zones: {', '.join(sorted(zones)) or 'none'})")


def check_workload(section: WorkloadVolumes, storage: StorageConfig | None, where: str, *, service: bool) -> None:
    """Each volume's class or dataset is declared; a service's volumes are datasets (its pods share their claims, as
    a Deployment's do); spread constraints are unique per (topologyKey, whenUnsatisfiable), as the API requires."""
    classes = {c.name for c in storage.classes} if storage is not None else set()
    datasets = {d.name for d in storage.datasets} if storage is not None else set()
    unique_names((v.name for v in section.volumes), lambda i: f"{where}.volumes.{i}.name", "volume name")
    for i, volume in enumerate(section.volumes):
        at = f"{where}.volumes.{i}"
        if volume.claim is not None and service:
            raise ConfigError(f"{at}.claim", "a service's pods share their claims (a Deployment's): use a dataset")
        if volume.storageClassName is not None and volume.storageClassName not in classes:
            raise ConfigError(f"{at}.storageClassName", f"no storage class {volume.storageClassName!r} in storage."
                                                        f"classes (declared: {', '.join(sorted(classes)) or 'none'})")
        if volume.dataset is not None and volume.dataset not in datasets:
            raise ConfigError(f"{at}.dataset", f"no dataset {volume.dataset!r} in storage.datasets "
                                               f"(declared: {', '.join(sorted(datasets)) or 'none'})")
    pairs: set[tuple[str, str]] = set()
    for i, spread in enumerate(section.topologySpreadConstraints):
        pair = (spread.topologyKey, spread.whenUnsatisfiable)
        if pair in pairs:
            raise ConfigError(f"{where}.topologySpreadConstraints.{i}",
                              f"duplicate {{topologyKey: {pair[0]}, whenUnsatisfiable: {pair[1]}}}")
        pairs.add(pair)


# ------------------------------------------------------------------------------------------------------ building
def storage_classes(storage: StorageConfig | None) -> tuple[StorageClass, ...]:
    if storage is None:
        return ()
    return tuple(StorageClass(
        name=c.name, provisioner=c.provisioner, wait_for_first_consumer=c.volumeBindingMode == "WaitForFirstConsumer",
        allowed_topologies=((((ZONE_LABEL, frozenset(c.allowedZones)),),) if c.allowedZones else ()))
        for c in storage.classes)


def dataset_volumes(storage: StorageConfig | None, namespaces: Mapping[str, Iterable[str]]
                    ) -> tuple[tuple[PersistentVolume, PersistentVolumeClaim], ...]:
    """Each dataset's PV and claim in every namespace using it (`namespaces`: dataset → namespaces)."""
    if storage is None:
        return ()
    found = []
    for d in storage.datasets:
        modes, size = frozenset(d.accessModes), _size(d.size)
        for namespace in sorted(set(namespaces.get(d.name, ()))):
            pv = PersistentVolume(name=f"{d.name}-{namespace}", capacity=size, access_modes=modes,
                                  node_affinity=zone_affinity(d.zone), storage_class=d.storageClassName,
                                  phase="Available")
            claim = PersistentVolumeClaim(namespace=namespace, name=d.name, storage_class=d.storageClassName,
                                          access_modes=modes, request=size)
            found.append((pv, claim))
    return tuple(found)


def claim_templates(section: WorkloadVolumes) -> tuple[ClaimTemplate, ...]:
    return tuple(ClaimTemplate(volume=v.name, per=PER_JOB if v.claim == "per-job" else PER_POD,
                               storage_class=v.storageClassName or "", request_bytes=_size(v.size),
                               access_modes=frozenset(v.accessModes))
                 for v in section.volumes if v.claim is not None)


def with_section(constraints: SchedulingConstraints, section: WorkloadVolumes, namespace: str,
                 own: Mapping[str, str], labels: Mapping[str, str]) -> SchedulingConstraints:
    """`constraints` plus the section's `DoNotSchedule` spread constraints (the `ScheduleAnyway` ones only score,
    which the twin's scheduler does not model) and its dataset claims."""
    spread = tuple(s.constraint(own, labels) for s in section.topologySpreadConstraints
                   if s.whenUnsatisfiable == DO_NOT_SCHEDULE)
    shared = tuple(PodClaim(namespace, v.dataset) for v in section.volumes if v.dataset is not None)
    if not spread and not shared:
        return constraints
    return replace(constraints, topology_spread=constraints.topology_spread + spread,
                   claims=constraints.claims + shared)
