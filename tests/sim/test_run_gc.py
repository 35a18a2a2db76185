"""A twin run collects the oldest generation rarely (after 100 middle-generation collections instead of 10), and
hands the collector back as it found it: after a run, and after a run that raised."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan
from gpuscale.engine.policy import Policy
from gpuscale.sim.cloud import CloudPool
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.run import TwinPolicy, TwinSetup, simulate
from tests.sim.test_twin import CPU_POOL, a100_pool, training

POLICY = TwinPolicy(name="p", policy=Policy())


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


def a_setup() -> TwinSetup:
    pools = (CloudPool(pool=CPU_POOL, profile=PROFILES["cpu"]),
             CloudPool(pool=a100_pool("a100", "zone-a"), profile=PROFILES["gpu-large"]))
    return TwinSetup(name="gc", pools=pools, jobs=(training("t", 60.0),), duration_s=1800.0)


def test_a_run_raises_the_oldest_threshold_and_puts_it_back(thresholds: tuple[int, int, int]) -> None:
    seen: list[tuple[int, int, int]] = []

    def observing(*args: Any) -> Plan:
        seen.append(gc.get_threshold())
        return decide(*args)

    result = simulate(a_setup(), POLICY, decide=observing)
    assert result.scale_ups >= 1 and set(seen) == {(700, 10, 100)}
    assert gc.get_threshold() == thresholds


def test_a_run_that_raises_puts_the_threshold_back(thresholds: tuple[int, int, int]) -> None:
    def failing(*args: Any) -> Plan:
        raise RuntimeError("a bug in decide")

    with pytest.raises(RuntimeError, match="a bug in decide"):
        simulate(replace(a_setup(), duration_s=60.0), POLICY, decide=failing)
    assert gc.get_threshold() == thresholds
