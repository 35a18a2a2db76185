"""Bad input to `fit` and `plan`: exit 2, exactly one line on stderr naming the object and field, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuscale.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "seed-pools"
CLUSTER, CONFIG = EXAMPLES / "cluster.yaml", EXAMPLES / "gpuscale.yaml"
runner = CliRunner()


@pytest.fixture
def bad_quantity(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.read_text().replace("cpu: '80'", "cpu: '80x'", 1))
    return path


@pytest.fixture
def unknown_key(tmp_path: Path) -> Path:
    path = tmp_path / "gpuscale.yaml"
    path.write_text(CONFIG.read_text().replace("scale_down_unneeded_time:", "scale_down_unneded_time:"))
    return path


@pytest.fixture
def bad_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "gpuscale.yaml"
    path.write_text("pools:\n  - name: cpu\n    allocatable: {cpu: 1\n")
    return path


def one_line_error(args: list[str], *expected: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("gpuscale: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr


@pytest.mark.parametrize("command", ["fit", "plan"])
def test_bad_quantity_in_the_cluster_names_pod_and_field(command: str, bad_quantity: Path) -> None:
    args = [command, "--cluster", str(bad_quantity)] + (["--config", str(CONFIG)] if command == "plan" else [])
    one_line_error(args, "Pod ml-training/llama-finetune-0", "spec.containers[0].resources.requests.cpu", "'80x'")


@pytest.mark.parametrize(("command", "option"), [("fit", "--pools"), ("plan", "--config")])
def test_unknown_config_key_is_named(command: str, option: str, unknown_key: Path) -> None:
    one_line_error([command, "--cluster", str(CLUSTER), option, str(unknown_key)],
                   "scale_down_unneded_time: unknown setting (did you mean scale_down_unneeded_time?)")


@pytest.mark.parametrize(("command", "option"), [("fit", "--pools"), ("plan", "--config")])
def test_bad_config_yaml_names_the_line(command: str, option: str, bad_yaml: Path) -> None:
    one_line_error([command, "--cluster", str(CLUSTER), option, str(bad_yaml)], f"{bad_yaml}: line ", "bad YAML")


def test_bad_cluster_yaml(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("kind: Node\nmetadata: {name: [\n")
    one_line_error(["fit", "--cluster", str(path)], str(path), "bad YAML")


def test_the_installed_command_prints_one_line_too(bad_quantity: Path) -> None:
    """Through the real entry point, as a user runs it (no CliRunner in between)."""
    done = subprocess.run([sys.executable, "-c", "from gpuscale.cli import main; main()", "plan", "--cluster",
                           str(bad_quantity), "--config", str(CONFIG)], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Pod ml-training/llama-finetune-0" in done.stderr
