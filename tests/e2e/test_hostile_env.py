"""Errors of the environment against the real API server (issue 30, item 3): a kubeconfig whose credentials the
server refuses is one line and exit 2 for `explain` and `run`; with good ones, `explain --kubeconfig` answers."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.cli import main

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml"


def assert_refused(*argv: str | Path, says: str) -> None:
    """`gpuscale ARGV…` through `main` exits 2 with one stderr line holding `says`, no traceback."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            pytest.raises(SystemExit) as done:
        main([str(a) for a in argv])
    assert done.value.code == 2, err.getvalue()
    assert err.getvalue().startswith("gpuscale: error: ") and err.getvalue().count("\n") == 1, err.getvalue()
    assert says in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()


def _bogus_token_kubeconfig(control_plane: Any, tmp_path: Path) -> Path:
    raw = yaml.safe_load(Path(control_plane.kubeconfig_path).read_text(encoding="utf-8"))
    for user in raw["users"]:
        user["user"] = {"token": "not-a-token"}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_refused_credentials_are_one_line_exit_2(control_plane: Any, tmp_path: Path) -> None:
    kubeconfig = _bogus_token_kubeconfig(control_plane, tmp_path)
    for command in (["explain", "ns/p"], ["run", "--once"]):
        assert_refused(*command, "--config", CONFIG, "--kubeconfig", kubeconfig,
                       says="refused the credentials: HTTP 401")


def test_explain_against_the_live_server_reads_it(control_plane: Any) -> None:
    assert_refused("explain", "default/no-such-pod", "--config", CONFIG, "--kubeconfig", control_plane.kubeconfig_path,
                   says="no such pod, ProvisioningRequest or node in the input")
