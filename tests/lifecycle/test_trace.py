"""The trace schema both worlds write: phases from milestones, the long and short paths, strict parsing — and the
schema test on both outputs (a twin run's `--trace` and the controller's tracer)."""

from __future__ import annotations

import json

import pytest

from gpuscale.lifecycle.phases import OPTIONAL_PHASES, Milestone, Phase, phases_of, with_node
from gpuscale.lifecycle.trace import SCHEMA_VERSION, PodTrace, build_trace, dump_lines, parse_lines
from gpuscale.model.errors import InputError

POD = {Milestone.CREATED: 100.0, Milestone.UNSCHEDULABLE: 101.0, Milestone.DECIDED: 103.0,
       Milestone.BOUND: 160.0, Milestone.PULLED: 170.0, Milestone.STARTED: 175.0}
NODE = {Milestone.REQUESTED: 104.0, Milestone.REGISTERED: 130.0, Milestone.READY: 140.0,
        Milestone.GPU_REGISTERED: 150.0}


def test_long_path_takes_the_nodes_milestones_and_phases_sum_to_the_wait() -> None:
    times, new_node = with_node(POD, NODE)
    assert new_node and times[Milestone.READY] == 140.0
    phases = phases_of(times)
    assert list(phases)[:2] == [Phase.FIRST_ATTEMPT, Phase.BLOCKED] and set(phases) == set(Phase)
    assert phases[Phase.FIRST_ATTEMPT] == 1.0 and phases[Phase.DECISION] == 2.0 and phases[Phase.REQUEST] == 1.0
    assert phases[Phase.REGISTRATION] == 26.0 and phases[Phase.GPU_REGISTRATION] == 10.0
    assert sum(phases.values()) == 75.0


def test_short_path_drops_node_milestones_even_a_decision() -> None:
    old_node = {**NODE, Milestone.REQUESTED: 50.0}
    times, new_node = with_node(POD, old_node)
    assert not new_node and Milestone.DECIDED not in times and Milestone.READY not in times
    phases = phases_of(times)
    assert phases[Phase.BIND] == 59.0 and phases[Phase.DECISION] == 0.0 and sum(phases.values()) == 75.0
    assert with_node(POD, None)[1] is False


def test_blocked_is_carved_out_of_the_decision_wait_and_capped_by_it() -> None:
    times, _ = with_node(POD, NODE)
    assert phases_of(times, blocked_s=1.5)[Phase.BLOCKED] == 1.5
    capped = phases_of(times, blocked_s=99.0)
    assert capped[Phase.BLOCKED] == 2.0 and capped[Phase.DECISION] == 0.0


def test_round_trip_and_the_open_record() -> None:
    times, new_node = with_node(POD, NODE)
    trace = build_trace(pod="ns/p", source="twin", times=times, new_node=new_node, pool="a100", node="n1")
    [back] = parse_lines(dump_lines([trace]), "mem")
    assert back == trace and back.pending_to_running_s == 75.0
    assert back.dominant_phase() == (Phase.REGISTRATION.value, 26.0)
    waiting = build_trace(pod="ns/q", source="controller", times={Milestone.CREATED: 5.0}, new_node=False,
                          pool=None, node=None)
    assert not waiting.complete and waiting.phases == {} and waiting.pending_to_running_s is None
    assert parse_lines(dump_lines([waiting]), "mem") == [waiting]


def _line(**change: object) -> str:
    times, new_node = with_node(POD, NODE)
    raw = build_trace(pod="ns/p", source="twin", times=times, new_node=new_node, pool="a100", node="n1").to_json()
    raw.update(change)
    return json.dumps(raw)


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "t.jsonl:1: (line): not JSON"),
    ("[1]", "t.jsonl:1: (record): expected a JSON object"),
    (_line(schema=2), f"t.jsonl:1: schema: expected {SCHEMA_VERSION}, got 2"),
    (_line(pod=""), "t.jsonl:1: pod: expected a non-empty string"),
    (_line(path="sideways"), "t.jsonl:1: path: expected"),
    (_line(milestones={"created": 0, "teleported": 1}), "t.jsonl:1: milestones.teleported: unknown"),
    (_line(phases={"decision": -1}), "t.jsonl:1: phases.decision: negative"),
    (_line(phases={"decision": 1.0}), "t.jsonl:1: phases: missing"),
    (_line(created_at="yesterday"), "t.jsonl:1: created_at: expected a finite number"),
])
def test_bad_records_name_the_line_and_field(line: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_lines(line, "t.jsonl")
    assert str(err.value).startswith(message), str(err.value)


def test_phases_that_do_not_sum_to_the_wait_are_refused() -> None:
    raw = json.loads(_line())
    raw["phases"]["image_pull"] += 5
    with pytest.raises(InputError, match="phases: sum"):
        parse_lines(json.dumps(raw), "t.jsonl")


def assert_schema(traces: list[PodTrace]) -> None:
    """What both worlds must write: parseable lines, every phase present and summing to pending→running, node
    milestones exactly on the long path."""
    assert traces
    again = parse_lines(dump_lines(traces), "again")
    assert again == traces
    node_only = {m.value for m in (Milestone.READY, Milestone.GPU_REGISTERED, Milestone.REQUESTED)}
    for trace in traces:
        if trace.complete:
            had = {p.value for p, m in OPTIONAL_PHASES.items() if m.value in trace.milestones}
            assert set(trace.phases) == {p.value for p in Phase if p not in OPTIONAL_PHASES} | had
            assert sum(trace.phases.values()) == pytest.approx(trace.pending_to_running_s, abs=0.01)
            assert bool(node_only & set(trace.milestones)) == trace.new_node, trace.to_json()
