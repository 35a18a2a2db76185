"""`scale_down_lost_gpu_minutes_per_hour` (D38): the policy's and a pool's own reach the engine, negative is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.config import parse_config
from gpuscale.engine.options import lost_work_budget
from gpuscale.model.errors import ConfigError

POOLS: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "examples" / "seed-pools" / "pools.yaml").read_text())["pools"]


def test_the_budget_reaches_the_policy_and_a_pool_overrides_it() -> None:
    pools = [{**p, "scale_down_lost_gpu_minutes_per_hour": 5} if p["name"] == "gpu-training-a100" else p for p in POOLS]
    config = parse_config({"pools": pools, "scale_down_lost_gpu_minutes_per_hour": 12}, "gpuscale.yaml")
    by_name = {p.name: p for p in config.pools}
    assert lost_work_budget(by_name["gpu-training-a100"], config.policy) == 5
    assert lost_work_budget(by_name["gpu-inference-t4"], config.policy) == 12
    default = parse_config({"pools": POOLS}, "gpuscale.yaml")
    assert default.policy.scale_down_lost_gpu_minutes_per_hour == 30


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"pools": POOLS, "scale_down_lost_gpu_minutes_per_hour": -1}, "gpuscale.yaml")
    assert "scale_down_lost_gpu_minutes_per_hour" in str(caught.value)
