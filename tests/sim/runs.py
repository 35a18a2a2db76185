"""Shared twin runs for the tests: a bundled scenario's first hours as the report's JSON, and the one-line check of
bad scenario input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.model.errors import ConfigError
from gpuscale.report.twin import result_json
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import load_scenario, parse_scenario, policy_named


def short_run_json(name: str, *, hours: float, seed: int | None = None) -> str:
    """Bundled scenario `name` cut to its first `hours` (later jobs dropped), run under the `gpuscale` preset with
    the scenario's options, as the twin's JSON without wall-clock figures."""
    setup, config = load_scenario(name, seed=seed)
    end = hours * 3600
    short = replace(setup, duration_s=end, jobs=tuple(j for j in setup.jobs if j.submit_s < end))
    return json.dumps(result_json(simulate(short, policy_named("gpuscale", config)), include_wall=False))


def assert_one_line_error(raw: dict[str, Any], where: str, words: str) -> None:
    """Parsing `raw` fails with one `ConfigError` line naming `s.yaml: <where>` and containing `words`."""
    with pytest.raises(ConfigError) as caught:
        parse_scenario(raw, "s.yaml")
    message = str(caught.value)
    assert f"s.yaml: {where}" in message and words in message and "\n" not in message, message


def assert_cli_one_line_exit_2(raw: dict[str, Any], where: str, tmp_path: Path) -> None:
    """`gpuscale simulate` on `raw` written as a file exits 2 with one line on stderr naming `where`."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    result = CliRunner().invoke(app, ["simulate", str(path), "--quiet"])
    assert result.exit_code == 2 and where in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
