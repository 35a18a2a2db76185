"""The schema test on both outputs: `gpuscale simulate --trace` (the twin) and the controller's tracer write lines
the one parser accepts, with the same invariants. The controller side here is the tracer fed like the watch feeds
it (tests/kube/test_tracer.py); tests/e2e/test_tracing.py parses its output from the real control plane too."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.kube.tracer import Tracer
from gpuscale.lifecycle.trace import parse_lines
from tests.cli.test_cli_twin import SCENARIO, write
from tests.kube.test_tracer import Clock, live_long_path
from tests.lifecycle.test_trace import assert_schema


def test_twin_trace_file_follows_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "twin.jsonl"
    result = CliRunner().invoke(app, ["simulate", str(write(tmp_path, SCENARIO)), "--quiet", "--trace", str(out)])
    assert result.exit_code == 0, result.output
    traces = parse_lines(out.read_text(), str(out))
    assert {t.source for t in traces} == {"twin"}
    assert any(t.new_node for t in traces) and any(not t.new_node for t in traces)
    assert_schema(traces)


def test_controller_traces_follow_the_schema(tmp_path: Path) -> None:
    clock = Clock()
    tracer = Tracer(clock=clock, sink=tmp_path / "controller.jsonl")
    live_long_path(tracer, clock)
    traces = parse_lines((tmp_path / "controller.jsonl").read_text(), "controller.jsonl")
    assert {t.source for t in traces} == {"controller"}
    assert_schema(traces)
