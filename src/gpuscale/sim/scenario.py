"""Scenarios for the twin: a YAML file naming the pools (the same `config` section the controller reads), how each
pool starts up, its stockouts, the initial nodes and the workload. `load_scenario` returns a `TwinSetup`.

A scenario does not fix the autoscaling policy: `gpuscale simulate --policy` and `gpuscale compare --policy A
--policy B` choose it — a preset (`gpuscale`, `ca-defaults`), `scenario` (the scenario's own `config` section), or the
path of a gpuscale config file whose autoscaling options replace the scenario's. Same scenario + seed → same run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from gpuscale.config import (
    Config,
    Duration,
    Fraction01,
    load_config,
    load_yaml_file,
    parse_config,
    preset_policy,
)
from gpuscale.engine.policy import Policy
from gpuscale.inputs.files import excerpt
from gpuscale.inputs.strict import StrictModel
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.errors import ConfigError
from gpuscale.model.resources import Resources, is_gpu_resource
from gpuscale.sim.calibrate import load_profiles
from gpuscale.sim.cloud import CloudPool, Spell, StartupProfile
from gpuscale.sim.distributions import Empirical, LogNormal
from gpuscale.sim.helios import bundled_curve, openb_helios_jobs
from gpuscale.sim.openb import bundled, read_pods
from gpuscale.sim.profiles import PROFILES, STOCKOUT_PROBABILITY
from gpuscale.sim.queue_config import QueuesConfig, build_queue_spec
from gpuscale.sim.run import TwinPolicy, TwinSetup
from gpuscale.sim.scenario_dra import (
    DeviceClassConfig,
    WorkloadDevices,
    check_classes,
    device_classes,
    job_by_claim,
    service_by_claim,
    uses_dra,
)
from gpuscale.sim.scenario_dra import check_workload as check_devices
from gpuscale.sim.scenario_volumes import (
    StorageConfig,
    WorkloadVolumes,
    check_storage,
    check_workload,
    claim_templates,
    dataset_volumes,
    storage_classes,
    with_section,
)
from gpuscale.sim.scheduler import Scoring
from gpuscale.sim.synthetic import (
    BatchMix,
    Team,
    TrainingMix,
    chat_traffic,
    generate_jobs,
    inference_service,
)
from gpuscale.sim.traces import GKE_PLACEMENT, read_jobs
from gpuscale.sim.workloads import JobSpec, PauseSpec, ServiceSpec, job_labels, service_labels

DEFAULT_SCENARIO = "default"


MAX_DURATION_S = 31 * 86_400.0
"""A scenario covers at most a month of virtual time."""
MAX_JOBS = 1_000_000
"""Jobs a scenario's training and batch arrival rates may be expected to submit over its duration."""
MAX_HELIOS_GPU_HOURS = 200_000
"""Helios demand (`scale_to_gpus` × duration): the replay draws about 4.5 jobs per GPU-hour."""
MAX_REPLICAS = 100_000
"""Replicas of one service or pause workload."""
MAX_SEED = 2**64 - 1


class _Strict(StrictModel):
    """Unknown keys refused; integers, booleans and numbers only as what they are (`gpuscale.inputs.strict`)."""


class SpellConfig(_Strict):
    pool: str
    start: Duration
    end: Duration

    @model_validator(mode="after")
    def _ordered(self) -> SpellConfig:
        if self.end < self.start:
            raise ValueError(f"end {self.end:g}s is before start {self.start:g}s")
        return self


class TeamConfig(_Strict):
    name: str
    weight: float = Field(default=1.0, ge=0)
    peak_hour: float = Field(default=14.0, ge=0, lt=24)


class TrainingConfig(WorkloadVolumes, WorkloadDevices):
    jobs_per_hour: float = Field(default=4.0, ge=0)
    max_run_time: Duration = 14 * 86_400.0
    teams: tuple[TeamConfig, ...] = ()


