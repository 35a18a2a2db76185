"""Benchmark: what a decision costs when nothing changed since the last one — the floor of a snapshot-fed engine.

Runs `bench/twin.py`'s scenario for `--hours` simulated hours, keeps the last decision's inputs, then decides again on
that very snapshot `--repeats` times with the loop's memo (as the next loop would if the cluster stood still), and
once without a memo. Prints the CPU per decision and what the week's 60,481 decisions would cost at that floor.
Run: `PYTHONPATH=. .venv/bin/python bench/decide_floor.py [--hours 12] [--repeats 500]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

from bench.twin import scenario

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named

WEEK_DECISIONS = 60_481
"""Decisions in `bench/twin.py`'s 7 days (a 10 s scan interval)."""


class _Last:
    """The engine's decide with the loop's memo, keeping the last call's inputs."""

    def __init__(self) -> None:
        self.memo = IncrementalStore()
        self.args: tuple[Any, ...] = ()

    def __call__(self, *args: Any) -> Plan:
        self.args = args
        return decide(*args, store=self.memo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=12.0)
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    setup, config = parse_scenario(scenario(args.hours / 24, 1000), "bench")
    last = _Last()
    simulate(setup, policy_named("gpuscale", config), decide=last)
    snapshot, pools, state, policy, now = last.args
    first = decide(snapshot, pools, state, policy, now, store=last.memo)
    cpu = time.process_time()
    for _ in range(args.repeats):
        again = decide(snapshot, pools, state, policy, now, store=last.memo)
    kept = (time.process_time() - cpu) / args.repeats
    cpu = time.process_time()
    fresh_plan = decide(snapshot, pools, state, policy, now)
    fresh = time.process_time() - cpu
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()} python {platform.python_version()}, {os.cpu_count()} CPUs, load {load}")
    print(f"snapshot after {args.hours:g} h: {len(snapshot.cluster.nodes)} nodes, {len(snapshot.cluster.pods)} pods")
    print(f"unchanged snapshot, with the memo: {1000 * kept:.2f} ms per decision (mean of {args.repeats}); "
          f"x {WEEK_DECISIONS:,} decisions = {kept * WEEK_DECISIONS:.1f} s")
    print(f"the same snapshot without a memo: {1000 * fresh:.1f} ms")
    print(f"plans equal: {first == again == fresh_plan}")


if __name__ == "__main__":
    main()
