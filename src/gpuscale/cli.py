"""The `gpuscale` command line: parse, build a frozen config, wire adapters, run. No decision logic lives here.

Errors the user can fix (`InputError`, `ConfigError`, and usage errors) print one line on stderr and exit 2, never a
traceback; an API server that does not answer is one line and exit 1 (`gpuscale.kube.connect`).
"""

from __future__ import annotations

import json
import math
import os
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
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from typer import rich_utils
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

from gpuscale.config import load_config, parse_duration
from gpuscale.engine.decide import decide
from gpuscale.engine.explain import explain as explain_target
from gpuscale.engine.fit import explain_fit
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Snapshot
from gpuscale.engine.state import EngineState
from gpuscale.inputs.files import TRACE_BYTES, one_line, read_text
from gpuscale.kube.connect import ApiUnreachable, api_client, api_errors, check_reachable
from gpuscale.kube.dump import load_cluster, load_objects
from gpuscale.kube.logs import LogFormat, configure
from gpuscale.lifecycle.trace import PodTrace, dump_lines, parse_lines
from gpuscale.loop.events import pool_sizes
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.report.config_schema import schema_text
from gpuscale.report.explain import explain_json, print_explanation
from gpuscale.report.fit import fit_json, print_fit
from gpuscale.report.html import render_html
from gpuscale.report.pack import pack_json, print_pack
from gpuscale.report.plan import plan_json, print_plan
from gpuscale.report.trace import print_traces, render_trace_html
from gpuscale.report.twin import print_comparison, print_summary, result_json
from gpuscale.sim.calibrate import fit_profiles, profiles_yaml
from gpuscale.sim.openb import bundled
from gpuscale.sim.pack import run_pack
from gpuscale.sim.result import SimResult
from gpuscale.sim.run import simulate as run_simulation
from gpuscale.sim.scenario import DEFAULT_SCENARIO, bundled_scenarios, load_scenario, policy_named

app = typer.Typer(
    name="gpuscale",
    help="GPU-aware cluster autoscaler for Kubernetes ML platforms, with a deterministic digital twin.",
    no_args_is_help=True,
    add_completion=True,
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
            print(f"gpuscale: error: {one_line(str(err), 1000)}", file=sys.stderr)
            raise typer.Exit(2) from None
        except ApiUnreachable as err:
            print(f"gpuscale: error: {one_line(str(err), 1000)}", file=sys.stderr)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _print_version(value: bool) -> None:
    if value:
        print(f"gpuscale {_version()}")
        raise typer.Exit(0)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuscale")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


@app.callback()
def root(
    show_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version, help="Print the version and exit.")] = False,
) -> None:
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


_LAST_RFC3339_S = 253_402_300_799
"""9999-12-31T23:59:59Z: the last time a Kubernetes timestamp can spell."""


def _finite(option: str, value: float | None) -> float | None:
    """A decision time: finite, and a time a Kubernetes object could carry (1970 to 9999)."""
    if value is not None and not math.isfinite(value):
        raise InputError(f"option {option}", "UNIX_SECONDS", f"expected a finite number, got {value!r}")
    if value is not None and not 0 <= value <= _LAST_RFC3339_S:
        raise InputError(f"option {option}", "UNIX_SECONDS", f"expected seconds from 1970 to 9999 (0 to "
                                                             f"{_LAST_RFC3339_S}), got {value:g}")
    return value


