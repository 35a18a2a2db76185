"""gpuscale on a real control plane, replaying a compressed demand day (issue 28's target), measured from the API.

Starts the e2e harness's control plane (tests/e2e/harness.py: kube-apiserver, kube-scheduler,
kube-controller-manager, kwok with deploy/kwok/stages.yaml) and the gpuscale controller with the kwok provider (its
loop in a thread, as `gpuscale run` runs it), replays the bundled default scenario's jobs for a seed (A100 gangs,
T4 jobs, CPU jobs; tests/e2e/day_replay.py says how they are picked and how the figures are computed), its times
divided by `--compress`, and prints cost, provisioned and idle GPU-hours, pending→running overall and for pods that
needed a new node, the node start-up chain, and the target check: p95 pending→running of new-node pods within 10 s
of the chain. Then replays the same pools, jobs and measured start-up samples in the twin and prints its prediction.

    PYTHONPATH=src:tests/e2e GPUSCALE_K8S_BIN=... .venv/bin/python bench/replay.py [--seed 42] [--pods 135]
        [--compress 120] [--boot 60] [--unneeded 120] [--no-nominations] [--record run.json]
    PYTHONPATH=src:tests/e2e .venv/bin/python bench/replay.py --from run.json   # a recorded run: figures, twin

`--record` writes the run (jobs with one pod each, what was recorded of every node and pod) as JSON; `--from` reads
one back and computes the same figures and the twin's prediction without a control plane (the same `--unneeded`,
`--boot` and `--no-nominations` must be given as when it was recorded; tests/e2e/data/replay-day.json was recorded
before nominations, D50, so it takes `--no-nominations`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from day_replay import (  # noqa: E402
    Chain,
    Figures,
    day_jobs,
    measure,
    measured_profiles,
    replay_config,
    run_from_json,
    run_real,
    run_to_json,
    twin_figures,
    twin_replay,
)
from harness import ControlPlane  # noqa: E402

from gpuscale.kube.connect import api_client  # noqa: E402
from gpuscale.providers.kwok import KwokProfile, KwokSettings  # noqa: E402

TARGET_S = 10.0
GPU_REGISTER_S = 5.0


def _figures(title: str, f: Figures) -> list[str]:
    return [f"{title}: cost ${f.cost_usd:.2f}, GPU-hours provisioned {f.gpu_hours_provisioned:.2f}, allocated "
            f"{f.gpu_hours_allocated:.2f}, idle {f.gpu_hours_idle:.2f}; nodes created {f.nodes_created}",
            f"  pending→running all pods: {f.pending_to_running}",
            f"  pending→running new-node pods: {f.new_node}"]


def _chain(c: Chain) -> list[str]:
    lines = ["node start-up chain (created → Ready → GPUs registered → pod running):"]
    lines += [f"  {pool}: created → Ready {s}" + (f"; Ready → GPUs {c.gpus[pool]}" if pool in c.gpus else "")
              for pool, s in c.ready.items()]
    lines += [f"  {pool}: bound → Ready {s}" for pool, s in c.pod_start.items()]
    lines += [f"  new-node pods: pod created → node created {c.reaction}",
              f"  new-node pods: node created → usable {c.usable}",
              f"  new-node pods: node usable → pod running {c.after}"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=42, help="the default scenario's seed (default 42)")
    parser.add_argument("--pods", type=int, default=135, help="pod budget (default 135)")
    parser.add_argument("--compress", type=float, default=120.0, help="time compression factor (default 120)")
    parser.add_argument("--boot", type=float, default=60.0, help="kwok node created → Ready, seconds (default 60)")
    parser.add_argument("--gpu-register", type=float, default=GPU_REGISTER_S,
                        help="kwok node Ready → GPUs registered, seconds (default 5)")
    parser.add_argument("--unneeded", type=float, default=120.0, help="unneeded time and delay after add (120)")
    parser.add_argument("--no-nominations", action="store_true",
                        help="nominate_pods off (D50): the policy before nominations")
    parser.add_argument("--record", type=Path, help="write the run (inputs and recorded objects) here as JSON")
    parser.add_argument("--from", dest="source", type=Path, help="a run written by --record: no control plane")
    args = parser.parse_args()
    if args.pods < 1 or args.compress <= 0 or args.boot < 0 or args.unneeded < 0:
        print("replay: --pods must be ≥ 1, --compress > 0, --boot and --unneeded ≥ 0", file=sys.stderr)
        return 2
    config, initial = replay_config(args.unneeded, nominate_pods=not args.no_nominations)
    jobs = day_jobs(args.seed, args.pods, args.compress)
    kwok = KwokSettings(default=KwokProfile(ready_after_s=args.boot, gpu_register_after_s=args.gpu_register))
    print(f"default scenario seed {args.seed}: {len(jobs)} jobs, {sum(j.pods for j in jobs)} pods "
          f"({sum(j.pods for j in jobs if j.requests.get('nvidia.com/gpu'))} GPU), a day compressed {args.compress:g}× "
          f"into {86_400 / args.compress:.0f} s; kwok boot {args.boot:g} s + GPUs {args.gpu_register:g} s; "
          f"unneeded time and delay after add {args.unneeded:g} s; scan {config.scan_interval_s:g} s, batch window "
          f"{config.policy.batch_idle_s:g} s / {config.policy.batch_max_s:g} s; nominations "
          f"{'on' if config.policy.nominate_pods else 'off'}", flush=True)
    started = time.monotonic()
    if args.source:
        run = run_from_json(json.loads(args.source.read_text()))
    else:
        with ControlPlane() as cp:
            api = api_client(cp.kubeconfig_path)  # the controller's own client, with its pool size
            run = run_real(api, config, jobs, kwok=kwok, initial=initial, namespace="replay",
                           timeout_s=1200, tail_s=args.unneeded + 60, progress=lambda line: print(line, flush=True))
            api.close()
    if args.record:
        args.record.write_text(json.dumps(run_to_json(run), indent=None, separators=(",", ":")) + "\n")
    wall = time.monotonic() - started
    measured, chain = measure(run, config.pools)
    result = twin_replay(run, config, measured_profiles(run, config.pools, kwok))
    predicted = twin_figures(result)
    lines = [f"wall {wall:.0f} s (run {run.end_s:.0f} s)", *_figures("measured", measured), *_chain(chain),
             *_figures("twin (same pools, jobs, start-up samples)", predicted)]
    for name, real, twin in (("cost", measured.cost_usd, predicted.cost_usd),
                             ("provisioned GPU-h", measured.gpu_hours_provisioned, predicted.gpu_hours_provisioned),
                             ("allocated GPU-h", measured.gpu_hours_allocated, predicted.gpu_hours_allocated),
                             ("p95 pending→running", measured.pending_to_running.p95,
                              predicted.pending_to_running.p95),
                             ("p95 new-node", measured.new_node.p95, predicted.new_node.p95)):
        lines.append(f"  twin / measured {name}: {twin / real:.3f}" if real else f"  {name}: measured 0")
    over = measured.new_node.p95 - chain.usable.p95
    lines.append(f"target: p95 pending→running of new-node pods {measured.new_node.p95:.1f} s vs p95 node start-up "
                 f"{chain.usable.p95:.1f} s: {over:+.1f} s → {'met' if over <= TARGET_S else 'NOT met'} "
                 f"(≤ {TARGET_S:g} s)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
