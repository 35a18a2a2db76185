"""Seeded synthetic workloads: training and batch jobs with daily-cycled Poisson arrivals, and inference services.

Defaults are TWIN-DEFAULTS §4–5 (each one's source is listed in `docs/traces.md`). Randomness comes only from the
`numpy.random.Generator` passed in, consumed in a fixed order, so one seed gives the same jobs on every run; training
and batch draw from separate child generators (`Generator.spawn`), so changing the batch mix leaves the training
jobs as they were. Time 0 is midnight (hour 0 of the daily cycle) of a Monday (for weekday effects). No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuscale.model.errors import ConfigError
from gpuscale.sim.distributions import Z90, LogNormal
from gpuscale.sim.traces import GB, GKE_PLACEMENT, Placement, pod_requests
from gpuscale.sim.workloads import JobSpec, ServiceSpec, Traffic

HOUR_S = 3600.0
DAY_S = 86_400.0
Spike = tuple[float, float, float]
"""(start_s, duration_s, multiplier), as `Traffic.spikes` holds them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Team:
    """A tenant: its share of a mix's arrivals and the hour its daily cycle peaks (the phase per tenant of §5)."""

    name: str
    weight: float = 1.0
    peak_hour: float = 14.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuShape:
    cpu_milli: int
    memory_mib: int
    weight: float


def _check_rates(where: str, per_hour: float, amplitude: float, teams: Sequence[Team]) -> None:
    if not per_hour >= 0:
        raise ConfigError(f"{where}.jobs_per_hour", f"must be ≥ 0, got {per_hour}")
    if not 0 <= amplitude <= 1:
        raise ConfigError(f"{where}.daily_amplitude", f"must be in [0, 1], got {amplitude}")
    _check_weights(f"{where}.teams", [t.weight for t in teams])


def _check_weights(where: str, weights: Sequence[float]) -> None:
    if not weights or any(not w >= 0 for w in weights) or sum(weights) <= 0:
        raise ConfigError(where, f"weights must be ≥ 0 with a positive sum, got {list(weights)}")


TRAINING_GPUS = ((1, 0.745), (2, 0.07), (4, 0.07), (8, 0.07), (16, 0.02), (32, 0.01), (64, 0.015))
"""GPUs per training job → probability (TWIN-DEFAULTS §5: mean 3.3, median 1)."""
DEFAULT_TEAMS = (Team(name="default"),)
TRAINING_RUN_TIME = LogNormal(median=600.0, sigma=2.3, floor=1.0, cap=14 * DAY_S)
BATCH_RUN_TIME = LogNormal(median=600.0, sigma=math.log(6.0) / Z90, floor=1.0, cap=DAY_S)
"""LN(600 s, p90 3,600 s), capped at one day."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingMix:
    jobs_per_hour: float = 4.0
    gpus_per_job: tuple[tuple[int, float], ...] = TRAINING_GPUS
    gang_pod_gpus: int = 8
    """Jobs with at least this many GPUs become gangs of pods of this many GPUs."""
    run_time: LogNormal = TRAINING_RUN_TIME
    checkpoint_s: tuple[float, float] = (900.0, 3600.0)
    """Checkpoint interval, uniform between these bounds."""
    daily_amplitude: float = 0.2
    teams: tuple[Team, ...] = DEFAULT_TEAMS
    priority: int = 0
    image_gb: float = 12.0
    single_gpu_model: str = "nvidia-tesla-t4"
    single_gpu_cpu_milli: int = 3_000
    single_gpu_memory_mib: int = 10_240
    multi_gpu_model: str = "nvidia-tesla-a100"
    cpu_milli_per_gpu: int = 10_000
    memory_mib_per_gpu: int = 61_440

    def __post_init__(self) -> None:
        _check_rates("TrainingMix", self.jobs_per_hour, self.daily_amplitude, self.teams)
        _check_weights("TrainingMix.gpus_per_job", [w for _, w in self.gpus_per_job])
        for gpus, _ in self.gpus_per_job:
            if gpus < 1 or (gpus > self.gang_pod_gpus and gpus % self.gang_pod_gpus):
                raise ConfigError("TrainingMix.gpus_per_job",
                                  f"{gpus} GPUs is not 1..{self.gang_pod_gpus} or a multiple of {self.gang_pod_gpus}")
        low, high = self.checkpoint_s
        if not 0 <= low <= high:
            raise ConfigError("TrainingMix.checkpoint_s", f"expected 0 ≤ low ≤ high, got {self.checkpoint_s}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMix:
    jobs_per_hour: float = 20.0
    shapes: tuple[CpuShape, ...] = (CpuShape(cpu_milli=500, memory_mib=1_024, weight=0.3),
                                    CpuShape(cpu_milli=1_000, memory_mib=2_048, weight=0.3),
                                    CpuShape(cpu_milli=2_000, memory_mib=4_096, weight=0.25),
                                    CpuShape(cpu_milli=4_000, memory_mib=8_192, weight=0.15))
    run_time: LogNormal = BATCH_RUN_TIME
    daily_amplitude: float = 0.2
    teams: tuple[Team, ...] = DEFAULT_TEAMS
    priority: int = -1
    image_gb: float = 0.5

    def __post_init__(self) -> None:
        _check_rates("BatchMix", self.jobs_per_hour, self.daily_amplitude, self.teams)
        _check_weights("BatchMix.shapes", [s.weight for s in self.shapes])


DEFAULT_TRAINING = TrainingMix()
DEFAULT_BATCH = BatchMix()


def daily_factor(t_s: np.ndarray, amplitude: float, peak_hour: float) -> np.ndarray:
    """1 ± `amplitude`, a cosine over the day peaking at `peak_hour`; its daily mean is 1."""
    return 1.0 + amplitude * np.cos(2 * np.pi * ((t_s / HOUR_S - peak_hour) % 24.0) / 24.0)


def _arrivals(rng: np.random.Generator, per_hour: float, duration_s: float, teams: Sequence[Team],
              amplitude: float) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times (whole ms, sorted) and each one's team index: per team, a Poisson process of rate
    `per_hour · weight / Σweights · daily_factor(t)`, drawn by thinning a homogeneous one at the peak rate."""
    total = sum(t.weight for t in teams)
    times, owners = [], []
    for i, team in enumerate(teams):
        peak_per_s = per_hour * team.weight / total / HOUR_S * (1 + amplitude)
        t = rng.uniform(0.0, duration_s, rng.poisson(peak_per_s * duration_s))
        t = t[rng.uniform(0.0, 1 + amplitude, len(t)) < daily_factor(t, amplitude, team.peak_hour)]
        times.append(np.floor(t * 1000) / 1000)  # whole milliseconds, still < duration_s
        owners.append(np.full(len(t), i))
    all_t, all_i = np.concatenate(times), np.concatenate(owners)
    order = np.lexsort((all_i, all_t))
    return all_t[order], all_i[order]


