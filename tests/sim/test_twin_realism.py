"""What the twin's GPU-hours and waits mean: container starts capped and short on a node that has the image, useful
GPU-hours (every pod of the job running) apart from allocated ones (from bind), `never_ran` per job, and a requeued
job's wait counted from when it began waiting, with the phases still summing to it."""

from __future__ import annotations

import math
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.engine.policy import Policy
from gpuscale.model.errors import ConfigError
from gpuscale.sim.cloud import CloudPool
from gpuscale.sim.distributions import Empirical, Keyed
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.result import REQUEUED, SimResult
from gpuscale.sim.run import TwinPolicy, TwinSetup, simulate
from gpuscale.sim.scenario import parse_scenario, policy_named
from tests.sim.test_twin import CPU_POOL, a100_pool, training

POLICY = TwinPolicy(name="gpuscale", policy=Policy())


def _run(jobs: tuple, *, max_nodes: int = 2, hours: float = 4, seed: int = 3) -> SimResult:
    pools = (CloudPool(pool=CPU_POOL, profile=PROFILES["cpu"]),
             CloudPool(pool=replace(a100_pool("a100", "zone-a"), max_size=max_nodes), profile=PROFILES["gpu-large"]))
    return simulate(TwinSetup(name="realism", pools=pools, jobs=jobs, duration_s=hours * 3600, seed=seed), POLICY)


def test_container_starts_are_capped_and_a_warm_start_is_drawn_at_the_same_quantile() -> None:
    keyed = Keyed(np.random.default_rng(0))
    for name, profile in PROFILES.items():
        cold, warm = profile.start(warm=False), profile.start(warm=True)
        draws = [keyed.lognormal(cold, "start", i) for i in range(5000)]
        assert max(draws) <= cold.cap < math.inf, name
        assert max(keyed.lognormal(warm, "start", i) for i in range(5000)) <= warm.cap < math.inf, name
        if name != "cpu":  # the model's files already on the node: a shorter median and a lower cap
            assert warm.median < cold.median and warm.cap <= cold.cap, name


def test_a_pod_whose_image_is_on_the_node_starts_warm() -> None:
    # one node: the second job waits for the first to end, then takes its node, which has the image
    first, second = training("first", 0.0, duration_s=600), training("second", 300.0, duration_s=600)
    result = _run((first, second), max_nodes=1)
    by_job = {p.job: p for p in result.pods}
    late = by_job["default/second"]
    assert not late.new_node and late.phases["image_pull"] == 0.0
    assert 0 < late.phases["container_start"] <= PROFILES["gpu-large"].start(warm=True).cap
    early = by_job["default/first"]
    assert early.new_node and early.phases["image_pull"] > 60  # 12 GB at tens of MB/s


def test_useful_gpu_hours_count_only_while_every_pod_of_the_gang_runs() -> None:
    result = _run((training("gang", 0.0, pods=2, duration_s=1800),), max_nodes=2)
    pods = [p for p in result.pods if p.job == "default/gang"]
    assert len(pods) == 2 and all(p.running_s is not None for p in pods)
    together = max(p.running_s or 0.0 for p in pods)
    assert math.isclose(result.gpu_hours_useful, 16 * 1800 / 3600, rel_tol=1e-9)
    bound = sum((together + 1800 - (p.bound_s or 0.0)) * 8 for p in pods) / 3600
    assert math.isclose(result.gpu_hours_allocated, bound, rel_tol=1e-9)
    assert result.gpu_hours_allocated > result.gpu_hours_useful
    assert result.gpu_hours_by_pool["a100"]["useful"] == result.gpu_hours_useful


def test_never_ran_counts_a_gang_that_cannot_run_once_not_per_pod() -> None:
    result = _run((training("big", 0.0, pods=3, duration_s=600),), max_nodes=2, hours=1)
    pods = [p for p in result.pods if p.job == "default/big"]
    assert len(pods) == 3 and all(p.running_s is None for p in pods)
    assert result.never_ran == 1


def test_a_job_preempted_before_it_ran_waits_from_its_first_submission() -> None:
    low = replace(training("low", 0.0, duration_s=7200), priority=0)
    alone = _run((low,), max_nodes=1)
    bound_s = next(p.bound_s for p in alone.pods if p.job == "default/low")
    assert bound_s is not None
    high = replace(training("high", bound_s + 20.0, duration_s=600), priority=100)  # low is still pulling its image
    result = _run((low, high), max_nodes=1)
    attempts = sorted((p for p in result.pods if p.job == "default/low"), key=lambda p: p.created_s)
    assert len(attempts) >= 2 and attempts[0].running_s is None
    last = attempts[-1]
    assert last.running_s is not None and last.waiting_since_s == 0.0
    assert last.pending_to_running_s == last.running_s  # from the first submission at 0
    assert math.isclose(last.phases[REQUEUED], last.created_s)
    assert math.isclose(sum(last.phases.values()), last.pending_to_running_s or 0.0, abs_tol=1e-6)
    assert result.never_ran == 0 and result.evictions >= 1


