"""Conventions every command line tool is expected to follow: `--version`, shell completion, a kubeconfig that cannot
be used named in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

from gpuscale.cli import app

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml"
SCRIPT = Path(sys.executable).parent / "gpuscale"


def test_version_comes_from_the_package_metadata() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"gpuscale {version('gpuscale')}\n"


def test_completion_options_exist_and_complete_commands_and_choices(tmp_path: Path) -> None:
    shown = CliRunner().invoke(app, ["--help"]).stdout
    assert "--install-completion" in shown and "--show-completion" in shown
    # Typer detects the shell from the parent process (make runs recipes under /bin/sh): ask from a bash, as a user
    # whose shell is bash does; the trailing `exit` keeps bash from exec-ing the command in its place.
    script = subprocess.run(["bash", "-c", f'"{SCRIPT}" --show-completion; exit $?'], capture_output=True, text=True,
                            check=True)
    assert "_GPUSCALE_COMPLETE=complete_bash" in script.stdout

    def complete(words: str) -> list[str]:
        env = os.environ | {"_GPUSCALE_COMPLETE": "complete_bash", "COMP_WORDS": words,
                            "COMP_CWORD": str(len(words.split(" ")) - 1)}
        done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
        return done.stdout.split()

    assert complete("gpuscale pl") == ["plan"]
    assert complete("gpuscale run --log-format ") == ["text", "json"]


def test_run_help_names_the_log_format() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--log-format" in result.stdout


def test_bad_log_format_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["run", "--config", str(CONFIG), "--log-format", "xml"])
    assert result.exit_code == 2 and "xml" in result.output


def test_a_kubeconfig_that_cannot_be_used_is_one_line_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n", encoding="utf-8")
    for path, says in ((tmp_path / "missing", "No such file"), (broken, "while parsing")):
        result = CliRunner().invoke(app, ["run", "--config", str(CONFIG), "--kubeconfig", str(path), "--once"])
        assert result.exit_code == 2, result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"gpuscale: error: --kubeconfig {path}: ") and says in line, line
        result = CliRunner().invoke(app, ["explain", "ns/p", "--config", str(CONFIG), "--kubeconfig", str(path)])
        assert result.exit_code == 2 and result.output.startswith(f"gpuscale: error: --kubeconfig {path}: ")


def test_the_cli_imports_no_kubernetes_client_until_a_command_needs_it() -> None:
    probe = ("import sys, gpuscale.cli; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'prometheus_client'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
