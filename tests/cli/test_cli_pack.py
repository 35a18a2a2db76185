"""`gpuscale pack` end to end on the bundled openb files."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuscale.cli import app


def test_pack_json_has_the_documented_shape_and_the_artifacts_seed_42_value() -> None:
    result = CliRunner().invoke(app, ["pack", "--policy", "bestfit", "--seed", "42", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"policy", "seed", "total_gpus", "points"} <= set(data)
    assert data["total_gpus"] == 6212
    assert [p["arrived_pct"] for p in data["points"]] == list(range(131))
    assert {"arrived_pct", "allocated_pct", "frag_pct", "frag_ratio_pct"} == set(data["points"][0])
    assert abs((100 - data["points"][100]["allocated_pct"]) - 7.06) < 0.05  # the artifact's BestFit, seed 42


def test_pack_unknown_policy_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["pack", "--policy", "nope"])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