def test_phases_sum_to_the_wait_for_every_pod_that_ran() -> None:
    jobs = tuple(training(f"j{i}", 300.0 * i, pods=1 + i % 2, duration_s=900) for i in range(8))
    result = _run(jobs, max_nodes=3)
    ran = [p for p in result.pods if p.running_s is not None]
    assert ran
    for pod in ran:
        assert math.isclose(sum(pod.phases.values()), pod.pending_to_running_s or 0.0, abs_tol=1e-6), pod.key
        assert pod.pending_to_bound_s is not None and pod.pending_to_bound_s <= (pod.pending_to_running_s or 0.0)


def test_presets_keep_the_scenarios_own_options_unless_they_name_them_and_list_what_they_changed() -> None:
    raw = yaml.safe_load(resources.files("gpuscale.data").joinpath("scenarios", "default.yaml").read_text())
    raw["config"] |= {"scale_down_unneeded_time": "2m", "new_pod_scale_up_delay": "5s", "scan_interval": "20s"}
    _setup, config = parse_scenario(raw, "test")
    ca, ours = policy_named("ca-defaults", config), policy_named("gpuscale", config)
    assert ca.policy.scale_down_unneeded_time_s == ours.policy.scale_down_unneeded_time_s == 120.0
    assert ca.settings.scan_interval_s == ours.settings.scan_interval_s == 20.0
    assert ca.policy.new_pod_delay_s == 2.0 and ours.policy.new_pod_delay_s == 5.0  # ca-defaults names it
    assert ours.policy.scale_down_gpu_unneeded_time_s is None  # CA's option set alone covers GPU nodes too
    assert "new_pod_delay_s: 5 → 2" in ca.changes and "protect_gpu_jobs: True → False" in ca.changes
    assert not any(c.startswith("scale_down_unneeded_time_s") for c in ca.changes + ours.changes)
    assert ours.changes == ("scheduler scoring: least-allocated → gpu-binpack",
                            "scheduler GPU placement: none → gpuscale")
    assert policy_named("scenario", config).changes == ()


def test_measured_samples_are_drawn_as_they_came_with_common_random_numbers() -> None:
    samples = Empirical.of([30.0, 10.0, 20.0, 40.0])
    assert samples.values == (10.0, 20.0, 30.0, 40.0) and samples.median == 20.0 and samples.cap == 40.0
    assert [samples.quantile(u) for u in (0.0, 0.25, 0.26, 0.75, 0.99, 1.0)] == [10.0, 10.0, 20.0, 30.0, 40.0, 40.0]
    one, two = Keyed(np.random.default_rng(9)), Keyed(np.random.default_rng(9))
    draws = [one.lognormal(samples, "start", i) for i in range(400)]
    assert draws == [two.lognormal(samples, "start", i) for i in range(400)]  # keyed: the same run, the same luck
    assert set(draws) == set(samples.values)
    counts = [draws.count(v) for v in samples.values]
    assert min(counts) > 60  # each sample about a quarter of the draws
    assert Keyed(np.random.default_rng(9)).lognormal(Empirical.of([7.0]), "x") == 7.0


def test_a_scenario_gives_start_up_steps_as_samples_and_bad_samples_are_one_clear_line() -> None:
    raw = yaml.safe_load(resources.files("gpuscale.data").joinpath("scenarios", "default.yaml").read_text())
    pool = raw["config"]["pools"][0]["name"]
    raw["startup_samples"] = {pool: {"boot_s": [50, 55.5, 61], "start_s": [3]}}
    setup, _config = parse_scenario(raw, "test")
    profile = next(p.profile for p in setup.pools if p.pool.name == pool)
    assert profile.boot_s == Empirical((50.0, 55.5, 61.0)) and profile.start_s == Empirical((3.0,))
    for bad, where in (({pool: {"boot_s": []}}, f"startup_samples.{pool}.boot_s"),
                       ({pool: {"boot_s": [1, -2]}}, f"startup_samples.{pool}.boot_s"),
                       ({pool: {"boot_s": [1, True]}}, f"startup_samples.{pool}.boot_s"),
                       ({pool: {"boot_s": "60"}}, f"startup_samples.{pool}.boot_s"),
                       ({pool: {"bot_s": [1]}}, f"startup_samples.{pool}.bot_s"),
                       ({"nope": {"boot_s": [1]}}, "startup_samples.nope")):
        with pytest.raises(ConfigError) as err:
            parse_scenario({**raw, "startup_samples": bad}, "test")
        assert f"test: {where}" in str(err.value) and "\n" not in str(err.value)


def test_bad_samples_exit_2_with_one_line(tmp_path: Path) -> None:
    raw = yaml.safe_load(resources.files("gpuscale.data").joinpath("scenarios", "default.yaml").read_text())
    raw["startup_samples"] = {raw["config"]["pools"][0]["name"]: {"start_s": [1, float("nan")]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    result = CliRunner().invoke(app, ["simulate", str(path), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "startup_samples" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
