"""`World.record` reads the pod's node's start-up milestones only on the long path (the node requested at or after the
pod's creation). Its records must equal those built, as before, with the node's milestones always handed to
`with_node`: pods that started or not, on nodes requested before, at or after their creation, blocked or not."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.lifecycle.phases import Milestone, with_node
from gpuscale.sim.cloud import CloudPool, NodeTimeline, SimCloud
from gpuscale.sim.cluster import SimCluster
from gpuscale.sim.core import Simulation
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.result import PodRecord
from gpuscale.sim.scheduler import SimScheduler
from gpuscale.sim.world import World, _PodTrack
from tests.builders import make_pod
from tests.sim.test_twin import a100_pool

OFFSETS = (-30.0, -0.5, 0.0, 0.5, 40.0)
"""Node request time minus pod creation time: before (short path), exactly at (long path), after."""
STEPS = ("acquired_s", "running_s", "registered_s", "ready_s", "gpu_s")
"""The timeline's start-up steps after the request, in order."""


def reference(world: World, track: _PodTrack) -> PodRecord:
    """The record as `World.record` built it before: the node's milestones always gathered and handed over."""
    started = track.times.get(Milestone.STARTED)
    node_name = track.pod.node_name
    timeline = world.cloud.timeline_of(node_name) if node_name else None
    if started is None:
        times, new_node = dict(track.times), False
    else:
        node_times = None if timeline is None else timeline.milestones()
        times, new_node = with_node(track.times, node_times)
    return world.record_with(track, times, new_node, timeline)


@settings(max_examples=200, deadline=None)
@given(created=st.floats(0.0, 1e4), offset=st.sampled_from(OFFSETS), bound=st.booleans(),
       started=st.booleans(), steps=st.lists(st.floats(0.0, 60.0), min_size=5, max_size=5),
       own=st.dictionaries(st.sampled_from((Milestone.UNSCHEDULABLE, Milestone.DECIDED, Milestone.REQUESTED)),
                           st.floats(0.0, 1e4)),
       blocked=st.sampled_from((None, 3.0)))
def test_record_equals_the_record_with_node_milestones_always_gathered(
        created: float, offset: float, bound: bool, started: bool, steps: list[float],
        own: dict[Milestone, float], blocked: float | None) -> None:
    sim = Simulation(start_s=created + 500.0)
    cluster = SimCluster()
    cloud = SimCloud(sim, cluster, {"a100": CloudPool(pool=a100_pool("a100", "zone-a"),
                                                      profile=PROFILES["gpu-large"])}, np.random.default_rng(3))
    world = World(sim=sim, cluster=cluster, scheduler=SimScheduler(sim, cluster, ["cpu", "nvidia.com/gpu"]),
                  cloud=cloud, rng=np.random.default_rng(3))
    at = created + offset
    timeline = NodeTimeline(pool="a100", request_id="a100-00001", requested_s=at, node="n1")
    for name, delay in zip(STEPS, steps, strict=True):
        at += delay
        setattr(timeline, name, at)
    cloud._by_node["n1"] = timeline
    times = {Milestone.CREATED: created, **own}
    if bound:
        times[Milestone.BOUND] = at + 1.0
    if started:
        times[Milestone.STARTED] = at + 9.0
    track = _PodTrack(make_pod("p", gpus=1, node="n1" if bound else None), "training", "default", times,
                      blocked_since=created + 1.0 if blocked is None else None, blocked_s=blocked or 0.0,
                      blocked_reason="PoolInBackoff: backed off")
    kept = dict(times)
    assert world.record(track) == reference(world, track)
    assert track.times == kept  # read, never changed
