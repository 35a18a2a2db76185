"""Nominations (`Plan.nominate`, `Policy.nominate_pods`, KEP-5278): a pending pod the decision expects on a registered
node that is still starting is named with that node, so kube-scheduler keeps the node's room for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot, UpcomingNode
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.selectors import LabelSelector, PodAffinityTerm
from tests.fakes import T0, make_pool, node_of, owned_pod

A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8)


def _plan(nodes: Sequence[Node], pods: Sequence[Pod], *, policy: Policy | None = None,
          upcoming: Sequence[UpcomingNode] = ()) -> Plan:
    """The plan without and with a decision memo: the same nominations."""
    snapshot = Snapshot(cluster=Cluster(nodes=tuple(nodes), pods=tuple(pods)), upcoming=tuple(upcoming))
    plain = decide(snapshot, [A100], EngineState(), policy or Policy(), T0)
    memo = decide(snapshot, [A100], EngineState(), policy or Policy(), T0, store=IncrementalStore())
    assert plain.nominate == memo.nominate
    return plain


def _gpu_pod(name: str, gpus: int = 4) -> Pod:
    return owned_pod(name, gpus=gpus, cpu=4_000, created_s=T0 - 60)


def test_pods_expected_on_a_registered_node_still_starting_are_nominated_to_it() -> None:
    starting = node_of(A100, "a100-1", created_s=T0 - 30, ready=False)
    plan = _plan([starting], [_gpu_pod("b"), _gpu_pod("a")])
    assert plan.scale_up == ()
    assert plan.nominate == (("default/a", "a100-1"), ("default/b", "a100-1"))


def test_a_ready_node_whose_gpus_have_not_registered_is_still_starting() -> None:
    waiting = node_of(A100, "a100-1", created_s=T0 - 90, gpus_registered=False)
    assert _plan([waiting], [_gpu_pod("a")]).nominate == (("default/a", "a100-1"),)


def test_no_nomination_for_usable_capacity_a_request_not_registered_or_a_pod_nominated_already() -> None:
    usable = node_of(A100, "a100-1", created_s=T0 - 900)
    assert _plan([usable], [_gpu_pod("a")]).nominate == ()  # the scheduler binds it now
    request = UpcomingNode(pool="gpu-training-a100", request_id="r-1", requested_s=T0 - 30)
    assert _plan([], [_gpu_pod("a")], upcoming=[request]).nominate == ()  # no Node object to name yet
    starting = node_of(A100, "a100-1", created_s=T0 - 30, ready=False)
    elsewhere = replace(_gpu_pod("a"), nominated_node="other-node")
    assert _plan([starting], [elsewhere, _gpu_pod("b")]).nominate == (("default/b", "a100-1"),)


def test_the_option_off_nominates_nothing() -> None:
    starting = node_of(A100, "a100-1", created_s=T0 - 30, ready=False)
    assert _plan([starting], [_gpu_pod("a")], policy=Policy(nominate_pods=False)).nominate == ()


def test_pods_beyond_the_starting_nodes_room_are_not_nominated_to_it() -> None:
    starting = node_of(A100, "a100-1", created_s=T0 - 30, ready=False)
    plan = _plan([starting], [_gpu_pod("a", 8), _gpu_pod("b", 8)])
    assert len(plan.nominate) == 1 and plan.nominate[0][1] == "a100-1"
    assert sum(s.nodes for s in plan.scale_up) == 1


def test_the_node_ordered_first_goes_to_the_pod_that_has_waited_longest_whatever_the_names() -> None:
    first = node_of(A100, "a100-z", created_s=T0 - 50, ready=False)
    second = node_of(A100, "a100-a", created_s=T0 - 20, ready=False)
    old = replace(_gpu_pod("zz-old", 8), created_s=T0 - 300)
    new = replace(_gpu_pod("aa-new", 8), created_s=T0 - 10)
    plan = _plan([second, first], [new, old])
    assert plan.nominate == (("default/aa-new", "a100-a"), ("default/zz-old", "a100-z"))


def test_a_pod_nominated_already_moves_when_an_older_pod_is_matched_to_its_node() -> None:
    first = node_of(A100, "a100-1", created_s=T0 - 50, ready=False)
    second = node_of(A100, "a100-2", created_s=T0 - 20, ready=False)
    kept = replace(_gpu_pod("kept", 8), created_s=T0 - 5, nominated_node="a100-1")
    old = replace(_gpu_pod("old", 8), created_s=T0 - 300)
    assert _plan([first, second], [kept, old]).nominate == (("default/kept", "a100-2"), ("default/old", "a100-1"))
    settled = replace(kept, nominated_node="a100-2"), replace(old, nominated_node="a100-1")
    assert _plan([first, second], settled).nominate == ()  # matched where they are: nothing to write


def test_an_older_pod_placed_on_a_requested_node_takes_the_registered_nodes_place_first() -> None:
    """The placement packs by name here (equal sizes), so it puts the newer pod on the registered node and the older
    one on the node only requested; the registered node, the first to come up, is matched to the older pod."""
    starting = node_of(A100, "a100-1", created_s=T0 - 30, ready=False)
    request = UpcomingNode(pool="gpu-training-a100", request_id="r-1", requested_s=T0 - 10)
    new = replace(_gpu_pod("aa-new", 8), created_s=T0 - 20)
    old = replace(_gpu_pod("zz-old", 8), created_s=T0 - 400)
    plan = _plan([starting], [new, old], upcoming=[request])
    assert plan.scale_up == () and plan.nominate == (("default/zz-old", "a100-1"),)


def test_pods_of_other_labels_share_the_room_unless_some_pod_places_by_labels() -> None:
    first = node_of(A100, "a100-1", created_s=T0 - 50, ready=False)
    second = node_of(A100, "a100-2", created_s=T0 - 20, ready=False)
    new = replace(_gpu_pod("aa-new", 8), created_s=T0 - 10, labels={"job": "a"})
    old = replace(_gpu_pod("zz-old", 8), created_s=T0 - 300, labels={"job": "z"})
    assert _plan([first, second], [new, old]).nominate == (("default/aa-new", "a100-2"), ("default/zz-old", "a100-1"))
    apart = SchedulingConstraints(tolerations=new.constraints.tolerations, pod_anti_affinity=(PodAffinityTerm(
        selector=LabelSelector(match_labels=(("job", "elsewhere"),)), topology_key="kubernetes.io/hostname"),))
    placed = _plan([first, second], [replace(new, constraints=apart), old]).nominate  # each keeps its own place
    assert placed == (("default/aa-new", "a100-1"), ("default/zz-old", "a100-2"))
