"""The one rule for per-pool options: the pool's own value, else (GPU nodes) the policy's GPU-specific value if set,
else the policy's general value."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.engine import options
from gpuscale.engine.policy import Policy
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources

POOL = NodePool(name="p", allocatable=Resources.of({"cpu": 8000, "memory": 2**34}))


@pytest.mark.parametrize(("own", "gpu", "gpu_specific", "expected"), [
    (5.0, True, 7.0, 5.0),       # the pool's own value wins, for GPU nodes too
    (None, True, 7.0, 7.0),      # a GPU node: the GPU-specific value
    (None, False, 7.0, 9.0),     # not a GPU node: the general value
    (None, True, None, 9.0),     # no GPU-specific value: the general one, GPU nodes too
    (0.0, True, 7.0, 0.0),       # 0 is a value, not "unset"
])
def test_resolve(own: float | None, gpu: bool, gpu_specific: float | None, expected: float) -> None:
    assert options.resolve(own, 9.0, gpu=gpu, gpu_specific=gpu_specific) == expected


def test_unneeded_time_for_gpu_and_other_pools() -> None:
    policy = Policy(scale_down_unneeded_time_s=600, scale_down_gpu_unneeded_time_s=420)
    assert options.unneeded_time_s(POOL, policy, gpu=True) == 420
    assert options.unneeded_time_s(POOL, policy, gpu=False) == 600
    assert options.unneeded_time_s(POOL, replace(policy, scale_down_gpu_unneeded_time_s=None), gpu=True) == 600
    assert options.unneeded_time_s(replace(POOL, scale_down_unneeded_time_s=60), policy, gpu=True) == 60


def test_new_pod_delay_falls_back_to_the_general_delay() -> None:
    assert options.new_pod_delay_s(Policy(new_pod_delay_s=2, new_gpu_pod_delay_s=10), gpu=True) == 10
    assert options.new_pod_delay_s(Policy(new_pod_delay_s=2, new_gpu_pod_delay_s=10), gpu=False) == 2
    assert options.new_pod_delay_s(Policy(new_pod_delay_s=5, new_gpu_pod_delay_s=None), gpu=True) == 5


def test_startup_time_is_the_pools_then_the_policys_then_the_provisioning_time() -> None:
    policy = Policy(max_node_provision_time_s=900)
    slow = replace(POOL, max_node_provision_time_s=1200)
    assert options.startup_time_s(slow, policy) == 1200  # unset everywhere: this pool's provisioning time
    assert options.startup_time_s(slow, replace(policy, max_node_startup_time_s=300)) == 300
    assert options.startup_time_s(replace(slow, max_node_startup_time_s=60), replace(
        policy, max_node_startup_time_s=300)) == 60
    assert options.provision_time_s(None, policy) == 900 and options.provision_time_s(slow, policy) == 1200


def test_utilization_threshold_gpu_nodes_read_the_gpu_options_only() -> None:
    policy = Policy(scale_down_utilization_threshold=0.5, scale_down_gpu_utilization_threshold=0.3)
    tuned = replace(POOL, scale_down_utilization_threshold=0.9)
    assert options.utilization_threshold(tuned, policy, gpu=False) == 0.9
    assert options.utilization_threshold(tuned, policy, gpu=True) == 0.3  # the pool's CPU threshold is not read
    assert options.utilization_threshold(replace(tuned, scale_down_gpu_utilization_threshold=0.6), policy,
                                         gpu=True) == 0.6


def test_ignore_daemonsets_and_unready_time() -> None:
    policy = Policy(ignore_daemonsets_utilization=True, scale_down_unready_time_s=1200)
    assert options.ignores_daemonsets(POOL, policy) is True
    assert options.ignores_daemonsets(replace(POOL, ignore_daemonsets_utilization=False), policy) is False
    assert options.unready_time_s(POOL, policy) == 1200
    assert options.unready_time_s(replace(POOL, scale_down_unready_time_s=30), policy) == 30
