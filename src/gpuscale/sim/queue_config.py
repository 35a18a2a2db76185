"""The `queues:` section of a twin scenario: Kueue's ResourceFlavors, ClusterQueues, LocalQueues and the
`waitForPodsReady` settings, spelt as Kueue spells them (camelCase), read into a `QueueSpec`.

Quantities are Kubernetes quantities (`16`, `500m`, `64Gi`); a resource's amounts are in the units `Resources` keeps
(cpu in millicores, memory in bytes, GPUs in devices). Errors name the setting: `teams.yaml: queues.clusterQueues[0]
.resourceGroups[0].flavors[1].name: unknown flavor 'h100' (flavors: a100)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import ConfigDict, Field

from gpuscale.config import Duration
from gpuscale.inputs.files import excerpt
from gpuscale.inputs.strict import StrictModel, unique_names
from gpuscale.model.errors import ConfigError
from gpuscale.model.pool import NodePool
from gpuscale.model.quantity import QuantityError, to_milli, to_units
from gpuscale.model.resources import CPU, GPU_MILLI
from gpuscale.sim.admission import (
    ClusterQueue,
    FlavorQuotas,
    PreemptionPolicy,
    QueueingStrategy,
    Quota,
    ResourceGroup,
)

Quantity = int | float | str
E = TypeVar("E", PreemptionPolicy, QueueingStrategy)


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)


class ResourceFlavorConfig(_Strict):
    name: str
    nodeLabels: dict[str, str] = Field(default_factory=dict)


class ResourceQuotaConfig(_Strict):
    name: str
    nominalQuota: Quantity
    borrowingLimit: Quantity | None = None
    lendingLimit: Quantity | None = None


class FlavorQuotasConfig(_Strict):
    name: str
    resources: tuple[ResourceQuotaConfig, ...]


class ResourceGroupConfig(_Strict):
    coveredResources: tuple[str, ...]
    flavors: tuple[FlavorQuotasConfig, ...]


class PreemptionConfig(_Strict):
    withinClusterQueue: str = "Never"
    reclaimWithinCohort: str = "Never"


class ClusterQueueConfig(_Strict):
    name: str
    cohort: str | None = None
    queueingStrategy: str = "BestEffortFIFO"
    preemption: PreemptionConfig = PreemptionConfig()
    resourceGroups: tuple[ResourceGroupConfig, ...]


class LocalQueueConfig(_Strict):
    name: str
    namespace: str | None = None
    """The team (the jobs' namespace); defaults to the queue's name."""
    clusterQueue: str


class RequeuingConfig(_Strict):
    backoffBaseSeconds: float = Field(default=60.0, ge=0)
    backoffMaxSeconds: float = Field(default=3600.0, ge=0)
    backoffLimitCount: int | None = Field(default=None, ge=0)


class WaitForPodsReadyConfig(_Strict):
    enable: bool = True
    timeout: Duration = 300.0
    requeuingStrategy: RequeuingConfig = RequeuingConfig()


class QueuesConfig(_Strict):
    resourceFlavors: tuple[ResourceFlavorConfig, ...]
    clusterQueues: tuple[ClusterQueueConfig, ...]
    localQueues: tuple[LocalQueueConfig, ...]
    waitForPodsReady: WaitForPodsReadyConfig | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodsReadySettings:
    timeout_s: float = 300.0
    backoff_base_s: float = 60.0
    backoff_max_s: float = 3600.0
    backoff_limit: int | None = None

    def backoff_s(self, requeues: int) -> float:
        """Kueue's requeue delay after the `requeues`-th timeout: base · 2^(n−1), capped (without Kueue's jitter)."""
        return min(self.backoff_base_s * 2.0 ** max(requeues - 1, 0), self.backoff_max_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSpec:
    """The queueing layer of one twin run: ClusterQueues, each flavor's node labels, LocalQueues and PodsReady."""

    cluster_queues: tuple[ClusterQueue, ...]
    flavor_labels: Mapping[str, Mapping[str, str]]
    local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, name) → ClusterQueue."""
    pods_ready: PodsReadySettings | None = None

    def cluster_queue_of(self, team: str, queue: str) -> str | None:
        """The ClusterQueue of a job in namespace `team` naming LocalQueue `queue` (its team's name when empty);
        None for a job no LocalQueue takes (Kueue leaves it alone: `manageJobsWithoutQueueName: false`)."""
        return self.local_queues.get((team, queue or team))


_WITHIN = (PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY)
_RECLAIM = (PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.ANY)


def _amount(where: str, resource: str, value: Quantity | None) -> int | None:
    if value is None:
        return None
    try:
        amount = to_milli(value) if resource in (CPU, GPU_MILLI) else to_units(value)
    except QuantityError as err:
        raise ConfigError(where, str(err)) from None
    if amount < 0:
        raise ConfigError(where, f"must be ≥ 0, got {value}")
    return amount


def _enum(where: str, value: str, allowed: Sequence[E]) -> E:
    for option in allowed:
        if option.value == value:
            return option
    raise ConfigError(where, f"expected one of {', '.join(o.value for o in allowed)}, got {excerpt(value)}")


def build_queue_spec(config: QueuesConfig, where: str, pools: Sequence[NodePool]) -> QueueSpec:
    """Check the section (names resolve, quotas well-formed, each flavor selects some pool) and build the spec."""
    unique_names((f.name for f in config.resourceFlavors), lambda i: f"{where}.resourceFlavors[{i}].name")
    unique_names((q.name for q in config.clusterQueues), lambda i: f"{where}.clusterQueues[{i}].name")
    flavors = {f.name: dict(f.nodeLabels) for f in config.resourceFlavors}
    for i, f in enumerate(config.resourceFlavors):
        if not any(all(p.labels.get(k) == v for k, v in f.nodeLabels.items()) for p in pools):
            raise ConfigError(f"{where}.resourceFlavors[{i}].nodeLabels",
                              f"flavor {f.name!r} matches no pool's labels")
    queues = [_cluster_queue(q, f"{where}.clusterQueues[{i}]", flavors) for i, q in enumerate(config.clusterQueues)]
    names = {q.name for q in queues}
    local: dict[tuple[str, str], str] = {}
    for i, lq in enumerate(config.localQueues):
        key = (lq.namespace or lq.name, lq.name)
        if lq.clusterQueue not in names:
            raise ConfigError(f"{where}.localQueues[{i}].clusterQueue",
                              f"unknown ClusterQueue {lq.clusterQueue!r} (clusterQueues: {', '.join(sorted(names))})")
        if key in local:
            raise ConfigError(f"{where}.localQueues[{i}].name",
                              f"duplicate LocalQueue {excerpt(key[1])} in {excerpt(key[0])}")
        local[key] = lq.clusterQueue
    ready = config.waitForPodsReady
    pods_ready = None
    if ready is not None and ready.enable:
        strategy = ready.requeuingStrategy
        pods_ready = PodsReadySettings(timeout_s=ready.timeout, backoff_base_s=strategy.backoffBaseSeconds,
                                       backoff_max_s=strategy.backoffMaxSeconds,
                                       backoff_limit=strategy.backoffLimitCount)
    return QueueSpec(cluster_queues=tuple(queues), flavor_labels=flavors, local_queues=local, pods_ready=pods_ready)


def _cluster_queue(config: ClusterQueueConfig, where: str, flavors: Mapping[str, object]) -> ClusterQueue:
    groups = []
    used: set[str] = set()
    for g, group in enumerate(config.resourceGroups):
        here = f"{where}.resourceGroups[{g}]"
        if not group.coveredResources:
            raise ConfigError(f"{here}.coveredResources", "must name at least one resource")
        flavor_quotas = []
        for f, fq in enumerate(group.flavors):
            at = f"{here}.flavors[{f}]"
            if fq.name not in flavors:
                raise ConfigError(f"{at}.name",
                                  f"unknown flavor {excerpt(fq.name)} (flavors: {', '.join(sorted(flavors))})")
            if fq.name in used:
                raise ConfigError(f"{at}.name", f"flavor {excerpt(fq.name)} is already used in this ClusterQueue")
            used.add(fq.name)
            listed = [r.name for r in fq.resources]
            if sorted(listed) != sorted(group.coveredResources):
                raise ConfigError(f"{at}.resources", f"must list exactly the covered resources "
                                                     f"({', '.join(group.coveredResources)}), got {', '.join(listed)}")
            quotas = {}
            for r, rq in enumerate(fq.resources):
                rat = f"{at}.resources[{r}]"
                nominal = _amount(f"{rat}.nominalQuota", rq.name, rq.nominalQuota)
                borrowing = _amount(f"{rat}.borrowingLimit", rq.name, rq.borrowingLimit)
                lending = _amount(f"{rat}.lendingLimit", rq.name, rq.lendingLimit)
                assert nominal is not None
                if config.cohort is None and (borrowing is not None or lending is not None):
                    raise ConfigError(rat, "borrowingLimit and lendingLimit need a cohort")
                if lending is not None and lending > nominal:
                    raise ConfigError(f"{rat}.lendingLimit", f"must be ≤ nominalQuota ({rq.nominalQuota})")
                quotas[rq.name] = Quota(nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)
            flavor_quotas.append(FlavorQuotas(flavor=fq.name, quotas=quotas))
        groups.append(ResourceGroup(covered=tuple(group.coveredResources), flavors=tuple(flavor_quotas)))
    return ClusterQueue(
        name=config.name, cohort=config.cohort, groups=tuple(groups),
        strategy=_enum(f"{where}.queueingStrategy", config.queueingStrategy,
                       (QueueingStrategy.BEST_EFFORT_FIFO, QueueingStrategy.STRICT_FIFO)),
        within=_enum(f"{where}.preemption.withinClusterQueue", config.preemption.withinClusterQueue, _WITHIN),
        reclaim=_enum(f"{where}.preemption.reclaimWithinCohort", config.preemption.reclaimWithinCohort, _RECLAIM))
