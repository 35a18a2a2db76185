"""Calibration: the lognormal fit, the profile file and its use in a scenario, and the error on held-back runs
(the twin with its published-figures profiles is the ground truth; bench/calibrate.py prints the full figures)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from bench.calibrate import SCENARIO, new_node_p50, traces_of

from gpuscale.model.errors import ConfigError
from gpuscale.sim.calibrate import STEPS, Fit, as_profiles, fit_lognormal, fit_profiles, load_profiles, profiles_yaml
from gpuscale.sim.distributions import LogNormal
from gpuscale.sim.scenario import parse_scenario


def test_fit_recovers_a_known_lognormal() -> None:
    truth = LogNormal(median=20.0, sigma=0.6)
    fit = fit_lognormal(list(truth.sample(np.random.default_rng(7), 4000)))
    assert fit.samples == 4000
    assert fit.distribution.median == pytest.approx(20.0, rel=0.04)
    assert fit.distribution.sigma == pytest.approx(0.6, rel=0.05)


def test_a_step_the_provider_does_not_report_is_a_constant_zero() -> None:
    assert fit_lognormal([0.0, 0.0, 0.0, 2.0]).distribution == LogNormal(median=0.0, sigma=0.0)
    one = fit_lognormal([5.0])
    assert one.distribution.median == pytest.approx(5.0) and one.distribution.sigma == 0.0


@pytest.fixture(scope="module")
def seed_1_fits() -> dict[str, dict[str, Fit]]:
    return fit_profiles(traces_of(1))


def test_profile_file_round_trips_and_loads_into_a_scenario(tmp_path: Path,
                                                            seed_1_fits: dict[str, dict[str, Fit]]) -> None:
    fits = seed_1_fits
    assert set(fits) == {"cpu", "t4"} and set(fits["t4"]) == {name for name, _ in STEPS}
    profile = tmp_path / "profile.yaml"
    profile.write_text(profiles_yaml(fits, "seed 1"), encoding="utf-8")
    loaded = load_profiles(profile)["t4"]
    assert loaded == as_profiles(fits)["t4"]
    assert loaded.gpu_s is not None and math.isclose(loaded.gpu_s.median, fits["t4"]["gpu_s"].distribution.median,
                                                     rel_tol=1e-3)
    setup, _ = parse_scenario({**SCENARIO, "calibrated_profiles": "profile.yaml"}, "s.yaml", tmp_path)
    assert {p.pool.name: p.profile for p in setup.pools}["t4"] == loaded
    profile.write_text("pools:\n  h100:\n    ready_s: {median: 5, sigma: 0}\n")
    with pytest.raises(ConfigError, match=r"calibrated_profiles: .* names unknown pool 'h100'"):
        parse_scenario({**SCENARIO, "calibrated_profiles": str(profile)}, "s.yaml")
    for text, message in (("pools: 3", "pools: expected a mapping"),
                          ("pools:\n  t4:\n    warp_s: {median: 1}\n", "pools.t4.warp_s: unknown step"),
                          ("pools:\n  t4:\n    ready_s: {median: -1}\n", "pools.t4.ready_s.median: expected a "
                                                                         "non-negative number")):
        profile.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_profiles(profile)


def test_fitted_profile_predicts_a_held_back_run_within_15_percent(tmp_path: Path,
                                                                   seed_1_fits: dict[str, dict[str, Fit]]) -> None:
    """Fit on seed 1, predict seed 2 (never seen by the fit): p50 pending→running of new-node pods."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(profiles_yaml(seed_1_fits, "seed 1"), encoding="utf-8")
    actual = new_node_p50(traces_of(2), "t4")
    predicted = new_node_p50(traces_of(2, profile), "t4")
    assert abs(predicted - actual) <= 0.15 * actual, (predicted, actual)
