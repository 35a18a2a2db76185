"""Mutation fuzzing of real inputs through `main` in-process (issue 30, item 5): cluster dumps, configurations,
scenarios, traces and pack CSVs, broken by Hypothesis at the byte level and in their structure. Whatever comes in,
`gpuscale` exits 0, 1 or 2, prints no traceback, says exactly one line on stderr when it exits 2, and allocates a
bounded amount of memory. Examples are few and derandomized, so the module costs well under a minute."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.lifecycle.phases import Milestone
from gpuscale.lifecycle.trace import build_trace, dump_lines
from tests.cli.hostile import CLUSTER, CONFIG, OPENB, Done, run_cli
from tests.cli.test_cli_explain import dump as explain_dump

PEAK_BYTES = 256 * 2**20
"""Python allocations one run may peak at: the seed inputs need a few MiB; an expansion bomb would need gigabytes."""

EXAMPLES = int(os.environ.get("GPUSCALE_FUZZ_EXAMPLES", "0"))
"""Set (e.g. 500) for a longer, randomly seeded hunt; unset, each target runs 25 derandomized examples."""
FUZZ = settings(max_examples=EXAMPLES or 25, deadline=None, derandomize=not EXAMPLES, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NASTY = ["1e400", "1E", "-1", "0", "NaN", ".nan", ".inf", "true", "yes", "on", "2:30", "~", "null", "0x1f", "010",
         "9223372036854775808", "1" * 30, "'", '"', "[", "{", "}", "]", ":", "- ", "&a ", "*a", "<<: *a", "!!int x",
         "%", "150%", "\t", "\n", "\x00", "\x01", "\u2028", "\ufeff", "é", "a" * 300, "10Mi ", "0.5", "-0", "1_000"]
VALUES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 2**31, 2**63, 2**64 + 1, 10**400, 1.5, 1e308, float("nan"),
                     float("inf"), -float("inf"), "", "1e400", "2:30", "150%", "yes", "-5m", "a" * 300, [], {}]),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=8), st.integers(), max_size=3))


@st.composite
def mutated_text(draw: st.DrawFn, text: str) -> str:
    """`text` with a few byte-level edits: slices deleted, duplicated or replaced, nasty tokens inserted."""
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        end = draw(st.integers(min_value=at, max_value=min(len(text), at + 40)))
        edit = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        token = draw(st.one_of(st.sampled_from(NASTY), st.text(max_size=6)))
        text = {"delete": text[:at] + text[end:], "insert": text[:at] + token + text[at:],
                "replace": text[:at] + token + text[end:], "duplicate": text[:end] + text[at:]}[edit]
    return text


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


@st.composite
def mutated_value(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` (parsed JSON/YAML) with one to three values replaced by hostile ones, at any depth."""
    doc = json.loads(json.dumps(doc, default=str))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from([p for p in _paths(doc) if p]))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = draw(VALUES)
    return doc


@contextmanager
def bounded_memory() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"


def check(done: Done) -> None:
    assert done.code in (0, 1, 2), (done.code, done.err[-1500:])
    assert "Traceback" not in done.err and "Traceback" not in done.out, done.err[-1500:]
    if done.code == 2:
        assert done.err.startswith("gpuscale: error: ") and done.err.count("\n") == 1, done.err[-1500:]
        assert len(done.err) <= 1100


def fuzz(name: str, content: str | bytes, command: Callable[[Path], list[str | Path]]) -> None:
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
        with bounded_memory():
            done = run_cli(*command(path))
        check(done)


def _dump_yaml(doc: Any) -> str:
    return yaml.safe_dump_all(doc) if isinstance(doc, list) else yaml.safe_dump(doc)


CLUSTER_TEXT = CLUSTER.read_text()
CLUSTER_DOCS = [d for d in yaml.safe_load_all(CLUSTER_TEXT) if d]
CONFIG_TEXT = CONFIG.read_text()
CONFIG_DOC = yaml.safe_load(CONFIG_TEXT)


@FUZZ
@given(mutated_text(CLUSTER_TEXT))
def test_mutated_dump_text(text: str) -> None:
    fuzz("cluster.yaml", text, lambda p: ["plan", "--cluster", p, "--config", CONFIG, "--now", "1764633600"])


@FUZZ
@given(mutated_value(CLUSTER_DOCS), st.booleans())
def test_mutated_dump_values(docs: list[Any], as_json: bool) -> None:
    text = json.dumps({"kind": "List", "items": docs}) if as_json else _dump_yaml(docs)
    fuzz("cluster.json" if as_json else "cluster.yaml", text, lambda p: ["fit", "--cluster", p, "--pools", CONFIG])


@FUZZ
@given(mutated_text(CONFIG_TEXT))
def test_mutated_config_text(text: str) -> None:
    fuzz("gpuscale.yaml", text, lambda p: ["plan", "--cluster", CLUSTER, "--config", p, "--now", "1764633600"])


