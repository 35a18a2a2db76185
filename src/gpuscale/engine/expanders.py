"""Expanders: small filters chained in the configured order, then a deterministic final pick.

Each filter keeps the best options by its own measure and never returns an empty list. After the chain, ties go to
the pool name (stable across runs), except that a `random` expander picks with a seeded hash — reproducible without
a random number generator in the engine.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuscale.engine.policy import ExpanderName, Policy
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, Resources, asks_gpu, is_gpu_resource

EPSILON = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One possible scale-up: `nodes` new nodes of `pool` would host `pods`."""

    pool: NodePool
    nodes: int
    pods: tuple[Pod, ...]
    capped_by: str | None = None
    """The limit that kept this option from hosting more pods, if one did."""

    @property
    def requested(self) -> Resources:
        return sum((p.requests for p in self.pods), Resources())


def _keep_min(options: Sequence[Option], key: Callable[[Option], float]) -> list[Option]:
    best = min(key(o) for o in options)
    return [o for o in options if key(o) <= best + EPSILON]


def waste(option: Option, counts_gpus: bool) -> float:
    """CA's least-waste score: unused share of CPU plus unused share of memory — plus, for GPU pools when
    `counts_gpus`, unused share of GPUs (CA ignores GPUs here, #2215; a half-empty 8-GPU node is real waste)."""
    offered = option.pool.allocatable.scale(option.nodes)
    used = option.requested
    score = 0.0
    for name in (CPU, MEMORY):
        if offered.get(name):
            score += (offered.get(name) - used.get(name)) / offered.get(name)
    if counts_gpus and option.pool.is_gpu_pool():
        gpus_offered = sum(a for n, a in offered.items if is_gpu_resource(n)) * 1000
        gpus_used = sum(a for n, a in used.items if is_gpu_resource(n)) * 1000 + used.get(GPU_MILLI)
        score += (gpus_offered - gpus_used) / gpus_offered
    return score


def _priority(policy: Policy) -> Callable[[Option], float]:
    rules = [(r.priority, [re.compile(p) for p in r.patterns]) for r in policy.priorities]

    def key(option: Option) -> float:
        matched = [prio for prio, patterns in rules if any(p.fullmatch(option.pool.name) for p in patterns)]
        return -max(matched) if matched else float("inf")

    return key


def _price(options: Sequence[Option]) -> list[Option]:
    cpu_only = all(not asks_gpu(p.requests) for o in options for p in o.pods)
    if cpu_only and any(not o.pool.is_gpu_pool() for o in options):
        # A GPU pool is never chosen for CPU-only pods while a CPU pool can take them.
        options = [o for o in options if not o.pool.is_gpu_pool()]
    return _keep_min(options, lambda o: o.nodes * o.pool.usd_per_hour / max(len(o.pods), 1))


def choose(options: Sequence[Option], policy: Policy, now: float) -> Option:
    """Run the expander chain over non-empty `options`; always returns one of them."""
    remaining = sorted(options, key=lambda o: o.pool.name)
    for name in policy.expander_chain():
        if len(remaining) == 1:
            break
        if name is ExpanderName.PRIORITY:
            remaining = _keep_min(remaining, _priority(policy))
        elif name is ExpanderName.LEAST_WASTE:
            remaining = _keep_min(remaining, lambda o: waste(o, policy.least_waste_counts_gpus))
        elif name is ExpanderName.PRICE:
            remaining = _price(remaining)
        elif name is ExpanderName.MOST_PODS:
            remaining = _keep_min(remaining, lambda o: -len(o.pods))
        elif name is ExpanderName.LEAST_NODES:
            remaining = _keep_min(remaining, lambda o: o.nodes)
        elif name is ExpanderName.RANDOM:
            token = f"{policy.random_seed}:{now!r}:{','.join(o.pool.name for o in remaining)}"
            remaining = [remaining[zlib.crc32(token.encode()) % len(remaining)]]
    return remaining[0]
