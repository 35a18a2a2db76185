"""The `gpuscale` command line: parse, build a frozen config, wire adapters, run. No decision logic lives here.

Errors the user can fix (`InputError`, `ConfigError`) print one line on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from gpuscale.config import load_config, parse_duration
from gpuscale.engine.decide import decide
from gpuscale.engine.fit import explain_fit
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Snapshot
from gpuscale.engine.state import EngineState
from gpuscale.kube.dump import load_cluster
from gpuscale.loop.events import pool_sizes
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.report.fit import fit_json, print_fit
from gpuscale.report.plan import plan_json, print_plan

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


def assume_unneeded(cluster: Cluster, since_s: float) -> Cluster:
    """Every node as if it had carried the deletion-candidate taint since `since_s`: the engine reads how long a node
    has been unneeded from that taint, so this is how a one-shot `plan` sees past `scale_down_unneeded_time`."""
    taint = Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(since_s)), effect=TaintEffect.PREFER_NO_SCHEDULE)
    nodes = tuple(replace(n, taints=(*(t for t in n.taints if t.key != DELETION_CANDIDATE_TAINT), taint))
                  for n in cluster.nodes)
    return replace(cluster, nodes=nodes)


def _duration_option(option: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise InputError(f"option {option}", "DURATION", str(err)) from None


@app.command()
@user_errors
def plan(
    cluster: ClusterOpt,
    config: Annotated[Path, typer.Option("--config", help="gpuscale configuration: pools and autoscaling options.")],
    output: FormatOpt = OutputFormat.TEXT,
    assume_unneeded_for: Annotated[str | None, typer.Option(
        "--assume-unneeded-for", metavar="DURATION",
        help="Treat every node as unneeded for this long already (e.g. 10m), so scale-down shows what it would "
             "remove now.")] = None,
    now: Annotated[float | None, typer.Option(
        "--now", metavar="UNIX_SECONDS", help="Decision time; default: the wall clock.")] = None,
) -> None:
    """One autoscaling decision on a cluster dump — what would be added, removed, kept and why. Acts on nothing."""
    snapshot = load_cluster(cluster)
    settings = load_config(config)
    decision_time = time.time() if now is None else now
    if assume_unneeded_for is not None:
        since = decision_time - _duration_option("--assume-unneeded-for", assume_unneeded_for)
        snapshot = assume_unneeded(snapshot, since)
    view = Snapshot(cluster=snapshot)
    result = decide(view, settings.pools, EngineState(), settings.policy, decision_time)
    if output is OutputFormat.JSON:
        json.dump(plan_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_plan(result, Console(soft_wrap=True), pool_sizes(view))


def main() -> None:
    app()
