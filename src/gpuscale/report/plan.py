"""Rendering `gpuscale plan`: the JSON documented in docs/cli.md, and a terminal view with rich.

Both are pure functions of a `Plan`. Lists keep the engine's order, which is deterministic, so the same cluster, config
and `--now` always print the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from gpuscale.engine.plan import NodeVerdict, Plan, PodVerdict
from gpuscale.engine.reasons import Reason

MAX_PODS_SHOWN = 5


def _number(value: float) -> float | None:
    """JSON has no infinity or NaN: those become null."""
    return value if math.isfinite(value) else None


def reasons_json(reasons: Sequence[Reason]) -> list[dict[str, Any]]:
    return [{"code": str(r.code), "message": r.message, "numbers": {k: _number(v) for k, v in r.numbers.items()}}
            for r in reasons]


def _nodes(items: Sequence[NodeVerdict]) -> list[dict[str, Any]]:
    return [{"node": v.node, "reasons": reasons_json(v.reasons)} for v in items]


def _pods(items: Sequence[PodVerdict]) -> list[dict[str, Any]]:
    return [{"pod": v.pod, "reasons": reasons_json(v.reasons)} for v in items]


def plan_json(plan: Plan) -> dict[str, Any]:
    """`scale_up` (with `zone` when the scale-up names one), `scale_down`, `blocked`, `unplaceable` (the documented
    core), then `unneeded`, `covered`, `waiting`, `timed_out`, `degraded`, `malformed` (objects whose protection
    annotation does not parse), `next_at_s` (when the plan next matters with no change to the cluster:
    `Plan.next_at_s`) and `mark_unneeded` (node → since, Unix s)."""
    return {
        "scale_up": [{"pool": s.pool, "nodes": s.nodes, **({"zone": s.zone} if s.zone else {}), "pods": list(s.pods),
                      "reasons": reasons_json(s.reasons)} for s in plan.scale_up],
        "scale_down": [{"node": r.node, "pool": r.pool, "evict": list(r.evict), "reasons": reasons_json(r.reasons)}
                       for r in plan.scale_down],
        "blocked": _nodes(plan.blocked),
        "unplaceable": _pods(plan.unplaceable),
        "unneeded": _nodes(plan.unneeded),
        "covered": _pods(plan.covered),
        "waiting": _pods(plan.waiting),
        "timed_out": [{"pool": t.pool, "node": t.node, "request_id": t.request_id, "reasons": reasons_json(t.reasons)}
                      for t in plan.timed_out],
        "degraded": _nodes(plan.degraded),
        "malformed": _pods(plan.malformed),
        "next_at_s": plan.next_at_s,
        "mark_unneeded": dict(sorted(plan.mark_unneeded.items())),
        "clear_unneeded": list(plan.clear_unneeded),
    }


PLAN_ITEM_KINDS = ("scale_up", "scale_down", "timed_out", "unplaceable", "blocked", "unneeded", "waiting", "covered",
                   "degraded")
"""The kinds of plan item, actions first, in the order `plan_items` lists them."""


def plan_items(plan: Plan) -> list[dict[str, Any]]:
    """Every plan item as one flat record, for structured logs: `kind`, the item as `plan --format json` shows it
    (pool, node or pod; `reasons` with code, message and numbers), and `codes`, its reason codes alone."""
    shown = plan_json(plan)
    return [{"kind": kind, **item, "codes": [r["code"] for r in item["reasons"]]}
            for kind in PLAN_ITEM_KINDS for item in shown[kind]]


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:MAX_PODS_SHOWN]) + (f", … ({len(names)} in all)" if len(names) > MAX_PODS_SHOWN else "")


def _reasons(console: Console, reasons: Sequence[Reason], style: str = "") -> None:
    for reason in reasons:
        console.print(Text(f"      {reason.message}", style=style))


def _section(console: Console, title: str, count: str, style: str) -> None:
    console.print(Text.assemble((title, f"bold {style}"), f" ({count})"))


def _verdicts(console: Console, items: Sequence[NodeVerdict | PodVerdict], title: str, style: str) -> None:
    if not items:
        return
    _section(console, title, str(len(items)), style)
    for item in items:
        console.print(Text.assemble("  · ", (item.node if isinstance(item, NodeVerdict) else item.pod, "bold")))
        _reasons(console, item.reasons, "dim")
    console.print()


def print_plan(plan: Plan, console: Console, sizes: Mapping[str, int] | None = None) -> None:
    """The decision as a person reads it: what would be added and removed, then what is held back and why.
    `sizes` (pool → current nodes, registered and requested) shows each scale-up as `before → after`."""
    if not (plan.scale_up or plan.scale_down or plan.timed_out):
        console.print(Text("No action: nothing to add or remove.\n", style="bold"))
    if plan.scale_up:
        _section(console, "Scale up", f"{sum(s.nodes for s in plan.scale_up)} node(s)", "green")
        for s in plan.scale_up:
            size = f"  ({sizes.get(s.pool, 0)} → {sizes.get(s.pool, 0) + s.nodes})" if sizes is not None else ""
            where = f" in zone {s.zone}" if s.zone else ""
            console.print(Text.assemble("  + ", (f"{s.nodes} × {s.pool}{where}", "bold green"), size))
            _reasons(console, s.reasons)
            if s.pods:
                console.print(Text(f"      pods: {_shown(s.pods)}", style="dim"))
        console.print()
    if plan.scale_down:
        _section(console, "Scale down", f"{len(plan.scale_down)} node(s)", "red")
        for r in plan.scale_down:
            console.print(Text.assemble("  - ", (r.node, "bold red"), f"  ({r.pool})"))
            _reasons(console, r.reasons)
            console.print(Text(f"      evict: {_shown(r.evict)}" if r.evict else "      empty", style="dim"))
        console.print()
    if plan.timed_out:
        _section(console, "Timed out", str(len(plan.timed_out)), "red")
        for t in plan.timed_out:
            console.print(Text.assemble("  ! ", (t.node or t.request_id or "?", "bold"), f"  ({t.pool})"))
            _reasons(console, t.reasons)
        console.print()
    _verdicts(console, plan.degraded, "Degraded nodes (kept; never timed out under their pods)", "red")
    _verdicts(console, plan.unplaceable, "Unplaceable pods: no scale-up helps", "yellow")
    _verdicts(console, plan.blocked, "Underutilized nodes kept", "yellow")
    _verdicts(console, plan.unneeded, "Unneeded nodes, waiting", "cyan")
    _verdicts(console, plan.waiting, "Pending pods not acted on yet", "")
    _verdicts(console, plan.covered, "Pending pods that existing or upcoming capacity takes", "")