def writable(option: str, path: Path | None) -> None:
    """An output path that can be written, checked before the work starts (not a directory, its folder exists and
    may be written, the file itself, if there, too)."""
    if path is None:
        return
    if path.is_dir():
        raise InputError(f"option {option}", str(path), "is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"option {option}", str(path), f"no directory {str(parent)!r} to write it in")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"option {option}", str(path), "permission denied")


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
    _finite("--now", now)
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


@app.command()
@user_errors
def explain(
    target: Annotated[str, typer.Argument(help="A pending pod or a ProvisioningRequest, as namespace/name; or a node "
                                               "by name (is it degraded?).")],
    config: Annotated[Path, typer.Option("--config", help="gpuscale configuration: pools and autoscaling options.")],
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help="Cluster dump (as for `fit`/`plan`; may also hold Workloads, ProvisioningRequests and "
                          "PodTemplates).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Read a live cluster instead of a dump.")]
    = None,
    output: FormatOpt = OutputFormat.TEXT,
    now: Annotated[float | None, typer.Option(
        "--now", metavar="UNIX_SECONDS", help="Decision time; default: the wall clock.")] = None,
) -> None:
    """The one reason a pending pod or a ProvisioningRequest is held back now — quota, gate, constraint, limits,
    stockout or capacity — and what would release it (docs/cli.md)."""
    if (cluster is None) == (kubeconfig is None):
        raise InputError("explain", "--cluster/--kubeconfig", "give exactly one of them")
    if not target or target.startswith("/") or target.endswith("/") or target.count("/") > 1:
        raise InputError("explain", "TARGET", f"expected namespace/name or a node name, got {target[:80]!r}")
    _finite("--now", now)
    from gpuscale.kube.queue import explain_input, live_objects

    settings = load_config(config)
    if cluster is not None:
        data = explain_input(load_objects(cluster), str(cluster))
    else:
        api = api_client(kubeconfig)
        try:
            check_reachable(api)
            with api_errors(api):
                objects = live_objects(api)
            data = explain_input(objects, str(kubeconfig))
        finally:
            api.close()
    result = explain_target(data.cluster, target, pools=settings.pools, policy=settings.policy,
                            now=time.time() if now is None else now, requests=data.requests, holds=data.holds)
    if output is OutputFormat.JSON:
        json.dump(explain_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_explanation(result, Console(soft_wrap=True))


ScenarioArg = Annotated[str, typer.Argument(
    help=f"A bundled scenario name ({', '.join(bundled_scenarios())}) or a scenario YAML file (docs/twin.md).")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Override the scenario's seed.")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the results as JSON (docs/cli.md).")]
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report with plots.")]


def _run_twin(scenario: str, policies: list[str], seed: int | None, quiet: bool) -> list[SimResult]:
    setup, config = load_scenario(scenario, seed)
    chosen = [policy_named(name, config) for name in policies]  # all validated before the first run
    results = []
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                  TimeElapsedColumn(), console=console, disable=quiet, transient=True) as progress:
        for policy in chosen:
            task = progress.add_task(f"{setup.name} · {policy.name}", total=setup.duration_s)

            def advance(now: float, total: float, task: TaskID = task) -> None:
                progress.update(task, completed=now)

            results.append(run_simulation(setup, policy, advance))
    return results


def _write_outputs(results: list[SimResult], json_path: Path | None, html_path: Path | None, title: str) -> None:
    if json_path is not None:
        payload: Any = result_json(results[0]) if len(results) == 1 else {"results": [result_json(r)
                                                                                      for r in results]}
        json_path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if html_path is not None:
        html_path.write_text(render_html(results, title), encoding="utf-8")


@app.command()
@user_errors
def simulate(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    policy: Annotated[str, typer.Option("--policy", help="gpuscale, ca-defaults, scenario, or a config file.")]
    = "gpuscale",
    seed: SeedOpt = None,
    json_out: JsonOpt = None,
    html_out: HtmlOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
    trace_out: Annotated[Path | None, typer.Option("--trace", help="Write per-pod phase traces as JSON lines "
                                                   "(docs/tracing.md).")] = None,
) -> None:
    """Replay a scenario in the digital twin — same engine and loop as the controller, virtual time — and report
    cost, idle GPU-hours and how long pods waited, phase by phase."""
    for option, path in (("--json", json_out), ("--html", html_out), ("--trace", trace_out)):
        writable(option, path)
    results = _run_twin(scenario, [policy], seed, quiet)
    print_summary(results[0], Console())
    _write_outputs(results, json_out, html_out, f"gpuscale twin — {results[0].scenario}")
    if trace_out is not None:
        trace_out.write_text(dump_lines([p.trace for p in results[0].pods if p.trace is not None]), encoding="utf-8")


@app.command()
@user_errors
def compare(
    scenario: ScenarioArg = DEFAULT_SCENARIO,
    policy: Annotated[list[str] | None, typer.Option("--policy", help="Repeat for each policy to compare.")] = None,
    seed: SeedOpt = None,
    json_out: JsonOpt = None,
    html_out: HtmlOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Run several policies on the same scenario and seed; print them side by side (and overlay them in HTML)."""
    names = policy or ["gpuscale", "ca-defaults"]
    writable("--json", json_out)
    writable("--html", html_out)
    results = _run_twin(scenario, names, seed, quiet)
    print_comparison(results, Console())
    _write_outputs(results, json_out, html_out, f"gpuscale twin — {results[0].scenario}: {' vs '.join(names)}")


@app.command()
@user_errors
def pack(
    nodes: Annotated[Path | None, typer.Option("--nodes", help="openb node list CSV (default: the bundled "
                                               "openb_node_list_gpu_node.csv).")] = None,
    pods: Annotated[Path | None, typer.Option("--pods", help="openb pod list CSV (default: the bundled "
                                              "openb_pod_list_default.csv).")] = None,
    policy: Annotated[str, typer.Option("--policy", help="random, dotprod, clustering, packing, bestfit, fgd, "
                                        "gpuscale.")] = "fgd",
    seed: Annotated[int, typer.Option("--seed", help="Shuffle and resampling seed (the paper uses 42-51).")] = 42,
    tune: Annotated[float, typer.Option("--tune", help="Arrive pods until this multiple of the cluster's GPUs.")]
    = 1.3,
    output: FormatOpt = OutputFormat.TEXT,
) -> None:
    """The FGD paper's fragmentation experiment (Weng et al., ATC'23) on openb files: submit pods one by one under a
    placement policy and report allocated and fragmented GPU % for each percent of arrived GPU demand (docs/fgd.md)."""
    result = run_pack(nodes or bundled("openb_node_list_gpu_node.csv"), pods or bundled("openb_pod_list_default.csv"),
                      policy, seed, tune)
    if output is OutputFormat.JSON:
        json.dump(pack_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_pack(result, Console())


config_app = typer.Typer(name="config", no_args_is_help=True,
                         help="The configuration file: its JSON Schema for editors, and checking a file.")
app.add_typer(config_app)


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON Schema of the configuration file (as docs/config.schema.json), for editors to complete and check
    it: `# yaml-language-server: $schema=…` on a file's first line (docs/config.md)."""
    sys.stdout.write(schema_text())


@config_app.command("validate")
@user_errors
def config_validate(
    path: Annotated[Path, typer.Argument(help="A gpuscale configuration file.", show_default=False)],
) -> None:
    """Check a configuration file as `run` and `plan` read it: the first problem in one line naming the setting (exit
    2), or `ok` (exit 0)."""
    settings = load_config(path)
    print(f"{path}: ok ({len(settings.pools)} pools: {', '.join(p.name for p in settings.pools)})")

HELP_WIDTH = 140
"""Help printed to a pipe or file is this wide, so no option name is cut (rich would use 80 columns)."""


def main(argv: list[str] | None = None) -> None:
    """The `gpuscale` command. A usage error (unknown option, missing or bad argument) is one line and exit 2; the
    usage box is for `--help`."""
    if not sys.stdout.isatty() and not os.environ.get("TERMINAL_WIDTH"):
        rich_utils.MAX_WIDTH = HELP_WIDTH
    try:
        code = app(args=argv, standalone_mode=False, prog_name="gpuscale")
    except NoArgsIsHelpError:
        sys.exit(2)  # the help was printed
    except UsageError as err:
        command = err.ctx.command_path if err.ctx is not None else "gpuscale"
        print(f"gpuscale: error: {command}: {one_line(err.format_message(), 500)} (see '{command} --help')",
              file=sys.stderr)
        sys.exit(2)
    except ClickException as err:
        print(f"gpuscale: error: {one_line(err.format_message(), 500)}", file=sys.stderr)
        sys.exit(err.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("gpuscale: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


class ProviderName(StrEnum):
    KWOK = "kwok"
    CLUSTERAPI = "clusterapi"


def _read_traces(source: Path | None, url: str | None) -> list[PodTrace]:
    """JSON-lines traces from a file or a controller's `/traces` endpoint; any problem is one `InputError`."""
    if (source is None) == (url is None):
        raise InputError("gpuscale trace", "input", "give a trace file or --url, not both or neither")
    if url is not None:
        import urllib.error
        import urllib.request
        if not url.startswith(("http://", "https://")):
            raise InputError(url[:80], "--url", "expected http://HOST:PORT of a controller's trace endpoint")
        endpoint = url.rstrip("/") + ("" if url.rstrip("/").endswith("/traces") else "/traces")
        try:
            with urllib.request.urlopen(endpoint, timeout=30) as response:
                body = response.read(TRACE_BYTES + 1)
                if len(body) > TRACE_BYTES:
                    raise InputError(endpoint[:80], "--url", f"answer over the {TRACE_BYTES >> 20} MiB limit")
                return parse_lines(body.decode("utf-8"), endpoint)
        except (urllib.error.URLError, OSError, UnicodeDecodeError, ValueError) as err:
            reason = one_line(str(getattr(err, "reason", None) or err), 200)
            raise InputError(endpoint[:80], "--url", f"cannot fetch traces: {reason}") from None
    assert source is not None
    return parse_lines(read_text(source, TRACE_BYTES, "a trace file"), str(source))


@app.command()
@user_errors
def trace(
    source: Annotated[Path | None, typer.Argument(help="A JSON-lines trace file (gpuscale simulate --trace, or a "
                                                        "controller's trace file).")] = None,
    url: Annotated[str | None, typer.Option("--url", help="A running controller's trace endpoint, "
                                                          "http://127.0.0.1:PORT.")] = None,
    html_out: HtmlOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many of the slowest pods to show.")] = 5,
) -> None:
    """Where pods wait between Pending and Running: per pool and phase (p50/p95), the slowest pods with the phase
    that dominated, and their waterfalls (docs/tracing.md)."""
    writable("--html", html_out)
    traces = _read_traces(source, url)
    print_traces(traces, Console(), top=top)
    if html_out is not None:
        html_out.write_text(render_trace_html(traces, f"gpuscale trace — {source or url}"), encoding="utf-8")


@app.command()
@user_errors
def calibrate(
    source: Annotated[Path, typer.Argument(help="A JSON-lines trace recorded on the cluster to model.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the fitted start-up profile (YAML).")],
) -> None:
    """Fit the twin's per-pool start-up distributions (capacity, boot, registration, Ready, GPU registration, image
    pull, container start) to measured traces; load the profile with `calibrated_profiles:` in a scenario."""
    writable("--out", out)
    traces = _read_traces(source, None)
    fits = fit_profiles(traces)
    if not fits:
        raise InputError(str(source), "path", "no complete new-node trace with a pool: nothing to fit")
    out.write_text(profiles_yaml(fits, str(source)), encoding="utf-8")
    for pool, steps in fits.items():
        shown = ", ".join(f"{name} {fit.distribution.median:.2f}s" for name, fit in steps.items())
        print(f"{pool} ({next(iter(steps.values())).samples} traces): {shown}")


@app.command()
@user_errors
def run(
    config: Annotated[Path, typer.Option("--config", help="gpuscale configuration: pools and autoscaling options.")],
    kubeconfig: Annotated[Path | None, typer.Option(
        "--kubeconfig", help="Kubeconfig to reach the cluster; default: the in-cluster service account.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Wait for the cache to sync, run one tick, exit.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide and log; write nothing, add or remove no "
                                          "node.")] = False,
    provider: Annotated[ProviderName, typer.Option("--provider", help="Node provider.")] = ProviderName.KWOK,
    leader_elect: Annotated[bool | None, typer.Option(
        "--leader-elect/--no-leader-elect", help="Lease leader election: only the holder acts (default: on, off "
        "with --once).")] = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", help="The controller's namespace (status ConfigMap, Lease); default $POD_NAMESPACE, else "
        "kube-system.")] = None,
    lease_name: Annotated[str, typer.Option("--lease-name", help="Name of the leader Lease.")] = "gpuscale",
    lease_namespace: Annotated[str | None, typer.Option(
        "--lease-namespace", help="Namespace of the leader Lease; default --namespace.")] = None,
    lease_duration: Annotated[str, typer.Option(
        "--lease-duration", help="How long a standby waits after the last renewal it saw before taking over.")] = "15s",
    renew_deadline: Annotated[str, typer.Option(
        "--renew-deadline", help="The leader stops acting when it could not renew for this long.")] = "10s",
    retry_period: Annotated[str, typer.Option(
        "--retry-period", help="Interval between acquire/renew attempts.")] = "2s",
    status_configmap: Annotated[str, typer.Option(
        "--status-configmap", help="Name of the status ConfigMap in --namespace.")] = "gpuscale-status",
    metrics_address: Annotated[str, typer.Option(
        "--metrics-address", help="HOST:PORT for /metrics and /healthz (port 0: any free port).")] = "127.0.0.1:8085",
    kwok_ready_after: Annotated[str, typer.Option(
        "--kwok-ready-after", help="kwok provider: a new node turns Ready this long after it registers.")] = "2s",
    kwok_gpu_register_after: Annotated[str, typer.Option(
        "--kwok-gpu-register-after", help="kwok provider: its GPUs register this long after Ready.")] = "2s",
    trace_file: Annotated[Path | None, typer.Option("--trace-file", help="Append finished pod traces to this "
                                                                         "JSON-lines file.")] = None,
    trace_retention: Annotated[int, typer.Option("--trace-retention", min=1, help="Finished traces kept in "
                                                                                  "memory.")] = 10_000,
    pool_refresh_interval: Annotated[str, typer.Option(
        "--pool-refresh-interval", help="clusterapi provider: discover the node groups again this often (0s: every "
                                        "tick).")] = "60s",
    node_group_auto_discovery: Annotated[list[str] | None, typer.Option(
        "--node-group-auto-discovery", help="clusterapi provider, as CA: only node groups matching "
                                            "clusterapi:namespace=NS,clusterName=NAME,LABEL=VALUE (any part may be "
                                            "left out; repeat for several: a group any one matches).")] = None,
    log_format: Annotated[LogFormat, typer.Option(
        "--log-format", help="text, or json: one JSON object per line, each plan item's kind, pool/node/pod and "
                             "reasons as fields (docs/controller.md).")] = LogFormat.TEXT,
) -> None:
    """Run the autoscaler against a real cluster: list+watch, decide every scan_interval, act (docs/controller.md)."""
    import signal
    import threading

    from gpuscale.controller import RunOptions, build_controller, run_loop
    from gpuscale.kube.lease import LeaseSettings
    from gpuscale.kube.metrics import MetricsServer
    from gpuscale.kube.tracer import Tracer
    from gpuscale.providers.clusterapi import AUTO_DISCOVERY_FLAG, parse_auto_discovery
    from gpuscale.providers.kwok import KwokProfile, KwokSettings

    settings = load_config(config)
    specs = [parse_auto_discovery(spec) for spec in node_group_auto_discovery or ()]
    if specs and provider is not ProviderName.CLUSTERAPI:
        raise ConfigError(AUTO_DISCOVERY_FLAG, f"applies to --provider clusterapi, not {provider.value}")
    own_namespace = namespace or os.environ.get("POD_NAMESPACE") or "kube-system"
    durations = {}
    for flag, text in (("--lease-duration", lease_duration), ("--renew-deadline", renew_deadline),
                       ("--retry-period", retry_period), ("--kwok-ready-after", kwok_ready_after),
                       ("--kwok-gpu-register-after", kwok_gpu_register_after),
                       ("--pool-refresh-interval", pool_refresh_interval)):
        try:
            durations[flag] = parse_duration(text)
        except ValueError as err:
            raise ConfigError(flag, str(err)) from None
    if durations["--lease-duration"] != int(durations["--lease-duration"]):
        raise ConfigError("--lease-duration", f"must be whole seconds (a Lease field), got {lease_duration!r}")
    lease = LeaseSettings(name=lease_name, namespace=lease_namespace or own_namespace,
                          lease_duration_s=int(durations["--lease-duration"]),
                          renew_deadline_s=durations["--renew-deadline"], retry_period_s=durations["--retry-period"])
    options = RunOptions(namespace=own_namespace, leader_elect=not once if leader_elect is None else leader_elect,
                         lease=lease, status_name=status_configmap,
                         pool_refresh_s=durations["--pool-refresh-interval"])
    configure(log_format)
    server = None if once else MetricsServer(metrics_address)  # bound now: a port in use fails before anything starts
    try:
        api = api_client(kubeconfig)
        check_reachable(api)
    except Exception:
        if server is not None:
            server.close()
        raise
    kwok = KwokSettings(default=KwokProfile(ready_after_s=durations["--kwok-ready-after"],
                                            gpu_register_after_s=durations["--kwok-gpu-register-after"]))
    controller = build_controller(api, settings, dry_run=dry_run, kwok=kwok, options=options,
                                  tracer=Tracer(retention=trace_retention, sink=trace_file),
                                  provider_name=provider.value, auto_discovery=specs)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = run_loop(controller, once=once, stop=stop, server=server)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        controller.close()
        api.close()
    raise typer.Exit(code)
