"""Running `gpuscale` in-process, as its entry point `main(argv)` runs it, and the promise every bad input must keep:
exit 2 with exactly one line on stderr (`gpuscale: error: …`), no traceback."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from gpuscale.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "seed-pools"
CLUSTER, CONFIG, POOLS = EXAMPLES / "cluster.yaml", EXAMPLES / "gpuscale.yaml", EXAMPLES / "pools.yaml"
SCENARIOS = ROOT / "src" / "gpuscale" / "data" / "scenarios"
OPENB = ROOT / "src" / "gpuscale" / "data" / "openb"


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    code: int
    out: str
    err: str


def run_cli(*argv: str | Path) -> Done:
    """`gpuscale ARGV…` through `main`, with stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in argv])
        except SystemExit as exit_:
            code = exit_.code
    return Done(code=code if isinstance(code, int) else (0 if code is None else 1), out=out.getvalue(),
                err=err.getvalue())


def assert_refused(done: Done, *expected: str, code: int = 2) -> None:
    """Exit `code`, one line on stderr naming what is expected, nothing on stdout, no traceback."""
    assert done.code == code, (done.code, done.err[-2000:], done.out[-500:])
    assert done.err.startswith("gpuscale: error: ") and done.err.count("\n") == 1, done.err[-2000:]
    assert "Traceback" not in done.err and "Traceback" not in done.out
    assert len(done.err) <= 1100, len(done.err)
    for text in expected:
        assert text in done.err, (text, done.err)
