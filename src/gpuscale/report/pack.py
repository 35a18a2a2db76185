"""Rendering packing-experiment results (`gpuscale.sim.pack`): the JSON of docs/fgd.md and a terminal table."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuscale.sim.pack import PackResult

SHOWN_ARRIVED_PCT = (0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 100, 105, 110, 120, 130)


def pack_json(result: PackResult) -> dict[str, Any]:
    """{"policy", "seed", "total_gpus", "points": [{"arrived_pct", "allocated_pct", "frag_pct", "frag_ratio_pct"}]}
    plus "trace", "pods", "failed_pods" and "unallocated_pct" (100 − allocated % at 100 % arrived; null if the run
    never reached 100 %)."""
    return {
        "policy": result.policy, "seed": result.seed, "total_gpus": result.total_gpus, "trace": result.trace,
        "pods": result.pods, "failed_pods": result.failed_pods,
        "unallocated_pct": None if math.isnan(result.unallocated_pct) else result.unallocated_pct,
        "points": [{"arrived_pct": p.arrived_pct, "allocated_pct": p.allocated_pct, "frag_pct": p.frag_pct,
                    "frag_ratio_pct": p.frag_ratio_pct} for p in result.points],
    }


def print_pack(result: PackResult, console: Console) -> None:
    console.print(f"[bold]{result.policy}[/bold] on {result.trace}, seed {result.seed}: {result.total_gpus} GPUs, "
                  f"{result.pods} pods submitted, {result.failed_pods} failed")
    console.print(f"Unallocated GPU at 100 % arrived: [bold]{result.unallocated_pct:.2f} %[/bold]")
    table = Table("arrived %", "allocated %", "fragmented % of GPUs", "fragmented % of idle")
    for p in result.points:
        if p.arrived_pct in SHOWN_ARRIVED_PCT:
            table.add_row(str(p.arrived_pct), f"{p.allocated_pct:.2f}", f"{p.frag_pct:.2f}", f"{p.frag_ratio_pct:.2f}")
    console.print(table)
