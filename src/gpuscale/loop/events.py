"""Event reasons and wording, as Cluster Autoscaler writes them, so existing dashboards and alerts keep matching.

Pod events (TriggeredScaleUp, NotTriggerScaleUp, ScaleDown) go on the pod; node events (ScaleDown, ScaleDownFailed,
ScaleUpTimedOut) on the node; pool-level events (ScaledUpGroup, ScaleUpFailed, ScaleUpTimedOut for a request that never
registered) on the status ConfigMap, as CA puts them on `kube-system/cluster-autoscaler-status`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuscale.engine.nodes import pool_of
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.reasons import Reason

STATUS_KIND = "ConfigMap"
STATUS_KEY = "kube-system/gpuscale-status"

TRIGGERED_SCALE_UP = "TriggeredScaleUp"
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
SCALED_UP_GROUP = "ScaledUpGroup"
SCALE_UP_FAILED = "ScaleUpFailed"
SCALE_UP_TIMED_OUT = "ScaleUpTimedOut"
SCALE_DOWN = "ScaleDown"
SCALE_DOWN_FAILED = "ScaleDownFailed"
CLEANUP = "CleanupToBeDeleted"
NODE_DEGRADED = "NodeDegraded"
"""gpuscale's own: a node that has been usable lacks GPUs or readiness (engine.health); CA has no such event."""
NODE_REPAIR = "NodeRepair"
MALFORMED_ANNOTATION = "MalformedAnnotation"
"""gpuscale's own: a protection annotation (karpenter.sh/do-not-disrupt) whose value does not parse."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupChange:
    """One pool's size change, as CA prints it: `gpu-training-a100 0->1 (max: 8)`."""

    pool: str
    before: int
    after: int
    max_size: int

    def __str__(self) -> str:
        return f"{self.pool} {self.before}->{self.after} (max: {self.max_size})"


def pool_sizes(snapshot: Snapshot) -> dict[str, int]:
    """Current size of each pool as CA counts a group's target size: registered nodes plus requested ones."""
    sizes: dict[str, int] = {}
    for node in snapshot.cluster.nodes:
        pool = pool_of(node, snapshot.node_pools)
        if pool is not None:
            sizes[pool] = sizes.get(pool, 0) + 1
    for upcoming in snapshot.upcoming:
        sizes[upcoming.pool] = sizes.get(upcoming.pool, 0) + 1
    return sizes


def triggered_scale_up(change: GroupChange) -> str:
    return f"pod triggered scale-up: [{change}]"


def scaled_up_group(change: GroupChange) -> str:
    return f"Scale-up: setting group {change.pool} size to {change.after} instead of {change.before} " \
           f"(max: {change.max_size})"


def not_triggered(reasons: Iterable[Reason]) -> str:
    return "pod didn't trigger scale-up: " + "; ".join(r.message for r in reasons)


class EventLimiter:
    """At most one event per key per `interval_s` (NotTriggerScaleUp would otherwise repeat every 10 s per pod).

    Holds only keys still active: `forget_except` drops the others, so it stays as small as the pending queue."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._keys: list[str] | None = None
        """The keys of the last `due` call, when every one of them is in `_last` (None otherwise)."""
        self._oldest = 0.0
        """Then the earliest time in `_last`: while `now - _oldest < interval_s`, no key of `_keys` is due."""

    def allow(self, key: str, now: float) -> bool:
        self._keys = None  # a key `due` was not given may be remembered now: `due` walks its keys next time
        return self._allow(key, now)

    def _allow(self, key: str, now: float) -> bool:
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[key] = now
        return True

    def forget_except(self, keys: Iterable[str]) -> None:
        keep = set(keys)
        self._last = {k: t for k, t in self._last.items() if k in keep}
        self._keys = None

    def due(self, keys: list[str], now: float) -> list[int]:
        """`forget_except(keys)`, then `allow` each key in order; returns the positions of the keys allowed.

        The usual call repeats the last one's keys (the same pods wait, tick after tick) before any is due again:
        then nothing is forgotten (every remembered key is among them) and nothing is allowed (each was allowed
        before, at or after the oldest time remembered, and `now - t` only grows as `t` falls), so the call returns
        at once instead of walking the keys. So does a call with no keys when none is remembered (no pod waits)."""
        if not keys and not self._last:
            return []
        if keys == self._keys:
            if now - self._oldest < self.interval_s:
                return []
        else:
            self.forget_except(keys)
        allow = self._allow
        allowed = [i for i, key in enumerate(keys) if allow(key, now)]
        self._keys = list(keys)  # every key is in `_last` now: allowed just now, or remembered before
        self._oldest = min(self._last.values(), default=now)
        return allowed

    def __len__(self) -> int:
        return len(self._last)
