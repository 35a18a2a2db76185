"""deploy/grafana/gpuscale.json queries only metrics the controller exports. The exported names come from the
controller's real registry — `Metrics` plus the tracer's collectors, registered as `build_controller` registers
them — not from a hand-written list: a renamed or removed metric fails here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuscale.config import load_config
from gpuscale.kube.metrics import Metrics
from gpuscale.kube.trace_metrics import register_metrics
from gpuscale.kube.tracer import Tracer

from .conftest import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "gpuscale.json"
SEED = ROOT / "examples" / "seed-pools" / "pools.yaml"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "gauge": ("",), "summary": ("", "_count", "_sum", "_created")}
# A name directly followed by a selector or a range: a metric (label names are followed by =, !=, =~ or !~).
SELECTED = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*[{\[]")
GPUSCALE = re.compile(r"\bgpuscale_[a-z0-9_]+")


def exported_series() -> dict[str, set[str]]:
    """Every series name the controller's /metrics can show → the label names it carries."""
    metrics = Metrics(load_config(SEED).pools)
    register_metrics(Tracer(clock=lambda: 0.0), metrics.registry)
    names: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        labels = {label for sample in family.samples for label in sample.labels}
        for suffix in SUFFIXES[family.type]:
            names[family.name + suffix] = labels
    return names


def queries(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def test_the_registry_is_read_not_empty() -> None:
    names = exported_series()
    assert "gpuscale_scaled_up_nodes_total" in names and "gpuscale_pod_phase_seconds_bucket" in names
    assert "gpuscale_scale_up_stockouts_total" in names  # the tracer's scrape-time collector
    assert "gpuscale_no_such_metric" not in names


def test_every_query_names_only_metrics_the_controller_exports() -> None:
    exported = exported_series()
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = list(queries(dashboard))
    assert len(exprs) >= 12
    for expr in exprs:
        named = set(GPUSCALE.findall(expr)) | set(SELECTED.findall(expr))
        assert named, f"no metric in {expr!r}"
        unknown = named - exported.keys()
        assert not unknown, f"{sorted(unknown)} in {expr!r}: not exported by the controller"


def test_the_dashboard_covers_what_operators_ask() -> None:
    text = DASHBOARD.read_text(encoding="utf-8")
    for metric in ("gpuscale_scaled_up_nodes_total", "gpuscale_scaled_down_nodes_total", "gpuscale_unschedulable_pods",
                   "gpuscale_pod_pending_to_running_seconds_bucket", "gpuscale_pod_phase_seconds_sum",
                   "gpuscale_upcoming_nodes", "gpuscale_unready_gpu_nodes", "gpuscale_pool_backoffs_total",
                   "gpuscale_scale_up_stockouts_total"):
        assert metric in text, metric


def test_the_dashboard_is_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "gpuscale" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys()
        assert [t["refId"] for t in panel["targets"]] == [chr(65 + i) for i in range(len(panel["targets"]))]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "pool"]
    assert Path(DASHBOARD).stat().st_size < 100_000
