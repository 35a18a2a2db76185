"""The phases of a pod's wait from Pending to Running, one enum for the twin and for real clusters.

A pod's timeline is a sequence of timestamps, one per milestone, in this order; a phase is the time between a
milestone and the previous one. Milestones that did not happen for a pod (it landed on an existing node, so no node
was requested for it) collapse to zero-length phases, so the phases of every pod always sum to its pending→running
time. Waiting caused by backoff, stockout or limits is its own phase (`BLOCKED`), carved out of the wait for a
decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum


class Milestone(StrEnum):
    CREATED = "created"
    DECIDED = "scale_up_decided"
    REQUESTED = "cloud_request_accepted"
    ACQUIRED = "capacity_acquired"
    RUNNING = "instance_running"
    REGISTERED = "node_registered"
    READY = "node_ready"
    GPU_REGISTERED = "gpu_registered"
    BOUND = "pod_bound"
    PULLED = "image_pulled"
    STARTED = "pod_ready"


class Phase(StrEnum):
    """Named after what the pod waits for during it."""

    BLOCKED = "blocked"
    """Waiting while every pool that could host it is backed off, stocked out or at a limit."""
    DECISION = "decision"
    """From creation (or the end of `blocked`) until the autoscaler decides on a scale-up for it."""
    REQUEST = "cloud_request"
    CAPACITY = "capacity_acquisition"
    BOOT = "instance_boot"
    REGISTRATION = "node_registration"
    NODE_READY = "node_ready"
    GPU_REGISTRATION = "gpu_registration"
    BIND = "scheduling"
    IMAGE_PULL = "image_pull"
    CONTAINER_START = "container_start"


ORDER: tuple[tuple[Milestone, Phase], ...] = (
    (Milestone.DECIDED, Phase.DECISION),
    (Milestone.REQUESTED, Phase.REQUEST),
    (Milestone.ACQUIRED, Phase.CAPACITY),
    (Milestone.RUNNING, Phase.BOOT),
    (Milestone.REGISTERED, Phase.REGISTRATION),
    (Milestone.READY, Phase.NODE_READY),
    (Milestone.GPU_REGISTERED, Phase.GPU_REGISTRATION),
    (Milestone.BOUND, Phase.BIND),
    (Milestone.PULLED, Phase.IMAGE_PULL),
    (Milestone.STARTED, Phase.CONTAINER_START),
)


def phases_of(times: Mapping[Milestone, float], blocked_s: float = 0.0) -> dict[Phase, float]:
    """Phase durations from milestone times. Missing milestones take the previous time; each time is clamped to be
    no earlier than the one before (a node requested before the pod existed counts from the pod's creation), so the
    phases are non-negative and sum to `times[STARTED] - times[CREATED]`. `blocked_s` moves that much of the
    decision wait into `BLOCKED`."""
    previous = times[Milestone.CREATED]
    result: dict[Phase, float] = {}
    for milestone, phase in ORDER:
        at = max(times.get(milestone, previous), previous)
        result[phase] = at - previous
        previous = at
    blocked = min(max(blocked_s, 0.0), result[Phase.DECISION])
    result[Phase.DECISION] -= blocked
    return {Phase.BLOCKED: blocked, **result}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence; deterministic, no interpolation."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
