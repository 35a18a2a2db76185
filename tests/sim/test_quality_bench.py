"""bench/quality.py: its window rule, its bad-input exits, and a 2-hour run on the bundled curve and pod list
(≈ 1 s; the full benchmark reads ../shared/traces and prints the figures docs/benchmarks.md records)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from bench.quality import main, pick_window, scenario

from gpuscale.sim.helios import DemandCurve
from gpuscale.sim.scenario import parse_scenario

BUNDLED_CURVES = Path(str(resources.files("gpuscale.data").joinpath("helios")))


def curve(values: list[float]) -> DemandCurve:
    return DemandCurve(name="vcTest", start="2020-05-01 00:00:00", gpus=tuple(values))


def test_window_rule_picks_the_hours_with_the_largest_swings() -> None:
    # 3 days of a flat 10 GPUs, with hours 40–43 swinging 0 / 50 / 0 / 50: the 6-hour window that varies most
    # starts on a whole hour and holds all four swinging hours.
    minutes = [10.0] * (3 * 1440)
    for hour, level in ((40, 0.0), (41, 50.0), (42, 0.0), (43, 50.0)):
        minutes[hour * 60:(hour + 1) * 60] = [level] * 60
    start = pick_window(curve(minutes), 0.25)
    assert start % 60 == 0
    assert start <= 40 * 60 and start + 6 * 60 >= 44 * 60


def test_window_rule_ties_go_to_the_earliest_window() -> None:
    assert pick_window(curve([7.0] * 1440 * 2), 0.5) == 0


def test_window_longer_than_the_curve_is_refused() -> None:
    with pytest.raises(SystemExit, match="longer than curve vcTest"):
        pick_window(curve([1.0] * 1440), 2.0)


@pytest.mark.parametrize("argv", [["--days", "0"], ["--seeds", "x"], ["--traces", "/nonexistent-dir"]])
def test_bad_arguments_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("quality.py: ") and err.count("\n") == 1


def test_two_hour_run_on_the_bundled_curve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "quality.json"
    assert main(["--traces", str(BUNDLED_CURVES), "--days", str(2 / 24), "--seeds", "1", "--shapes", "default",
                 "--gpus", "32", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "gpuscale / ca-defaults per curve" in printed and "issue #28 targets" in printed
    doc = json.loads(out.read_text())
    assert list(doc["windows"]) == ["vc3sl"]
    runs = doc["runs"]
    assert [(r["curve"], r["policy"], r["seed"]) for r in runs] == [("vc3sl", "ca-defaults", 1),
                                                                     ("vc3sl", "gpuscale", 1)]
    assert runs[0]["jobs"] == runs[1]["jobs"] > 0  # the same jobs for both policies
    for r in runs:
        assert 0 < r["gpu_hours_allocated"] <= r["gpu_hours_hindsight_bound"] + 1e-6
        assert r["gpu_hours_hindsight_bound"] <= r["gpu_hours_provisioned"] + 1e-6
        assert r["gpu_hours_idle"] == pytest.approx(r["gpu_hours_provisioned"] - r["gpu_hours_allocated"])
        assert r["p50_bound_s"] <= r["p95_bound_s"] and r["p50_running_s"] <= r["p95_running_s"]
    summary = doc["summary"]
    ratio = summary["per_curve"]["vc3sl"]["gpu_hours_idle"]
    assert ratio == pytest.approx(runs[1]["gpu_hours_idle"] / runs[0]["gpu_hours_idle"])
    assert summary["runs"] == 1 and set(summary["targets"]) >= {"no curve idle > 1.05"}


def test_a100_pools_of_every_size_price_the_same_per_gpu() -> None:
    _, config = parse_scenario(scenario("q", peak_gpus=64, duration_s=3600, seed=1), "bench")
    a100 = {p.name: p for p in config.pools if p.gpu_model == "nvidia-tesla-a100"}
    assert {n: p.gpus_per_node for n, p in a100.items()} == {"a100": 8, "a100-4g": 4, "a100-2g": 2, "a100-1g": 1}
    per_gpu = {n: p.usd_per_hour / p.gpus_per_node for n, p in a100.items()}
    assert max(per_gpu.values()) - min(per_gpu.values()) < 0.001  # the price file's a2-highgpu-Ng are N × 1g
    assert all(p.min_size == 0 and p.max_size * p.gpus_per_node >= 1.5 * 64 for p in a100.values())
    _, only_8g = parse_scenario(scenario("q", peak_gpus=64, duration_s=3600, seed=1, pool_set="8g"), "bench")
    assert [p.name for p in only_8g.pools if p.gpu_model] == ["a100"]
