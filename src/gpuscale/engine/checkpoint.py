"""Checkpoint-aware consolidation: when a protected GPU job may move, what moving it loses, and the lost-work budget.

`protect_gpu_jobs` keeps a running GPU Job pod on its node: killing a training run loses its work. A job that
checkpoints loses only the work since its last checkpoint, so gpuscale may move it (D38) when it says when that was:
- `gpuscale.io/last-checkpoint`: the time of the last checkpoint, RFC 3339 (`2026-12-02T09:30:00Z`) or Unix seconds
  (`1796203800`); the job (or a sidecar) rewrites it after each checkpoint. Exact: preferred.
- `gpuscale.io/checkpoint-interval`: a Go duration (`30m`); checkpoints are taken that often from the pod's start
  (`status.startTime`), so the last one is `start + ⌊(now − start) / interval⌋ × interval`. On a real cluster the
  start time is the kubelet's, before the image pull, so this may read a checkpoint up to the pull time too late;
  write `last-checkpoint` where that matters.

The work lost by moving such a pod is `GPUs × (now − last checkpoint)`. Each pool has a **lost-work budget**
(`scale_down_lost_gpu_minutes_per_hour`, GPU-minutes per hour, engine/options.py): the evictions of the last
`WINDOW_S` (a sliding hour) are carried in `EngineState.lost_work`, and a removal whose loss does not fit what is
left waits (the loss falls back to ~0 at the next checkpoint, the budget frees as old entries leave the window).
A pod of a gang is never moved this way: moving one member stops the whole gang, whose other members' loss the node
does not see. Pure: the time is a parameter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuscale.engine.protection import parse_go_duration
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI

LAST_CHECKPOINT = "gpuscale.io/last-checkpoint"
CHECKPOINT_INTERVAL = "gpuscale.io/checkpoint-interval"
WINDOW_S = 3600.0
"""The budget is per hour: evictions count against it for this long after they happen."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LostWork:
    """One eviction's charge against its pool's budget: when, which pool, how many GPU-minutes of work it lost."""

    at_s: float
    pool: str
    gpu_minutes: float


_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|([+-])(\d{2}):(\d{2}))")


def _days(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to the date (proleptic Gregorian; Howard Hinnant's days_from_civil)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _time(text: str) -> float | None:
    """Unix seconds from an RFC 3339 time or a plain number, or None when neither parses."""
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        return number if math.isfinite(number) else None
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    seconds = _days(year, month, day) * 86400 + hour * 3600 + minute * 60 + second + float(match.group(7) or 0)
    if match.group(8):
        offset = int(match.group(9)) * 3600 + int(match.group(10)) * 60
        seconds -= offset if match.group(8) == "+" else -offset
    return seconds


def checkpoint_problem(pod: Pod) -> str | None:
    """Why the pod's checkpoint annotations do not tell when its last checkpoint was (None: they do)."""
    value = pod.annotations.get(LAST_CHECKPOINT)
    if value is not None:
        return None if _time(value) is not None else f"{LAST_CHECKPOINT}: {value!r} is not an RFC 3339 time"
    value = pod.annotations.get(CHECKPOINT_INTERVAL)
    if value is None:
        return "carries no checkpoint annotation"
    seconds = parse_go_duration(value)
    if seconds is None or seconds <= 0:
        return f"{CHECKPOINT_INTERVAL}: {value!r} is not a positive duration (Go syntax: 30m, 1h)"
    return None


def declares_checkpoints(pod: Pod) -> bool:
    return (LAST_CHECKPOINT in pod.annotations or CHECKPOINT_INTERVAL in pod.annotations) \
        and checkpoint_problem(pod) is None


def last_checkpoint_s(pod: Pod, now: float) -> float:
    """When the pod last checkpointed, as its annotations say (call only when `declares_checkpoints`). An interval
    with no start time known counts a whole interval as lost (the safe reading)."""
    value = pod.annotations.get(LAST_CHECKPOINT)
    if value is not None:
        at = _time(value)
        assert at is not None
        return min(at, now)
    interval = parse_go_duration(pod.annotations[CHECKPOINT_INTERVAL])
    assert interval is not None and interval > 0
    if pod.started_s is None:
        return now - interval
    ran = max(now - pod.started_s, 0.0)
    return pod.started_s + math.floor(ran / interval) * interval


def next_checkpoint_s(pod: Pod, now: float) -> float | None:
    """When the loss of moving the pod next falls (its next checkpoint by interval), or None when no interval and start
    tell it (a rewritten `last-checkpoint` changes the pod itself)."""
    if LAST_CHECKPOINT in pod.annotations or pod.started_s is None:
        return None
    interval = parse_go_duration(pod.annotations.get(CHECKPOINT_INTERVAL, ""))
    if interval is None or interval <= 0:
        return None
    return last_checkpoint_s(pod, now) + interval


def pod_gpus(pod: Pod) -> float:
    """GPUs the pod holds: whole GPUs, or `gpuscale.io/gpu-milli` thousandths."""
    return pod.requests.gpu_count() + pod.requests.get(GPU_MILLI) / 1000.0


def lost_gpu_minutes(pods: Iterable[Pod], now: float) -> float:
    """GPU-minutes of work lost by evicting `pods` (checkpointed ones) at `now`."""
    return sum(pod_gpus(p) * max(now - last_checkpoint_s(p, now), 0.0) for p in pods) / 60.0


def window(entries: Sequence[LostWork], now: float) -> tuple[LostWork, ...]:
    """The entries still inside the budget's hour at `now`."""
    return tuple(e for e in entries if e.at_s > now - WINDOW_S)


def spent(entries: Sequence[LostWork], now: float) -> Mapping[str, float]:
    """GPU-minutes lost per pool within the last hour."""
    out: dict[str, float] = {}
    for e in window(entries, now):
        out[e.pool] = out.get(e.pool, 0.0) + e.gpu_minutes
    return out
