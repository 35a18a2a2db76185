"""The twin report: JSON keys and values, nearest-rank percentiles, deterministic bytes, and the terminal views."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from gpuscale.lifecycle.phases import OPTIONAL_PHASES, Phase
from gpuscale.report.twin import (
    Better,
    ComparisonRow,
    comparison_rows,
    format_clock,
    format_count,
    format_duration,
    latency_stats,
    print_comparison,
    print_summary,
    result_json,
)
from gpuscale.sim.result import Notable
from tests.report.builders import make_day_result, make_pod, make_result

REQUIRED_KEYS = {
    "scenario", "policy", "seed", "duration_s", "cost_usd", "cost_by_pool", "gpu_hours", "pending_to_running_s",
    "phases_s", "evictions", "lost_gpu_hours", "scale_ups", "scale_ups_by_pool", "scale_downs", "stockouts",
    "backoffs", "never_ran", "sim_events", "wall_s", "notable",
}


def test_json_has_the_documented_keys_and_totals() -> None:
    doc = result_json(make_result())
    assert set(doc) >= REQUIRED_KEYS
    assert doc["gpu_hours"] == {"provisioned": 10.0, "allocated": 6.0, "useful": 5.0, "idle": 4.0,
                                "hindsight_bound": 8.0, "efficiency": 0.6, "useful_efficiency": 0.5,
                                "hindsight_efficiency": 0.75,
                                "by_pool": {"gpu-a100": {"provisioned": 10.0, "allocated": 6.0, "useful": 5.0,
                                                         "idle": 4.0, "hindsight_bound": 8.0}}}
    assert list(doc["gpu_hours"]) == ["provisioned", "allocated", "useful", "idle", "hindsight_bound", "efficiency",
                                      "useful_efficiency", "hindsight_efficiency", "by_pool"]
    assert list(doc["gpu_hours"]["by_pool"]["gpu-a100"]) == ["provisioned", "allocated", "useful", "idle",
                                                             "hindsight_bound"]
    assert (doc["scenario"], doc["policy"], doc["seed"], doc["cost_usd"]) == ("unit", "default", 7, 12.5)
    assert "queue_wait_by_team" not in doc


def test_pending_to_running_percentiles_are_nearest_rank_over_pods_that_ran() -> None:
    pods = [make_pod(f"p{i}", created_s=1000.0, running_s=1000.0 + i, new_node=i > 60) for i in range(1, 101)]
    pods.append(make_pod("never", running_s=None))
    stats = result_json(make_result(pods=tuple(pods)))["pending_to_running_s"]
    assert {k: stats[k] for k in ("count", "p50", "p95", "p99", "max")} == {
        "count": 100, "p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0}
    assert stats["new_node"] == {"count": 40, "p50": 80.0, "p95": 98.0, "p99": 100.0, "max": 100.0}
    assert stats["existing_node"] == {"count": 60, "p50": 30.0, "p95": 57.0, "p99": 60.0, "max": 60.0}


def test_statistics_are_null_when_no_pod_ran() -> None:
    doc = result_json(make_result(pods=(make_pod(running_s=None),)))
    assert doc["pending_to_running_s"]["count"] == 0
    assert doc["pending_to_running_s"]["p95"] is None
    assert doc["phases_s"][Phase.BOOT] == {"mean": None, "p95": None}


def test_phases_cover_new_node_pods_in_lifecycle_order() -> None:
    pods = (make_pod("a", new_node=True, phases={Phase.BOOT: 60.0, Phase.IMAGE_PULL: 10.0}),
            make_pod("b", new_node=True, phases={Phase.BOOT: 90.0}),
            make_pod("c", new_node=False, phases={Phase.BOOT: 999.0, Phase.IMAGE_PULL: 999.0}))
    phases = result_json(make_result(pods=pods))["phases_s"]
    assert list(phases) == [str(p) for p in Phase if p not in OPTIONAL_PHASES]  # an optional one only when had
    assert phases[Phase.BOOT] == {"mean": 75.0, "p95": 90.0}
    assert phases[Phase.IMAGE_PULL] == {"mean": 5.0, "p95": 10.0}
    assert phases[Phase.DECISION] == {"mean": 0.0, "p95": 0.0}


def test_floats_are_rounded_and_non_finite_values_become_null() -> None:
    doc = result_json(make_result(cost_usd=1 / 3, lost_gpu_hours=math.nan, duration_s=-0.0))
    assert (doc["cost_usd"], doc["lost_gpu_hours"]) == (0.333, None)
    assert math.copysign(1.0, doc["duration_s"]) == 1.0
    json.dumps(doc, allow_nan=False)


def test_json_bytes_do_not_depend_on_mapping_order_or_wall_time() -> None:
    first = make_result(cost_by_pool={"b": 1.0, "a": 2.0}, scale_ups_by_pool={"b": 1, "a": 2}, wall_s=1.0,
                        queue_wait_by_team={"z": {"p95": 2.0, "p50": 1.0}, "y": {"p50": 3.0}})
    second = make_result(cost_by_pool={"a": 2.0, "b": 1.0}, scale_ups_by_pool={"a": 2, "b": 1}, wall_s=9.0,
                         queue_wait_by_team={"y": {"p50": 3.0}, "z": {"p50": 1.0, "p95": 2.0}})
    a, b = result_json(first, include_wall=False), result_json(second, include_wall=False)
    assert "wall_s" not in a
    assert json.dumps(a) == json.dumps(b)
    assert list(a["cost_by_pool"]) == ["a", "b"]
    assert list(a["queue_wait_by_team"]) == ["y", "z"]
    assert result_json(first)["wall_s"] == 1.0


def test_notable_events_are_in_time_order_and_ties_keep_their_order() -> None:
    events = (Notable(t_s=50.0, kind="stockout", message="b"), Notable(t_s=10.0, kind="fallback", message="a"),
              Notable(t_s=50.0, kind="fallback", message="c"))
    notable = result_json(make_result(notable=events))["notable"]
    assert [n["message"] for n in notable] == ["a", "b", "c"]
    assert notable[0] == {"t_s": 10.0, "kind": "fallback", "message": "a"}


def test_a_day_run_serializes_identically_twice() -> None:
    a = json.dumps(result_json(make_day_result(seed=3), include_wall=False), allow_nan=False)
    b = json.dumps(result_json(make_day_result(seed=3), include_wall=False), allow_nan=False)
    assert a == b


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=200))
def test_latency_stats_are_ordered_sample_values(values: list[float]) -> None:
    stats = latency_stats(values)
    assert stats["p50"] <= stats["p95"] <= stats["p99"] <= stats["max"]
    rounded = {round(v, 3) + 0.0 for v in values}
    assert {stats["p50"], stats["p95"], stats["p99"], stats["max"]} <= rounded


def test_best_value_per_row_respects_direction_ties_and_unknowns() -> None:
    def row(*values: float | None, better: Better = Better.LOWER) -> ComparisonRow:
        return ComparisonRow(label="x", values=values, better=better, format=format_count)

    assert row(3, 1, 2).best() == {1}
    assert row(3, 1, 3, better=Better.HIGHER).best() == {0, 2}
    assert row(None, 4, 5).best() == {1}
    assert row(2, 2).best() == set()
    assert row(None, 4).best() == set()


def test_comparison_rows_follow_the_results_order() -> None:
    rows = {r.label: r for r in comparison_rows([make_result(cost_usd=5.0), make_result(cost_usd=3.0)])}
    assert rows["Cost"].values == (5.0, 3.0)
    assert rows["Cost"].best() == {1}
    assert rows["Allocated GPU-hours"].better is Better.HIGHER


def test_formatting() -> None:
    assert [format_duration(s) for s in (None, 0.42, 12.34, 245, 7380, 100800)] == [
        "—", "0.42 s", "12.3 s", "4m 05s", "2h 03m", "1d 04h"]
    assert (format_clock(3723.9), format_clock(86400 + 7384)) == ("01:02:03", "1+02:03:04")


def test_summary_shows_the_headline_and_fits_100_columns() -> None:
    console = Console(record=True, width=100)
    result = make_day_result(seed=2)
    print_summary(result, console)
    text = console.export_text()
    doc = result_json(result)
    assert f"${doc['cost_usd']:,.2f}" in text
    assert f"{result.gpu_hours_idle:,.1f} GPU-h" in text
    assert f"p95 pending→running {format_duration(doc['pending_to_running_s']['p95'])}" in text
    for heading in ("Pods by workload", "Pools (GPU-hours)", "Slowest phases of new-node pods", "Notable events"):
        assert heading in text
    for kind in ("training", "inference", "batch"):
        assert kind in text
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "…" not in text.replace("… ", "")  # no cell was truncated to fit


def test_summary_of_a_tiny_run() -> None:
    console = Console(record=True, width=100)
    print_summary(make_result(), console)
    text = console.export_text()
    assert "Cost $12.50 · idle 4.0 GPU-h (40% of provisioned) · p95 pending→running 10.0 s" in text
    assert "Efficiency 60.0% of provisioned · hindsight bound 8.0 GPU-h: 75.0% (nodes exactly when needed)" in text
    assert "bound" in text.split("Pools (GPU-hours)")[1].splitlines()[2]  # the pool table's bound column


def test_comparison_lists_every_policy_and_row_and_marks_the_best() -> None:
    console = Console(record=True, width=100)
    print_comparison([make_result(policy="ca", cost_usd=20.0), make_result(policy="gpuscale", cost_usd=12.5)],
                     console)
    styled = console.export_text(styles=True, clear=False)
    text = console.export_text()
    assert "\x1b[1;32m  $12.50" in styled and "\x1b[1;32m  $20.00" not in styled
    assert "ca" in text and "gpuscale" in text
    assert "$20.00" in text and "$12.50" in text
    for label in ("Cost", "Idle GPU-hours", "p99 pending→running", "Lost GPU-hours", "Never ran"):
        assert label in text


def test_capacity_wait_is_pending_to_bound_beside_pending_to_running() -> None:
    pods = [replace(make_pod(f"p{i}", created_s=100.0, running_s=100.0 + 10 * i, new_node=i > 5), bound_s=100.0 + i)
            for i in range(1, 11)]
    pods.append(replace(make_pod("pulling", created_s=50.0, running_s=None), bound_s=80.0))  # bound, not running
    pods.append(make_pod("waiting", running_s=None))
    # a requeued job's pod: its wait, bound and running, counts from when the job began waiting
    pods.append(replace(make_pod("again", created_s=500.0, running_s=560.0), bound_s=520.0, waiting_since_s=0.0))
    doc = result_json(make_result(pods=tuple(pods)))
    bound = doc["pending_to_bound_s"]
    assert (bound["count"], bound["max"], bound["p50"]) == (12, 520.0, 6.0)
    assert bound["new_node"]["count"] == 5 and bound["new_node"]["max"] == 10.0
    assert doc["pending_to_running_s"]["max"] == 560.0 and doc["pending_to_running_s"]["count"] == 11
    assert doc["pending_to_running_by_workload"]["batch"]["capacity_wait_p95"] == 520.0
    labels = [row.label for row in comparison_rows([make_result(pods=tuple(pods))])]
    assert labels.index("p95 capacity wait (pending→bound)") < labels.index("p95 pending→running")


def test_never_ran_counts_jobs_once_and_skips_withdrawn_pods() -> None:
    pods = (replace(make_pod("a-1-0", running_s=None), job="t/a"),
            replace(make_pod("a-2-0", running_s=None), job="t/a"),
            replace(make_pod("b-1-0", running_s=None), job="t/b"), replace(make_pod("b-2-0"), job="t/b"),
            make_pod("svc-1", running_s=None), replace(make_pod("svc-2", running_s=None), withdrawn=True))
    doc = result_json(make_result(pods=pods, never_ran=2))
    assert doc["pending_to_running_by_workload"]["batch"]["never_ran"] == 2  # job a and svc-1
