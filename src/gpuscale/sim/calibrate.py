"""Calibrating the twin from measured traces: per-pool start-up distributions fitted to what a cluster really did.

Method (docs/tracing.md): for each pool, the traces of pods that took the long path (they waited for a new node of
that pool) give one sample per node start-up step — requested → capacity acquired (`acquire_s`), → instance running
(`boot_s`), → registered (`register_s`), → Ready (`ready_s`), → GPUs in allocatable (`gpu_s`) — plus the cold image
pull (`pull_s`, bind → pulled on the fresh node) and the container start (`start_s`, pulled → Ready). Each step is
fitted with the twin's own `LogNormal` by maximum likelihood: median = exp(mean ln x), σ = sample standard deviation
of ln x. A step that took no time in at least half the samples (a provider that does not report it: kwok has no
separate capacity or boot step) is a constant 0. The profile file is YAML; `load_profiles` turns it back into
`StartupProfile`s, and a scenario names it with `calibrated_profiles:` (pools it lists replace their preset).

`replay` runs the twin on given arrivals with those profiles, to compare its prediction with the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuscale.config import Config, load_yaml_file
from gpuscale.inputs.files import excerpt
from gpuscale.lifecycle.phases import Phase, percentile
from gpuscale.lifecycle.trace import PodTrace
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.errors import ConfigError
from gpuscale.sim.cloud import CloudPool, StartupProfile
from gpuscale.sim.distributions import Z90, LogNormal
from gpuscale.sim.run import TwinPolicy, TwinSetup, simulate
from gpuscale.sim.workloads import JobSpec

STEPS: tuple[tuple[str, Phase], ...] = (
    ("acquire_s", Phase.CAPACITY), ("boot_s", Phase.BOOT), ("register_s", Phase.REGISTRATION),
    ("ready_s", Phase.NODE_READY), ("gpu_s", Phase.GPU_REGISTRATION), ("pull_s", Phase.IMAGE_PULL),
    ("start_s", Phase.CONTAINER_START))
"""Profile field ← the phase whose durations it is fitted to."""
ZERO_S = 1e-3
"""Durations below this count as "took no time" (the step is not observed separately)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    distribution: LogNormal
    samples: int


def fit_lognormal(values: Sequence[float]) -> Fit:
    """Maximum-likelihood lognormal of non-negative durations; mostly-zero steps are a constant 0."""
    positive = [v for v in values if v >= ZERO_S]
    if not values or len(positive) * 2 < len(values):
        return Fit(distribution=LogNormal(median=0.0, sigma=0.0), samples=len(values))
    logs = [math.log(v) for v in positive]
    mean = sum(logs) / len(logs)
    sigma = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)) if len(logs) > 1 else 0.0
    return Fit(distribution=LogNormal(median=math.exp(mean), sigma=sigma), samples=len(values))


def fit_profiles(traces: Sequence[PodTrace]) -> dict[str, dict[str, Fit]]:
    """Pool → profile field → fit, from the complete new-node traces of each pool (pools without any are left out)."""
    by_pool: dict[str, list[PodTrace]] = {}
    for trace in traces:
        if trace.complete and trace.new_node and trace.pool:
            by_pool.setdefault(trace.pool, []).append(trace)
    return {pool: {name: fit_lognormal([t.phases.get(phase.value, 0.0) for t in pool_traces])
                   for name, phase in STEPS}
            for pool, pool_traces in sorted(by_pool.items())}


def profiles_yaml(fits: Mapping[str, Mapping[str, Fit]], source: str) -> str:
    doc: dict[str, Any] = {
        "source": source,
        "method": "lognormal maximum likelihood per pool and start-up step (docs/tracing.md)",
        "pools": {pool: {name: {"median": round(fit.distribution.median, 3), "sigma": round(fit.distribution.sigma, 4),
                                "p90": round(fit.distribution.median * math.exp(Z90 * fit.distribution.sigma), 3),
                                "samples": fit.samples}
                         for name, fit in steps.items()}
                  for pool, steps in fits.items()}}
    return "# Start-up profile fitted by `gpuscale calibrate`; load it with `calibrated_profiles:` in a scenario.\n" + \
        yaml.safe_dump(doc, sort_keys=False)


