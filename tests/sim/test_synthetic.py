"""`gpuscale.sim.synthetic` (seeded jobs and inference traffic) and `gpuscale.sim.helios` (openb shapes on a Helios
demand curve): determinism, the distributions the defaults promise, shapes, and demand following the curve."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU
from gpuscale.sim.helios import (
    Durations,
    bundled_curve,
    openb_helios_jobs,
    read_demand_curve,
    scaled_demand,
)
from gpuscale.sim.openb import OpenbPod, bundled, read_pods
from gpuscale.sim.synthetic import (
    TRAINING_GPUS,
    BatchMix,
    Team,
    TrainingMix,
    api_traffic,
    chat_traffic,
    generate_jobs,
    inference_service,
)
from gpuscale.sim.traces import GKE_ACCELERATOR_LABEL, GKE_PLACEMENT, GPU_TOLERATION, read_jobs, write_jobs
from gpuscale.sim.workloads import JobSpec

DAY = 86_400.0
NO_BATCH = BatchMix(jobs_per_hour=0)
NO_TRAINING = TrainingMix(jobs_per_hour=0)


def rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


def job_gpus(job: JobSpec) -> float:
    return job.pods * (job.requests.get(NVIDIA_GPU) + job.requests.get(GPU_MILLI) / 1000)


def assert_valid(jobs: Sequence[JobSpec]) -> None:
    """Positive duration, at least one pod, only known resources, a fraction only below one GPU, GPU pods (and only
    they) tolerate the GPU taint, unique names."""
    assert len({j.name for j in jobs}) == len(jobs)
    for job in jobs:
        amounts = job.requests.as_dict()
        assert job.duration_s > 0 and job.submit_s >= 0 and job.pods >= 1, job
        assert set(amounts) <= {CPU, MEMORY, NVIDIA_GPU, GPU_MILLI} and amounts.get(CPU, 0) > 0, job
        assert all(a > 0 for a in amounts.values()), job
        assert not (NVIDIA_GPU in amounts and GPU_MILLI in amounts) and amounts.get(GPU_MILLI, 0) < 1000, job
        assert (GPU_TOLERATION in job.constraints.tolerations) == (job_gpus(job) > 0), job


# -------------------------------------------------------------------------------------------------- generate_jobs
def test_same_seed_same_jobs_and_another_seed_other_jobs() -> None:
    first = generate_jobs(rng(1), 2 * DAY)
    assert first == generate_jobs(rng(1), 2 * DAY)
    assert first != generate_jobs(rng(2), 2 * DAY)
    assert {j.kind for j in first} == {"training", "batch"}
    assert [j.submit_s for j in first] == sorted(j.submit_s for j in first)
    assert_valid(first)


def test_batch_mix_does_not_disturb_training_draws() -> None:
    with_batch = [j for j in generate_jobs(rng(), DAY) if j.kind == "training"]
    assert with_batch == generate_jobs(rng(), DAY, batch=NO_BATCH)


def test_training_gpus_per_job_follow_the_categorical_mix() -> None:
    jobs = generate_jobs(rng(), DAY, training=TrainingMix(jobs_per_hour=1000), batch=NO_BATCH)
    counts = Counter(int(job_gpus(j)) for j in jobs)
    assert len(jobs) == pytest.approx(24_000, rel=0.03)
    for gpus, p in TRAINING_GPUS:
        assert counts[gpus] / len(jobs) == pytest.approx(p, abs=0.01), gpus
    runs = np.array([j.duration_s for j in jobs])
    assert np.median(runs) == pytest.approx(600, rel=0.1)  # LN(μ = ln 600 s, σ = 2.3)
    assert runs.min() >= 1.0 and runs.max() <= 14 * DAY
    assert all(900 <= j.checkpoint_s <= 3600 for j in jobs)
    assert {j.image_bytes for j in jobs} == {12 * 10**9}


@pytest.mark.parametrize(("gpus", "pods", "per_pod", "model"), [
    (16, 2, 8, "nvidia-tesla-a100"), (64, 8, 8, "nvidia-tesla-a100"), (8, 1, 8, "nvidia-tesla-a100"),
    (4, 1, 4, "nvidia-tesla-a100"), (1, 1, 1, "nvidia-tesla-t4"),
])
def test_gang_shapes(gpus: int, pods: int, per_pod: int, model: str) -> None:
    jobs = generate_jobs(rng(), DAY, training=TrainingMix(jobs_per_hour=5, gpus_per_job=((gpus, 1.0),)),
                         batch=NO_BATCH)
    assert jobs
    for job in jobs:
        assert (job.pods, job.requests.get(NVIDIA_GPU)) == (pods, per_pod)
        assert dict(job.constraints.affinity.node_selector) == {GKE_ACCELERATOR_LABEL: model}
        assert job.requests.get(CPU) == (3_000 if gpus == 1 else 10_000 * per_pod)


def test_mix_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="gpus_per_job: 12 GPUs"):
        TrainingMix(gpus_per_job=((12, 1.0),))
    with pytest.raises(ConfigError, match="daily_amplitude"):
        BatchMix(daily_amplitude=1.5)
    with pytest.raises(ConfigError, match="teams"):
        BatchMix(teams=())


def test_arrivals_follow_the_daily_cycle_and_each_teams_phase() -> None:
    teams = (Team(name="day", weight=3.0, peak_hour=14.0), Team(name="night", weight=1.0, peak_hour=2.0))
    jobs = generate_jobs(rng(), 5 * DAY, training=NO_TRAINING, batch=BatchMix(jobs_per_hour=400, teams=teams))
    assert len(jobs) == pytest.approx(400 * 24 * 5, rel=0.02)
    assert_valid(jobs)
    by_team = Counter(j.team for j in jobs)
    assert by_team["day"] / len(jobs) == pytest.approx(0.75, abs=0.01)
    for team, peak, trough in (("day", 14, 2), ("night", 2, 14)):
        hours = Counter(int(j.submit_s // 3600) % 24 for j in jobs if j.team == team)
        # 1 ± 0.2: the peak hour gets ≈ 1.2 / 0.8 = 1.5 × the trough hour's arrivals
        assert hours[peak] / hours[trough] == pytest.approx(1.5, abs=0.15), team


# ------------------------------------------------------------------------------------------------------ inference
def test_chat_traffic_has_a_30x_daily_swing_and_half_weekends() -> None:
    traffic = chat_traffic(peak_rps=30.0, duration_s=7 * DAY)
    assert traffic.rps(13 * 3600) == pytest.approx(30.0)
    assert traffic.rps(1 * 3600) == pytest.approx(1.0)
    assert traffic.rps(5 * DAY + 13 * 3600) == pytest.approx(15.0)  # Saturday
    assert traffic.rps(6 * DAY + 1 * 3600) == pytest.approx(0.5)  # Sunday
    assert traffic.spikes == ((5 * DAY, 2 * DAY, 0.5),)
    assert chat_traffic(peak_rps=1, duration_s=7 * DAY, start_weekday=5).spikes == ((0.0, 2 * DAY, 0.5),)


def test_api_traffic_is_flat_with_seeded_hourly_spread() -> None:
    traffic = api_traffic(rng(), mean_rps=10.0, duration_s=30 * DAY)
    assert traffic == api_traffic(rng(), mean_rps=10.0, duration_s=30 * DAY)
    hourly = np.array([traffic.rps(h * 3600 + 1) for h in range(30 * 24)])
    assert hourly.max() <= 40.0 and hourly.min() >= 0.0
    assert hourly.mean() == pytest.approx(10.0, rel=0.1)
    assert hourly.std() / hourly.mean() == pytest.approx(0.8, abs=0.15)


def test_inference_service_shapes() -> None:
    chat = inference_service("chat", traffic=chat_traffic(peak_rps=30, duration_s=DAY), rps_per_replica=2.0)
    assert chat.requests.get(NVIDIA_GPU) == 1 and chat.image_bytes == 6 * 10**9
    assert dict(chat.constraints.affinity.node_selector) == {GKE_ACCELERATOR_LABEL: "nvidia-tesla-t4"}
    shared = inference_service("emb", traffic=chat.traffic, rps_per_replica=5.0, gpu_milli=300, gpu_model="")
    assert shared.requests.get(GPU_MILLI) == 300 and not shared.requests.get(NVIDIA_GPU)
    assert shared.constraints.tolerations == (GPU_TOLERATION,) and not shared.constraints.affinity.node_selector
    cpu = inference_service("api", traffic=chat.traffic, rps_per_replica=5.0, gpus_per_pod=0)
    assert cpu.requests.gpu_count() == 0 and not cpu.constraints.tolerations


# --------------------------------------------------------------------------------------------------------- helios
@cache
def openb_pods() -> tuple[OpenbPod, ...]:
    return tuple(read_pods(bundled("openb_pod_list_default.csv")))


def hourly_gpus(jobs: Sequence[JobSpec], hours: int) -> np.ndarray:
    """Mean GPUs held per hour by jobs that run from submission for their duration."""
    demand = np.zeros(hours)
    for job in jobs:
        start, end = job.submit_s, job.submit_s + job.duration_s
        for hour in range(int(start // 3600), min(math.ceil(end / 3600), hours)):
            demand[hour] += job_gpus(job) * (min(end, (hour + 1) * 3600) - max(start, hour * 3600)) / 3600
    return demand


def test_bundled_curve_is_a_month_of_minutes() -> None:
    curve = bundled_curve()
    assert (curve.name, curve.start, len(curve.gpus)) == ("vc3sl", "2020-05-01 00:00:00", 44_640)
    whole = scaled_demand(curve, start_minute=0, duration_s=len(curve.gpus) * 60, scale_to_gpus=200)
    assert np.percentile(whole, 95) == pytest.approx(200)


@pytest.mark.parametrize("day", [6, 10, 18])
def test_helios_demand_follows_the_curve_over_a_day(day: int) -> None:
    curve = bundled_curve()
    jobs = openb_helios_jobs(rng(), openb_pods(), curve, start_minute=day * 1440, duration_s=DAY, scale_to_gpus=128)
    target = scaled_demand(curve, start_minute=day * 1440, duration_s=DAY, scale_to_gpus=128).reshape(24, 60).mean(1)
    demand = hourly_gpus(jobs, 24)
    assert np.corrcoef(demand, target)[0, 1] > 0.8
    assert demand.sum() == pytest.approx(target.sum(), rel=0.1)
    assert_valid(jobs)
    assert all(j.submit_s < DAY for j in jobs)


def test_helios_jobs_are_seeded_and_keep_openb_shapes_and_lifetimes() -> None:
    curve, pods = bundled_curve(), openb_pods()
    jobs = openb_helios_jobs(rng(), pods, curve, start_minute=8640, duration_s=6 * 3600, scale_to_gpus=64)
    assert jobs == openb_helios_jobs(rng(), pods, curve, start_minute=8640, duration_s=6 * 3600, scale_to_gpus=64)
    assert jobs != openb_helios_jobs(rng(8), pods, curve, start_minute=8640, duration_s=6 * 3600, scale_to_gpus=64)
    shapes = {p.requests() for p in pods}
    assert all(j.requests in shapes for j in jobs)
    assert {j.kind for j in jobs} == {"training", "batch"}
    durations = np.array([j.duration_s for j in jobs])
    assert durations.max() <= 7 * DAY and np.median(durations) == pytest.approx(545, rel=0.25)  # openb GPU median


def test_helios_options_lognormal_no_cancel_and_model() -> None:
    curve, pods = bundled_curve(), openb_pods()
    jobs = openb_helios_jobs(rng(), pods, curve, start_minute=8640, duration_s=DAY, scale_to_gpus=64,
                             durations=Durations.LOGNORMAL, cancel_above=None, gpu_model="nvidia-l4")
    assert_valid(jobs)
    assert np.median([j.duration_s for j in jobs]) == pytest.approx(655, rel=0.25)
    gpu_jobs = [j for j in jobs if job_gpus(j) > 0]
    assert all(dict(j.constraints.affinity.node_selector) == {GKE_ACCELERATOR_LABEL: "nvidia-l4"} for j in gpu_jobs)


def test_helios_window_and_pods_are_checked() -> None:
    curve = bundled_curve()
    with pytest.raises(ConfigError, match="start_minute"):
        openb_helios_jobs(rng(), openb_pods(), curve, start_minute=44_000, duration_s=DAY, scale_to_gpus=8)
    cpu_only = [p for p in openb_pods() if p.num_gpu == 0]
    with pytest.raises(ConfigError, match="openb_pods"):
        openb_helios_jobs(rng(), cpu_only, curve, duration_s=3600, scale_to_gpus=8)


def test_helios_jobs_convert_to_the_generic_csv(tmp_path: Path) -> None:
    jobs = openb_helios_jobs(rng(), openb_pods(), bundled_curve(), start_minute=8640, duration_s=3 * 3600,
                             scale_to_gpus=32)
    write_jobs(tmp_path / "helios.csv", jobs)
    assert read_jobs(tmp_path / "helios.csv", GKE_PLACEMENT) == jobs
    synthetic = generate_jobs(rng(), DAY)
    write_jobs(tmp_path / "synthetic.csv", synthetic)
    assert read_jobs(tmp_path / "synthetic.csv", GKE_PLACEMENT) == synthetic


def test_read_demand_curve_errors_name_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "vcX_cluster_sequence_vc.csv"
    path.write_text("time,running_gpu_num,pending_gpu_num\nt0,4,0\nt1,x,0\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"row 3: running_gpu_num: expected a GPU count"):
        read_demand_curve(path)
    path.write_text("time,running_gpu_num\nt0,4\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"header: missing required column.*pending_gpu_num"):
        read_demand_curve(path)
    path.write_text("time,running_gpu_num,pending_gpu_num\nt0,4,1\nt1,2,0\n", encoding="utf-8")
    assert read_demand_curve(path).gpus == (5.0, 2.0)