class BatchConfig(WorkloadVolumes, WorkloadDevices):
    jobs_per_hour: float = Field(default=20.0, ge=0)
    teams: tuple[TeamConfig, ...] = ()


class SpikeConfig(_Strict):
    start: Duration
    duration: Duration
    factor: float = Field(gt=0, le=1000)


class ServiceConfig(WorkloadVolumes, WorkloadDevices):
    name: str
    gpu_model: str = "nvidia-tesla-t4"
    peak_rps: float = Field(gt=0, le=1e7)
    rps_per_replica: float = Field(ge=1e-3, le=1e7)
    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(default=100, ge=1, le=MAX_REPLICAS)
    spikes: tuple[SpikeConfig, ...] = ()
    team: str = "serving"

    @model_validator(mode="after")
    def _ordered(self) -> ServiceConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}")
        return self


class HeliosConfig(_Strict):
    vc: str = "vc3sl"
    scale_to_gpus: float = Field(gt=0)
    start_minute: int = Field(default=0, ge=0)


class PauseConfig(_Strict):
    replicas: int = Field(ge=1, le=MAX_REPLICAS)
    cpu_milli: int = Field(default=1000, ge=0, le=10**9)
    memory_mib: int = Field(default=1024, ge=0, le=10**9)


class WorkloadConfig(_Strict):
    training: TrainingConfig | None = None
    batch: BatchConfig | None = None
    services: tuple[ServiceConfig, ...] = ()
    trace: str | None = None
    """A generic job CSV (docs/traces.md), relative to the scenario file."""
    helios: HeliosConfig | None = None
    pause: PauseConfig | None = None


class ScenarioFile(_Strict):
    name: str
    description: str = ""
    duration: Duration = 86_400.0
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    config: dict[str, Any]
    profiles: dict[str, Literal["cpu", "gpu-small", "gpu-large"]] = Field(default_factory=dict)
    """Pool → start-up profile; pools left out get `gpu-large` (≥ 4 GPUs), `gpu-small` (GPUs) or `cpu`."""
    calibrated_profiles: str | None = None
    """A profile file from `gpuscale calibrate` (relative to the scenario): the pools it lists start up as measured."""
    startup_samples: dict[str, Any] = Field(default_factory=dict)
    """Pool → start-up step → measured seconds (a list): that step is drawn from the samples (`Empirical`)."""
    stockout_probability: dict[str, Fraction01] = Field(default_factory=dict)
    stockouts: tuple[SpellConfig, ...] = ()
    initial_nodes: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    workload: WorkloadConfig = WorkloadConfig()
    queues: QueuesConfig | None = None
    """Kueue-like ClusterQueues, LocalQueues and flavors in front of the jobs (docs/queues.md)."""
    storage: StorageConfig | None = None
    """StorageClasses and datasets the workloads' volumes use (`sim.scenario_volumes`, docs/twin.md)."""
    deviceClasses: tuple[DeviceClassConfig, ...] = ()
    """DeviceClasses the workloads' `resourceClaims` name (`sim.scenario_dra`); none: NVIDIA's `gpu.nvidia.com`."""

    @field_validator("duration")
    @classmethod
    def _bounded(cls, seconds: float) -> float:
        if seconds > MAX_DURATION_S:
            raise ValueError(f"{seconds / 3600:g}h is longer than the {MAX_DURATION_S / 86_400:g} days a scenario "
                             "may run")
        return seconds


def _teams(items: tuple[TeamConfig, ...]) -> tuple[Team, ...]:
    return tuple(Team(name=t.name, weight=t.weight, peak_hour=t.peak_hour) for t in items) or (Team(name="default"),)


def _profile_name(config: Config, pool: str, chosen: Mapping[str, str]) -> str:
    if pool in chosen:
        return chosen[pool]
    spec = next(p for p in config.pools if p.name == pool)
    gpus = (sum(a for n, a in spec.allocatable.items if is_gpu_resource(n))
            or sum(len(s.devices) for s in spec.resource_slices))
    return "gpu-large" if gpus >= 4 else "gpu-small" if gpus else "cpu"


