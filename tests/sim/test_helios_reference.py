"""`openb_helios_jobs` reads plain Python values in its per-job loop and makes each drawn openb pod's requests and
constraints once; the jobs must be exactly those of the loop written with NumPy scalars and a fresh `_job` per draw
(restated here as the reference), for every window, seed, duration mode, cancel limit, team mix and GPU model; and
equal requests or constraints must be one object."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.sim.helios import (
    MINUTE_S,
    Durations,
    _Pool,
    bundled_curve,
    openb_helios_jobs,
    scaled_demand,
)
from gpuscale.sim.openb import OpenbPod, bundled, read_pods
from gpuscale.sim.synthetic import DEFAULT_TEAMS, Team
from gpuscale.sim.traces import GB, GKE_PLACEMENT, Placement
from gpuscale.sim.workloads import JobSpec


@cache
def _pods() -> tuple[OpenbPod, ...]:
    return tuple(read_pods(bundled("openb_pod_list_default.csv")))


def _reference(rng: np.random.Generator, openb_pods: Sequence[OpenbPod], *, start_minute: int, duration_s: float,
               scale_to_gpus: float, durations: Durations, min_duration_s: float, max_duration_s: float,
               cancel_above: float | None, teams: Sequence[Team], gpu_model: str = "",
               placement: Placement = GKE_PLACEMENT) -> list[JobSpec]:
    """The loop as it was: NumPy scalars per job, `np.clip`, `searchsorted`, `flatnonzero`, a new `_job` per draw."""
    target = scaled_demand(bundled_curve(), start_minute=start_minute, duration_s=duration_s,
                           scale_to_gpus=scale_to_gpus)
    pool = _Pool.of(openb_pods, durations, rng)
    limit = target * (1 + cancel_above) + 1.0 if cancel_above is not None else np.full(len(target), np.inf)
    cumulative_weights = np.cumsum([t.weight for t in teams])
    minutes = len(target)
    committed = np.zeros(minutes)
    jobs: list[JobSpec] = []
    for minute in range(minutes):
        while committed[minute] < target[minute]:
            i = int(rng.integers(len(pool.pods)))
            span_ms = max(1, min(60_000, round((duration_s - minute * MINUTE_S) * 1000)))
            submit_s = minute * MINUTE_S + int(rng.integers(span_ms)) / 1000
            run_s = float(np.clip(pool.lifetimes[i], min_duration_s, max_duration_s))
            team = teams[int(np.searchsorted(cumulative_weights, rng.uniform(0.0, cumulative_weights[-1]),
                                             side="right"))]
            gpus = float(pool.gpus[i])
            offset_s = submit_s - minute * MINUTE_S
            end = min(minute + math.ceil((offset_s + run_s) / MINUTE_S), minutes)
            first = min(minute + math.ceil((offset_s + min_duration_s) / MINUTE_S), end)
            over = np.flatnonzero(committed[first:end] + gpus > limit[first:end]) if gpus else np.empty(0)
            if len(over):
                end = first + int(over[0])
                run_s = end * MINUTE_S - submit_s
            committed[minute:end] += gpus
            pod = pool.pods[i]
            requests = pod.requests()
            gpu = pod.num_gpu > 0
            rule = placement.rule(gpu_model if gpu else "", requests)
            assert rule is not None
            image_gb = 0.5 if not gpu else 6.0 if pod.num_gpu == 1 else 12.0
            jobs.append(JobSpec(name=f"helios-{len(jobs):06d}", kind="training" if gpu else "batch", team=team.name,
                                submit_s=submit_s, requests=requests, constraints=rule.constraints(),
                                duration_s=max(round(run_s, 3), 0.001), priority=0, image_bytes=round(image_gb * GB)))
    return sorted(jobs, key=lambda j: (j.submit_s, j.name))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), start=st.integers(0, 44_000), minutes=st.integers(1, 200),
       scale=st.sampled_from([16.0, 200.0, 1000.0]), durations=st.sampled_from(list(Durations)),
       min_s=st.sampled_from([1.0, 60.0, 600.0]), max_s=st.sampled_from([600.0, 7 * 86_400.0]),
       cancel=st.sampled_from([None, 0.0, 0.1, 1.0]), odd_end=st.booleans(),
       teams=st.sampled_from([DEFAULT_TEAMS, (Team(name="a"),),
                              (Team(name="a", weight=0.0), Team(name="b", weight=2.0), Team(name="c"))]))
def test_jobs_equal_the_numpy_scalar_loop(seed: int, start: int, minutes: int, scale: float, durations: Durations,
                                          min_s: float, max_s: float, cancel: float | None, odd_end: bool,
                                          teams: Sequence[Team]) -> None:
    duration_s = minutes * MINUTE_S - (17.5 if odd_end else 0.0)
    kwargs = {"start_minute": start, "duration_s": duration_s, "scale_to_gpus": scale, "durations": durations,
              "min_duration_s": min(min_s, max_s), "max_duration_s": max_s, "cancel_above": cancel, "teams": teams}
    got = openb_helios_jobs(np.random.default_rng(seed), _pods(), bundled_curve(), **kwargs)  # type: ignore[arg-type]
    want = _reference(np.random.default_rng(seed), _pods(), **kwargs)  # type: ignore[arg-type]
    assert got == want


@pytest.mark.parametrize("gpu_model", ["", "nvidia-tesla-a100"])
def test_a_day_equals_the_numpy_scalar_loop(gpu_model: str) -> None:
    placement = GKE_PLACEMENT if not gpu_model else Placement(model_label="cloud.google.com/gke-accelerator",
                                                               gpu=GKE_PLACEMENT.gpu)
    kwargs = {"start_minute": 8640, "duration_s": 21_600.0, "scale_to_gpus": 300.0, "durations": Durations.OPENB,
              "min_duration_s": 60.0, "max_duration_s": 7 * 86_400.0, "cancel_above": 0.1, "teams": DEFAULT_TEAMS,
              "gpu_model": gpu_model, "placement": placement}
    got = openb_helios_jobs(np.random.default_rng(3), _pods(), bundled_curve(), **kwargs)  # type: ignore[arg-type]
    assert got == _reference(np.random.default_rng(3), _pods(), **kwargs)  # type: ignore[arg-type]
    assert len(got) > 300 and len({j.requests for j in got}) > 10
    # one object per distinct requests and constraints value (the caches keyed by them find the object they hold)
    assert len({id(j.requests) for j in got}) == len({j.requests for j in got})
    assert len({id(j.constraints) for j in got}) == len({j.constraints for j in got})
