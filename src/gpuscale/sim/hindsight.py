"""The hindsight bound: the GPU-hours a pool would have provisioned with exactly the nodes its pods needed.

At every moment, a pool whose pods hold `u` GPUs (bound pods, the same pods and instants `allocated` counts) needs at
least `ceil(u / g)` nodes of its shape of `g` GPUs per node: no node holds more than `g` GPUs' worth of pods, whole or
fractional, so fewer nodes cannot hold them. The bound integrates `ceil(u / g) · g` over the run, per pool, as if
nodes started and stopped instantly at the moments the pool's use changes. It is a lower bound on what *any*
autoscaler provisions for the same placement of pods to pools (same pools, same pod start and end times), and it is
never below `allocated`, since `ceil(u / g) · g ≥ u`. It ignores that a real scheduler cannot repack running pods, so a
real cluster cannot reach it; docs/report.md says how to read it.

Integrated in the same pass as `allocated`: one update where the world starts and stops counting a pod's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

_SLACK = 1e-6
"""GPUs of rounding noise ignored before `ceil` (sums of fractional requests such as 0.1 + 0.2 drift by ~1e-16)."""


def nodes_needed(gpus_in_use: float, gpus_per_node: int) -> int:
    """The fewest nodes of `gpus_per_node` GPUs that hold `gpus_in_use` GPUs' worth of pods."""
    return max(0, math.ceil((gpus_in_use - _SLACK) / gpus_per_node))


class HindsightBound:
    """Per pool, the GPUs in use as a step function of time and the integral of its node-granular hull.

    A pool missing from `gpus_per_node` (or with 0 GPUs per node) is counted without granularity: its bound is
    its allocated GPU-seconds."""

    def __init__(self, gpus_per_node: Mapping[str, int]) -> None:
        self._per_node = dict(gpus_per_node)
        self._in_use: dict[str, float] = {}
        self._since: dict[str, float] = {}
        self._gpu_seconds: dict[str, float] = {}

    def change(self, pool: str, delta_gpus: float, now: float) -> None:
        """The pool's pods hold `delta_gpus` more (or, negative, fewer) GPUs from `now` on."""
        self._close(pool, now)
        self._in_use[pool] = self._in_use.get(pool, 0.0) + delta_gpus

    def gpu_seconds(self, now: float) -> dict[str, float]:
        """The bound per pool from the start up to `now` (GPU-seconds), pools sorted; changes nothing."""
        return {pool: self._gpu_seconds.get(pool, 0.0) + self._hull(pool) * (now - self._since.get(pool, now))
                for pool in sorted(set(self._gpu_seconds) | set(self._in_use))}

    def _close(self, pool: str, now: float) -> None:
        since = self._since.get(pool)
        if since is not None and now > since:
            self._gpu_seconds[pool] = self._gpu_seconds.get(pool, 0.0) + self._hull(pool) * (now - since)
        self._since[pool] = now

    def _hull(self, pool: str) -> float:
        in_use = self._in_use.get(pool, 0.0)
        per_node = self._per_node.get(pool, 0)
        if per_node <= 0:
            return max(in_use, 0.0)
        return float(nodes_needed(in_use, per_node) * per_node)
