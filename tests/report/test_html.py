"""The HTML report: one self-contained document with SVG plots, nothing fetched from outside, small and
deterministic; plus the downsampling that keeps it small."""

from __future__ import annotations

import re

from gpuscale.report import twin
from gpuscale.report.html import MAX_POINTS, downsample, render_html
from gpuscale.sim.result import Notable
from tests.report.builders import make_day_result, make_pod, make_result, make_series

EXTERNAL = re.compile(r"(?:https?:)?//[^\s\"'<>)]+", re.IGNORECASE)
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def external_references(page: str) -> list[str]:
    """Every URL-like reference except the SVG namespace, which names the format and is never fetched."""
    return [m for m in EXTERNAL.findall(page.replace(f'xmlns="{SVG_NAMESPACE}"', "")) if not m.startswith("//<")]


def test_one_self_contained_document_with_every_plot() -> None:
    page = render_html([make_day_result(seed=1)], "Diurnal run")
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<html") == 1 and page.rstrip().endswith("</html>")
    assert page.count("<svg") == 6  # nodes, pending, cost, GPUs, latency CDF, phase waterfall
    for title in ("Nodes per pool", "Pending pods", "Cumulative cost", "GPUs provisioned vs allocated",
                  "Latency CDF", "Where new-node pods wait", "Notable events"):
        assert title in page
    assert external_references(page) == []
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", page, re.IGNORECASE)


def test_the_header_and_pool_tables_show_the_hindsight_bound() -> None:
    result = make_day_result(seed=1)
    page = render_html([result], "Diurnal run")
    assert result.efficiency is not None and result.hindsight_efficiency is not None
    assert f"{100 * result.efficiency:.1f}% · {100 * result.hindsight_efficiency:.1f}%" in page
    assert "Efficiency · hindsight bound" in page
    for p in twin.pool_rows(result):
        assert f"<td>{twin.format_hours(p.idle_gpu_h)}</td><td>{twin.format_hours(p.bound_gpu_h)}</td>" in page


def test_comparison_overlays_policies_with_distinct_colours_and_one_node_panel_each() -> None:
    results = [make_day_result("a", seed=1), make_day_result("b", seed=1, warm=0.5),
               make_day_result("c", seed=1, warm=0.9)]
    page = render_html(results, "Compare")
    assert page.count("<svg") == 3 + 5
    for policy in ("Nodes per pool — a", "Nodes per pool — b", "Nodes per pool — c"):
        assert policy in page
    cdf = page[page.index("Latency CDF"):page.index("Where new-node pods wait")]
    strokes = re.findall(r'<path d="[^"]*" fill="none" stroke="(#[0-9a-f]{6})"', cdf)
    assert len(strokes) == 3 and len(set(strokes)) == 3
    assert 'class=best' in page


def test_text_is_escaped() -> None:
    result = make_result(policy="<b>p&q</b>", notable=(Notable(t_s=5.0, kind="x", message="<script>"),))
    page = render_html([result], "T <1>")
    assert "<script>" not in page and "<b>p&q</b>" not in page
    assert "&lt;b&gt;p&amp;q&lt;/b&gt;" in page and "T &lt;1&gt;" in page


def test_a_week_comparison_stays_under_a_megabyte_and_is_deterministic() -> None:
    results = [make_day_result(p, seed=2, days=7, sample_s=30, warm=w) for p, w in (("a", 0.1), ("b", 0.5), ("c", 0.8))]
    page = render_html(results, "Week")
    assert len(page.encode()) < 1_000_000
    assert page == render_html(results, "Week")
    longest = max(len(d.split("L")) for d in re.findall(r' d="([^"]*)"', page))
    assert longest <= 4 * MAX_POINTS  # steps at most double a downsampled line; areas have two edges


def test_renders_a_run_with_no_pods_and_no_samples() -> None:
    empty = make_result(pods=(), series=make_series(t_s=(), nodes_by_pool={}, pending=(), cost_usd=(),
                                                     provisioned=(), allocated=()), cost_by_pool={},
                        gpu_hours_by_pool={}, scale_ups_by_pool={})
    page = render_html([empty], "Empty")
    assert page.count("<svg") == 6 and "no new-node pods ran" in page and "NaN" not in page


def test_renders_pods_that_never_ran_and_zero_waits() -> None:
    pods = (make_pod("a", running_s=0.0), make_pod("b", running_s=None), make_pod("c", running_s=3600.0, new_node=True,
                                                                                 phases={"instance_boot": 3600.0}))
    page = render_html([make_result(pods=pods)], "Edges")
    assert "instance boot" in page and "NaN" not in page and "inf" not in page


def test_downsampling_keeps_the_ends_and_the_extremes() -> None:
    values = [float(i % 97) for i in range(10_000)]
    values[4321] = 500.0
    values[7777] = -5.0
    keep = downsample(values)
    assert len(keep) <= MAX_POINTS
    assert keep == sorted(set(keep))
    assert {0, 9999, 4321, 7777} <= set(keep)
    assert downsample([1.0, 2.0]) == [0, 1]
