"""Bad flags of `gpuscale run` fail before anything starts: exit 2, one line naming the flag, no traceback (the
kubeconfig named here does not even exist: the flags are checked first)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuscale.cli import app

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml"


@pytest.mark.parametrize(("flags", "expected"), [
    (["--renew-deadline", "20s"], "--renew-deadline: 20 s must be below the lease duration 15 s"),
    (["--retry-period", "9s"], "--retry-period: 9 s must be positive and below the renew deadline"),
    (["--lease-duration", "2.5s", "--renew-deadline", "1s", "--retry-period", "0.5s"], "--lease-duration: must be "
                                                                                        "whole seconds"),
    (["--lease-duration", "soon"], "--lease-duration: expected a duration"),
    (["--metrics-address", "localhost"], "--metrics-address: expected HOST:PORT"),
    (["--kwok-ready-after", "-1s"], "--kwok-ready-after: must be a finite duration"),
    (["--pool-refresh-interval", "often"], "--pool-refresh-interval: expected a duration"),
    (["--provider", "clusterapi", "--node-group-auto-discovery", "aws:namespace=a"],
     "--node-group-auto-discovery: unsupported discoverer 'aws' (only clusterapi)"),
    (["--node-group-auto-discovery", "clusterapi:namespace=a"],
     "--node-group-auto-discovery: applies to --provider clusterapi, not kwok"),
])
def test_bad_run_flags_exit_2_with_one_line(flags: list[str], expected: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "--config", str(CONFIG), "--kubeconfig", str(tmp_path / "missing"),
                                      *flags])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.output
    assert "Traceback" not in result.output


def test_a_metrics_port_in_use_exits_2_before_connecting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["run", "--config", str(CONFIG), "--kubeconfig", str(tmp_path / "missing"),
                                          "--metrics-address", f"127.0.0.1:{port}"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"gpuscale: error: --metrics-address: cannot listen on 127.0.0.1:{port}: Address already in use"]
