"""Jobs whose GPU demand follows a Helios virtual-cluster curve, with pod shapes (and lifetimes) drawn from openb.

The openb pod lists are shapes, not load (their own timestamps give ≈ 1 % of the cluster), and the Helios "Earth"
sequences are load without shapes (per-minute running + pending GPUs of one virtual cluster, May 2020, Hu et al.,
SC'21). `openb_helios_jobs` joins them: it scales the curve so its p95 is `scale_to_gpus`, then walks the window minute
by minute and, while the demand of the jobs generated so far is below the target, submits one more job — a uniformly
drawn openb pod with its own lifetime. Demand counts a job from its submission for ⌈duration / 60 s⌉ minutes, i.e.
as if it started at once; in the twin, pending time adds to it (running + pending, as Helios counts). A job whose
lifetime would keep demand above (1 + `cancel_above`) × target + 1 GPU when the curve falls is cut short at that minute,
as a cancelled job (Helios cancels 22 % of jobs, TWIN-DEFAULTS §4). Method and defaults: `docs/traces.md`.
Side effects: `read_demand_curve` opens a file; everything else is computation on values.
"""

from __future__ import annotations

import csv
import gzip
import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TextIO, TypeVar, cast

import numpy as np

from gpuscale.inputs.files import excerpt
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.pod import SchedulingConstraints
from gpuscale.model.resources import Resources
from gpuscale.sim.distributions import LogNormal
from gpuscale.sim.openb import OpenbPod
from gpuscale.sim.synthetic import DAY_S, DEFAULT_TEAMS, Team
from gpuscale.sim.traces import GB, GKE_PLACEMENT, Placement
from gpuscale.sim.workloads import JobSpec

MINUTE_S = 60.0
BUNDLED_VC = "vc3sl"
_V = TypeVar("_V")
OPENB_LIFETIME = LogNormal.from_p90(655.0, 7_389.0, floor=1.0)
"""LN(655 s, 7,389 s): openb GPU pod lifetimes (TWIN-DEFAULTS §4–5), for `Durations.LOGNORMAL` and missing times."""