def generate_jobs(rng: np.random.Generator, duration_s: float, *, training: TrainingMix = DEFAULT_TRAINING,
                  batch: BatchMix = DEFAULT_BATCH, placement: Placement = GKE_PLACEMENT) -> list[JobSpec]:
    """Training and batch jobs submitted in [0, `duration_s`), sorted by (submit_s, name). Every job has a positive
    duration, at least one pod and valid requests. Raises `ConfigError` if `placement` cannot place a mix's model."""
    for model in (training.single_gpu_model, training.multi_gpu_model):
        if model and placement.rule(model, pod_requests(gpus_per_pod=1, gpu_milli=1000, cpu_milli=0,
                                                         memory_mib=0)) is None:
            raise ConfigError("TrainingMix", f"GPU model {model!r} unknown to the placement")
    train_rng, batch_rng = rng.spawn(2)
    jobs = [*_training_jobs(train_rng, duration_s, training, placement),
            *_batch_jobs(batch_rng, duration_s, batch, placement)]
    return sorted(jobs, key=lambda j: (j.submit_s, j.name))


def _training_jobs(rng: np.random.Generator, duration_s: float, mix: TrainingMix,
                   placement: Placement) -> list[JobSpec]:
    times, owners = _arrivals(rng, mix.jobs_per_hour, duration_s, mix.teams, mix.daily_amplitude)
    n = len(times)
    sizes, weights = zip(*mix.gpus_per_job, strict=True)
    gpus = rng.choice(np.array(sizes), size=n, p=np.array(weights) / sum(weights))
    runs = np.round(mix.run_time.sample(rng, n), 3)
    checkpoints = np.round(rng.uniform(*mix.checkpoint_s, n), 3)
    jobs = []
    for i in range(n):
        g = int(gpus[i])
        pods, per_pod = (g // mix.gang_pod_gpus, mix.gang_pod_gpus) if g >= mix.gang_pod_gpus else (1, g)
        if g == 1:
            model, cpu, memory = mix.single_gpu_model, mix.single_gpu_cpu_milli, mix.single_gpu_memory_mib
        else:
            model, cpu, memory = mix.multi_gpu_model, mix.cpu_milli_per_gpu * per_pod, mix.memory_mib_per_gpu * per_pod
        requests = pod_requests(gpus_per_pod=per_pod, gpu_milli=1000, cpu_milli=cpu, memory_mib=memory)
        jobs.append(JobSpec(
            name=f"train-{i:06d}", kind="training", team=mix.teams[owners[i]].name, submit_s=float(times[i]),
            pods=pods, requests=requests, constraints=placement.constraints(model, requests),
            duration_s=float(runs[i]), checkpoint_s=float(checkpoints[i]), priority=mix.priority,
            image_bytes=round(mix.image_gb * GB)))
    return jobs


def _batch_jobs(rng: np.random.Generator, duration_s: float, mix: BatchMix, placement: Placement) -> list[JobSpec]:
    times, owners = _arrivals(rng, mix.jobs_per_hour, duration_s, mix.teams, mix.daily_amplitude)
    n = len(times)
    weights = np.array([s.weight for s in mix.shapes])
    picks = rng.choice(len(mix.shapes), size=n, p=weights / weights.sum())
    runs = np.round(mix.run_time.sample(rng, n), 3)
    jobs = []
    for i in range(n):
        shape = mix.shapes[picks[i]]
        requests = pod_requests(gpus_per_pod=0, gpu_milli=0, cpu_milli=shape.cpu_milli, memory_mib=shape.memory_mib)
        jobs.append(JobSpec(
            name=f"batch-{i:06d}", kind="batch", team=mix.teams[owners[i]].name, submit_s=float(times[i]),
            requests=requests, constraints=placement.constraints("", requests), duration_s=float(runs[i]),
            priority=mix.priority, image_bytes=round(mix.image_gb * GB)))
    return jobs


# ---------------------------------------------------------------------------------------------------------- inference
def chat_traffic(*, peak_rps: float, duration_s: float, trough_ratio: float = 1 / 30, peak_hour: float = 13.0,
                 weekend_factor: float = 0.5, start_weekday: int = 0, spikes: Sequence[Spike] = ()) -> Traffic:
    """Chat-like requests (BurstGPT): a daily cosine from `peak_rps · trough_ratio` up to `peak_rps` at `peak_hour`
    (13 h, the middle of the 10–16 h busy hours), Saturdays and Sundays × `weekend_factor` (day 0 is weekday
    `start_weekday`, 0 = Monday), then any extra `spikes`."""
    weekend: list[Spike] = []
    for day in range(math.ceil(duration_s / DAY_S)):
        if (start_weekday + day) % 7 < 5 or weekend_factor == 1.0:
            continue
        start = day * DAY_S
        if weekend and weekend[-1][0] + weekend[-1][1] == start:
            weekend[-1] = (weekend[-1][0], weekend[-1][1] + DAY_S, weekend_factor)
        else:
            weekend.append((start, DAY_S, weekend_factor))
    return Traffic(trough_rps=peak_rps * trough_ratio, peak_rps=peak_rps, peak_hour=peak_hour,
                   spikes=(*weekend, *spikes))


def api_traffic(rng: np.random.Generator, *, mean_rps: float, duration_s: float, hourly_cv: float = 0.8,
                max_factor: float = 4.0, spikes: Sequence[Spike] = ()) -> Traffic:
    """API-like requests (BurstGPT): no daily cycle, but each hour's rate is `mean_rps` times a Gamma factor (mean 1,
    coefficient of variation `hourly_cv`, capped at `max_factor`), then any extra `spikes`. `Traffic.rps` costs one
    step per spike: a week holds 168 hourly factors."""
    hours = math.ceil(duration_s / HOUR_S)
    if hourly_cv > 0:
        shape = 1.0 / hourly_cv**2
        factors = np.clip(rng.gamma(shape, 1.0 / shape, hours), 0.0, max_factor)
    else:
        factors = np.ones(hours)
    hourly = tuple((h * HOUR_S, HOUR_S, round(float(factors[h]), 4)) for h in range(hours))
    return Traffic(trough_rps=mean_rps, peak_rps=mean_rps, spikes=(*hourly, *spikes))


def inference_service(name: str, *, traffic: Traffic, rps_per_replica: float, gpus_per_pod: int = 1,
                      gpu_milli: int = 1000, gpu_model: str = "nvidia-tesla-t4", cpu_milli: int = 3_000,
                      memory_mib: int = 10_240, placement: Placement = GKE_PLACEMENT, team: str = "default",
                      min_replicas: int = 1, max_replicas: int = 100, priority: int = 100,
                      image_gb: float = 6.0) -> ServiceSpec:
    """An inference Deployment+HPA of one pod shape (default: the seed-pools chat replica, 1 T4, 3 CPU, 10 GiB).
    `gpu_milli` < 1000 with one GPU makes it a fractional-GPU service. Raises ValueError for an invalid shape and
    `ConfigError` for a model `placement` cannot place."""
    requests = pod_requests(gpus_per_pod=gpus_per_pod, gpu_milli=gpu_milli if gpus_per_pod else 0,
                            cpu_milli=cpu_milli, memory_mib=memory_mib)
    rule = placement.rule(gpu_model if gpus_per_pod else "", requests)
    if rule is None:
        raise ConfigError(f"inference_service {name}", f"GPU model {gpu_model!r} unknown to the placement")
    return ServiceSpec(name=name, team=team, requests=requests, constraints=rule.constraints(), traffic=traffic,
                       rps_per_replica=rps_per_replica, min_replicas=min_replicas, max_replicas=max_replicas,
                       priority=priority, image_bytes=round(image_gb * GB))