@FUZZ
@given(mutated_value(CONFIG_DOC))
def test_mutated_config_values(doc: Any) -> None:
    fuzz("gpuscale.yaml", _dump_yaml(doc), lambda p: ["plan", "--cluster", CLUSTER, "--config", p,
                                                       "--now", "1764633600"])


def _explain_docs() -> list[Any]:
    with TemporaryDirectory() as tmp:
        return [d for d in yaml.safe_load_all(explain_dump(Path(tmp)).read_text()) if d]


EXPLAIN_DOCS = _explain_docs()


@FUZZ
@given(mutated_value(EXPLAIN_DOCS), st.sampled_from(["team-a/queued-0", "team-a/plain-0", "team-a/big"]))
def test_mutated_explain_dump(docs: list[Any], target: str) -> None:
    """Workloads, ProvisioningRequests and PodTemplates too: `explain` reads them beyond what `fit` and `plan` do."""
    fuzz("cluster.yaml", _dump_yaml(docs), lambda p: ["explain", target, "--cluster", p, "--config", CONFIG,
                                                       "--now", "1800000000"])


SCENARIO_DOC = {"name": "fuzz", "duration": "10m", "seed": 1, "config": CONFIG_DOC,
                "initial_nodes": {"cpu-general": 1}, "stockouts": [{"pool": "gpu-training-a100", "start": "1m",
                                                                     "end": "2m"}],
                "workload": {"training": {"jobs_per_hour": 2}, "batch": {"jobs_per_hour": 2},
                             "services": [{"name": "chat", "peak_rps": 5, "rps_per_replica": 2}],
                             "pause": {"replicas": 1}}}


class Accepted(Exception):
    """The scenario parsed: the fuzz stops before simulating it (a valid month of virtual time takes minutes)."""


def _fuzz_scenario(text: str) -> None:
    def accept(*_: Any, **__: Any) -> Any:
        raise Accepted

    with mock.patch("gpuscale.cli.run_simulation", accept), suppress(Accepted):
        fuzz("scenario.yaml", text, lambda p: ["simulate", p, "--quiet"])


@FUZZ
@given(mutated_text(_dump_yaml(SCENARIO_DOC)))
def test_mutated_scenario_text(text: str) -> None:
    _fuzz_scenario(text)


@FUZZ
@given(mutated_value(SCENARIO_DOC))
def test_mutated_scenario_values(doc: Any) -> None:
    _fuzz_scenario(_dump_yaml(doc))


def _traces() -> str:
    milestones = list(Milestone)
    traces = [build_trace(pod=f"ml/p{i}", source="twin", times={m: float(i + k) for k, m in
                                                                 enumerate(milestones)},
                          new_node=True, pool="a100", node=f"n{i}") for i in range(4)]
    return dump_lines(traces)


TRACES = _traces()


@FUZZ
@given(mutated_text(TRACES), st.booleans())
def test_mutated_traces(text: str, calibrate: bool) -> None:
    def command(path: Path) -> list[str | Path]:
        return ["calibrate", path, "--out", path.with_suffix(".yaml")] if calibrate else ["trace", path]

    fuzz("t.jsonl", text, command)


@FUZZ
@given(mutated_value([json.loads(line) for line in TRACES.splitlines()]))
def test_mutated_trace_values(records: list[Any]) -> None:
    fuzz("t.jsonl", "".join(json.dumps(r) + "\n" for r in records), lambda p: ["trace", p])


NODES_CSV = "\n".join((OPENB / "openb_node_list_gpu_node.csv").read_text().splitlines()[:6]) + "\n"
PODS_CSV = "\n".join((OPENB / "openb_pod_list_default.csv").read_text().splitlines()[:12]) + "\n"


@FUZZ
@given(mutated_text(NODES_CSV), mutated_text(PODS_CSV), st.booleans())
def test_mutated_pack_csvs(nodes: str, pods: str, mutate_nodes: bool) -> None:
    with TemporaryDirectory() as tmp:
        pods_path = Path(tmp) / "pods.csv"
        pods_path.write_text(PODS_CSV if mutate_nodes else pods, encoding="utf-8", errors="surrogatepass")
        fuzz("nodes.csv", nodes if mutate_nodes else NODES_CSV,
             lambda p: ["pack", "--nodes", p, "--pods", pods_path, "--tune", "1.3"])


@settings(FUZZ, max_examples=EXAMPLES or 12)
@given(st.binary(max_size=2000))
def test_random_bytes_as_every_kind_of_file(data: bytes) -> None:
    for name, command in (("c.yaml", lambda p: ["fit", "--cluster", p]),
                          ("g.yaml", lambda p: ["fit", "--cluster", CLUSTER, "--pools", p]),
                          ("t.jsonl", lambda p: ["trace", p])):
        fuzz(name, data, command)
