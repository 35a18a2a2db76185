"""The per-pod trace record, one schema for the twin (`gpuscale simulate --trace`) and the controller (`/traces`).

A trace file is JSON lines, one object per pod that reached Ready (or, for `complete: false`, one still waiting):

    {"schema": 1, "source": "controller" | "twin", "pod": "ns/name", "pool": str | null, "node": str | null,
     "path": "new-node" | "existing-node", "reason": str | null, "complete": bool,
     "created_at": float, "milestones": {milestone: seconds since created}, "phases": {phase: seconds},
     "pending_to_running_s": float | null}

`created_at` is the clock of the world that wrote it (Unix seconds for the controller, simulated seconds for the
twin); milestones are offsets from it, so traces from both worlds compare directly. `phases` has every phase of
`Phase` but the optional ones whose milestone did not happen (`OPTIONAL_PHASES`: `slice_publication` on nodes that
publish no ResourceSlices) and sums to `pending_to_running_s`. `reason` says why the pod was blocked (backoff,
stockout, limits), if it was. Parsing is strict: a line that breaks the schema is an `InputError` naming the line
and field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuscale.inputs.files import excerpt
from gpuscale.lifecycle.phases import OPTIONAL_PHASES, PHASES, Milestone, Phase, phase_durations
from gpuscale.model.errors import InputError
from gpuscale.model.frozen import quick_init

SCHEMA_VERSION = 1
NEW_NODE, EXISTING_NODE = "new-node", "existing-node"


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PodTrace:
    pod: str
    source: str
    created_at: float
    milestones: Mapping[str, float]
    """Milestone name → seconds after creation; only milestones that happened."""
    phases: Mapping[str, float] = field(default_factory=dict)
    pool: str | None = None
    node: str | None = None
    new_node: bool = False
    reason: str | None = None
    complete: bool = True

    @property
    def pending_to_running_s(self) -> float | None:
        return self.milestones.get(Milestone.STARTED.value) if self.complete else None

    def dominant_phase(self) -> tuple[str, float]:
        """The phase that took longest (ties: the earlier phase)."""
        best = ("", -1.0)
        for phase in Phase:
            value = self.phases.get(phase.value, 0.0)
            if value > best[1]:
                best = (phase.value, value)
        return best

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "source": self.source, "pod": self.pod, "pool": self.pool,
                "node": self.node, "path": NEW_NODE if self.new_node else EXISTING_NODE, "reason": self.reason,
                "complete": self.complete, "created_at": round(self.created_at, 3),
                "milestones": {k: round(v, 3) for k, v in self.milestones.items()},
                "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "pending_to_running_s": None if self.pending_to_running_s is None
                else round(self.pending_to_running_s, 3)}


_MILESTONE_NAMES = tuple((m, m.value) for m in Milestone)
_PHASE_NAMES = tuple(p.value for p in PHASES)
_OPTIONAL = tuple((p.value, m) for p, m in OPTIONAL_PHASES.items())
"""Milestones in order with their names, phase names, and the optional phases' names with their milestones:
iterating the enum and reading `.value` per pod are slow (Python-level), and the twin writes a trace per pod."""
_REQUIRED = frozenset(p.value for p in Phase) - {name for name, _ in _OPTIONAL}


def build_trace(*, pod: str, source: str, times: Mapping[Milestone, float], new_node: bool, pool: str | None,
                node: str | None, blocked_s: float = 0.0, reason: str | None = None) -> PodTrace:
    """A trace from absolute milestone times (any clock); `times` must hold `CREATED`. Complete iff it holds
    `STARTED`; then its phases are `phases_of`'s, by name (they sum to pending→running)."""
    created = times[Milestone.CREATED]
    complete = Milestone.STARTED in times
    ordered = {name: times[m] - created for m, name in _MILESTONE_NAMES if m in times}
    phases = dict(zip(_PHASE_NAMES, phase_durations(times, blocked_s), strict=True)) if complete else {}
    for name, milestone in _OPTIONAL:
        if complete and milestone not in times:
            del phases[name]
    return PodTrace(pod=pod, source=source, created_at=created, milestones=ordered, phases=phases, pool=pool,
                    node=node, new_node=new_node, reason=reason, complete=complete)