def _jobs(parsed: ScenarioFile, base: Path | None, rng: np.random.Generator) -> list[JobSpec]:
    work = parsed.workload
    jobs: list[JobSpec] = []
    if work.training is not None or work.batch is not None:
        training = TrainingMix(jobs_per_hour=work.training.jobs_per_hour if work.training else 0.0,
                               run_time=LogNormal(median=600.0, sigma=2.3, floor=1.0,
                                                  cap=work.training.max_run_time if work.training else 86_400.0),
                               teams=_teams(work.training.teams if work.training else ()))
        batch = BatchMix(jobs_per_hour=work.batch.jobs_per_hour if work.batch else 0.0,
                         teams=_teams(work.batch.teams if work.batch else ()))
        jobs += [job_by_claim(_with_volumes(job, section), section)
                 for job in generate_jobs(rng, parsed.duration, training=training, batch=batch)
                 for section in (work.training if job.kind == "training" else work.batch,)]
    if work.trace is not None:
        path = Path(work.trace)
        if not path.is_absolute() and base is not None:
            path = base / path
        jobs += read_jobs(path, GKE_PLACEMENT)
    if work.helios is not None:
        curve = bundled_curve(work.helios.vc)
        jobs += openb_helios_jobs(rng, read_pods(bundled("openb_pod_list_default.csv")), curve,
                                  start_minute=work.helios.start_minute, duration_s=parsed.duration,
                                  scale_to_gpus=work.helios.scale_to_gpus)
    return jobs


def _with_volumes(job: JobSpec, section: WorkloadVolumes | None) -> JobSpec:
    """A generated job with its section's spread constraints, dataset claims and claim templates."""
    if section is None or not (section.topologySpreadConstraints or section.volumes):
        return job
    labels = job_labels(job.name, job.kind)
    constraints = with_section(job.constraints, section, job.team, {"job-name": job.name}, labels)
    return replace(job, constraints=constraints, claims=claim_templates(section))


def _services(parsed: ScenarioFile) -> list[ServiceSpec]:
    services = []
    for s in parsed.workload.services:
        spec = inference_service(
            s.name, traffic=chat_traffic(peak_rps=s.peak_rps, duration_s=parsed.duration,
                                         spikes=tuple((k.start, k.duration, k.factor) for k in s.spikes)),
            rps_per_replica=s.rps_per_replica, gpu_model=s.gpu_model, min_replicas=s.min_replicas,
            max_replicas=s.max_replicas, team=s.team)
        if s.topologySpreadConstraints or s.volumes:
            spec = replace(spec, constraints=with_section(spec.constraints, s, s.team, {"app": s.name},
                                                          service_labels(s.name)))
        services.append(service_by_claim(spec, s))
    return services


def _check_volumes(parsed: ScenarioFile, config: Config, source: str) -> None:
    """The `storage` section and each workload's spread constraints and volumes, against the pools' zones."""
    check_storage(parsed.storage, {z for p in config.pools for z in p.zones}, f"{source}: storage")
    work = parsed.workload
    for name, section in (("training", work.training), ("batch", work.batch)):
        if section is not None:
            check_workload(section, parsed.storage, f"{source}: workload.{name}", service=False)
    for i, service in enumerate(work.services):
        check_workload(service, parsed.storage, f"{source}: workload.services.{i}", service=True)


def _check_devices(parsed: ScenarioFile, source: str) -> None:
    """The `deviceClasses` and each workload's `resourceClaims`."""
    check_classes(parsed.deviceClasses, f"{source}: deviceClasses")
    work = parsed.workload
    for name, section in (("training", work.training), ("batch", work.batch)):
        if section is not None:
            check_devices(section, parsed.deviceClasses, f"{source}: workload.{name}")
    for i, service in enumerate(work.services):
        check_devices(service, parsed.deviceClasses, f"{source}: workload.services.{i}")


