"""PodDisruptionBudgets, as the Eviction API applies them: an eviction is allowed while `disruptionsAllowed` > 0."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuscale.model.selectors import LabelSelector


@dataclass(frozen=True, slots=True, kw_only=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int
    """`status.disruptionsAllowed` as the disruption controller last computed it."""
    min_available: str | None = None
    max_unavailable: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the budget selects a pod; an empty selector selects every pod of the namespace (policy/v1)."""
        return namespace == self.namespace and self.selector.matches(labels)
