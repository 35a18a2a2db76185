"""The twin's scheduler reads each pod request once per request object (found by identity, then by value) and keeps
one object per distinct constraints value; what it reads must be what a fresh read of that very request gives, even
as request objects die and new ones take their addresses (ids), and after its identity maps start over."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.taints import Toleration, TolerationOperator
from gpuscale.sim import scheduler as scheduler_module
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.scheduler import SimScheduler, _Request

COLUMNS = ["cpu", "memory", NVIDIA_GPU, GPU_MILLI]

request_st = st.tuples(st.integers(0, 4).map(lambda n: 500 * n), st.sampled_from([0, 2**30, 2**33]),
                       st.sampled_from([None, (GPU_MILLI, 250), (GPU_MILLI, 700), (NVIDIA_GPU, 1), (NVIDIA_GPU, 2),
                                        ("example.com/fpga", 1)]))
constraints_st = st.sampled_from([(), ("dedicated",), ("dedicated", "spot")])


def _fields(request: _Request) -> tuple[object, ...]:
    return (None if request.vec is None else request.vec.tolist(), request.wanted, request.need, request.shape,
            request.klass)


def _resources(cpu: int, memory: int, extra: tuple[str, int] | None) -> Resources:
    return Resources.of({"cpu": cpu, "memory": memory, **dict([extra] if extra else [])})


def _constraints(keys: tuple[str, ...]) -> SchedulingConstraints:
    return SchedulingConstraints(tolerations=tuple(Toleration(key=k, operator=TolerationOperator.EXISTS)
                                                   for k in keys))


@pytest.mark.parametrize("kept", [4, scheduler_module._OBJECTS_KEPT])
@given(st.lists(st.tuples(request_st, constraints_st, st.booleans()), min_size=1, max_size=80))
@settings(max_examples=150, deadline=None)
def test_a_request_reads_as_a_fresh_read_of_it(kept: int, steps: list[tuple[tuple[int, int, tuple[str, int] | None],
                                                                             tuple[str, ...], bool]]) -> None:
    """Each step makes new objects (the last step's die, so CPython hands their addresses to the next ones) or
    asks again with the objects kept from earlier; `kept` small makes the identity maps start over often."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scheduler_module, "_OBJECTS_KEPT", kept)
        sim, cluster = Simulation(), SimCluster()
        scheduler = SimScheduler(sim, cluster, COLUMNS, gpu_placement="gpuscale")
        plain = SimScheduler(Simulation(), SimCluster(), COLUMNS)  # no GPU workload counted: no class
        held: list[tuple[Resources, SchedulingConstraints]] = []
        kinds: list[tuple[tuple[Resources, SchedulingConstraints, int], int]] = []
        for (cpu, memory, extra), keys, again in steps:
            requests, constraints = _resources(cpu, memory, extra), _constraints(keys)
            if again and held:
                requests, constraints = held[(cpu + memory) % len(held)]
            elif cpu % 1000 == 0:
                held.append((requests, constraints))
            assert _fields(scheduler._request(requests)) == _fields(scheduler._read(requests))
            assert _fields(plain._request(requests)) == _fields(plain._read(requests))
            assert plain._request(requests).klass is None
            one = scheduler._constraint(constraints)
            assert one == constraints
            assert scheduler._constraint(replace(constraints)) is one  # one object per value
            pod = Pod(namespace="default", name=f"p{len(kinds)}", uid="u", requests=requests, constraints=constraints,
                      priority=cpu // 500 % 2)
            kinds.append(((requests, constraints, pod.priority), scheduler._enqueue(pod)[2]))
        for value, kind in kinds:  # a pod kind's number stands for its value
            assert all((kind == other) == (value == seen) for seen, other in kinds)