def _datasets(parsed: ScenarioFile, specs: list[JobSpec | ServiceSpec]) -> dict[str, set[str]]:
    """Dataset → the namespaces whose pods use its claim."""
    names = {d.name for d in parsed.storage.datasets} if parsed.storage is not None else set()
    used: dict[str, set[str]] = {}
    for spec in specs:
        for claim in spec.constraints.claims:
            if claim.name in names:
                used.setdefault(claim.name, set()).add(claim.namespace)
    return used


def _calibrated(name: str | None, base: Path | None, source: str, pools: set[str]) -> dict[str, StartupProfile]:
    if name is None:
        return {}
    path = Path(name)
    if not path.is_absolute() and base is not None:
        path = base / path
    profiles = load_profiles(path)
    unknown = sorted(set(profiles) - pools)
    if unknown:
        raise ConfigError(f"{source}: calibrated_profiles", f"{path} names unknown pool {excerpt(unknown[0])} "
                                                            f"(pools: {', '.join(sorted(pools))})")
    return profiles


SAMPLE_STEPS = ("acquire_s", "boot_s", "register_s", "ready_s", "gpu_s", "slices_s", "pull_s", "start_s",
                "warm_start_s")
"""The `StartupProfile` steps `startup_samples` may give."""
MAX_SAMPLES = 100_000


def _samples(raw: Mapping[str, Any], source: str, pools: set[str]) -> dict[str, dict[str, Empirical]]:
    """`startup_samples` checked: pool → step → `Empirical`; the first bad entry is one `ConfigError` naming it."""
    out: dict[str, dict[str, Empirical]] = {}
    for pool, steps in raw.items():
        where = f"{source}: startup_samples.{str(pool)[:80]}"
        if pool not in pools:
            raise ConfigError(where, f"unknown pool (pools: {', '.join(sorted(pools))})")
        if not isinstance(steps, dict) or not steps:
            raise ConfigError(where, f"expected a mapping of step → seconds (steps: {', '.join(SAMPLE_STEPS)})")
        for step, values in steps.items():
            if step not in SAMPLE_STEPS:
                raise ConfigError(f"{where}.{str(step)[:80]}", f"unknown step (steps: {', '.join(SAMPLE_STEPS)})")
            if (not isinstance(values, list) or not 0 < len(values) <= MAX_SAMPLES
                    or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values)):
                raise ConfigError(f"{where}.{step}", f"expected a list of 1 to {MAX_SAMPLES} numbers of seconds, "
                                                     f"got {excerpt(values)}")
            try:
                out.setdefault(pool, {})[step] = Empirical.of(values)
            except ValueError as err:
                raise ConfigError(f"{where}.{step}", str(err)) from None
    return out


def _check_jobs(parsed: ScenarioFile, source: str) -> None:
    """The jobs the arrival rates would generate, bounded before any is drawn (`MAX_JOBS`)."""
    work = parsed.workload
    rate = (work.training.jobs_per_hour if work.training else 0.0) + (work.batch.jobs_per_hour if work.batch else 0.0)
    expected = rate * parsed.duration / 3600
    if expected > MAX_JOBS:
        raise ConfigError(f"{source}: workload", f"{rate:g} jobs per hour for {parsed.duration / 3600:g} h is "
                                                 f"{expected:.3g} jobs, more than the {MAX_JOBS} a scenario may hold")
    gpu_hours = (work.helios.scale_to_gpus if work.helios else 0.0) * parsed.duration / 3600
    if gpu_hours > MAX_HELIOS_GPU_HOURS:
        raise ConfigError(f"{source}: workload.helios.scale_to_gpus",
                          f"{gpu_hours:.3g} GPU-hours of demand over the scenario is more than the "
                          f"{MAX_HELIOS_GPU_HOURS} (about {MAX_JOBS} jobs) a scenario may hold")


