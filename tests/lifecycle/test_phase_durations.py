"""`phase_durations` (the list the twin keys by phase name per finished pod) gives `phases_of`'s values, and both give
what the per-phase dict computation they replaced gave, float for float (compared by `repr`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuscale.lifecycle.phases import OPTIONAL_PHASES, ORDER, PHASES, Milestone, Phase, phase_durations, phases_of
from gpuscale.lifecycle.trace import build_trace


def former_phases_of(times: dict[Milestone, float], blocked_s: float) -> dict[Phase, float]:
    previous = times[Milestone.CREATED]
    result: dict[Phase, float] = {}
    for milestone, phase in ORDER:
        at = max(times.get(milestone, previous), previous)
        result[phase] = at - previous
        previous = at
    blocked = min(max(blocked_s, 0.0), result[Phase.DECISION])
    result[Phase.DECISION] -= blocked
    first = result.pop(Phase.FIRST_ATTEMPT)
    return {Phase.FIRST_ATTEMPT: first, Phase.BLOCKED: blocked, **result}


timings = st.fixed_dictionaries({Milestone.CREATED: st.floats(0, 1e6)},
                                optional={m: st.floats(0, 1e6) for m, _ in ORDER})


@given(timings, st.floats(-10, 1e5))
def test_phases_are_those_of_the_former_computation(times: dict[Milestone, float], blocked_s: float) -> None:
    expected = former_phases_of(times, blocked_s)
    assert repr(phases_of(times, blocked_s)) == repr(expected)
    assert list(expected) == list(PHASES) == list(Phase)
    assert repr(phase_durations(times, blocked_s)) == repr(list(expected.values()))


@given(timings, st.floats(0, 1e5))
def test_a_complete_trace_keys_them_by_name(times: dict[Milestone, float], blocked_s: float) -> None:
    times = {**times, Milestone.STARTED: times.get(Milestone.STARTED, times[Milestone.CREATED])}
    trace = build_trace(pod="ns/p", source="twin", times=times, new_node=False, pool=None, node=None,
                        blocked_s=blocked_s)
    expected = {k: v for k, v in former_phases_of(times, blocked_s).items()
                if k not in OPTIONAL_PHASES or OPTIONAL_PHASES[k] in times}  # an optional phase only with its step
    assert repr(list(trace.phases.items())) == repr([(k.value, v) for k, v in expected.items()])
