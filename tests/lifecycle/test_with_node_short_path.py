"""`World.record` gathers a node's start-up milestones only for the long path: when the node was requested before the
pod was created, `with_node` must give the same times (and the short path) whether it is handed the node's milestones
or none at all — the premise of not gathering them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.lifecycle.phases import NODE_MILESTONES, Milestone, with_node

POD_MILESTONES = (Milestone.UNSCHEDULABLE, Milestone.DECIDED, Milestone.BOUND, Milestone.PULLED, Milestone.STARTED)
NODE_STEPS = (Milestone.ACQUIRED, Milestone.RUNNING, Milestone.REGISTERED, Milestone.READY, Milestone.GPU_REGISTERED)
times_s = st.floats(0.0, 1e5, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(created=times_s, before=st.floats(0.0, 1e4, allow_nan=False),
       pod=st.dictionaries(st.sampled_from(POD_MILESTONES + NODE_MILESTONES), times_s),
       node=st.dictionaries(st.sampled_from(NODE_STEPS), times_s))
def test_a_node_requested_before_the_pod_adds_nothing(created: float, before: float, pod: dict[Milestone, float],
                                                      node: dict[Milestone, float]) -> None:
    requested = created - before
    pod_times = {Milestone.CREATED: created, **pod}
    node_times = {Milestone.REQUESTED: requested, **node}
    handed, short = with_node(pod_times, node_times), with_node(pod_times, None)
    if requested < created:
        assert handed == short and list(handed[0]) == list(short[0]) and handed[1] is False
    else:  # requested exactly at creation: the long path, which the node's milestones do change
        assert handed[1] is True and handed[0][Milestone.REQUESTED] == requested
