"""The configuration file: pools, the autoscaling options mapped onto `Policy`, durations, and one-line errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.config import _POLICY_NAMES, ConfigFile, load_config, parse_config, parse_duration
from gpuscale.engine.policy import Buffer, ExpanderName, Policy, PriorityRule
from gpuscale.model.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "seed-pools"
POOLS: list[dict[str, Any]] = yaml.safe_load((EXAMPLES / "pools.yaml").read_text())["pools"]


def parse(**options: Any) -> Any:
    return parse_config({"pools": POOLS, **options}, "gpuscale.yaml")


def error_of(**options: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(**options)
    text = str(caught.value)
    assert "\n" not in text
    return text


# --- the example files


def test_pools_only_file_keeps_the_policy_defaults() -> None:
    config = load_config(EXAMPLES / "pools.yaml")
    assert [p.name for p in config.pools] == ["cpu-general", "gpu-training-a100", "gpu-inference-t4"]
    assert config.policy == Policy()
    assert (config.scan_interval_s, config.max_graceful_termination_s) == (10.0, 600.0)


def test_example_config_loads() -> None:
    config = load_config(EXAMPLES / "gpuscale.yaml")
    assert {p.name for p in config.pools} == {"cpu-general", "gpu-training-a100", "gpu-inference-t4"}
    assert config.policy.buffers and config.policy.limits.max_gpus_by_model


# --- durations


@pytest.mark.parametrize(("text", "seconds"), [
    ("10m", 600), ("30s", 30), ("1h30m", 5400), ("1.5h", 5400), ("2m30s", 150), ("300ms", 0.3), ("0", 0),
    (600, 600), (2.5, 2.5), ("600", 600), (" 10m ", 600), ("1h0m0s", 3600),
])
def test_durations_go_style_or_seconds(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["1d", "-1s", "", "ten minutes", "1h 30m", "m", True, None, float("nan"), -5])
def test_bad_durations(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# --- mapping onto Policy


def test_every_option_reaches_the_policy() -> None:
    config = parse(
        new_pod_scale_up_delay="5s", new_gpu_pod_scale_up_delay="30s", expendable_pods_priority_cutoff=-5,
        expander=["priority", "least-waste", "price"], priorities={10: ["gpu-.*"], 50: ["cpu-.*"]},
        expander_random_seed=7, least_waste_counts_gpus=False, max_nodes_per_scale_up=100,
        max_node_provision_time="20m", max_gpu_init_time="12m", initial_node_group_backoff_duration="1m",
        max_node_group_backoff_duration="1h", node_group_backoff_reset_timeout="6h",
        scale_down_enabled=False, scale_down_utilization_threshold=0.6, scale_down_gpu_utilization_threshold=0.3,
        scale_down_unneeded_time="15m", scale_down_unready_time="30m", scale_down_delay_after_add="5m",
        scale_down_delay_after_delete="10s", scale_down_delay_after_failure="1m", max_empty_bulk_delete=5,
        unremovable_node_recheck_timeout="2m",
        max_drain_parallelism=2, max_total_unready_percentage=30, ok_total_unready_count=5,
        skip_nodes_with_system_pods=False, skip_nodes_with_local_storage=False, protect_gpu_jobs=False,
        max_nodes_total=100, cores_total=2000, memory_total="8Ti", gpu_total={"nvidia-tesla-a100": 64},
        max_usd_per_hour=500, warm_capacity=[{"pool": "gpu-inference-t4", "idle_nodes": 1, "free_gpus": 2,
                                              "free_gpus_ratio": 0.05}],
        scan_interval="15s", max_graceful_termination_sec="5m",
    )
    p = config.policy
    assert (p.new_pod_delay_s, p.new_gpu_pod_delay_s, p.expendable_priority_cutoff) == (5, 30, -5)
    assert p.expanders == (ExpanderName.PRIORITY, ExpanderName.LEAST_WASTE, ExpanderName.PRICE)
    assert p.priorities == (PriorityRule(priority=50, patterns=("cpu-.*",)),
                            PriorityRule(priority=10, patterns=("gpu-.*",)))
    assert (p.random_seed, p.least_waste_counts_gpus, p.max_nodes_per_scale_up) == (7, False, 100)
    assert (p.max_node_provision_time_s, p.max_gpu_init_time_s) == (1200, 720)
    assert (p.backoff_initial_s, p.backoff_max_s, p.backoff_reset_s) == (60, 3600, 21600)
    assert (p.scale_down_enabled, p.scale_down_utilization_threshold, p.scale_down_gpu_utilization_threshold) == (
        False, 0.6, 0.3)
    assert (p.scale_down_unneeded_time_s, p.scale_down_unready_time_s) == (900, 1800)
    assert (p.scale_down_delay_after_add_s, p.scale_down_delay_after_delete_s,
            p.scale_down_delay_after_failure_s) == (300, 10, 60)
    assert p.unremovable_node_recheck_timeout_s == 120
    assert (p.max_empty_bulk_delete, p.max_drain_parallelism) == (5, 2)
    assert (p.max_total_unready_percentage, p.ok_total_unready_count) == (30, 5)
    assert (p.skip_nodes_with_system_pods, p.skip_nodes_with_local_storage, p.protect_gpu_jobs) == (False,) * 3
    assert p.limits.max_nodes_total == 100 and p.limits.max_cores_total == 2000
    assert p.limits.max_memory_bytes_total == 8 * 2**40
    assert p.limits.max_gpus_by_model == {"NVIDIA-A100-SXM4-40GB": 64}
    assert p.limits.max_usd_per_hour == 500
    assert p.buffers == (Buffer(pool="gpu-inference-t4", idle_nodes=1, free_gpus=2, free_gpus_ratio=0.05),)
    assert (config.scan_interval_s, config.max_graceful_termination_s) == (15, 300)


def test_every_policy_field_has_an_option() -> None:
    """A Policy field added to the engine without a config option fails here."""
    built_separately = {"expanders", "priorities", "limits", "buffers", "startup_taints"}
    assert {f.name for f in dataclasses.fields(Policy)} == set(_POLICY_NAMES.values()) | built_separately
    assert set(_POLICY_NAMES) <= set(ConfigFile.model_fields)


def test_ca_spellings() -> None:
    p = parse(expander="priority,least-waste", priorities={"10": [".*"]}, cores_total="0:320",
              memory_total=1024, gpu_total={"NVIDIA-A100-SXM4-40GB": "0:16"}, max_nodes_total=0).policy
    assert p.expanders == (ExpanderName.PRIORITY, ExpanderName.LEAST_WASTE)
    assert p.limits.max_cores_total == 320 and p.limits.max_memory_bytes_total == 1024 * 2**30
    assert p.limits.max_gpus_by_model == {"NVIDIA-A100-SXM4-40GB": 16}
    assert p.limits.max_nodes_total is None  # 0 is "no limit", as for CA


def test_ca_defaults_preset_and_overrides() -> None:
    p = parse(preset="ca-defaults").policy
    assert (p.least_waste_counts_gpus, p.new_gpu_pod_delay_s, p.protect_gpu_jobs) == (False, 30, False)
    assert parse(preset="ca-defaults", protect_gpu_jobs=True).policy.protect_gpu_jobs


def test_per_pool_provision_time() -> None:
    pools = [{**POOLS[1], "max_node_provision_time": "25m"}, POOLS[0]]
    config = parse_config({"pools": pools})
    assert config.pools[0].max_node_provision_time_s == 1500 and config.pools[1].max_node_provision_time_s is None


def test_per_pool_scale_down_options() -> None:
    pools = [{**POOLS[1], "scale_down_utilization_threshold": 0.2, "scale_down_gpu_utilization_threshold": 0.7,
              "scale_down_unneeded_time": "1h", "scale_down_unready_time": "90s"}, POOLS[0]]
    config = parse_config({"pools": pools})
    tuned, plain = config.pools
    assert (tuned.scale_down_utilization_threshold, tuned.scale_down_gpu_utilization_threshold,
            tuned.scale_down_unneeded_time_s, tuned.scale_down_unready_time_s) == (0.2, 0.7, 3600, 90)
    assert (plain.scale_down_utilization_threshold, plain.scale_down_gpu_utilization_threshold,
            plain.scale_down_unneeded_time_s, plain.scale_down_unready_time_s) == (None, None, None, None)
    assert parse_config({"pools": pools, "ignore_daemonsets_utilization": True}).policy.ignore_daemonsets_utilization
    assert not config.policy.ignore_daemonsets_utilization  # CA's default: DaemonSet pods count
    lean = parse_config({"pools": [{**POOLS[0], "ignore_daemonsets_utilization": False}]}).pools[0]
    assert lean.ignore_daemonsets_utilization is False and tuned.ignore_daemonsets_utilization is None
    for key, value, expected in (("scale_down_utilization_threshold", 1.5, "less than or equal to 1"),
                                 ("scale_down_gpu_utilization_threshold", -0.1, "greater than or equal to 0"),
                                 ("scale_down_unneeded_time", "later", "expected a duration")):
        with pytest.raises(ConfigError, match=rf"pools\[0\]\.{key}: .*{expected}"):
            parse_config({"pools": [{**POOLS[0], key: value}]})


def test_startup_time_for_the_policy_and_a_pool() -> None:
    config = parse_config({"pools": [{**POOLS[1], "max_node_startup_time": "20m"}, POOLS[0]],
                           "max_node_startup_time": "5m"})
    assert config.policy.max_node_startup_time_s == 300
    assert [p.max_node_startup_time_s for p in config.pools] == [1200, None]
    assert parse_config({"pools": POOLS}).policy.max_node_startup_time_s is None


def test_scale_down_turned_off_for_one_pool() -> None:
    kept, plain = parse_config({"pools": [{**POOLS[1], "scale_down_enabled": False}, POOLS[0]]}).pools
    assert kept.scale_down_disabled == "scale-down is turned off for it in the configuration"
    assert plain.scale_down_disabled is None


def test_a_zero_or_max_pool() -> None:
    whole = parse_config({"pools": [{**POOLS[1], "zero_or_max_scaling": True}, POOLS[0]]}).pools
    assert whole[0].zero_or_max and not whole[1].zero_or_max
    with pytest.raises(ConfigError, match=r"pools\[0\]\.zero_or_max_scaling: "):
        parse_config({"pools": [{**POOLS[0], "zero_or_max_scaling": "sometimes"}]})


# --- errors: one line naming the setting


@pytest.mark.parametrize(("options", "expected"), [
    ({"scan_intervall": "10s"}, "gpuscale.yaml: scan_intervall: unknown setting (did you mean scan_interval?)"),
    ({"scale_down_utilization_threshold": 1.5}, "gpuscale.yaml: scale_down_utilization_threshold: "),
    ({"scale_down_gpu_utilization_threshold": -0.1}, "scale_down_gpu_utilization_threshold: "),
    ({"scale_down_unneeded_time": "10 minutes"}, "scale_down_unneeded_time: expected a duration"),
    ({"scale_down_delay_after_add": "-5m"}, "scale_down_delay_after_add: must be a finite duration"),
    ({"scan_interval": 0}, "scan_interval: "),
    ({"priorities": {10: ["gpu-("]}}, "priorities.10[0]: bad regex 'gpu-('"),
    ({"priorities": {10: []}}, "priorities.10: give at least one"),
    ({"expander": "priority"}, "expander: the priority expander needs `priorities`"),
    ({"expander": ["least-waste", "cheapest"]}, "expander[1]: unknown expander 'cheapest'"),
    ({"expander": "price,price"}, "expander: expander 'price' is listed twice"),
    ({"cores_total": "400:320"}, "cores_total: minimum 400 is above maximum 320"),
    ({"cores_total": "8:320"}, "cores_total: a minimum is not supported"),
    ({"cores_total": "lots"}, "cores_total: expected MAX or MIN:MAX"),
    ({"memory_total": "4Tb"}, "memory_total: expected MAX or MIN:MAX"),
    ({"gpu_total": {"nvidia-h100-80gb": 8}}, "gpu_total.nvidia-h100-80gb: no pool has GPU type 'nvidia-h100-80gb'"),
    ({"warm_capacity": [{"pool": "gpu-h100", "idle_nodes": 1}]}, "warm_capacity[0].pool: no pool named 'gpu-h100'"),
    ({"warm_capacity": [{"pool": "cpu-general"}]}, "warm_capacity[0]: give idle_nodes, free_gpus or free_gpus_ratio"),
    ({"warm_capacity": [{"pool": "gpu-inference-t4", "free_gpus_ratio": 1.5}]},
     "warm_capacity[0].free_gpus_ratio: Input should be less than or equal to 1"),
    ({"warm_capacity": [{"pool": "gpu-inference-t4", "free_gpus_ratio": -0.05}]},
     "warm_capacity[0].free_gpus_ratio: Input should be greater than or equal to 0"),
    ({"warm_capacity": [{"pool": "gpu-inference-t4", "free_gpus_ratio": "some"}]},
     "warm_capacity[0].free_gpus_ratio: expected a number, got 'some'"),
    ({"warm_capacity": [{"pool": "cpu-general", "free_gpus_ratio": 0.1}]},
     "warm_capacity[0].free_gpus_ratio: pool 'cpu-general' has no GPUs"),
    ({"warm_capacity": [{"pool": "cpu-general", "free_gpus": 1}]}, "warm_capacity[0].free_gpus: pool 'cpu-general'"),
    ({"warm_capacity": [{"pool": "gpu-training-a100", "idle_nodes": 9}]}, "warm_capacity[0].idle_nodes: 9 idle"),
    ({"warm_capacity": [{"pool": "gpu-inference-t4", "idle_nodes": 1, "spare": 2}]},
     "warm_capacity[0].spare: unknown setting"),
    ({"initial_node_group_backoff_duration": "1h"}, "initial_node_group_backoff_duration: 3600s is above"),
    ({"max_drain_parallelism": 0}, "max_drain_parallelism: "),
    ({"max_total_unready_percentage": 120}, "max_total_unready_percentage: "),
    ({"scale_down_enabled": "perhaps"}, "scale_down_enabled: expected true or false, got 'perhaps'"),
    ({"preset": "karpenter"}, "preset: "),
])
def test_impossible_settings_are_one_line_errors(options: dict[str, Any], expected: str) -> None:
    assert expected in error_of(**options)


def test_pool_errors_name_the_pool_setting() -> None:
    bad = [{**POOLS[0], "min_size": 5, "max_size": 2}]
    with pytest.raises(ConfigError, match=r"^config: pools\[0\]: .*min_size 5 is above max_size 2"):
        parse_config({"pools": bad})
    bad = [{**POOLS[0], "max_node_provision_time": "soon"}]
    with pytest.raises(ConfigError, match=r"pools\[0\]\.max_node_provision_time: expected a duration"):
        parse_config({"pools": bad})


def test_file_errors(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("pools:\n  - name: x\n   bad: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: line \d+ column \d+: bad YAML"):
        load_config(bad_yaml)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load_config(listing)
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        load_config(tmp_path / "missing.yaml")


# --- GPU sharing (docs/gpu-sharing.md)


def _gpu_pool(gpu: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "gpu", "allocatable": {"cpu": "95", "memory": "1Ti"}, "gpu": gpu, **extra}


def test_pools_without_sharing_are_unchanged() -> None:
    pool = parse().pools[1]
    assert pool.allocatable.get("nvidia.com/gpu") == 8
    assert {k: v for k, v in pool.labels.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8"}


def test_mig_pool_offers_mig_devices_and_carries_the_operator_labels() -> None:
    gpu = {"model": "NVIDIA-A100-SXM4-80GB", "count": 8,
           "sharing": {"mode": "mig", "strategy": "mixed", "layout": "all-balanced"}}
    pool = parse_config({"pools": [_gpu_pool(gpu)]}).pools[0]
    assert {n: a for n, a in pool.allocatable.items if n.startswith("nvidia.com/")} == {
        "nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}
    assert (pool.gpu_model, pool.gpus_per_node) == ("NVIDIA-A100-SXM4-80GB", 8)
    assert pool.labels["nvidia.com/mig.config"] == "all-balanced"
    assert pool.labels["nvidia.com/mig.strategy"] == "mixed"


def test_a100_40gb_all_1g_10gb_is_four_per_gpu() -> None:
    gpu = {"model": "NVIDIA-A100-SXM4-40GB", "count": 8,
           "sharing": {"mode": "mig", "strategy": "mixed", "layout": "all-1g.10gb"}}
    assert parse_config({"pools": [_gpu_pool(gpu)]}).pools[0].allocatable.get("nvidia.com/mig-1g.10gb") == 32


def test_mig_strategy_defaults_to_single_as_the_gpu_operator() -> None:
    gpu = {"model": "NVIDIA-H100-80GB-HBM3", "count": 8, "sharing": {"mode": "mig", "layout": "all-3g.40gb"}}
    pool = parse_config({"pools": [_gpu_pool(gpu)]}).pools[0]
    assert pool.allocatable.get("nvidia.com/gpu") == 16
    assert pool.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"
    assert pool.labels["nvidia.com/mig.strategy"] == "single"


def test_time_sliced_pool_and_matching_allocatable() -> None:
    gpu = {"model": "Tesla-T4", "count": 1, "sharing": {"mode": "time-slicing", "replicas": 4}}
    pool = _gpu_pool(gpu, allocatable={"cpu": "4", "memory": "12Gi", "nvidia.com/gpu": 4})
    parsed = parse_config({"pools": [pool]}).pools[0]
    assert parsed.allocatable.get("nvidia.com/gpu") == 4
    assert parsed.labels["nvidia.com/gpu.replicas"] == "4"
    assert parsed.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert parsed.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"


def test_user_labels_win_over_operator_labels() -> None:
    gpu = {"model": "Tesla-T4", "count": 1, "sharing": {"mode": "mps", "replicas": 8}}
    pool = parse_config({"pools": [_gpu_pool(gpu, labels={"nvidia.com/gpu.product": "T4"})]}).pools[0]
    assert pool.labels["nvidia.com/gpu.product"] == "T4"
    assert pool.labels["nvidia.com/gpu.sharing-strategy"] == "mps"


@pytest.mark.parametrize(("gpu", "allocatable", "expected"), [
    ({"model": "NVIDIA-A100-SXM4-40GB", "count": 8, "sharing": {"mode": "mig", "layout": "all-2g.20gb"}}, None,
     "pools[2].gpu.sharing.layout: unknown MIG layout 'all-2g.20gb' for A100-40GB"),
    ({"model": "NVIDIA-A100-SXM4-40GB", "count": 8, "sharing": {"mode": "mig"}}, None,
     "pools[2].gpu.sharing.layout: MIG needs a layout"),
    ({"model": "NVIDIA-A100-SXM4-40GB", "count": 8, "sharing": {"mode": "mig", "layout": "all-balanced"}}, None,
     "pools[2].gpu.sharing.strategy: strategy single needs a one-profile layout"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "mig", "layout": "all-1g.5gb"}}, None,
     "pools[2].gpu.model: no MIG profile table for GPU 'Tesla-T4'"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "time-slicing"}}, None,
     "pools[2].gpu.sharing.replicas: time-slicing needs replicas: 2 or more"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "time-slicing", "replicas": 4, "strategy": "mixed"}},
     None, "pools[2].gpu.sharing.strategy: applies to mode mig, not time-slicing"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "time-slicing", "replicas": 4, "layout": "all-1g.5gb"}},
     None, "pools[2].gpu.sharing.layout: applies to mode mig, not time-slicing"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "timeslicing", "replicas": 4}}, None,
     "pools[2].gpu.sharing.mode: Input should be 'none', 'time-slicing', 'mps' or 'mig'"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "mps", "replica": 4}}, None,
     "pools[2].gpu.sharing.replica: unknown setting (did you mean replicas?)"),
    ({"model": "Tesla-T4", "count": 1, "sharing": {"mode": "time-slicing", "replicas": 4}},
     {"cpu": "4", "memory": "12Gi", "nvidia.com/gpu": 1},
     "pools[2].allocatable.nvidia.com/gpu: 1 disagrees with gpu.sharing, which offers nvidia.com/gpu: 4"),
    ({"model": "NVIDIA-A100-SXM4-80GB", "count": 8, "sharing": {"mode": "mig", "layout": "all-1g.10gb",
                                                                "strategy": "mixed"}},
     {"cpu": "95", "memory": "1Ti", "nvidia.com/gpu": 8},
     "pools[2].allocatable.nvidia.com/gpu: 8 disagrees with gpu.sharing, which offers nvidia.com/mig-1g.10gb: 56"),
])
def test_sharing_errors_name_the_setting(gpu: dict[str, Any], allocatable: dict[str, Any] | None,
                                         expected: str) -> None:
    pool = _gpu_pool(gpu, **({"allocatable": allocatable} if allocatable else {}))
    with pytest.raises(ConfigError) as caught:
        parse_config({"pools": [*POOLS[:2], pool]}, "gpuscale.yaml")
    assert str(caught.value).startswith(f"gpuscale.yaml: {expected}")


def test_balance_similar_node_groups_is_cas_flag_off_by_default() -> None:
    assert parse().policy.balance_similar_node_groups is False
    assert parse(balance_similar_node_groups=True).policy.balance_similar_node_groups is True
    assert "balance_similar_node_groups" in error_of(balance_similar_node_groups="sometimes")
