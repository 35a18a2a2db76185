"""Cluster Autoscaler's options mean what they mean in CA: set alone, `scale_down_unneeded_time` and
`new_pod_scale_up_delay` apply to GPU nodes and pods too; the GPU-specific defaults only fill in when the user set
neither. `gpu_total` also takes CA's `--gpu-total` form, `TYPE:MIN:MAX`, with a GPU resource for all GPUs together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.config import parse_config
from gpuscale.engine.options import new_pod_delay_s, unneeded_time_s
from gpuscale.engine.policy import Limits, Policy
from gpuscale.model.errors import ConfigError
from tests.engine.test_scaledown import NOW, busy, node, pools_for, removed, run

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "seed-pools"
POOLS: list[dict[str, Any]] = yaml.safe_load((EXAMPLES / "pools.yaml").read_text())["pools"]


def policy(**options: Any) -> Policy:
    return parse_config({"pools": POOLS, **options}, "gpuscale.yaml").policy


def limits(**options: Any) -> Limits:
    return policy(**options).limits


@pytest.mark.parametrize(("options", "gpu_unneeded", "cpu_unneeded"), [
    ({}, 420, 600),                                                              # neither: gpuscale's GPU default
    ({"scale_down_unneeded_time": "20m"}, 1200, 1200),                           # CA's flag alone: every node
    ({"scale_down_unneeded_time": "20m", "scale_down_gpu_unneeded_time": "5m"}, 300, 1200),
    ({"scale_down_gpu_unneeded_time": "5m"}, 300, 600),
    ({"preset": "ca-defaults", "scale_down_unneeded_time": "3m"}, 180, 180),
])
def test_unneeded_time(options: dict[str, Any], gpu_unneeded: float, cpu_unneeded: float) -> None:
    pool = parse_config({"pools": POOLS}, "x").pools[0]
    chosen = policy(**options)
    assert (unneeded_time_s(pool, chosen, gpu=True), unneeded_time_s(pool, chosen, gpu=False)) == (
        gpu_unneeded, cpu_unneeded)


@pytest.mark.parametrize(("options", "gpu_delay", "delay"), [
    ({}, 0, 0),
    ({"new_pod_scale_up_delay": "0s"}, 0, 0),
    ({"new_pod_scale_up_delay": "30s", "new_gpu_pod_scale_up_delay": "1m"}, 60, 30),
    ({"new_gpu_pod_scale_up_delay": "10s"}, 10, 0),
    ({"preset": "ca-defaults"}, 30, 2),
    ({"preset": "ca-defaults", "new_pod_scale_up_delay": "5s"}, 5, 5),
])
def test_new_pod_delay(options: dict[str, Any], gpu_delay: float, delay: float) -> None:
    chosen = policy(**options)
    assert (new_pod_delay_s(chosen, gpu=True), new_pod_delay_s(chosen, gpu=False)) == (gpu_delay, delay)


@pytest.mark.parametrize(("options", "idle", "most"), [
    ({}, 3, 10),
    ({"batch_idle_duration": "2s", "batch_max_duration": "30s"}, 2, 30),
    ({"batch_idle_duration": "0s"}, 0, 10),
    ({"preset": "ca-defaults"}, 0, 10),
    ({"preset": "ca-defaults", "batch_idle_duration": "1s"}, 1, 10),
])
def test_batch_window(options: dict[str, Any], idle: float, most: float) -> None:
    """Karpenter's names; CA has no window (the preset turns it off, naming it turns it on again)."""
    chosen = policy(**options)
    assert (chosen.batch_idle_s, chosen.batch_max_s) == (idle, most)


def test_the_unneeded_clock_restart_is_gpuscales() -> None:
    assert policy().unneeded_restarts_on_pod_start and not policy(preset="ca-defaults").unneeded_restarts_on_pod_start
    assert policy(preset="ca-defaults", unneeded_restarts_on_pod_start=True).unneeded_restarts_on_pod_start


