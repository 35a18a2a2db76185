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