def parse_scenario(raw: Mapping[str, Any], source: str, base: Path | None = None) -> tuple[TwinSetup, Config]:
    try:
        parsed = ScenarioFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        message = "unknown setting" if first["type"] == "extra_forbidden" else str(first["msg"]).removeprefix(
            "Value error, ")
        raise ConfigError(f"{source}: {where}", message) from None
    _check_jobs(parsed, source)
    config = parse_config(parsed.config, f"{source}: config")
    names = {p.name for p in config.pools}
    for where, named in ([("profiles", p) for p in parsed.profiles]
                         + [("stockouts", s.pool) for s in parsed.stockouts]
                         + [("initial_nodes", p) for p in parsed.initial_nodes]
                         + [("stockout_probability", p) for p in parsed.stockout_probability]):
        if named not in names:
            raise ConfigError(f"{source}: {where}",
                              f"unknown pool {excerpt(named)} (pools: {', '.join(sorted(names))})")
    for pool in config.pools:
        if parsed.initial_nodes.get(pool.name, 0) > pool.max_size:
            raise ConfigError(f"{source}: initial_nodes.{pool.name}", f"{parsed.initial_nodes[pool.name]} is above the "
                                                                     f"pool's max_size {pool.max_size}")
    _check_volumes(parsed, config, source)
    _check_devices(parsed, source)
    rng = np.random.default_rng(parsed.seed)
    calibrated = _calibrated(parsed.calibrated_profiles, base, source, names)
    sampled = _samples(parsed.startup_samples, source, names)
    cloud_pools = []
    for pool in config.pools:
        profile = _profile_name(config, pool.name, parsed.profiles)
        steps: dict[str, Any] = dict(sampled.get(pool.name, {}))  # every step in SAMPLE_STEPS takes a `Duration`
        startup = replace(calibrated.get(pool.name, PROFILES[profile]), **steps)
        cloud_pools.append(CloudPool(pool=pool, profile=startup,
                                     stockout_probability=parsed.stockout_probability.get(
                                         pool.name, STOCKOUT_PROBABILITY[profile])))
    pause = parsed.workload.pause
    pauses = (PauseSpec(replicas=pause.replicas,
                        requests=Resources.of(cpu=pause.cpu_milli, memory=pause.memory_mib * 2**20)),) if pause else ()
    initial = {p.name: max(p.min_size, parsed.initial_nodes.get(p.name, 0)) for p in config.pools}
    jobs = _jobs(parsed, base, rng)
    queues = None
    if parsed.queues is not None:
        queues = build_queue_spec(parsed.queues, f"{source}: queues", config.pools)
        for job in jobs:
            if job.queue and queues.cluster_queue_of(job.team, job.queue) is None:
                raise ConfigError(f"{source}: job {job.name}",
                                  f"queue {job.queue!r} is not a LocalQueue of namespace {job.team!r}")
    services = _services(parsed)
    setup = TwinSetup(name=parsed.name, pools=tuple(cloud_pools), jobs=tuple(jobs), queues=queues,
                      services=tuple(services), pauses=pauses,
                      spells=tuple(Spell(pool=s.pool, start_s=s.start, end_s=s.end) for s in parsed.stockouts),
                      initial_nodes={k: v for k, v in initial.items() if v}, duration_s=parsed.duration,
                      seed=parsed.seed, storage_classes=storage_classes(parsed.storage),
                      bound_volumes=dataset_volumes(parsed.storage, _datasets(parsed, [*jobs, *services])),
                      device_classes=device_classes(parsed.deviceClasses, uses_dra(
                          [parsed.workload.training, parsed.workload.batch, *parsed.workload.services],
                          config.pools)))
    return setup, config


