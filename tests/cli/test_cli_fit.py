"""`gpuscale fit` on the example cluster: the documented JSON shape and the text view; keeps working with a full
configuration file as `--pools`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuscale.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "seed-pools"
CLUSTER = EXAMPLES / "cluster.yaml"
runner = CliRunner()


@pytest.mark.parametrize("config", ["pools.yaml", "gpuscale.yaml"])
def test_json_shape(config: str) -> None:
    result = runner.invoke(app, ["fit", "--cluster", str(CLUSTER), "--pools", str(EXAMPLES / config),
                                 "--format", "json"])
    assert result.exit_code == 0, result.stderr
    pods = json.loads(result.stdout)["pods"]
    assert pods
    for pod in pods:
        assert set(pod) == {"namespace", "name", "fits", "reasons", "message", "pools"}
        assert isinstance(pod["fits"], list) and all(isinstance(n, int) for n in pod["reasons"].values())
        assert set(pod["pools"]) == {"cpu-general", "gpu-training-a100", "gpu-inference-t4"}
    bert = next(p for p in pods if p["name"] == "bert-train-0")
    assert bert["pools"]["gpu-training-a100"] == "fits" and bert["fits"] == []


def test_without_pools_and_as_text() -> None:
    result = runner.invoke(app, ["fit", "--cluster", str(CLUSTER)])
    assert result.exit_code == 0 and "Pending pods" in result.stdout
    result = runner.invoke(app, ["fit", "--cluster", str(CLUSTER), "--format", "json"])
    assert all(p["pools"] == {} for p in json.loads(result.stdout)["pods"])