def _distribution(raw: Any, where: str) -> LogNormal:
    if not isinstance(raw, dict):
        raise ConfigError(where, "expected {median, sigma}")
    median, sigma = raw.get("median"), raw.get("sigma", 0.0)
    for name, value in (("median", median), ("sigma", sigma)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
            raise ConfigError(f"{where}.{name}", f"expected a non-negative number, got {excerpt(value)}")
    if median > 86_400 or sigma > 5:  # type: ignore[operator]
        raise ConfigError(where, f"a start-up step has a median of at most 86400 s and a sigma of at most 5, got "
                                 f"median {excerpt(median)}, sigma {excerpt(sigma)}")
    return LogNormal(median=float(median), sigma=float(sigma))  # type: ignore[arg-type]


def load_profiles(path: Path) -> dict[str, StartupProfile]:
    """A profile file written by `gpuscale calibrate` → pool → `StartupProfile`."""
    return profiles_from_doc(load_yaml_file(path, "a start-up profile"), str(path))


def profiles_from_doc(raw: Any, path: str) -> dict[str, StartupProfile]:
    pools = raw.get("pools") if isinstance(raw, dict) else None
    if not isinstance(pools, dict) or not pools:
        raise ConfigError(f"{path}: pools", "expected a mapping of pool → fitted steps")
    out = {}
    for pool, steps in pools.items():
        if not isinstance(steps, dict):
            raise ConfigError(f"{path}: pools.{pool}", "expected a mapping of step → {median, sigma}")
        unknown = set(steps) - {name for name, _ in STEPS}
        if unknown:
            raise ConfigError(f"{path}: pools.{pool}.{sorted(unknown)[0]}", "unknown step")
        fitted = {name: _distribution(steps[name], f"{path}: pools.{pool}.{name}")
                  for name, _ in STEPS if name in steps}
        zero = LogNormal(median=0.0, sigma=0.0)
        out[str(pool)] = StartupProfile(
            acquire_s=fitted.get("acquire_s", zero), boot_s=fitted.get("boot_s", zero),
            register_s=fitted.get("register_s", zero), ready_s=fitted.get("ready_s", zero),
            gpu_s=fitted.get("gpu_s"), pull_s=fitted.get("pull_s"), start_s=fitted.get("start_s", zero))
    return out


def as_profiles(fits: Mapping[str, Mapping[str, Fit]]) -> dict[str, StartupProfile]:
    """Fits → profiles, through the same YAML document a user would load (so the file format is what is used)."""
    return profiles_from_doc(yaml.safe_load(profiles_yaml(fits, "in-memory")), "in-memory")


def replay(jobs: Sequence[JobSpec], profiles: Mapping[str, StartupProfile], config: Config, *,
           scan_interval_s: float, seed: int = 0, horizon_s: float = 1800.0) -> list[float]:
    """Pending→running seconds of each pod of `jobs` in a twin whose pools start up as `profiles` say (pools not in
    it keep their scenario preset), with `config`'s policy and no stockouts."""
    from gpuscale.sim.profiles import PROFILES

    pools = tuple(CloudPool(pool=p, profile=profiles.get(p.name) or PROFILES["gpu-large" if p.gpus_per_node >= 4
                                                                             else "gpu-small" if p.gpus_per_node
                                                                             else "cpu"])
                  for p in config.pools)
    setup = TwinSetup(name="replay", pools=pools, jobs=tuple(jobs), seed=seed,
                      initial_nodes={p.name: p.min_size for p in config.pools if p.min_size},
                      duration_s=max((j.submit_s for j in jobs), default=0.0) + horizon_s, sample_s=horizon_s)
    result = simulate(setup, TwinPolicy(name="replay", policy=config.policy,
                                        settings=LoopSettings(scan_interval_s=scan_interval_s)))
    return [w for w in (p.pending_to_running_s for p in result.pods) if w is not None]


def replay_p50(jobs: Sequence[JobSpec], profiles: Mapping[str, StartupProfile], config: Config, *,
               scan_interval_s: float, seed: int = 0) -> float:
    waits = replay(jobs, profiles, config, scan_interval_s=scan_interval_s, seed=seed)
    if not waits:
        raise ValueError("no pod ran in the replay")
    return percentile(waits, 50)