def bundled_scenarios() -> tuple[str, ...]:
    """The names of the scenarios shipped in the package, sorted."""
    folder = resources.files("gpuscale.data").joinpath("scenarios")
    return tuple(sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")))


def load_scenario(name_or_path: str, seed: int | None = None) -> tuple[TwinSetup, Config]:
    """A bundled scenario by name (`bundled_scenarios()`) or a scenario file; `seed` overrides the file's."""
    path = Path(name_or_path)
    if not path.exists():
        bundled_path = resources.files("gpuscale.data").joinpath("scenarios", f"{name_or_path}.yaml")
        if not bundled_path.is_file():
            raise ConfigError(name_or_path, "no such scenario file, and not a bundled scenario "
                                            f"(bundled: {', '.join(bundled_scenarios())})")
        path = Path(str(bundled_path))
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ConfigError("--seed", f"must be between 0 and {MAX_SEED}, got {seed}")
    raw = load_yaml_file(path, "a scenario")
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "expected a mapping at the top level")
    if seed is not None:
        raw = {**raw, "seed": seed}
    return parse_scenario(raw, str(path), path.parent)


# ------------------------------------------------------------------------------------------------------- presets
def _shown(value: object) -> str:
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple) and not value:
        return "none"
    if isinstance(value, tuple):
        return ", ".join(_shown(v) for v in value)
    return "unset" if value is None else str(value)


def preset_changes(scenario: Policy, preset: Policy, scoring: Scoring, placement: str | None) -> tuple[str, ...]:
    """`field: scenario's → preset's` for every `Policy` field the preset changed, then the twin's scheduler profile
    (the scenario runs kube's default scoring without fragmentation-aware placement). O(fields)."""
    out = [f"{f.name}: {_shown(getattr(scenario, f.name))} → {_shown(getattr(preset, f.name))}"
           for f in fields(Policy) if getattr(scenario, f.name) != getattr(preset, f.name)]
    if scoring is not Scoring.LEAST_ALLOCATED:
        out.append(f"scheduler scoring: {Scoring.LEAST_ALLOCATED} → {scoring}")
    if placement is not None:
        out.append(f"scheduler GPU placement: none → {placement}")
    return tuple(out)


PRESET_SCORING = {"ca-defaults": Scoring.LEAST_ALLOCATED, "gpuscale": Scoring.GPU_BINPACK}
"""The scheduler scoring each preset runs the twin's cluster with: kube-scheduler's default for `ca-defaults`, and the
GPU bin-packing profile gpuscale recommends (docs/twin.md) for `gpuscale`."""
PRESET_GPU_PLACEMENT = {"ca-defaults": None, "gpuscale": "gpuscale"}
"""Fragmentation-aware placement of GPU pods in the twin's scheduler (docs/gpu-sharing.md): off for `ca-defaults`."""


def policy_named(name: str, config: Config) -> TwinPolicy:
    """A preset, `scenario` (the scenario's own config), or a config file's autoscaling section.

    A preset keeps the scenario's limits and its own settings (`Config.options`: `scale_down_unneeded_time`, …) except
    those the preset names; `gpuscale` keeps the warm buffers, `ca-defaults` drops them (CA has none). What it changed
    against the scenario's `config` is listed in `TwinPolicy.changes`, for the report."""
    settings = LoopSettings(scan_interval_s=config.scan_interval_s,
                            max_graceful_termination_s=config.max_graceful_termination_s)
    if name in PRESET_SCORING:
        buffers = config.policy.buffers if name == "gpuscale" else ()
        policy = preset_policy(name, config.policy.limits, buffers, config.options)
        scoring, placement = PRESET_SCORING[name], PRESET_GPU_PLACEMENT[name]
        return TwinPolicy(name=name, policy=policy, settings=settings, scoring=scoring, gpu_placement=placement,
                          changes=preset_changes(config.policy, policy, scoring, placement))
    if name == "scenario":
        return TwinPolicy(name=name, policy=config.policy, settings=settings)
    path = Path(name)
    if not path.exists():
        raise ConfigError(f"--policy {name}", "not a preset (gpuscale, ca-defaults, scenario) nor a config file")
    other = load_config(path)
    return TwinPolicy(name=path.stem, policy=other.policy, settings=LoopSettings(
        scan_interval_s=other.scan_interval_s, max_graceful_termination_s=other.max_graceful_termination_s))
