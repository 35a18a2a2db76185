"""Benchmark: CPU per engine decision, and of its scale-down stage, in the twin of `bench/twin.py`.

The twin decides every 10 simulated seconds with the engine's decision memo, as the control loop does. Prints the
number of decisions, `decide`'s process CPU per decision and that of `decide._scale_down` (the scale-down stage:
engine/scaledown.py with its `ScaleDownCache`). CPU time, not wall time: the machines are shared.
Run: `PYTHONPATH=. .venv/bin/python bench/twin_scaledown.py [--days 0.25] [--gpus 1000]`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.twin import scenario

import gpuscale.engine.decide as engine
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.pool import NodePool
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named


def _timed(spent: list[float], inner: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - start
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=0.25)
    parser.add_argument("--gpus", type=float, default=1000.0)
    args = parser.parse_args()
    decide_s, scale_down_s = [0.0], [0.0]
    engine._scale_down = _timed(scale_down_s, engine._scale_down)
    memo = IncrementalStore()
    decisions = [0]

    def decide(snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
               now: float) -> Plan:
        decisions[0] += 1
        return engine.decide(snapshot, pools, state, policy, now, store=memo)

    setup, config = parse_scenario(scenario(args.days, args.gpus), "bench")
    start = time.process_time()
    simulate(setup, policy_named("gpuscale", config), decide=_timed(decide_s, decide))
    total = time.process_time() - start
    n = max(decisions[0], 1)
    print(f"{decisions[0]} decisions in {args.days:g} days: decide {1000 * decide_s[0] / n:.2f} ms CPU each, "
          f"scale-down {1000 * scale_down_s[0] / n:.2f} ms; run {total:.1f} s CPU")


if __name__ == "__main__":
    main()
