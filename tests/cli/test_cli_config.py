"""`gpuscale config schema` and `gpuscale config validate`: the schema is current in docs/config.schema.json, is a
valid JSON Schema, accepts every configuration the project ships and flags what editors should flag; `validate` says
`ok` or fails exactly as `run` does."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.report.config_schema import config_schema, schema_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "seed-pools"
CONFIG = EXAMPLES / "gpuscale.yaml"
runner = CliRunner()


def _validator() -> Draft202012Validator:
    schema = config_schema()
    Draft202012Validator.check_schema(schema)  # a schema editors can load
    return Draft202012Validator(schema)


def _shipped() -> dict[str, Any]:
    """Every configuration the project ships: the examples, the chart's and kustomize's, the bundled scenarios'."""
    configs = {name: yaml.safe_load((EXAMPLES / name).read_text()) for name in ("gpuscale.yaml", "pools.yaml")}
    configs["chart"] = yaml.safe_load((REPO / "charts" / "gpuscale" / "values.yaml").read_text())["config"]
    kustomize = yaml.safe_load((REPO / "deploy" / "kustomize" / "base" / "configmap.yaml").read_text())
    configs["kustomize"] = yaml.safe_load(kustomize["data"]["config.yaml"])
    for scenario in ("default", "teams", "sharing"):
        text = resources.files("gpuscale.data").joinpath("scenarios", f"{scenario}.yaml").read_text()
        configs[scenario] = yaml.safe_load(text)["config"]
    return configs


def test_the_committed_schema_is_current() -> None:
    result = runner.invoke(app, ["config", "schema"])
    assert result.exit_code == 0
    assert result.stdout == schema_text()
    committed = (REPO / "docs" / "config.schema.json").read_text(encoding="utf-8")
    assert committed == result.stdout, "stale: run gpuscale config schema > docs/config.schema.json"
    assert json.loads(committed)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_shipped_configuration_is_valid_against_the_schema() -> None:
    validator = _validator()
    for name, config in _shipped().items():
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(config)]
        assert errors == [], name


@pytest.mark.parametrize(("change", "path"), [
    ({"scale_down_unneded_time": "10m"}, []),                       # a misspelt option
    ({"scale_down_unneeded_time": "10 minutes"}, ["scale_down_unneeded_time"]),
    ({"scale_down_utilization_threshold": 1.5}, ["scale_down_utilization_threshold"]),
    ({"expander": 3}, ["expander"]),
    ({"preset": "karpenter"}, ["preset"]),
    ({"priorities": {"high": ["gpu-.*"]}}, ["priorities"]),
    ({"pools": [{"name": "Bad_Name", "allocatable": {"cpu": 1, "memory": "1Gi"}}]}, ["pools", 0, "name"]),
    ({"pools": [{"name": "a", "allocatable": {"cpu": 1, "memory": "1Gi"}, "gpu": {"model": "t4"}}]},
     ["pools", 0, "gpu"]),                                          # count is required
])
def test_the_schema_flags_what_an_editor_should(change: dict[str, Any], path: list[Any]) -> None:
    config = yaml.safe_load(CONFIG.read_text()) | change
    errors = list(_validator().iter_errors(config))
    assert errors, change
    assert any(list(e.absolute_path) == path for e in errors), [(list(e.absolute_path), e.message) for e in errors]


def test_durations_in_the_schema_are_go_durations_or_seconds() -> None:
    validator = _validator()
    base = {"pools": [{"name": "a", "allocatable": {"cpu": 1, "memory": "1Gi"}}]}
    for good in ("10m", "1h30m", "300ms", "2.5s", 600, "600"):
        assert validator.is_valid(base | {"scan_interval": good}), good
    for bad in ("10 minutes", "1d", "-5s", -1):
        assert not validator.is_valid(base | {"scan_interval": bad}), bad


def test_validate_says_ok_and_exits_0() -> None:
    result = runner.invoke(app, ["config", "validate", str(CONFIG)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{CONFIG}: ok (3 pools: cpu-general, gpu-training-a100, gpu-inference-t4)\n"


@pytest.mark.parametrize("text", [
    "pools: []\n",
    "scale_down_unneded_time: 10m\n",
    "pools: [{name: a, allocatable: {cpu: 1, memory: 1Gi}}]\nwarm_capacity: [{pool: b, idle_nodes: 1}]\n",
    "pools: [{name: a, allocatable: {cpu: 1, memory: 1Gi}, gpu: {model: t4, count: 1}}]\ngpu_total: nvidia.com/gpu\n",
    "pools: [\n",
])
def test_validate_fails_as_run_does(text: str, tmp_path: Path) -> None:
    path = tmp_path / "gpuscale.yaml"
    path.write_text(text, encoding="utf-8")
    checked = runner.invoke(app, ["config", "validate", str(path)])
    assert checked.exit_code == 2 and checked.stdout == ""
    (line,) = checked.stderr.strip().splitlines()
    assert line.startswith(f"gpuscale: error: {path}")
    ran = runner.invoke(app, ["run", "--config", str(path), "--kubeconfig", str(tmp_path / "missing"), "--once"])
    assert (ran.exit_code, ran.stderr) == (2, checked.stderr)  # the very same line: run reads the file first