class Durations(StrEnum):
    OPENB = "openb"
    """Each drawn pod's own `deletion_time - creation_time`."""
    LOGNORMAL = "lognormal"
    """`OPENB_LIFETIME`, independent of the shape."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DemandCurve:
    """GPU demand (running + pending GPUs) of one Helios VC, one value per minute from `start`."""

    name: str
    start: str
    """Timestamp of the first minute, as the file writes it (`2020-05-01 00:00:00`)."""
    gpus: tuple[float, ...]


@contextmanager
def _open_text(path: Path) -> Iterator[TextIO]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", newline="", encoding="utf-8") as f:
            yield f
    else:
        with path.open(newline="", encoding="utf-8") as f:
            yield f


def read_demand_curve(path: Path) -> DemandCurve:
    """A Helios `*_cluster_sequence_vc.csv[.gz]` file as a demand curve. Raises `InputError` naming row and column."""
    columns = ("time", "running_gpu_num", "pending_gpu_num")
    gpus: list[float] = []
    start = ""
    with _open_text(path) as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(str(path), "header", f"missing required column(s): {', '.join(missing)}")
        for row in reader:
            start = start or row["time"]
            total = 0.0
            for column in columns[1:]:
                try:
                    value = float(row[column])
                except (TypeError, ValueError):
                    value = math.nan
                if not (math.isfinite(value) and value >= 0):
                    raise InputError(f"{path} row {reader.line_num}", column,
                                     f"expected a GPU count ≥ 0, got {row[column]!r}")
                total += value
            gpus.append(total)
    if not gpus or max(gpus) <= 0:
        raise InputError(str(path), "running_gpu_num", "no minute with any GPU demand")
    return DemandCurve(name=path.name.split("_")[0], start=start, gpus=tuple(gpus))


def bundled_curve(vc: str = BUNDLED_VC) -> DemandCurve:
    """The Helios curve shipped in `gpuscale/data/helios/` (only `vc3sl`; the others are in ../shared/traces)."""
    path = Path(str(resources.files("gpuscale.data").joinpath("helios", f"{vc}_cluster_sequence_vc.csv.gz")))
    return read_demand_curve(path)


def scaled_demand(curve: DemandCurve, *, start_minute: int, duration_s: float, scale_to_gpus: float) -> np.ndarray:
    """Target GPUs per minute of the window: the curve × `scale_to_gpus` / p95 of the *whole* curve (so a quiet window
    stays quiet). Raises `ConfigError` if the window leaves the curve."""
    minutes = math.ceil(duration_s / MINUTE_S)
    if start_minute < 0 or minutes < 1 or start_minute + minutes > len(curve.gpus):
        raise ConfigError("start_minute", f"window {start_minute}+{minutes} min is outside the "
                                          f"{len(curve.gpus)}-minute curve {curve.name}")
    if not scale_to_gpus > 0:
        raise ConfigError("scale_to_gpus", f"must be > 0, got {scale_to_gpus}")
    gpus = np.asarray(curve.gpus, dtype=float)
    p95 = float(np.percentile(gpus, 95)) or float(gpus.max())
    return np.asarray(gpus[start_minute:start_minute + minutes] * (scale_to_gpus / p95))


@dataclass(frozen=True, slots=True)
class _Pool:
    """The openb pods as arrays: GPUs (fractional ones as milli/1000) and lifetimes in seconds."""

    pods: Sequence[OpenbPod]
    gpus: np.ndarray
    lifetimes: np.ndarray

    @staticmethod
    def of(pods: Sequence[OpenbPod], durations: Durations, rng: np.random.Generator) -> _Pool:
        gpus = np.array([p.total_gpu_milli / 1000.0 for p in pods])
        fallback = OPENB_LIFETIME.sample(rng, len(pods))
        own = np.array([(p.deletion_s - p.creation_s) if p.deletion_s is not None and p.creation_s is not None
                        else math.nan for p in pods])
        if durations is Durations.LOGNORMAL:
            return _Pool(pods, gpus, fallback)
        return _Pool(pods, gpus, np.where(np.isfinite(own) & (own > 0), own, fallback))


def openb_helios_jobs(rng: np.random.Generator, openb_pods: Sequence[OpenbPod], demand_curve: DemandCurve, *,
                      start_minute: int = 0, duration_s: float = DAY_S, scale_to_gpus: float,
                      placement: Placement = GKE_PLACEMENT, gpu_model: str = "",
                      durations: Durations = Durations.OPENB, min_duration_s: float = MINUTE_S,
                      max_duration_s: float = 7 * DAY_S, cancel_above: float | None = 0.1,
                      teams: Sequence[Team] = DEFAULT_TEAMS, priority: int = 0,
                      name_prefix: str = "helios-") -> list[JobSpec]:
    """One-pod jobs submitted in [0, `duration_s`) whose running+pending GPUs follow `demand_curve` from
    `start_minute`, scaled by `scaled_demand`. GPU pods are `training` jobs placed on `gpu_model` ("" = any GPU node),
    CPU-only pods `batch` jobs (they ride along in openb's proportion and add no GPU demand). Lifetimes are clipped to
    [`min_duration_s`, `max_duration_s`]; `cancel_above=None` never cuts a job short. Sorted by submit time."""
    target = scaled_demand(demand_curve, start_minute=start_minute, duration_s=duration_s, scale_to_gpus=scale_to_gpus)
    _check(openb_pods, min_duration_s, max_duration_s, teams)
    pool = _Pool.of(openb_pods, durations, rng)
    limit = target * (1 + cancel_above) + 1.0 if cancel_above is not None else np.full(len(target), np.inf)
    cumulative_weights = np.cumsum([t.weight for t in teams])
    # Per job, the loop reads plain Python values, not NumPy scalars (each NumPy call on a scalar costs a few µs,
    # ≈ 77,000 jobs a week): the lifetimes clipped once as an array (the same values `np.clip` gives one by one),
    # the team found by `bisect_right` on the cumulative weights as floats (`searchsorted(..., side="right")`), the
    # first minute over the limit as the mask's `argmax` (`flatnonzero(...)[0]`). The draws are the same calls in the
    # same order.
    lifetimes = np.clip(pool.lifetimes, min_duration_s, max_duration_s).tolist()
    gpus_of = pool.gpus.tolist()
    weights_to = cumulative_weights.tolist()
    weight_sum = cumulative_weights[-1]
    targets = target.tolist()
    minutes = len(target)
    committed = np.zeros(minutes)
    jobs: list[JobSpec] = []
    shapes: dict[int, tuple[str, Resources, SchedulingConstraints, int]] = {}
    """Per openb pod drawn: what its jobs share (kind, requests, constraints, image size), made at its first draw."""
    canonical: dict[object, object] = {}
    """One object per distinct requests or constraints value (≈ 150 and 2 over the ≈ 8,000 openb pods a week draws):
    the twin's and the engine's caches keyed by these values then find the very object they hold, not an equal one."""
    for minute in range(minutes):
        while committed[minute] < targets[minute]:
            i = int(rng.integers(len(pool.pods)))
            # whole milliseconds, and never past `duration_s` when the window ends inside a minute
            span_ms = max(1, min(60_000, round((duration_s - minute * MINUTE_S) * 1000)))
            submit_s = minute * MINUTE_S + int(rng.integers(span_ms)) / 1000
            run_s = lifetimes[i]
            team = teams[bisect_right(weights_to, rng.uniform(0.0, weight_sum))]
            gpus = gpus_of[i]
            offset_s = submit_s - minute * MINUTE_S
            end = min(minute + math.ceil((offset_s + run_s) / MINUTE_S), minutes)
            # A cancelled job still runs `min_duration_s`: look for the curve falling below it only after that.
            first = min(minute + math.ceil((offset_s + min_duration_s) / MINUTE_S), end)
            if gpus and first < end:
                over = committed[first:end] + gpus > limit[first:end]
                at = int(over.argmax())
                if over[at]:
                    end = first + at
                    run_s = end * MINUTE_S - submit_s  # cancelled when the curve falls: ends at that minute
            committed[minute:end] += gpus
            shape = shapes.get(i)
            if shape is None:
                shape = shapes[i] = _shape(pool.pods[i], placement, gpu_model, canonical)
            kind, requests, constraints, image_bytes = shape
            jobs.append(JobSpec(name=f"{name_prefix}{len(jobs):06d}", kind=kind, team=team.name, submit_s=submit_s,
                                requests=requests, constraints=constraints, duration_s=max(round(run_s, 3), 0.001),
                                priority=priority, image_bytes=image_bytes))
    return sorted(jobs, key=lambda j: (j.submit_s, j.name))


def _check(pods: Sequence[OpenbPod], min_duration_s: float, max_duration_s: float, teams: Sequence[Team]) -> None:
    if not any(p.num_gpu > 0 and p.gpu_milli > 0 for p in pods):
        raise ConfigError("openb_pods", "need at least one pod with a GPU")
    if not 0 < min_duration_s <= max_duration_s:
        raise ConfigError("min_duration_s", f"expected 0 < min ≤ max, got {min_duration_s}, {max_duration_s}")
    if not teams or any(not t.weight >= 0 for t in teams) or sum(t.weight for t in teams) <= 0:
        raise ConfigError("teams", "need at least one team, weights ≥ 0 with a positive sum")


def _shape(pod: OpenbPod, placement: Placement, gpu_model: str,
           canonical: dict[object, object]) -> tuple[str, Resources, SchedulingConstraints, int]:
    """What every job drawing `pod` gets: its kind, requests, placement constraints and image size (bytes); the
    requests and constraints are the first equal ones in `canonical` (added when new)."""
    requests = _canonical(canonical, pod.requests())
    gpu = pod.num_gpu > 0
    rule = placement.rule(gpu_model if gpu else "", requests)
    if rule is None:
        raise ConfigError("gpu_model", f"{excerpt(gpu_model)} unknown to the placement")
    # Image sizes by pool (TWIN-DEFAULTS §5): ≤ 1 GPU → gpu-small's CUDA runtime, more → gpu-large's PyTorch NGC.
    image_gb = 0.5 if not gpu else 6.0 if pod.num_gpu == 1 else 12.0
    return "training" if gpu else "batch", requests, _canonical(canonical, rule.constraints()), round(image_gb * GB)


def _canonical(seen: dict[object, object], value: _V) -> _V:
    """The first value equal to `value` that `seen` holds (`value` itself, added, when there is none)."""
    return cast(_V, seen.setdefault(value, value))
