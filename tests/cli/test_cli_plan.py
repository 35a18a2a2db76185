"""`gpuscale plan`: one decision on a cluster dump, no actuation; JSON shape, text view, one-line errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuscale.cli import app, assume_unneeded
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT
from gpuscale.kube.dump import load_cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "seed-pools"
CLUSTER, CONFIG = EXAMPLES / "cluster.yaml", EXAMPLES / "gpuscale.yaml"
NOW = str(datetime(2026, 11, 29, 10, tzinfo=UTC).timestamp())  # an hour after the example's pods were created
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def plan_json(*extra: str) -> dict[str, object]:
    code, out, err = run("plan", "--cluster", str(CLUSTER), "--config", str(CONFIG), "--now", NOW, "--format", "json",
                         *extra)
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_json_shape() -> None:
    doc = plan_json()
    assert {"scale_up", "scale_down", "blocked", "unplaceable"} <= set(doc)
    assert doc["scale_up"], "the example has pending GPU pods a pool can host"
    for item in doc["scale_up"]:  # type: ignore[attr-defined]
        assert set(item) == {"pool", "nodes", "pods", "reasons"}
        assert isinstance(item["nodes"], int) and all("/" in p for p in item["pods"])
    for section, key in (("scale_down", "node"), ("blocked", "node"), ("unplaceable", "pod"), ("covered", "pod"),
                         ("waiting", "pod"), ("unneeded", "node")):
        for item in doc[section]:  # type: ignore[attr-defined]
            assert key in item and item["reasons"]
            assert all({"code", "message"} <= set(r) for r in item["reasons"])


def test_pods_no_pool_can_host_are_unplaceable_with_reasons() -> None:
    unplaceable = {v["pod"]: v["reasons"] for v in plan_json()["unplaceable"]}  # type: ignore[attr-defined]
    assert "research/h100-bench-0" in unplaceable  # asks for an H100: no pool has one
    assert unplaceable["research/h100-bench-0"][0]["message"]


def test_same_input_same_bytes() -> None:
    assert plan_json() == plan_json()
    first = run("plan", "--cluster", str(CLUSTER), "--config", str(CONFIG), "--now", NOW)
    assert first == run("plan", "--cluster", str(CLUSTER), "--config", str(CONFIG), "--now", NOW)


def test_text_view() -> None:
    code, out, _ = run("plan", "--cluster", str(CLUSTER), "--config", str(CONFIG), "--now", NOW)
    assert code == 0
    assert "Scale up" in out and "Unplaceable pods" in out and "research/h100-bench-0" in out


def test_assume_unneeded_for_taints_every_node_since_now_minus_duration() -> None:
    cluster = assume_unneeded(load_cluster(CLUSTER), 1_000.0)
    for node in cluster.nodes:
        [taint] = [t for t in node.taints if t.key == DELETION_CANDIDATE_TAINT]
        assert taint.value == "1000" and taint.effect == "PreferNoSchedule"
    again = assume_unneeded(cluster, 2_000.0)  # replaces, never duplicates
    assert all([t.value for t in n.taints if t.key == DELETION_CANDIDATE_TAINT] == ["2000"] for n in again.nodes)


def test_assume_unneeded_for_runs() -> None:
    doc = plan_json("--assume-unneeded-for", "1h")
    assert {"scale_down", "blocked"} <= set(doc)


def test_now_defaults_to_the_wall_clock() -> None:
    code, out, err = run("plan", "--cluster", str(CLUSTER), "--config", str(CONFIG), "--format", "json")
    assert code == 0, err
    assert "scale_up" in json.loads(out)


@pytest.mark.parametrize(("args", "expected"), [
    (("--assume-unneeded-for", "10 minutes"), "option --assume-unneeded-for: DURATION: expected a duration"),
    (("--config", "/nonexistent/gpuscale.yaml"), "/nonexistent/gpuscale.yaml: No such file"),
])
def test_bad_options_are_one_line(args: tuple[str, ...], expected: str) -> None:
    base = ["plan", "--cluster", str(CLUSTER), "--now", NOW]
    if "--config" not in args:
        base += ["--config", str(CONFIG)]
    code, out, err = run(*base, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err
