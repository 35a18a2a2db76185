"""A pool's own scale-down options reach the twin through the scenario's config (the same pools section the controller
reads), so their cost can be compared before production: keeping the T4 inference pool's idle nodes for an hour instead
of the policy's minutes removes fewer nodes and leaves more idle T4 GPU-hours, at a higher T4 bill."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpuscale.report.twin import result_json
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named

T4 = "gpu-inference-t4"


def _default(**t4_options: Any) -> dict[str, Any]:
    raw = yaml.safe_load(resources.files("gpuscale.data").joinpath("scenarios", "default.yaml").read_text())
    raw["config"]["pools"] = [{**p, **t4_options} if p["name"] == T4 else p for p in raw["config"]["pools"]]
    return dict(raw)


def _run(raw: dict[str, Any]) -> dict[str, Any]:
    setup, config = parse_scenario(raw, "default.yaml")
    return result_json(simulate(setup, policy_named("gpuscale", config)), include_wall=False)


def test_a_pool_unneeded_time_in_the_scenario_keeps_that_pool_longer() -> None:
    base = _run(_default())
    kept = _run(_default(scale_down_unneeded_time="1h"))
    t4_base, t4_kept = base["gpu_hours"]["by_pool"][T4], kept["gpu_hours"]["by_pool"][T4]
    assert t4_kept["idle"] > t4_base["idle"], (t4_base, t4_kept)
    assert kept["cost_by_pool"][T4] > base["cost_by_pool"][T4]
    assert kept["scale_downs"] < base["scale_downs"]
