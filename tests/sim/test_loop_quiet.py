"""The twin's loop skips a tick when nothing could come of it (`sim/run.py`, `_Loop._needed`): the results must be
the ones a loop that decides at every tick gets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.report.twin import result_json
from gpuscale.sim import run
from gpuscale.sim.scenario import load_scenario, policy_named


@pytest.mark.parametrize("policy", ["gpuscale", "ca-defaults"])
def test_skipped_ticks_change_nothing(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """8 hours of the default day. With `ca-defaults`, nodes whose removal failed are re-checked 5 minutes later: a
    quiet cluster must still tick then (without that, results differ here)."""
    setup, config = load_scenario("default")
    setup = replace(setup, duration_s=8 * 3600.0)
    twin_policy = policy_named(policy, config)
    skipping = result_json(run.simulate(setup, twin_policy), include_wall=False)
    monkeypatch.setattr(run._Loop, "_needed", lambda self: True)
    every = result_json(run.simulate(setup, twin_policy), include_wall=False)
    assert skipping.pop("sim_events") <= every.pop("sim_events")
    assert skipping == every
