"""The `gpuscale` command line: parse, build a frozen config, wire adapters, run. No decision logic lives here.

Errors the user can fix (`InputError`, `ConfigError`) print one line on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from gpuscale.config import load_config
from gpuscale.engine.fit import explain_fit
from gpuscale.kube.dump import load_cluster
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.report.fit import fit_json, print_fit

app = typer.Typer(
    name="gpuscale",
    help="GPU-aware cluster autoscaler for Kubernetes ML platforms, with a deterministic digital twin.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


def user_errors(func: F) -> F:
    """Turn the user's errors into one line on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (InputError, ConfigError) as err:
            print(f"gpuscale: error: {err}", file=sys.stderr)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def root() -> None:
    """GPU-aware cluster autoscaler for Kubernetes ML platforms, with a deterministic digital twin.

    Start with `gpuscale fit` on a cluster dump to see what the scheduler sees.
    """


ClusterOpt = Annotated[Path, typer.Option("--cluster", help="Cluster dump: `kubectl get nodes,pods,pdb -A -o json` "
                                          "output, or multi-document YAML.")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="Output format.")]


@app.command()
@user_errors
def fit(
    cluster: ClusterOpt,
    pools: Annotated[Path | None, typer.Option("--pools", help="Config file whose pools to test as new nodes.")] = None,
    output: FormatOpt = OutputFormat.TEXT,
) -> None:
    """Explain, for every pending pod, where it fits now — or why not, in the scheduler's words — and which pool's
    new node would host it."""
    snapshot = load_cluster(cluster)
    config = load_config(pools) if pools is not None else None
    results = explain_fit(snapshot, config.pools if config else ())
    if output is OutputFormat.JSON:
        json.dump(fit_json(results), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_fit(results, Console())


def main() -> None:
    app()