def _number(raw: Mapping[str, Any], name: str, where: str) -> float:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(where, name, f"expected a finite number, got {excerpt(value)}")
    return float(value)


def _seconds(raw: Mapping[str, Any], name: str, where: str, known: frozenset[str]) -> dict[str, float]:
    value = raw.get(name)
    if not isinstance(value, dict):
        raise InputError(where, name, f"expected an object, got {type(value).__name__}")
    out = {}
    for key in value:
        if key not in known:
            raise InputError(where, f"{name}.{str(key)[:80]}", f"unknown (known: {', '.join(sorted(known))})")
        out[key] = _number(value, key, where)
        if out[key] < 0:
            raise InputError(where, f"{name}.{key}", f"negative ({out[key]})")
    return out


def trace_from_json(raw: Any, where: str) -> PodTrace:
    """One schema-checked record; `where` names it in errors (e.g. `trace.jsonl:12`)."""
    if not isinstance(raw, dict):
        raise InputError(where, "(record)", f"expected a JSON object, got {type(raw).__name__}")
    if raw.get("schema") != SCHEMA_VERSION:
        raise InputError(where, "schema", f"expected {SCHEMA_VERSION}, got {excerpt(raw.get('schema'))}")
    for name in ("pod", "source"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            raise InputError(where, name, "expected a non-empty string")
    for name in ("pool", "node", "reason"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise InputError(where, name, "expected a string or null")
    if raw.get("path") not in (NEW_NODE, EXISTING_NODE):
        raise InputError(where, "path", f"expected {NEW_NODE!r} or {EXISTING_NODE!r}, got {excerpt(raw.get('path'))}")
    if not isinstance(raw.get("complete"), bool):
        raise InputError(where, "complete", "expected true or false")
    milestones = _seconds(raw, "milestones", where, frozenset(m.value for m in Milestone))
    phases = _seconds(raw, "phases", where, frozenset(p.value for p in Phase))
    trace = PodTrace(pod=raw["pod"], source=raw["source"], created_at=_number(raw, "created_at", where),
                     milestones=milestones, phases=phases, pool=raw.get("pool"), node=raw.get("node"),
                     new_node=raw["path"] == NEW_NODE, reason=raw.get("reason"), complete=raw["complete"])
    if trace.complete:
        total = trace.pending_to_running_s
        if total is None:
            raise InputError(where, f"milestones.{Milestone.STARTED.value}", "missing on a complete trace")
        if not set(phases) >= _REQUIRED:
            raise InputError(where, "phases", f"missing {', '.join(sorted(_REQUIRED - set(phases)))}")
        if abs(sum(phases.values()) - total) > 0.01:
            raise InputError(where, "phases", f"sum {sum(phases.values()):.3f}s differs from pending_to_running_s "
                                    f"{total:.3f}s")
    return trace


def parse_lines(text: str, source: str) -> list[PodTrace]:
    """Every non-blank line of a JSON-lines trace; the first bad line is an `InputError` naming `source:line`."""
    traces = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{source}:{number}", "(line)", f"not JSON: {err.msg}") from None
        except RecursionError:
            raise InputError(f"{source}:{number}", "(line)", "not JSON: nested too deeply") from None
        except ValueError as err:  # an integer literal beyond Python's 4300-digit limit
            raise InputError(f"{source}:{number}", "(line)", f"not JSON: {str(err).split(';')[0]}") from None
        traces.append(trace_from_json(raw, f"{source}:{number}"))
    return traces


def dump_lines(traces: list[PodTrace]) -> str:
    return "".join(json.dumps(t.to_json(), sort_keys=True) + "\n" for t in traces)
