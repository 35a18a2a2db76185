"""`gpuscale trace` and `gpuscale calibrate` from files, and their bad input: one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.lifecycle.trace import dump_lines
from tests.report.test_trace import TRACES


def test_trace_file_to_text_and_html(tmp_path: Path) -> None:
    source, page = tmp_path / "t.jsonl", tmp_path / "t.html"
    source.write_text(dump_lines(TRACES))
    result = CliRunner().invoke(app, ["trace", str(source), "--html", str(page), "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "Slowest 1 pods" in result.output and "ns/b" in result.output and "ns/c" not in result.output
    assert page.read_text().count("<svg") == 2


def test_calibrate_writes_a_profile(tmp_path: Path) -> None:
    source, out = tmp_path / "t.jsonl", tmp_path / "p.yaml"
    source.write_text(dump_lines(TRACES))
    result = CliRunner().invoke(app, ["calibrate", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    fitted = yaml.safe_load(out.read_text())["pools"]["a100"]
    assert fitted["ready_s"]["median"] == pytest.approx((5 * 6 * 5) ** (1 / 3), rel=1e-3)
    assert fitted["ready_s"]["samples"] == 3 and fitted["boot_s"]["median"] == 0.0


@pytest.mark.parametrize(("args", "content", "message"), [
    (["trace", "{dir}/missing.jsonl"], None, "missing.jsonl: file: No such file or directory"),
    (["trace", "{dir}/t.jsonl"], '{"schema": 1}\n', "t.jsonl:1: pod: expected a non-empty string"),
    (["trace", "{dir}/t.jsonl", "--url", "http://127.0.0.1:1"], "", "give a trace file or --url, not both"),
    (["trace"], None, "give a trace file or --url"),
    (["trace", "--url", "ftp://x"], None, "--url: expected http://HOST:PORT"),
    (["trace", "--url", "http://127.0.0.1:1"], None, "--url: cannot fetch traces"),
    (["calibrate", "{dir}/t.jsonl", "--out", "{dir}/p.yaml"], "not json\n", "t.jsonl:1: (line): not JSON"),
    (["calibrate", "{dir}/t.jsonl", "--out", "{dir}/p.yaml"], "", "path: no complete new-node trace"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / "t.jsonl").write_text(content)
    result = CliRunner().invoke(app, [a.format(dir=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscale: error: ") and message in lines[0], result.output
    assert not (tmp_path / "p.yaml").exists()
