"""The knobs of one decision, with Cluster Autoscaler's defaults (see docs/config.md for the flag each mirrors).

Times are seconds. Utilization thresholds are fractions. Limits are in base units (cores as whole cores, memory in
bytes) as CA's `--cores-total` / `--memory-total` count them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuscale.model.taints import DEFAULT_STARTUP_TAINTS, StartupTaints


class CooldownScope(StrEnum):
    CLUSTER = "cluster"
    """CA: any scale-up pauses every removal for `scale_down_delay_after_add_s`."""
    POOL = "pool"
    """gpuscale: a scale-up pauses removals in the pool that grew only; an idle A100 node is not kept because the
    T4 pool just added a node."""


class ExpanderName(StrEnum):
    PRIORITY = "priority"
    LEAST_WASTE = "least-waste"
    PRICE = "price"
    MOST_PODS = "most-pods"
    LEAST_NODES = "least-nodes"
    RANDOM = "random"


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Cluster-wide ceilings for scale-up; `None` means unlimited."""

    max_nodes_total: int | None = None
    max_cores_total: int | None = None
    max_memory_bytes_total: int | None = None
    max_gpus_by_model: Mapping[str, int] = field(default_factory=dict)
    """Per GPU model (the pool's `gpu_model`), physical GPUs across the cluster — every provider, not GKE only."""
    max_gpus_total: int | None = None
    """Physical GPUs of every model together across the cluster (CA's `--gpu-total=nvidia.com/gpu:MIN:MAX`)."""
    max_usd_per_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Buffer:
    """Warm capacity kept ready in one pool: whole idle nodes, or free GPUs (whichever is configured, both if both).

    `free_gpus_ratio` makes the free-GPU target proportional to use, like cluster-proportional overprovisioning:
    a pool's demand grows by a share of what it already runs within one node start-up (an HPA on a daily curve),
    so a busy inference pool keeps a few GPUs warm and a pool that is nearly idle at night keeps `free_gpus`."""

    pool: str
    idle_nodes: int = 0
    free_gpus: int = 0
    free_gpus_ratio: float = 0.0

    def free_gpus_target(self, in_use: int) -> int:
        """GPUs to keep free when `in_use` GPUs of the pool are requested: max(`free_gpus`, ratio × in_use rounded to
        the nearest GPU, halves up). Not rounded up: a whole idle GPU for a tenth of one expected (⌈0.05 × 2⌉ = 1)
        is a fixed buffer at night, which costs more idle GPU-hours than the cold starts it saves (docs/twin.md)."""
        return max(self.free_gpus, math.floor(round(self.free_gpus_ratio * in_use, 9) + 0.5))


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityRule:
    """One entry of the priority expander: pools whose name matches any regex get this priority (higher wins)."""

    priority: int
    patterns: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    # --- scale-up
    new_pod_delay_s: float = 0.0
    """Cluster Autoscaler's age check: no scale-up while the oldest candidate is younger than this (CA's fixed 2 s
    buffer plus `--new-pod-scale-up-delay`; the `ca-defaults` preset). gpuscale batches with the window below (D39)."""
    new_gpu_pod_delay_s: float | None = None
    """The same when a GPU pod waits (`None`: `new_pod_delay_s`, as for any pod; engine/options.py; CA: 30 s)."""
    batch_idle_s: float = 3.0
    """Karpenter's `batchIdleDuration`: the newest batch of pending pods is decided once no pod joined it for this
    long (0: no window — every pod is decided at the next loop, as in CA). D39; 3 s rather than Karpenter's 1 s: D40."""
    batch_max_s: float = 10.0
    """Karpenter's `batchMaxDuration`: a batch is decided at most this long after its first pod, however many join."""
    expendable_priority_cutoff: int = -10
    expanders: tuple[ExpanderName, ...] = (ExpanderName.LEAST_WASTE, ExpanderName.PRICE)
    priorities: tuple[PriorityRule, ...] = ()
    """If set and `priority` is not already in `expanders`, it runs first."""
    random_seed: int = 0
    least_waste_counts_gpus: bool = True
    balance_similar_node_groups: bool = False
    """Split a scale-up over the pools similar to the chosen one to keep their sizes even (CA's
    `--balance-similar-node-groups`, `engine.balance`)."""
    """CA's least-waste ignores GPUs (#2215); ours counts them. The `ca-defaults` preset turns this off."""
    max_nodes_per_scale_up: int = 1000
    gpu_placement: str | None = "gpuscale"
    """Where the what-ifs put GPU pods on nodes with per-GPU accounting: `gpuscale` or `fgd` (fragmentation-aware,
    engine/placement), or None for CA's first fit in node order (the `ca-defaults` preset)."""
    limits: Limits = field(default_factory=Limits)
    buffers: tuple[Buffer, ...] = ()
    max_node_provision_time_s: float = 900.0
    max_node_startup_time_s: float | None = None
    """How long a registered node may stay not Ready (CA's `--max-node-startup-time`); `None`: the provisioning time,
    counted from the node's creation, as before this option existed."""
    max_gpu_init_time_s: float = 600.0
    """How long a Ready node may stay not fully started: GPUs not registered, or start-up taints left."""
    startup_taints: StartupTaints = DEFAULT_STARTUP_TAINTS
    """Start-up and status taints for every pool (each pool's own are added: `engine.nodes.with_policy_taints`)."""
    backoff_initial_s: float = 300.0
    backoff_max_s: float = 1800.0
    backoff_reset_s: float = 10800.0
    # --- scale-down
    scale_down_enabled: bool = True
    scale_down_utilization_threshold: float = 0.5
    scale_down_gpu_utilization_threshold: float = 0.5
    scale_down_unneeded_time_s: float = 600.0
    scale_down_gpu_unneeded_time_s: float | None = 420.0
    """Unneeded time for GPU nodes (`None`: `scale_down_unneeded_time_s`; engine/options.py). An idle 8-GPU node
    costs ~35× a CPU node an hour; on the twin's default day (4 seeds) 7 minutes cuts idle GPU-hours by ~23 % at equal
    mean p95."""
    scale_down_unready_time_s: float = 1200.0
    ignore_daemonsets_utilization: bool = False
    """Leave DaemonSet pods out of a node's utilization (CA's `--ignore-daemonsets-utilization`, off by default): they
    run on every node and would move with none of them, so they can keep a small node above the threshold."""
    scale_down_delay_after_add_s: float = 120.0
    """No removal this soon after a scale-up (in the pool that grew, with the `pool` scope). CA waits 10 minutes (the
    `ca-defaults` preset), as its removal simulation does not know where pending pods will land; here it does
    (engine/decide.py step 4), so the pause only guards against removing a pool's nodes while a burst is still
    arriving: 2 minutes, measured on three workloads (D49)."""
    scale_down_delay_after_add_scope: CooldownScope = CooldownScope.POOL
    scale_down_delay_after_delete_s: float = 0.0
    scale_down_delay_after_failure_s: float = 180.0
    unremovable_node_recheck_timeout_s: float = 0.0
    """A node whose removal simulation failed is not looked at again for this long. CA waits 5 minutes (the
    `ca-defaults` preset); 0 looks again at every decision, so a node freed a minute after its pods could not move
    is not kept for the rest of the five (docs/config.md)."""
    node_deletion_candidate_ttl_s: float = 0.0
    """A `DeletionCandidateOfClusterAutoscaler` taint older than this starts its node's unneeded clock again (CA's
    `--node-deletion-candidate-ttl`; 0: never stale)."""
    max_empty_bulk_delete: int = 10
    max_drain_parallelism: int = 1
    max_total_unready_percentage: float = 45.0
    ok_total_unready_count: int = 3
    skip_nodes_with_system_pods: bool = True
    skip_nodes_with_local_storage: bool = True
    unneeded_restarts_on_pod_start: bool = True
    """A pod that is not a DaemonSet pod starting on an unneeded node starts its unneeded clock again (D39); CA keeps
    the clock while the node stays removable (the `ca-defaults` preset)."""
    protect_gpu_jobs: bool = True
    """Running pods of GPU Jobs block scale-down unless annotated `gpuscale.io/checkpoint-safe: "true"`, or they say
    when they last checkpointed (engine/checkpoint.py): then they move within the lost-work budget below."""
    scale_down_lost_gpu_minutes_per_hour: float = 30.0
    """Each pool's lost-work budget: GPU-minutes of work (GPUs × time since the last checkpoint) that moving
    checkpointed GPU jobs may lose per sliding hour (D38; a pool may set its own)."""
    nominate_pods: bool = True
    """Write `status.nominatedNodeName` on pending pods expected on a registered node that is still starting
    (KEP-5278, on by default in kube-scheduler since 1.35): kube-scheduler then keeps that node's room for them, so a
    newer pod does not take the node ordered for an older one that sits in backoff (D50; CA does not: `ca-defaults`
    turns it off)."""
    scale_down_replace_with_cheaper: bool = True
    """Consolidation onto cheaper nodes (D48): the removal simulation takes the candidates of the pools with the
    dearest nodes first, so a small job on a big node may move to an empty node of a cheaper pool, which then stays,
    rather than that empty node being removed first (CA: empty nodes first, whatever they cost; `ca-defaults`
    turns it off)."""

    def expander_chain(self) -> tuple[ExpanderName, ...]:
        if self.priorities and ExpanderName.PRIORITY not in self.expanders:
            return (ExpanderName.PRIORITY, *self.expanders)
        return self.expanders