def test_the_general_unneeded_time_keeps_an_idle_gpu_node_as_long_as_any_other() -> None:
    """The decision, not only the policy: an empty GPU node unneeded for 10 minutes goes under gpuscale's 7-minute
    GPU default, but stays when the user set `scale_down_unneeded_time: 20m` alone, as it would in CA."""
    nodes = [node("g", gpus=1, pool="gpu"), node("b")]
    since = {"g": NOW - 600}
    assert removed(run(nodes, [busy("z", "b")], pools=pools_for(nodes), unneeded_since=since,
                       policy=policy())) == ["g"]
    result = run(nodes, [busy("z", "b")], pools=pools_for(nodes), unneeded_since=since,
                 policy=policy(scale_down_unneeded_time="20m"))
    assert removed(result) == []
    assert {v.node: v.reasons[0].numbers["required_s"] for v in result.unneeded}["g"] == 1200


# --- gpu_total in CA's form


def test_gpu_total_in_cas_form_per_type_and_for_all_gpus() -> None:
    assert limits(gpu_total="nvidia-tesla-t4:0:20").max_gpus_by_model == {"Tesla-T4": 20}  # the model it names
    both = limits(gpu_total=["nvidia-tesla-a100:0:64", "nvidia.com/gpu:0:80"])
    assert both.max_gpus_by_model == {"NVIDIA-A100-SXM4-40GB": 64} and both.max_gpus_total == 80
    assert limits(gpu_total="nvidia.com/gpu:48").max_gpus_total == 48
    assert limits(gpu_total={"nvidia.com/gpu": "0:32"}).max_gpus_total == 32  # the mapping form takes it too
    assert limits().max_gpus_total is None


def test_the_seed_configs_alternative_form_is_valid() -> None:
    raw = yaml.safe_load((EXAMPLES / "gpuscale.yaml").read_text())
    assert parse_config({**raw, "gpu_total": ["nvidia-tesla-a100:0:64", "nvidia.com/gpu:0:84"]}, "x").policy.limits \
        .max_gpus_total == 84


@pytest.mark.parametrize(("value", "expected"), [
    ("nvidia.com/gpu", "gpu_total: expected TYPE:MIN:MAX or TYPE:MAX (CA's --gpu-total), got 'nvidia.com/gpu'"),
    ("", "gpu_total: expected TYPE:MIN:MAX"),
    (["nvidia.com/gpu:0:8", "nvidia.com/gpu:0:9"], "gpu_total[1]: nvidia.com/gpu is limited twice"),
    (["nvidia.com/gpu:2:8"], "gpu_total[0]: a minimum is not supported"),
    (["nvidia.com/gpu:0:x"], "gpu_total[0]: expected MAX or MIN:MAX"),
    ("amd.com/gpu:0:8", "gpu_total: pools gpu-inference-t4, gpu-training-a100 advertise other GPU resources than "
                        "amd.com/gpu: limit them by GPU type instead"),
    ("nvidia-h100-80gb:0:8", "gpu_total: no pool has GPU type 'nvidia-h100-80gb'"),
])
def test_bad_gpu_total_is_one_line_naming_the_entry(value: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        policy(gpu_total=value)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_limit_on_all_gpus_caps_scale_up_across_models() -> None:
    from gpuscale.engine.limits import Totals, headroom

    pools = {p.name: p for p in parse_config({"pools": POOLS}, "x").pools}
    a100, t4 = pools["gpu-training-a100"], pools["gpu-inference-t4"]
    capped = Limits(max_gpus_total=20)
    have = Totals().add(t4, 4)  # 4 T4 GPUs in use
    room = headroom(a100, have, capped, 1000)
    assert (room.nodes, room.binding) == (2, "gpu_total 20 (all GPU models)")  # 16 of 20 left: two 8-GPU nodes
    assert headroom(t4, have.add(a100, 2), capped, 1000).nodes == 0
