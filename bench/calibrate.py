"""Calibration error on held-back data: fit the twin's start-up profile to one run's traces, predict another.

Ground truth is the twin itself with its published-figures profiles (sim/profiles.py): run a scenario with seed A,
fit `gpuscale calibrate`'s profile to its traces, then compare, on runs with seeds the fit never saw, (1) each fitted
step median with the held-back runs' measured step medians and (2) the p50 pending→running of new-node pods predicted
by the twin with the fitted profile against the held-back truth. Prints one line per figure.

    .venv/bin/python bench/calibrate.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from gpuscale.lifecycle.phases import percentile
from gpuscale.lifecycle.trace import PodTrace
from gpuscale.sim.calibrate import STEPS, fit_profiles, profiles_yaml
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named

SCENARIO = {
    "name": "calibration", "duration": "24h", "seed": 1,
    "config": {"pools": [
        {"name": "cpu", "usd_per_hour": 0.8, "min_size": 1, "max_size": 10,
         "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}},
        {"name": "t4", "usd_per_hour": 0.54, "max_size": 80,
         "labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
         "gpu": {"model": "nvidia-tesla-t4", "count": 1}, "allocatable": {"cpu": "4", "memory": "15Gi"}},
    ]},
    "stockout_probability": {"t4": 0.0, "cpu": 0.0},
    "workload": {"batch": {"jobs_per_hour": 30},
                 "services": [{"name": "chat", "peak_rps": 240, "rps_per_replica": 4, "max_replicas": 70,
                                   "spikes": [{"start": "3h", "duration": "20m", "factor": 3},
                                              {"start": "15h", "duration": "20m", "factor": 3}]}]},
}


def traces_of(seed: int, profile: Path | None = None) -> list[PodTrace]:
    raw = {**SCENARIO, "seed": seed, **({"calibrated_profiles": str(profile)} if profile else {})}
    setup, config = parse_scenario(raw, "bench")
    result = simulate(setup, policy_named("scenario", config))
    return [p.trace for p in result.pods if p.trace is not None and p.trace.complete]


def new_node_p50(traces: list[PodTrace], pool: str) -> float:
    return percentile([t.pending_to_running_s or 0.0 for t in traces if t.new_node and t.pool == pool], 50)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    fit_traces = traces_of(1)
    fits = fit_profiles(fit_traces)
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile.yaml"
        profile.write_text(profiles_yaml(fits, "seed 1"), encoding="utf-8")
        print(f"fitted on seed 1: {sum(t.new_node and t.pool == 't4' for t in fit_traces)} new-node t4 traces")
        errors: dict[str, list[float]] = {name: [] for name, _ in STEPS}
        p50_errors = []
        for seed in range(2, 2 + args.seeds):
            truth = traces_of(seed)
            for name, _ in STEPS:
                measured = percentile([t.phases.get(dict(STEPS)[name].value, 0.0) for t in truth
                                       if t.new_node and t.pool == "t4"], 50)
                fitted = fits["t4"][name].distribution.median
                if measured > 0:
                    errors[name].append(abs(fitted - measured) / measured)
            predicted = new_node_p50(traces_of(seed, profile), "t4")
            actual = new_node_p50(truth, "t4")
            p50_errors.append(abs(predicted - actual) / actual)
            print(f"seed {seed}: new-node t4 p50 pending→running measured {actual:.1f}s, predicted {predicted:.1f}s "
                  f"({(predicted - actual) / actual:+.1%})")
        for name, values in errors.items():
            if values:
                print(f"step {name}: mean |fitted median − held-back median| / held-back median = "
                      f"{sum(values) / len(values):.1%} over {len(values)} seeds")
        print(f"p50 pending→running (new-node t4): mean abs error {sum(p50_errors) / len(p50_errors):.1%}, "
              f"max {max(p50_errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
