"""Per-pool options: the one rule for every option a pool may set, read wherever the engine reads such an option.

The rule is Cluster Autoscaler's for its per-node-group options, with gpuscale's GPU-specific options slotted in:
**the pool's own value; else, for a GPU node, the policy's GPU-specific value if it has one; else the policy's
general value.** A GPU-specific value of `None` means "not set": the general value applies to GPU nodes too. The
configuration sets it to `None` when the user sets the general option but not the GPU one, so an option keeps the
meaning it has in CA (docs/config.md, "Options CA has and gpuscale's GPU-specific ones"); the engine never needs to
know what the user wrote.

Pure: values in, a number or flag out.
"""

from __future__ import annotations

from typing import TypeVar

from gpuscale.engine.policy import Policy
from gpuscale.model.pool import NodePool

T = TypeVar("T")


def resolve(own: T | None, general: T, *, gpu: bool = False, gpu_specific: T | None = None) -> T:
    """`own` if set; else `gpu_specific` if `gpu` and it is set; else `general`."""
    if own is not None:
        return own
    if gpu and gpu_specific is not None:
        return gpu_specific
    return general


def provision_time_s(pool: NodePool | None, policy: Policy) -> float:
    """How long a requested node may take to register and become Ready (CA's `--max-node-provision-time`)."""
    return resolve(pool.max_node_provision_time_s if pool is not None else None, policy.max_node_provision_time_s)


def startup_time_s(pool: NodePool | None, policy: Policy) -> float:
    """How long a registered node may stay not Ready (CA's `--max-node-startup-time`); unset everywhere, the pool's
    provisioning time."""
    general = policy.max_node_startup_time_s
    return resolve(pool.max_node_startup_time_s if pool is not None else None,
                   provision_time_s(pool, policy) if general is None else general)


def unneeded_time_s(pool: NodePool, policy: Policy, *, gpu: bool) -> float:
    """How long a Ready node must stay unneeded before it goes (`scale_down_unneeded_time`; GPU pools:
    `scale_down_gpu_unneeded_time` when set)."""
    return resolve(pool.scale_down_unneeded_time_s, policy.scale_down_unneeded_time_s, gpu=gpu,
                   gpu_specific=policy.scale_down_gpu_unneeded_time_s)


def unready_time_s(pool: NodePool, policy: Policy) -> float:
    """How long a not-Ready node must stay unneeded before it goes (CA's `--scale-down-unready-time`)."""
    return resolve(pool.scale_down_unready_time_s, policy.scale_down_unready_time_s)


def utilization_threshold(pool: NodePool, policy: Policy, *, gpu: bool) -> float:
    """The utilization below which a node is underutilized. A GPU node is judged by its GPU requests against the GPU
    threshold, as in CA: the pool's own GPU threshold, else the policy's; a pool's general threshold is for its
    non-GPU nodes only."""
    own = pool.scale_down_gpu_utilization_threshold if gpu else pool.scale_down_utilization_threshold
    return resolve(own, policy.scale_down_utilization_threshold, gpu=gpu,
                   gpu_specific=policy.scale_down_gpu_utilization_threshold)


def ignores_daemonsets(pool: NodePool, policy: Policy) -> bool:
    """Whether DaemonSet pods are left out of the node's utilization (CA's `--ignore-daemonsets-utilization`)."""
    return resolve(pool.ignore_daemonsets_utilization, policy.ignore_daemonsets_utilization)


def new_pod_delay_s(policy: Policy, *, gpu: bool) -> float:
    """How old the oldest pending pod must be before a scale-up for it (`new_pod_scale_up_delay`; a batch with a GPU
    pod: `new_gpu_pod_scale_up_delay` when set). A policy option only: pods, not pools, are batched."""
    return resolve(None, policy.new_pod_delay_s, gpu=gpu, gpu_specific=policy.new_gpu_pod_delay_s)


def lost_work_budget(pool: NodePool, policy: Policy) -> float:
    """GPU-minutes of work per sliding hour that moving the pool's checkpointed GPU jobs may lose
    (`scale_down_lost_gpu_minutes_per_hour`; engine/checkpoint.py)."""
    return resolve(pool.scale_down_lost_gpu_minutes_per_hour, policy.scale_down_lost_gpu_minutes_per_hour)
