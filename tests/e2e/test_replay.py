"""A recorded real run holds the twin to it (issue 28): a few minutes of the default day replayed on the real control
plane with the controller (tests/e2e/day_replay.py), measured from the API objects, then the same pools, jobs
(measured submission offsets, requests read back from a real pod) and measured start-up samples replayed in the twin.
The twin must predict cost and GPU-hours within a few per cent and p95 pending→running within a few seconds.

Bounds: `bench/replay.py` (the full compressed day) and repeated runs of this test measured the twin/measured ratios
recorded in docs/benchmarks.md; the bounds below sit above that spread (the sum of the timestamps' ±1 s whole-second
resolution and the control plane's latencies the twin does not model), and well below what a wrong twin gives.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from day_replay import (
    clean_up,
    day_jobs,
    measure,
    measured_profiles,
    replay_config,
    run_real,
    twin_figures,
    twin_replay,
)
from harness import wait_for
from kubernetes import client

from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProfile, KwokSettings

SEED, PODS, COMPRESS = 42, 21, 1440.0
"""21 pods of the default day (T4, A100 and CPU jobs, one 4-pod A100 gang), the day in 60 s."""
KWOK = KwokSettings(default=KwokProfile(ready_after_s=15.0, gpu_register_after_s=3.0))
UNNEEDED_S = 30.0
COST_TOLERANCE, GPU_HOURS_TOLERANCE = 0.08, 0.10
P95_TOLERANCE_S = 5.0


@pytest.fixture
def replay_namespace(api_client: client.ApiClient, core_v1: client.CoreV1Api) -> Iterator[str]:
    name = f"replay-{uuid.uuid4().hex[:6]}"
    clean_up(api_client, "replay-none")
    wait_for(lambda: not core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items, 30,
             desc="no kwok-managed nodes left from earlier tests")
    yield name
    clean_up(api_client, name)


def test_a_real_run_replayed_in_the_twin_predicts_cost_gpu_hours_and_p95(
        api_client: client.ApiClient, replay_namespace: str) -> None:
    config, initial = replay_config(UNNEEDED_S)
    jobs = day_jobs(SEED, PODS, COMPRESS)
    assert {j.kind for j in jobs} == {"training", "batch"} and any(j.pods > 1 for j in jobs), jobs
    run = run_real(api_client, config, jobs, kwok=KWOK, initial=initial, namespace=replay_namespace, timeout_s=150,
                   tail_s=UNNEEDED_S + 30)
    measured, chain = measure(run, config.pools)
    assert measured.nodes_created >= 3 and measured.new_node.n >= 3, (measured, chain)
    # The chain kwok was asked for: Ready 15 s after creation, GPUs 3 s later (absolute deadlines, D39).
    for pool, ready in chain.ready.items():
        assert 14.0 <= ready.p50 <= 17.0, (pool, chain)
    predicted = twin_figures(twin_replay(run, config, measured_profiles(run, config.pools, KWOK)))
    story = f"measured {measured}\ntwin {predicted}\nchain {chain}"
    assert abs(predicted.cost_usd / measured.cost_usd - 1) <= COST_TOLERANCE, story
    assert abs(predicted.gpu_hours_provisioned / measured.gpu_hours_provisioned - 1) <= GPU_HOURS_TOLERANCE, story
    assert abs(predicted.gpu_hours_allocated / measured.gpu_hours_allocated - 1) <= GPU_HOURS_TOLERANCE, story
    assert abs(predicted.pending_to_running.p95 - measured.pending_to_running.p95) <= P95_TOLERANCE_S, story
    assert abs(predicted.new_node.p95 - measured.new_node.p95) <= P95_TOLERANCE_S, story
