"""The phases of a pod's wait from Pending to Running, one enum for the twin and for real clusters.

A pod's timeline is a sequence of timestamps, one per milestone, in this order; a phase is the time between a
milestone and the previous one. Milestones that did not happen for a pod (it landed on an existing node, so no node
was requested for it) collapse to zero-length phases, so the phases of every pod always sum to its pending→running
time. Waiting caused by backoff, stockout or limits is its own phase (`BLOCKED`), carved out of the wait for a
decision.

The scheduler publishes only the outcome of an attempt (the `PodScheduled=False/Unschedulable` condition and its
FailedScheduling event), so "first scheduling attempt" and "unschedulable" are one milestone, `UNSCHEDULABLE`: the
phase before it is the scheduler queue plus the failed attempt. A pod that fits at once never gets it (zero length).
`lifecycle/trace.py` holds the per-pod record both worlds write.

The node milestones (`NODE_MILESTONES`) are the start-up chain's steps, in the words the engine's `NodePhase` uses
too (docs/decisions.md, D35): *ready* is the Node's Ready condition only, *GPU registered* the device plugin's
advertising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum


class Milestone(StrEnum):
    CREATED = "created"
    UNSCHEDULABLE = "unschedulable"
    DECIDED = "scale_up_decided"
    REQUESTED = "cloud_request_accepted"
    ACQUIRED = "capacity_acquired"
    RUNNING = "instance_running"
    REGISTERED = "node_registered"
    """The Node object appeared (kubelet registered)."""
    READY = "node_ready"
    """The Node's Ready condition turned True; its GPUs need not be there yet."""
    GPU_REGISTERED = "gpu_registered"
    """The device plugin advertises the node's GPUs in allocatable (at `READY` for a node that expects none). The
    engine's `NodePhase.USABLE` also waits for the start-up taints to go; these milestones do not watch taints."""
    SLICES_PUBLISHED = "slices_published"
    """The node's DRA drivers published its ResourceSlices (only on nodes of pools that declare `resource_slices`)."""
    BOUND = "pod_bound"
    PULLED = "image_pulled"
    STARTED = "pod_ready"


class Phase(StrEnum):
    """Named after what the pod waits for during it."""

    FIRST_ATTEMPT = "first_scheduling_attempt"
    """From creation until the scheduler's first attempt reported the pod Unschedulable."""
    BLOCKED = "blocked"
    """Waiting while every pool that could host it is backed off, stocked out or at a limit."""
    DECISION = "decision"
    """From Unschedulable (or the end of `blocked`) until the autoscaler decides on a scale-up for it."""
    REQUEST = "cloud_request"
    CAPACITY = "capacity_acquisition"
    BOOT = "instance_boot"
    REGISTRATION = "node_registration"
    NODE_READY = "node_ready"
    GPU_REGISTRATION = "gpu_registration"
    SLICE_PUBLICATION = "slice_publication"
    """Until the node's DRA drivers published its ResourceSlices; in a record only when its chain had that step
    (`OPTIONAL_PHASES`)."""
    BIND = "scheduling"
    IMAGE_PULL = "image_pull"
    CONTAINER_START = "container_start"


ORDER: tuple[tuple[Milestone, Phase], ...] = (
    (Milestone.UNSCHEDULABLE, Phase.FIRST_ATTEMPT),
    (Milestone.DECIDED, Phase.DECISION),
    (Milestone.REQUESTED, Phase.REQUEST),
    (Milestone.ACQUIRED, Phase.CAPACITY),
    (Milestone.RUNNING, Phase.BOOT),
    (Milestone.REGISTERED, Phase.REGISTRATION),
    (Milestone.READY, Phase.NODE_READY),
    (Milestone.GPU_REGISTERED, Phase.GPU_REGISTRATION),
    (Milestone.SLICES_PUBLISHED, Phase.SLICE_PUBLICATION),
    (Milestone.BOUND, Phase.BIND),
    (Milestone.PULLED, Phase.IMAGE_PULL),
    (Milestone.STARTED, Phase.CONTAINER_START),
)


def phases_of(times: Mapping[Milestone, float], blocked_s: float = 0.0) -> dict[Phase, float]:
    """Phase durations from milestone times. Missing milestones take the previous time; each time is clamped to be
    no earlier than the one before (a node requested before the pod existed counts from the pod's creation), so the
    phases are non-negative and sum to `times[STARTED] - times[CREATED]`. `blocked_s` moves that much of the
    decision wait into `BLOCKED`."""
    return dict(zip(PHASES, phase_durations(times, blocked_s), strict=True))


PHASES = (Phase.FIRST_ATTEMPT, Phase.BLOCKED, *(p for _, p in ORDER[1:]))
"""Every phase, in the order `phases_of` gives them (the enum's)."""
OPTIONAL_PHASES = {Phase.SLICE_PUBLICATION: Milestone.SLICES_PUBLISHED}
"""Phases a trace names only when their milestone happened (a step most start-up chains lack), so records of pods
whose nodes publish no ResourceSlices keep the phases they always had."""
_MILESTONES = tuple(m for m, _ in ORDER)


def phase_durations(times: Mapping[Milestone, float], blocked_s: float = 0.0) -> list[float]:
    """`phases_of`'s values in `Phase` order (`PHASES`), without the dict keyed by enum members (the twin asks per
    finished pod, then keys them by name)."""
    previous = times[Milestone.CREATED]
    out = []
    for milestone in _MILESTONES:
        at = times.get(milestone, previous)
        if previous > at:  # max(at, previous) without the call
            at = previous
        out.append(at - previous)
        previous = at
    decision = out[1]
    blocked = min(max(blocked_s, 0.0), decision)
    out[1] = blocked
    out.insert(2, decision - blocked)
    return out


NODE_MILESTONES = (Milestone.DECIDED, Milestone.REQUESTED, Milestone.ACQUIRED, Milestone.RUNNING,
                   Milestone.REGISTERED, Milestone.READY, Milestone.GPU_REGISTERED, Milestone.SLICES_PUBLISHED)
"""Milestones of the long path only: a pod that fit existing capacity has none of them."""


def with_node(pod: Mapping[Milestone, float], node: Mapping[Milestone, float] | None) -> tuple[dict[Milestone, float],
                                                                                                 bool]:
    """A pod's milestones joined with those of the node it ran on; returns them and whether it took the long path.

    The long path: the node was requested at or after the pod's creation (the pod waited for it — ordered for it, or
    for a pod ahead of it). Then the node's start-up milestones become the pod's, and a missing decision time is the
    request time. Otherwise (short path) the pod's own node milestones are dropped: the decision it may have seen
    did not make the node it ran on. Both worlds call this, so the twin and the controller split time alike."""
    times = dict(pod)
    requested = node.get(Milestone.REQUESTED) if node else None
    if node is not None and requested is not None and requested >= times[Milestone.CREATED]:
        times.setdefault(Milestone.DECIDED, requested)
        times.update({m: t for m, t in node.items() if m in NODE_MILESTONES and m != Milestone.DECIDED})
        return times, True
    for milestone in NODE_MILESTONES:
        times.pop(milestone, None)
    return times, False


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence; deterministic, no interpolation."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
