"""Time-limited protections read from annotations: `karpenter.sh/do-not-disrupt` as `"true"` or as a Go duration.

Karpenter 1.x (kubernetes-sigs/karpenter#2874) reads a duration as "protected from the pod's start until the duration
has passed"; `"true"` protects for as long as it is there. gpuscale reads it the same way on pods (from
`status.startTime`, else the creation time) and on Nodes (from the node's creation). A value that is neither `"true"`,
`"false"` nor a duration is malformed: the safe reading applies (protected, with no end) and the reason says so, so
the loop can put a Warning event on the object (docs/config.md, *Annotations*). Pure: the time is a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float | None:
    """Seconds in `text` as Go's `time.ParseDuration` reads it (`"4h"`, `"1h30m"`, `"1.5h"`, `"0"`), or None when it
    does not parse. A sign is accepted as Go does; callers refuse negative durations themselves."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    if not body:
        return None
    total, at = 0.0, 0
    while at < len(body):
        match = _PART.match(body, at)
        if match is None:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    return -total if text.startswith("-") else total


@dataclass(frozen=True, slots=True, kw_only=True)
class Protection:
    """A do-not-disrupt protection in force: until when (None: no end) and, when the value is malformed, why."""

    until_s: float | None
    value: str
    malformed: str | None = None


def do_not_disrupt(annotations: Mapping[str, str], start_s: float | None, now: float) -> Protection | None:
    """The `karpenter.sh/do-not-disrupt` protection in force at `now`, if any. `start_s`: when the protection's
    duration is counted from (None: unknown, so a duration protects with no end — the safe reading)."""
    value = annotations.get(DO_NOT_DISRUPT)
    if value is None or value == "false":
        return None
    if value == "true":
        return Protection(until_s=None, value=value)
    seconds = parse_go_duration(value)
    if seconds is None or seconds < 0:
        return Protection(until_s=None, value=value, malformed=f"{DO_NOT_DISRUPT}: {value!r} is neither \"true\" nor "
                                                               "a duration (Go syntax: 4h, 90m, 1h30m)")
    if start_s is None:
        return Protection(until_s=None, value=value)
    until = start_s + seconds
    return Protection(until_s=until, value=value) if now < until else None
