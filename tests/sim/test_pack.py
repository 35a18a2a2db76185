"""The FGD packing experiment: a cheap acceptance run, the workload build, the sampling and the JSON shape."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console

from gpuscale.engine.placement import GoRand, PackTrace
from gpuscale.model.errors import ConfigError
from gpuscale.report.pack import pack_json, print_pack
from gpuscale.sim.openb import bundled, read_nodes, read_pods
from gpuscale.sim.pack import build_workload, run_pack, sample_points

NODES = bundled("openb_node_list_gpu_node.csv")
PODS = bundled("openb_pod_list_default.csv")
PAPER_MEAN = {"fgd": 4.77, "bestfit": 7.14}
ARTIFACT_SEED_42 = {"fgd": (4.86, 4.97), "bestfit": (7.06, 7.34)}  # unallocated % at 100 %, frag % at 90 %


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    return {policy: run_pack(NODES, PODS, policy, 42) for policy in PAPER_MEAN}


@pytest.mark.parametrize("policy", sorted(PAPER_MEAN))
def test_one_seed_lands_near_the_paper_and_on_the_artifacts_own_run(results: dict, policy: str) -> None:  # type: ignore[type-arg]
    result = results[policy]
    assert abs(result.unallocated_pct - PAPER_MEAN[policy]) <= 1.5
    assert (result.unallocated_pct, result.point(90).frag_pct) == ARTIFACT_SEED_42[policy]


def test_fgd_beats_bestfit(results: dict) -> None:  # type: ignore[type-arg]
    assert results["fgd"].unallocated_pct < results["bestfit"].unallocated_pct
    assert results["fgd"].failed_pods < results["bestfit"].failed_pods


def test_json_shape(results: dict) -> None:  # type: ignore[type-arg]
    doc = pack_json(results["fgd"])
    assert {"policy", "seed", "total_gpus", "points"} <= set(doc)
    assert (doc["policy"], doc["seed"], doc["total_gpus"]) == ("fgd", 42, 6212)
    assert [p["arrived_pct"] for p in doc["points"]] == list(range(131))
    assert set(doc["points"][0]) == {"arrived_pct", "allocated_pct", "frag_pct", "frag_ratio_pct"}
    assert doc["points"][0]["frag_pct"] == pytest.approx(13.94, abs=0.1)  # nearly the empty cluster


def test_print_pack(results: dict) -> None:  # type: ignore[type-arg]
    console = Console(record=True, width=100)
    print_pack(results["bestfit"], console)
    text = console.export_text()
    assert "Unallocated GPU at 100 % arrived: 7.06 %" in text


def test_workload_shuffles_originals_then_appends_resampled_pods() -> None:
    pods = read_pods(PODS)
    w = build_workload(read_nodes(NODES), pods, GoRand(42), 1.3)
    assert len(w.nodes) == 1213 and sorted(w.ranks) == list(range(1213))
    assert len(w.pods) == 10866
    assert sorted(w.pods[:8152], key=repr) == sorted(w.originals, key=repr)  # every original, once, first
    demand = sum(p.total_gpu_milli for p in w.pods)
    assert 1.3 * 6_212_000 - 1000 < demand <= 1.3 * 6_212_000 + 7000
    again = build_workload(read_nodes(NODES), pods, GoRand(42), 1.3)
    assert again == w  # same seed, same workload and ranks (for every policy)


def test_unknown_policy_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown policy 'worstfit'"):
        run_pack(NODES, PODS, "worstfit", 42)


def test_tuning_down_removes_pods_until_the_target() -> None:
    w = build_workload(read_nodes(NODES), read_pods(PODS), GoRand(1), 0.5)
    assert sum(p.total_gpu_milli for p in w.pods) <= 0.5 * 6_212_000


def test_points_average_the_samples_in_each_rounded_percent_and_fall_back_to_neighbours() -> None:
    # 10 GPUs: arrived 20 / 40 / 60 / 300 milli → 0.2 / 0.4 / 0.6 / 3.0 % → buckets 0, 0, 1, 3
    trace = PackTrace(node=np.zeros(4, dtype=np.int64), arrived_milli=np.array([20, 40, 60, 300]),
                      allocated_milli=np.array([10, 20, 30, 40]), frag_milli=np.array([100.0, 200.0, 300.0, 400.0]),
                      idle_milli=np.array([1000.0, 1000.0, 1000.0, 1000.0]), total_gpu_milli=10_000)
    points = {p.arrived_pct: p for p in sample_points(trace, 10)}
    assert sorted(points) == [0, 1, 2, 3, 4]
    assert points[0].allocated_pct == 0.15 and points[0].frag_ratio_pct == 15.0
    assert points[2].allocated_pct == pytest.approx((0.3 + 0.4) / 2)  # no sample at 2 %: 1 % and 3 % stand in
    assert points[4].allocated_pct == 0.4
