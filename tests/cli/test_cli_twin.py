"""`gpuscale simulate` / `compare` end to end on a short scenario, and their bad-input handling."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuscale.cli import app

SCENARIO = {
    "name": "short", "duration": "2h", "seed": 3,
    "config": {"pools": [
        {"name": "cpu", "usd_per_hour": 0.8, "min_size": 1, "max_size": 10,
         "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}},
        {"name": "t4", "usd_per_hour": 0.54, "max_size": 10,
         "labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
         "gpu": {"model": "nvidia-tesla-t4", "count": 1}, "allocatable": {"cpu": "4", "memory": "15Gi"}},
    ]},
    "workload": {"batch": {"jobs_per_hour": 30},
                 "services": [{"name": "chat", "peak_rps": 30, "rps_per_replica": 6, "max_replicas": 8}]},
}


def write(tmp_path: Path, scenario: dict[str, object]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    return path


def test_simulate_writes_json_and_html(tmp_path: Path) -> None:
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    result = CliRunner().invoke(app, ["simulate", str(write(tmp_path, SCENARIO)), "--quiet", "--json", str(out),
                                      "--html", str(html)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["scenario"] == "short" and data["policy"] == "gpuscale"
    assert data["pending_to_running_s"]["count"] > 0 and data["scale_ups"] > 0
    assert html.read_text().count("<svg") >= 4


def test_compare_runs_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    result = CliRunner().invoke(app, ["compare", str(write(tmp_path, SCENARIO)), "--policy", "gpuscale",
                                      "--policy", "ca-defaults", "--quiet", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert [r["policy"] for r in json.loads(out.read_text())["results"]] == ["gpuscale", "ca-defaults"]


def test_bad_scenario_and_bad_policy_are_one_line_exit_2(tmp_path: Path) -> None:
    bad = write(tmp_path, {**SCENARIO, "duraton": "2h"})
    result = CliRunner().invoke(app, ["simulate", str(bad), "--quiet"])
    assert result.exit_code == 2 and "duraton" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    unknown_pool = write(tmp_path, {**SCENARIO, "initial_nodes": {"gpu-h100": 1}})
    result = CliRunner().invoke(app, ["simulate", str(unknown_pool), "--quiet"])
    assert result.exit_code == 2 and "gpu-h100" in result.stderr
    result = CliRunner().invoke(app, ["simulate", str(write(tmp_path, SCENARIO)), "--policy", "nope", "--quiet"])
    assert result.exit_code == 2 and "--policy nope" in result.stderr


def test_simulate_help_names_every_bundled_scenario() -> None:
    shipped = sorted(p.stem for p in (Path(__file__).parents[2] / "src/gpuscale/data/scenarios").glob("*.yaml"))
    assert len(shipped) >= 5
    result = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    assert f"({', '.join(shipped)})" in " ".join(result.output.split()), result.output
