"""Cost of the controller's phase tracer per watch event, and its memory bound.

Feeds `Tracer.on_object` the watch events a cluster produces for N pods (ADDED, Unschedulable, bound, Pulled Event,
Ready) spread over N/8 new 8-GPU nodes (ADDED, Ready, GPUs registered), with a tick report deciding each pod, and
prints events per second and the traces kept. The tracer runs on the watch threads, so this is the extra work per
event the cache's threads do.

    PYTHONPATH=. .venv/bin/python bench/tracer.py [--pods 50000] [--retention 10000] [--memory]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc

from tests.kube.test_tracer import T0, event, node, pod

from gpuscale.engine.plan import Plan, ScaleUp
from gpuscale.kube.tracer import Tracer
from gpuscale.loop.report import ScaleUpDone, TickReport


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--retention", type=int, default=10_000)
    parser.add_argument("--memory", action="store_true", help="trace allocations (slows the run several-fold)")
    args = parser.parse_args()
    clock = [T0]
    tracer = Tracer(clock=lambda: clock[0], retention=args.retention)
    events = ticks = 0
    if args.memory:
        tracemalloc.start()
    started = time.perf_counter()
    for batch in range(0, args.pods, 8):
        name = f"n{batch}"
        keys = tuple(f"ns/p{i}" for i in range(batch, min(batch + 8, args.pods)))
        for key in keys:
            tracer.on_object("Pod", "ADDED", pod(key[3:]), False)
            tracer.on_object("Pod", "MODIFIED", pod(key[3:], unschedulable=T0), False)
        tracer.on_object("Node", "ADDED", node(name), False)
        tracer.on_tick(TickReport(now_s=clock[0], synced=True,
                                  plan=Plan(scale_up=(ScaleUp(pool="a100", nodes=1, pods=keys, reasons=()),)),
                                  scaled_up=(ScaleUpDone(pool="a100", nodes=1, request_ids=(name,)),)))
        tracer.on_object("Node", "MODIFIED", node(name, ready=T0), False)
        tracer.on_object("Node", "MODIFIED", node(name, ready=T0, gpus=8), False)
        for key in keys:
            tracer.on_object("Pod", "MODIFIED", pod(key[3:], node=name), False)
            tracer.on_object("Event", "ADDED", event("Pulled", key[3:]), False)
            tracer.on_object("Pod", "MODIFIED", pod(key[3:], node=name, ready=T0 + 1), False)
            tracer.on_object("Pod", "DELETED", pod(key[3:], node=name, ready=T0 + 1), False)
        tracer.on_object("Node", "DELETED", node(name), False)
        events += 5 * len(keys) + 4
        ticks += 1
        clock[0] += 0.01
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] if args.memory else 0
    print(f"{args.pods:,} pods, {events:,} watch events, {ticks:,} ticks in {elapsed:.2f} s: "
          f"{events / elapsed:,.0f} events/s ({elapsed / events * 1e6:.1f} µs/event, object building included)")
    memory = f"; peak traced memory {peak / 2**20:.1f} MiB" if args.memory else ""
    print(f"finished traces kept: {len(tracer.traces()):,} (retention {args.retention:,}){memory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
