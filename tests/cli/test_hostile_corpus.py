"""Issue 30's corpus: every bad input it names, through `main` as a user runs it — exit 2 (1 for an API server that
does not answer), one line on stderr naming the file, object and field, no traceback, bounded time and memory."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.inputs.files import CONFIG_BYTES, MAX_DEPTH
from gpuscale.inputs.yaml12 import ALIAS_NODES
from gpuscale.kube import connect
from gpuscale.lifecycle.phases import Milestone
from gpuscale.lifecycle.trace import NEW_NODE, SCHEMA_VERSION
from gpuscale.model.errors import ConfigError
from gpuscale.sim.scenario import MAX_DURATION_S, MAX_JOBS
from tests.cli.hostile import CLUSTER, CONFIG, OPENB, SCENARIOS, assert_refused, run_cli

POD = "Pod ml-training/llama-finetune-0"
NODE = "Node gpu-training-a100-h4m2"


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(CLUSTER.read_text()) if d]


def _dump(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    return _write(tmp_path, "cluster.json", json.dumps({"kind": "List", "items": docs}))


def _edit(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _pod_request(tmp_path: Path, resource: str, value: Any) -> Path:
    docs = _docs()
    _edit(docs, "Pod", "llama-finetune-0")["spec"]["containers"][0]["resources"]["requests"][resource] = value
    return _dump(tmp_path, docs)


# ------------------------------------------------------------------------------------------------ quantities (dump)

@pytest.mark.parametrize("value", ["1e400", "1E", "1e308", str(2**64 + 1), 1e26, "9223372036854776"])
@pytest.mark.parametrize("command", ["fit", "plan"])
def test_quantities_beyond_int64_milli_units_are_refused(tmp_path: Path, command: str, value: Any) -> None:
    dump = _pod_request(tmp_path, "nvidia.com/gpu" if isinstance(value, float) else "cpu", value)
    extra = ["--config", CONFIG] if command == "plan" else []
    assert_refused(run_cli(command, "--cluster", dump, *extra), POD, "resources.requests.", "out of range")


def test_node_allocatable_beyond_int64_is_refused(tmp_path: Path) -> None:
    docs = _docs()
    _edit(docs, "Node", "gpu-training-a100-h4m2")["status"]["allocatable"] = {"cpu": "1e400", "memory": "1Gi"}
    assert_refused(run_cli("fit", "--cluster", _dump(tmp_path, docs)), NODE, "status.allocatable.cpu",
                   "out of range")


def test_nodes_adding_up_beyond_int64_are_refused(tmp_path: Path) -> None:
    docs = [{"kind": "Node", "metadata": {"name": f"n{i}"}, "status": {"allocatable": {
        "cpu": "1", "memory": "8Ei" if i else "1Gi", "pods": "110"}}} for i in range(3)]
    docs[1]["status"]["allocatable"]["memory"] = "8191Ti"
    docs = [*docs, *({"kind": "Node", "metadata": {"name": f"m{i}"}, "status": {"allocatable": {
        "cpu": "1", "memory": "8000000Gi"}}} for i in range(1200))]
    docs = [d for d in docs if d["status"]["allocatable"]["memory"] != "8Ei"]
    assert_refused(run_cli("fit", "--cluster", _dump(tmp_path, docs)), "memory",
                   "the nodes' allocatable add up to more than int64")


@pytest.mark.parametrize(("resource", "value", "message"), [
    ("nvidia.com/gpu", "0.5", "must be a whole number (an extended resource)"),
    ("nvidia.com/gpu", 1.5, "must be a whole number"),
    ("nvidia.com/gpu", "500m", "must be a whole number"),
    ("cpu", "-1", "must be greater than or equal to 0"),
])
def test_fractional_gpus_and_negative_requests_are_refused(tmp_path: Path, resource: str, value: Any,
                                                           message: str) -> None:
    assert_refused(run_cli("fit", "--cluster", _pod_request(tmp_path, resource, value)), POD,
                   f"requests.{resource}", message)


# --------------------------------------------------------------------------------------------- other dump fields

@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda p: p["spec"].__setitem__("priority", 2**31), "spec.priority", "must fit in int32"),
    (lambda p: p["spec"].__setitem__("priority", -(2**31) - 1), "spec.priority", "must fit in int32"),
    (lambda p: p["spec"].__setitem__("priority", True), "spec.priority", "expected int"),
    (lambda p: p["metadata"]["labels"].__setitem__("bad key!", "x"), "metadata.labels.bad key!",
     "is not a label key"),
    (lambda p: p["metadata"]["labels"].__setitem__("-x.io/a", "x"), "metadata.labels.-x.io/a", "DNS subdomain"),
    (lambda p: p["metadata"]["labels"].__setitem__("app", "v" * 64), "metadata.labels.app", "not a label value"),
    (lambda p: p["metadata"]["labels"].update({"kueue.x-k8s.io/pod-group-name": "g"})
     or p["metadata"].setdefault("annotations", {}).update({"kueue.x-k8s.io/pod-group-total-count": "0"}),
     "pod-group-total-count", "gang size of at least 1"),
    (lambda p: p["metadata"]["labels"].update({"kueue.x-k8s.io/pod-group-name": "g"})
     or p["metadata"].setdefault("annotations", {}).update({"kueue.x-k8s.io/pod-group-total-count": "-3"}),
     "pod-group-total-count", "gang size of at least 1"),
])
def test_pod_fields_the_api_server_would_refuse(tmp_path: Path, edit: Any, field: str, message: str) -> None:
    docs = _docs()
    edit(_edit(docs, "Pod", "llama-finetune-0"))
    assert_refused(run_cli("fit", "--cluster", _dump(tmp_path, docs)), POD, field, message)


@pytest.mark.parametrize(("spec", "message"), [
    ({"minAvailable": "150%"}, "between 0% and 100%"),
    ({"maxUnavailable": "101%"}, "between 0% and 100%"),
    ({"minAvailable": -1}, "between 0 and 2147483647"),
    ({"minAvailable": "half"}, "an integer or a percentage"),
    ({"minAvailable": 1.5}, "an integer or a percentage"),
])
def test_pdb_budgets_are_integers_or_percentages_0_to_100(tmp_path: Path, spec: dict[str, Any],
                                                         message: str) -> None:
    pdb = {"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "ml-training"},
           "spec": {"selector": {"matchLabels": {"app": "x"}}, **spec}}
    assert_refused(run_cli("fit", "--cluster", _dump(tmp_path, [*_docs(), pdb])),
                   "PodDisruptionBudget ml-training/b", "spec.m", message)


@pytest.mark.parametrize("text", ["", "---\n", '{"kind": "List", "items": []}',
                                  "kind: Namespace\nmetadata: {name: a}\n"])
@pytest.mark.parametrize("command", ["fit", "plan"])
def test_an_empty_or_object_less_dump_says_so(tmp_path: Path, command: str, text: str) -> None:
    dump = _write(tmp_path, "empty.yaml", text)
    extra = ["--config", CONFIG] if command == "plan" else []
    assert_refused(run_cli(command, "--cluster", dump, *extra), str(dump), "no nodes and no pods in the dump")


# ------------------------------------------------------------------------------------------ dumps: size and shape

def test_deeply_nested_json_and_yaml_dumps_are_refused(tmp_path: Path) -> None:
    deep_json = _write(tmp_path, "deep.json", '{"kind": "Pod", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_refused(run_cli("fit", "--cluster", deep_json), "deep.json", "nested too deeply")
    deep_yaml = _write(tmp_path, "deep.yaml", "kind: Pod\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    assert_refused(run_cli("fit", "--cluster", deep_yaml), "deep.yaml", f"nested deeper than {MAX_DEPTH} levels")


def test_yaml_nesting_up_to_the_limit_is_read(tmp_path: Path) -> None:
    node = "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '1', memory: 1Gi}}\n"
    fine = _write(tmp_path, "ok.yaml", node + "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    assert run_cli("fit", "--cluster", fine).code == 0
    deep = _write(tmp_path, "deep.yaml", node + "x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    assert_refused(run_cli("fit", "--cluster", deep), "nested deeper than")


def _bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefghij", "bcdefghijk"[: levels - 1], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["dump", "config", "scenario"])
def test_a_yaml_alias_bomb_is_refused_early_with_a_short_message(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path, "bomb.yaml", ("kind: Pod\n" if kind == "dump" else "") + _bomb())
    args = {"dump": ["fit", "--cluster", path], "config": ["fit", "--cluster", CLUSTER, "--pools", path],
            "scenario": ["simulate", path, "--quiet"]}[kind]
    assert_refused(run_cli(*args), "bomb.yaml", f"aliases expand to more than {ALIAS_NODES} extra nodes")


def test_dev_zero_as_a_dump_reads_one_chunk(tmp_path: Path) -> None:
    assert_refused(run_cli("fit", "--cluster", "/dev/zero"), "/dev/zero", "not a text file")


def test_files_over_the_size_limit_are_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(CONFIG_BYTES + 1)  # sparse: its size is what is checked
    assert_refused(run_cli("fit", "--cluster", CLUSTER, "--pools", big), "big.yaml", "over the 4 MiB limit")


@pytest.mark.parametrize(("text", "message"), [
    (b"kind: Pod\nmetadata: {name: \x01}\n", "bad YAML"),
    (b"kind: Pod\nmetadata: {name: [\n", "bad YAML"),
    (b"\xff\xfe\x00k", "not a text file"),
    (b"\xff\xfekind", "not UTF-8"),
])
def test_unreadable_dumps_are_one_line(tmp_path: Path, text: bytes, message: str) -> None:
    assert_refused(run_cli("fit", "--cluster", _write(tmp_path, "c.yaml", text)), "c.yaml", message)


# ------------------------------------------------------------------------------------------------------ configs

def _config(tmp_path: Path, text: str) -> Path:
    return _write(tmp_path, "gpuscale.yaml", text)


POOL = "pools:\n  - name: gpu\n    allocatable: {cpu: '8', memory: 32Gi}\n"


@pytest.mark.parametrize(("text", "field", "message"), [
    (POOL + "    gpu: {model: T4, count: 1e30}\n", "pools[0].gpu.count", "expected an integer, got 1e+30"),
    (POOL + "    gpu: {model: T4, count: 1.5}\n", "pools[0].gpu.count", "expected an integer, got 1.5"),
    (POOL + "    gpu: {model: T4, count: 65}\n", "pools[0].gpu.count", "less than or equal to 64"),
    ("pools:\n  - name: gpu\n    allocatable: {cpu: 1e400, memory: 32Gi}\n", "pools[0].allocatable", "cpu:"),
    ("pools:\n  - name: gpu\n    allocatable: {cpu: '1e400', memory: 32Gi}\n", "pools[0].allocatable",
     "out of range"),
    ("pools:\n  - name: gpu\n    allocatable: {cpu: '8', memory: '10Mi '}\n", "pools[0].allocatable",
     "remove the spaces"),
    ("pools:\n  - name: gpu\n    allocatable: {cpu: '8', memory: 1Gi, nvidia.com/gpu: 0.5}\n",
     "pools[0].allocatable", "must be a whole number"),
    ("pools:\n  - name: gpu\n    allocatable: {cpu: true, memory: 1Gi}\n", "pools[0].allocatable",
     "expected a number or a string, got True"),
    (POOL + "    max_size: true\n", "pools[0].max_size", "expected an integer, got True"),
    (POOL + "    max_size: 10.0\n", "pools[0].max_size", "expected an integer"),
    (POOL + "    max_size: 1000000\n", "pools[0].max_size", "less than or equal to 100000"),
    (POOL + "    min_size: 5\n    max_size: 2\n", "pools[0]", "min_size 5 is above max_size 2"),
    (POOL + "    usd_per_hour: .nan\n", "pools[0].usd_per_hour", "expected a finite number"),
    (POOL + "    usd_per_hour: .inf\n", "pools[0].usd_per_hour", "expected a finite number"),
    (POOL + "    zero_or_max_scaling: yes\n", "pools[0].zero_or_max_scaling", "YAML 1.2"),
    (POOL + "    scale_down_enabled: 1\n", "pools[0].scale_down_enabled", "expected true or false"),
    (POOL + "    labels: {'bad key!': x}\n", "pools[0].labels", "is not a label key"),
    (POOL + "    labels: {app: 'a b'}\n", "pools[0].labels", "is not a label value"),
    (POOL + "    taints: [{key: 'a b', effect: NoSchedule}]\n", "pools[0].taints[0].key", "is not a label key"),
    (POOL + "cores_total: 2:30\n", "cores_total", "a minimum is not supported"),
    (POOL + "cores_total: '99999999999999999999999'\n", "cores_total", "expected MAX or MIN:MAX"),
    (POOL + "cores_total: '\u0663'\n", "cores_total", "expected MAX or MIN:MAX"),
    (POOL + "cores_total: 0:1_000\n", "cores_total", "expected MAX or MIN:MAX"),
    (POOL + "memory_total: '1e400'\n", "memory_total", "expected MAX or MIN:MAX"),
    (POOL + "memory_total: " + "9" * 400 + "\n", "memory_total", "expected MAX or MIN:MAX"),
    (POOL + "max_nodes_total: true\n", "max_nodes_total", "expected an integer"),
    (POOL + "scale_down_utilization_threshold: .nan\n", "scale_down_utilization_threshold", "finite"),
    (POOL + "scale_down_unneeded_time: -5m\n", "scale_down_unneeded_time", "zero or more"),
    (POOL + "scale_down_unneeded_time: .inf\n", "scale_down_unneeded_time", "finite duration"),
    (POOL + "scan_interval: 2:30\n", "scan_interval", "expected a duration"),
    (POOL + "    max_size: 5\n    max_size: 500\n", "line 5 column 5", "duplicate key 'max_size'"),
])
def test_config_values_are_refused_not_converted(tmp_path: Path, text: str, field: str, message: str) -> None:
    path = _config(tmp_path, text)
    assert_refused(run_cli("fit", "--cluster", CLUSTER, "--pools", path), f"{path}: {field}", message)


def test_a_yaml_merge_may_override_its_defaults(tmp_path: Path) -> None:
    from gpuscale.config import load_config
    text = "x: &p {name: gpu, allocatable: {cpu: '8', memory: 32Gi}, max_size: 3}\npools:\n  - {<<: *p, max_size: 7}\n"
    with pytest.raises(ConfigError, match="x: unknown setting"):
        load_config(_config(tmp_path, text))
    text = "pools:\n  - &p {name: gpu, allocatable: {cpu: '8', memory: 32Gi}, max_size: 3}\n  - {<<: *p, name: g2}\n"
    assert [p.max_size for p in load_config(_config(tmp_path, text)).pools] == [3, 3]


def test_yaml_1_2_numbers_are_read_as_written(tmp_path: Path) -> None:
    from gpuscale.config import load_config
    config = load_config(_config(tmp_path, POOL + "    max_size: 010\n    min_size: 0o7\n    labels: {on: 'no'}\n"))
    assert (config.pools[0].max_size, config.pools[0].min_size, config.pools[0].labels["on"]) == (10, 7, "no")


# ---------------------------------------------------------------------------------------------------- scenarios

def _scenario(tmp_path: Path, edit: Any) -> Path:
    raw = yaml.safe_load((SCENARIOS / "default.yaml").read_text())
    edit(raw)
    return _write(tmp_path, "scenario.yaml", yaml.safe_dump(raw))


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda r: r.__setitem__("duration", "100000h"), "duration",
     f"100000h is longer than the {MAX_DURATION_S / 86_400:g} days a scenario may run"),
    (lambda r: r.__setitem__("duration", "-1h"), "duration", "zero or more"),
    (lambda r: r.__setitem__("initial_nodes", {"cpu-general": 1e6}), "initial_nodes", "expected an integer"),
    (lambda r: r.__setitem__("initial_nodes", {"cpu-general": 1_000_000}), "initial_nodes.cpu-general",
     "above the pool's max_size 50"),
    (lambda r: r.__setitem__("initial_nodes", {"cpu-general": -1}), "initial_nodes", "greater than or equal to 0"),
    (lambda r: r["workload"]["training"].__setitem__("jobs_per_hour", 1e9), "workload",
     f"more than the {MAX_JOBS} a scenario may hold"),
    (lambda r: r["workload"]["services"][0].update(min_replicas=50, max_replicas=10), "workload.services.0",
     "min_replicas 50 is above max_replicas 10"),
    (lambda r: r.__setitem__("stockouts", [{"pool": "gpu-training-a100", "start": "11h", "end": "9h"}]),
     "stockouts.0", "end 32400s is before start 39600s"),
    (lambda r: r.__setitem__("stockout_probability", {"gpu-inference-t4": 1.5}), "stockout_probability",
     "less than or equal to 1"),
    (lambda r: r.__setitem__("workload", {"helios": {"scale_to_gpus": 1e12}}), "workload.helios.scale_to_gpus",
     "GPU-hours of demand over the scenario is more than the 200000"),
    (lambda r: r["workload"]["services"][0].update(peak_rps=1e300, rps_per_replica=1e-300),
     "workload.services.0.peak_rps", "less than or equal to 10000000"),
    (lambda r: r["workload"]["services"][0].update(spikes=[{"start": "1h", "duration": "1h", "factor": 1e300}]),
     "workload.services.0.spikes.0.factor", "less than or equal to 1000"),
    (lambda r: r.__setitem__("seed", True), "seed", "expected an integer"),
    (lambda r: r.__setitem__("seed", -1), "seed", "greater than or equal to 0"),
])
def test_scenario_sizes_and_pairs_are_checked_before_anything_runs(tmp_path: Path, edit: Any, field: str,
                                                                   message: str) -> None:
    path = _scenario(tmp_path, edit)
    assert_refused(run_cli("simulate", path, "--quiet"), f"{path}: {field}", message)


def test_a_binary_scenario_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.yaml", bytes(range(256)) * 8)
    assert_refused(run_cli("simulate", path, "--quiet"), "s.yaml", "not a text file")


def test_a_negative_seed_is_refused(tmp_path: Path) -> None:
    assert_refused(run_cli("simulate", "--seed", "-1", "--quiet"), "--seed", "between 0 and")


# -------------------------------------------------------------------------------- output paths, before the work

@pytest.mark.parametrize("option", ["--json", "--html", "--trace"])
def test_output_paths_are_checked_before_the_simulation(tmp_path: Path, option: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuscale.cli._run_twin", lambda *a, **k: pytest.fail("the twin ran"))
    assert_refused(run_cli("simulate", "--quiet", option, tmp_path), option, "is a directory")
    assert_refused(run_cli("simulate", "--quiet", option, tmp_path / "no" / "out"), option, "no directory")


def test_calibrate_and_trace_check_their_outputs_first(tmp_path: Path) -> None:
    trace = _write(tmp_path, "t.jsonl", "")
    assert_refused(run_cli("calibrate", trace, "--out", tmp_path), "--out", "is a directory")
    assert_refused(run_cli("trace", trace, "--html", tmp_path / "x" / "y.html"), "--html", "no directory")


# --------------------------------------------------------------------------------------------------------- traces

def _record(at: float) -> str:
    return json.dumps({"schema": SCHEMA_VERSION, "pod": "a/b", "source": "twin", "pool": None, "path": NEW_NODE,
                       "complete": False, "created_at": 0, "milestones": {next(iter(Milestone)).value: at},
                       "phases": {}}, allow_nan=True)


@pytest.mark.parametrize(("line", "message"), [
    (_record(at=-5), "negative"),
    (_record(at=float("nan")), "expected a finite number"),
    (_record(at=float("inf")), "expected a finite number"),
    ("[" * 5000 + "]" * 5000, "not JSON: nested too deeply"),
    ("1" * 5000, "not JSON"),
])
def test_bad_trace_lines_are_one_line(tmp_path: Path, line: str, message: str) -> None:
    assert_refused(run_cli("trace", _write(tmp_path, "t.jsonl", line + "\n")), "t.jsonl:1", message)


def test_a_malformed_trace_url_is_one_line() -> None:
    assert_refused(run_cli("trace", "--url", "http://[::1"), "--url", "Invalid IPv6 URL")


# ------------------------------------------------------------------------------------------------------ pack CSVs

def test_pack_inputs_are_one_line(tmp_path: Path) -> None:
    assert_refused(run_cli("pack", "--nodes", tmp_path / "missing.csv"), "missing.csv", "No such file")
    assert_refused(run_cli("pack", "--nodes", _write(tmp_path, "e.csv", "")), "e.csv", "no node with GPUs")
    assert_refused(run_cli("pack", "--nodes", _write(tmp_path, "b.csv", bytes(range(256)))), "b.csv",
                   "not a text file")
    header = (OPENB / "openb_pod_list_default.csv").read_text().splitlines()[0]
    assert_refused(run_cli("pack", "--pods", _write(tmp_path, "h.csv", header + "\n")), "h.csv",
                   "no pod asking for GPUs")
    many = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,100000000,P100\n"
    assert_refused(run_cli("pack", "--nodes", _write(tmp_path, "n.csv", many)), "n.csv row 2: gpu",
                   "expected an integer from 0 to 64")
    negative = "sn,cpu_milli,memory_mib,gpu,model\nn0,-1,262144,2,P100\n"
    assert_refused(run_cli("pack", "--nodes", _write(tmp_path, "m.csv", negative)), "m.csv row 2: cpu_milli")


@pytest.mark.parametrize("tune", ["1e9", "-1", "nan", "11"])
def test_pack_tune_is_range_checked(tune: str) -> None:
    assert_refused(run_cli("pack", "--tune", tune), "--tune", "between 0 (no resampling) and 10")


# ------------------------------------------------------------------------------------- the environment (kube API)

def test_kubeconfig_missing_garbage_or_a_directory_is_one_line(tmp_path: Path) -> None:
    for path, message in ((tmp_path / "none", "No such file"), (tmp_path, "is a directory"),
                          (_write(tmp_path, "kc", "garbage: [\n"), "not a usable kubeconfig"),
                          (_write(tmp_path, "kc2", "- 1\n- 2\n"), "not a usable kubeconfig")):
        for args in (["explain", "ns/p", "--config", CONFIG], ["run", "--config", CONFIG, "--once"]):
            assert_refused(run_cli(*args, "--kubeconfig", path), message)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on return: nothing listens there


def test_an_unreachable_api_server_is_exit_1_after_bounded_tries(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect, "RETRY_DELAYS_S", (0.0, 0.0))
    port = _closed_port()
    kubeconfig = _write(tmp_path, "kc", yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    for args in (["explain", "ns/p", "--config", CONFIG], ["run", "--config", CONFIG, "--once"]):
        assert_refused(run_cli(*args, "--kubeconfig", kubeconfig), f"cannot reach the API server at http://127.0.0.1:"
                                                                    f"{port} (tried 3 times)", code=1)


def test_run_outside_a_pod_without_kubeconfig_says_what_it_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert_refused(run_cli("run", "--config", CONFIG, "--once"), "in-cluster config (no --kubeconfig)",
                   "not running in a pod", "give --kubeconfig")


# ------------------------------------------------------------------------------------------------- usage errors

@pytest.mark.parametrize(("args", "message"), [
    (["fit"], "Missing option '--cluster'"),
    (["fit", "--bogus"], "No such option: --bogus"),
    (["plan", "--cluster"], "requires an argument"),
    (["simulate", "--seed", "x"], "Invalid value for '--seed'"),
    (["trace", "--top", "0"], "--top"),
    (["nosuchcommand"], "No such command"),
    (["plan", "--cluster", "c", "--config", "c", "--now", "soon"], "--now"),
])
def test_usage_errors_are_one_line(args: list[str], message: str) -> None:
    assert_refused(run_cli(*args), message, "--help')")


def test_now_must_be_finite_and_a_time_kubernetes_can_spell() -> None:
    for value in ("nan", "inf", "-inf"):
        assert_refused(run_cli("plan", "--cluster", CLUSTER, "--config", CONFIG, "--now", value), "--now",
                       "expected a finite number")
    for value in ("1e300", "-1"):
        assert_refused(run_cli("plan", "--cluster", CLUSTER, "--config", CONFIG, "--now", value), "--now",
                       "expected seconds from 1970 to 9999")
        assert_refused(run_cli("explain", "ns/p", "--cluster", CLUSTER, "--config", CONFIG, "--now", value), "--now")


def test_help_piped_cuts_no_option_name() -> None:
    done = run_cli("run", "--help")
    assert done.code == 0 and "--no-leader-elect" in done.out and "…" not in done.out


# --------------------------------------------------------------------------------------------- job-trace CSVs

JOBS_HEADER = "name,kind,team,submit_s,duration_s,pods,gpus_per_pod,gpu_milli,gpu_model,cpu_milli,memory_mib," \
              "priority,checkpoint_s,image_gb\n"
JOB = "j1,training,a,0,600,1,1,1000,nvidia-tesla-t4,1000,1024,0,0,1\n"


@pytest.mark.parametrize(("csv", "field", "message"), [
    (None, "file", "No such file"),
    (b"\x00\x01\x02", "byte 0", "not a text file"),
    (JOBS_HEADER + JOB.replace(",1,1,1000,", ",1,1000000000,1000,"), "row 2: gpus_per_pod", "between"),
    (JOBS_HEADER + JOB.replace(",0,0,1\n", ",0,0,1e308\n"), "row 2: image_gb", "at most 10000"),
    (JOBS_HEADER + JOB.replace(",0,600,", ",0,1e300,"), "row 2: duration_s", "at most"),
    (JOBS_HEADER + JOB.replace(",1024,0,", ",1024,3000000000,"), "row 2: priority", "between"),
    (JOBS_HEADER + JOB.replace(",1,1,1000,", ",0,1,1000,"), "row 2: pods", "must be"),
    (JOBS_HEADER + JOB.replace("j1,", "j" * 200_000 + ","), "(file)", "bad CSV: field larger than field limit"),
])
def test_a_scenario_job_trace_is_read_within_limits(tmp_path: Path, csv: str | bytes | None, field: str,
                                                    message: str) -> None:
    if csv is not None:
        _write(tmp_path, "jobs.csv", csv)
    path = _scenario(tmp_path, lambda r: r.__setitem__("workload", {"trace": "jobs.csv"}))
    assert_refused(run_cli("simulate", path, "--quiet"), field, message)


# ---------------------------------------------------------------------------------- explain: queue objects

@pytest.mark.parametrize("edit", [
    lambda w: w.__setitem__("status", ["not", "an", "object"]),
    lambda w: w["status"]["conditions"][0].__setitem__("lastTransitionTime", "yesterday"),
    lambda w: w["metadata"].__setitem__("ownerReferences", ["job"]),
])
def test_malformed_workloads_name_the_object(tmp_path: Path, edit: Any) -> None:
    from tests.cli.test_cli_explain import dump as explain_dump
    docs = [d for d in yaml.safe_load_all(explain_dump(tmp_path).read_text()) if d]
    edit(next(d for d in docs if d["kind"] == "Workload"))
    path = _write(tmp_path, "c.yaml", yaml.safe_dump_all(docs))
    done = run_cli("explain", "team-a/queued-0", "--cluster", path, "--config", CONFIG, "--now", "1800000000")
    if done.code != 0:
        assert_refused(done, "Workload team-a/")


def test_a_provisioning_request_count_must_be_a_whole_int32(tmp_path: Path) -> None:
    from tests.cli.test_cli_explain import dump as explain_dump
    docs = [d for d in yaml.safe_load_all(explain_dump(tmp_path).read_text()) if d]
    next(d for d in docs if d["kind"] == "ProvisioningRequest")["spec"]["podSets"][0]["count"] = True
    path = _write(tmp_path, "c.yaml", yaml.safe_dump_all(docs))
    done = run_cli("explain", "team-a/big", "--cluster", path, "--config", CONFIG, "--now", "1800000000",
                   "--format", "json")
    assert done.code == 0 and "count >= 1 (an int32)" in done.out, done.err
