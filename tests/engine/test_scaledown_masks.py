"""The removal simulation's feasibility masks kept within one decision (`_Simulation._feasible`): a candidate whose
first pod has the shape of an earlier candidate's takes that mask, narrowed to the rows still enabled, while the
running table changed only by rows disabled since. Every plan must equal the plan made with each mask computed afresh
on the running table — over the random clusters of the scale-down property tests, where candidates often lead with
pods of one shape, some fit nowhere, others are accepted and their pods placed (which must drop the kept masks).
Until a first pod is placed, masks are asked of the decision's table itself (no fork) and narrowed to the rows the
what-if enables; the masks made afresh are asked of the forked running table."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.policy import Policy
from gpuscale.engine.scaledown import ScaleDownResult, _Simulation
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.pod import OwnerRef, Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from tests.builders import make_node, make_pod
from tests.engine.test_scaledown_properties import NOW, PROPERTY, World, plan, worlds


def _fresh(self: _Simulation, pod: Pod) -> npt.NDArray[np.bool_]:
    return self.work.feasible(pod)


def _planned_both_ways(world: World) -> tuple[ScaleDownResult, ScaleDownResult, int]:
    """The plan with kept masks, the plan with every mask computed afresh, and how many masks were taken."""
    kept = _Simulation._feasible
    taken = 0

    def counting(self: _Simulation, pod: Pod) -> npt.NDArray[np.bool_]:
        nonlocal taken
        running = self._work if self._work is not None else self._table  # (not `work`: that would fork it)
        taken += running.topology is None and (pod.requests, pod.constraints) in self._masks
        return kept(self, pod)

    with mock.patch.object(_Simulation, "_feasible", counting):
        with_masks = plan(world)
    with mock.patch.object(_Simulation, "_feasible", _fresh):
        afresh = plan(world)
    return with_masks, afresh, taken


@st.composite
def alike(draw: st.DrawFn) -> World:
    """Nodes of one size whose movable pods come in two shapes (so candidates lead with pods of one shape), some nodes
    kept by a pod without a controller (destinations that are no candidates), every clock expired."""
    owner = OwnerRef(kind="ReplicaSet", name="rs", controller=True)
    shapes = [Resources.of(cpu=draw(st.sampled_from((500, 1000, 1500))), memory=2**30) for _ in range(2)]
    nodes, pods = [], []
    for i in range(draw(st.integers(2, 8))):
        nodes.append(make_node(f"n{i}", cpu="2", memory="8Gi", labels={POOL_LABEL: "cpu"}))
        used = 0
        if draw(st.integers(0, 3)) == 0:
            pods.append(replace(make_pod(f"k{i}", cpu="500m", memory="1Gi", node=f"n{i}")))
            used = 500
        for j in range(draw(st.integers(0, 3))):
            shape = draw(st.sampled_from(shapes))
            if used + shape.get("cpu") > 2000:
                break
            used += shape.get("cpu")
            pods.append(replace(make_pod(f"p{i}-{j}", node=f"n{i}"), requests=shape, owner=owner))
    return World(nodes=tuple(nodes), pods=tuple(pods), pdbs=(),
                 pools={"cpu": NodePool(name="cpu", allocatable=Resources(), min_size=0)},
                 policy=Policy(scale_down_utilization_threshold=draw(st.sampled_from((0.5, 0.8, 1.0))),
                               max_drain_parallelism=10),
                 unneeded_since={n.name: NOW - 5_000 for n in nodes})


@PROPERTY
@given(worlds())
def test_kept_masks_plan_as_fresh_ones(world: World) -> None:
    with_masks, afresh, _ = _planned_both_ways(world)
    assert with_masks == afresh


@settings(max_examples=300, deadline=None)
@given(alike())
def test_kept_masks_plan_as_fresh_ones_for_pods_alike(world: World) -> None:
    with_masks, afresh, _ = _planned_both_ways(world)
    assert with_masks == afresh


def test_a_mask_is_taken_for_a_later_candidate_of_one_shape_and_dropped_once_pods_move() -> None:
    """Four nodes each with one movable 1.5-CPU pod on 2 CPUs, and a 3-CPU node that a pod without a controller keeps
    (1 CPU used): the first candidate's pod goes there (the kept masks are dropped with the placement); the next
    candidates' pods then fit nowhere, the third and fourth on the mask the second made. A mask kept past the placement
    would send a second pod to the node that no longer has room."""
    owner = OwnerRef(kind="ReplicaSet", name="rs", controller=True)
    nodes = (*(make_node(f"n{i}", cpu="2", memory="8Gi", labels={POOL_LABEL: "cpu"}) for i in range(4)),
             make_node("n4", cpu="3", memory="8Gi", labels={POOL_LABEL: "cpu"}))
    pods = (*(replace(make_pod(f"p{i}", cpu="1500m", memory="1Gi", node=f"n{i}"), owner=owner) for i in range(4)),
            make_pod("keeper", cpu="1", memory="1Gi", node="n4"))
    world = World(nodes=nodes, pods=pods, pdbs=(),
                  pools={"cpu": NodePool(name="cpu", allocatable=Resources(), min_size=0)},
                  policy=Policy(scale_down_utilization_threshold=1.0, max_drain_parallelism=10),
                  unneeded_since={n.name: NOW - 5_000 for n in nodes})
    with_masks, afresh, taken = _planned_both_ways(world)
    assert with_masks == afresh
    assert taken == 2
    assert [r.node for r in with_masks.removals] == ["n0"]
    assert [v.node for v in with_masks.blocked] == ["n1", "n2", "n3", "n4"]
