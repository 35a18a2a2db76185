"""Taints and tolerations with the exact matching rules of `k8s.io/api/core/v1` (`ToleratesTaint`).

A toleration matches a taint when the effects match (an empty toleration effect matches every effect), the keys match
(an empty toleration key matches every key) and — for `Equal`, the default operator — the values are equal too; so
`Exists` with an empty key tolerates everything. `PreferNoSchedule` never blocks scheduling; `NoSchedule` and
`NoExecute` do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuscale.model.frozen import quick_init


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect
    time_added: str | None = None

    def blocks_scheduling(self) -> bool:
        return self.effect is not TaintEffect.PREFER_NO_SCHEDULE

    def __str__(self) -> str:
        """Rendered as the scheduler renders it in messages: `{key: value}`."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    """`None` is the empty effect, which matches every effect."""
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        # An empty key skips the key comparison for either operator, as upstream does; the API only admits it with
        # `Exists`, where it tolerates every taint.
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator is TolerationOperator.EXISTS or self.value == taint.value


def blocking_taints(taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
    """The taints that can fail a filter (NoSchedule, NoExecute), in order; `PreferNoSchedule` ones only score."""
    return tuple(t for t in taints if t.blocks_scheduling())


def untolerated_taint(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first taint that blocks scheduling and no toleration matches, as TaintToleration's Filter finds it."""
    for taint in taints:
        if taint.blocks_scheduling() and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def soft_taint_count(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> int:
    """How many `PreferNoSchedule` taints no toleration matches: what TaintToleration's Score counts (fewer is
    better; a `PreferNoSchedule` toleration or one with an empty effect matches)."""
    return sum(1 for taint in taints if taint.effect is TaintEffect.PREFER_NO_SCHEDULE
               and not any(t.tolerates(taint) for t in tolerations))


UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect=TaintEffect.NO_SCHEDULE)
"""The taint a cordoned node implies; a pod tolerating it may land on a cordoned node (NodeUnschedulable)."""


KUBERNETES_STARTUP_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized"})
"""What the node lifecycle controller and the cloud controller manager put on a node until it is up."""
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
IGNORE_TAINT_PREFIX = "ignore-taint.cluster-autoscaler.kubernetes.io/"
"""Deprecated in Cluster Autoscaler 1.29; it still means a start-up taint there, and here."""
STATUS_TAINT_PREFIX = "status-taint.cluster-autoscaler.kubernetes.io/"
READINESS_TAINT_PREFIX = "readiness.k8s.io/"
"""The Node Readiness Controller's taints (`readiness.k8s.io/NetworkReady`, …), which NVIDIA's GPU operator documents
for gating GPU nodes until the driver and device plugin work."""
NODEWRIGHT_TAINTS = frozenset({"nodewright.nvidia.com", "skyhook.nvidia.com"})
"""NVIDIA NodeWright's (formerly Skyhook's) `runtime-required` taint, held until its node packages are installed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupTaints:
    """Which taints say a node is still starting (start-up taints: Cluster Autoscaler's `--startup-taint`, Karpenter's
    NodePool `startupTaints`) and which only report a status (`--status-taint`). Both are left out of the scheduling
    simulation; a node that carries a start-up taint is not fully started yet, one with a status taint is."""

    keys: frozenset[str] = KUBERNETES_STARTUP_TAINTS | NODEWRIGHT_TAINTS
    prefixes: tuple[str, ...] = (STARTUP_TAINT_PREFIX, IGNORE_TAINT_PREFIX, READINESS_TAINT_PREFIX)
    status_keys: frozenset[str] = frozenset()
    status_prefixes: tuple[str, ...] = (STATUS_TAINT_PREFIX,)

    def is_startup(self, key: str) -> bool:
        return key in self.keys or key.startswith(self.prefixes)

    def is_status(self, key: str) -> bool:
        return key in self.status_keys or key.startswith(self.status_prefixes)

    def startup_of(self, taints: tuple[Taint, ...]) -> tuple[str, ...]:
        """The keys of the start-up taints among `taints`, in order."""
        return tuple(t.key for t in taints if self.is_startup(t.key))

    def merged(self, other: StartupTaints) -> StartupTaints:
        """Both sets of taints (a pool's own added to the policy's); `self` when `other` adds nothing."""
        keys, status = self.keys | other.keys, self.status_keys | other.status_keys
        prefixes = tuple(dict.fromkeys((*self.prefixes, *other.prefixes)))
        status_prefixes = tuple(dict.fromkeys((*self.status_prefixes, *other.status_prefixes)))
        if (keys, prefixes, status, status_prefixes) == (self.keys, self.prefixes, self.status_keys,
                                                         self.status_prefixes):
            return self
        return StartupTaints(keys=keys, prefixes=prefixes, status_keys=status, status_prefixes=status_prefixes)


DEFAULT_STARTUP_TAINTS = StartupTaints()
