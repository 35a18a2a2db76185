"""Rendering `gpuscale fit` results: the JSON documented in docs/cli.md, and a terminal view with rich."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from gpuscale.engine.fit import POOL_FITS, PodFit

MAX_NODES_SHOWN = 5


def fit_json(results: Sequence[PodFit]) -> dict[str, Any]:
    return {"pods": [
        {"namespace": r.pod.namespace, "name": r.pod.name, "fits": list(r.fits), "reasons": dict(r.reasons),
         "message": r.message, "pools": dict(r.pools)}
        for r in results
    ]}


def print_fit(results: Sequence[PodFit], console: Console) -> None:
    if not results:
        console.print("No pending pods: every pod is bound to a node.")
        return
    fitting = sum(1 for r in results if r.fits)
    console.print(Text.assemble(("Pending pods: ", "bold"), f"{len(results)} — {fitting} fit on a node now, "
                                f"{len(results) - fitting} do not.\n"))
    for r in results:
        mark = ("✔", "green") if r.fits else ("✘", "red")
        console.print(Text.assemble((f"{mark[0]} ", mark[1]), (r.pod.key, "bold")))
        if r.fits:
            shown = ", ".join(r.fits[:MAX_NODES_SHOWN]) + (", …" if len(r.fits) > MAX_NODES_SHOWN else "")
            console.print(f"    {r.message}: {shown}")
        else:
            console.print(Text(f"    {r.message}", style="yellow"))
        for pool, verdict in r.pools.items():
            if verdict == POOL_FITS:
                console.print(Text.assemble("    new ", (pool, "cyan"), " node: ", ("fits", "green")))
            else:
                console.print(Text.assemble("    new ", (pool, "cyan"), " node: ", (verdict, "dim")))
        if r.pools and not r.fits and all(v != POOL_FITS for v in r.pools.values()):
            console.print(Text("    no pool can host it: scaling up would not help", style="red"))
        console.print()
