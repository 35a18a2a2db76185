"""`gpuscale explain` output: one explanation as text lines or as a JSON object."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from gpuscale.engine.explain import Explanation


def explain_json(explanation: Explanation) -> dict[str, Any]:
    return {"target": explanation.target, "hold": str(explanation.hold), "code": explanation.code,
            "reason": explanation.reason, "release": explanation.release, "details": list(explanation.details)}


def print_explanation(explanation: Explanation, console: Console) -> None:
    console.print(f"[bold]{escape(explanation.target)}[/bold]")
    code = f" ({escape(explanation.code)})" if explanation.code else ""
    console.print(f"  held by:  [bold]{explanation.hold}[/bold]{code}")
    console.print(f"  why:      {escape(explanation.reason)}")
    for line in explanation.details:
        console.print(f"            {escape(line)}")
    console.print(f"  released: {escape(explanation.release)}")
