"""Scale-down's memo only saves work: with history (`ScaleDownCache` kept from one plan to the next), every plan equals
the one `plan_scale_down` computes from scratch, over sequences of random clusters where some node, pod, PDB and
policy objects stay the very same and others are replaced, added, removed or reordered (Hypothesis)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from gpuscale.engine import scaledown
from gpuscale.engine.drain import DO_NOT_DISRUPT
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaledown import ScaleDownCache, ScaleDownResult, plan_scale_down, unneeded_since_from_taints
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.facts import NodeFacts, derive
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.selectors import LabelSelector
from gpuscale.model.taints import Taint, TaintEffect
from tests.engine.test_scaledown import node, pod, pools_for
from tests.engine.test_scaledown_properties import NOW, World, worlds


def _clocked(world: World) -> World:
    """The world's unneeded clocks as the nodes' deletion-candidate taints (where the memo reads them)."""
    def clocked(n: Node) -> Node:
        since = world.unneeded_since.get(n.name)
        if since is None:
            return n
        return replace(n, taints=(*n.taints, Taint(key=DELETION_CANDIDATE_TAINT, value=str(since),
                                                   effect=TaintEffect.PREFER_NO_SCHEDULE)))
    nodes = tuple(map(clocked, world.nodes))
    return replace(world, nodes=nodes)


def _mixed(old: World, new: World, keep: list[bool]) -> World:
    """`new`, except that some of its nodes and pods are `old`'s very objects of the same name (and, with `keep[0]`,
    the policy and PDBs are `old`'s too)."""
    old_nodes = {n.name: n for n in old.nodes}
    old_pods = {p.name: p for p in old.pods}
    nodes = tuple(old_nodes.get(n.name, n) if keep[i % len(keep)] else n for i, n in enumerate(new.nodes))
    names = {n.name for n in nodes}
    pods = tuple(p2 if keep[(i + 1) % len(keep)] and (p2 := old_pods.get(p.name, p)).node_name in names else p
                 for i, p in enumerate(new.pods))
    if keep[0]:
        return replace(new, nodes=nodes, pods=pods, policy=old.policy, pdbs=old.pdbs)
    return replace(new, nodes=nodes, pods=pods)


def _facts(nodes: Sequence[Node], pools: Mapping[str, NodePool]) -> dict[str, NodeFacts]:
    return {n.name: derive(n, None, pools) for n in nodes}


def _plan(world: World, memo: ScaleDownCache | None, order: list[Node]) -> ScaleDownResult:
    """From scratch, or as `decide` plans: from the decision memo's node facts, with the memo's history."""
    by_node: dict[str, list[Pod]] = {n.name: [] for n in world.nodes}
    for p in world.pods:
        by_node.setdefault(p.node_name or "", []).append(p)
    table = whatif_of(world.nodes, [n.allocatable for n in world.nodes], world.pods)
    if memo is None:
        return plan_scale_down(nodes=world.nodes, table=table, pods_by_node=by_node, pools=world.pools,
                               pool_of={n.name: n.labels[POOL_LABEL] for n in world.nodes}, pdbs=world.pdbs,
                               policy=world.policy, state=EngineState(), now=NOW,
                               unneeded_since=unneeded_since_from_taints(world.nodes))
    facts = _facts(order, world.pools)
    return memo.plan(list(facts.values()), table=table, pods_by_node=by_node, pdbs=world.pdbs,
                                policy=world.policy, state=EngineState(), now=NOW)


@given(worlds(), worlds(), st.lists(st.booleans(), min_size=3, max_size=12), st.randoms(use_true_random=False))
def test_plans_with_history_equal_fresh_plans(first: World, second: World, keep: list[bool],
                                              rnd: random.Random) -> None:
    _plans_with_history_equal_fresh_plans(first, second, keep, rnd)


@given(worlds(), worlds(), st.lists(st.booleans(), min_size=3, max_size=12), st.randoms(use_true_random=False))
def test_plans_with_history_equal_fresh_plans_patched_in_bulk(first: World, second: World, keep: list[bool],
                                                               rnd: random.Random) -> None:
    """The same with the node set's columns patched through `_Columns.of` however few records changed (the way
    patches of many records go)."""
    with patch.object(scaledown, "_FEW_RECORDS", 0):
        _plans_with_history_equal_fresh_plans(first, second, keep, rnd)


def _plans_with_history_equal_fresh_plans(first: World, second: World, keep: list[bool], rnd: random.Random) -> None:
    first, second = _clocked(first), _clocked(second)
    mixed = _mixed(first, second, keep)
    memo = ScaleDownCache()
    for world in (first, first, mixed, mixed, second, first, mixed):
        order = sorted(world.nodes, key=lambda n: n.name)
        if rnd.random() < 0.2:
            rnd.shuffle(order)  # the memo sorts what does not come in name order
        assert _plan(world, memo, order) == _plan(world, None, order)


def test_a_changed_pod_is_judged_again() -> None:
    """A node's verdict is reused only for the very same pod objects: a pod that gains a blocking annotation keeps
    its node in the next plan."""
    nodes = (node("a"), node("b"))
    busy = pod("busy", "b", cpu="3", memory="12Gi")  # b stays: a's pod can move there
    world = _clocked(World(nodes=nodes, pods=(pod("p", "a"), busy), pdbs=(), pools=pools_for(nodes), policy=Policy(),
                           unneeded_since={"a": NOW - 5_000, "b": NOW - 5_000}))
    memo = ScaleDownCache()
    order = list(world.nodes)
    before = _plan(world, memo, order)
    assert before == _plan(world, None, order)
    assert "a" in [r.node for r in before.removals]
    protected = replace(world, pods=(pod("p", "a", annotations={DO_NOT_DISRUPT: "true"}), busy))
    after = _plan(protected, memo, order)
    assert after == _plan(protected, None, order)
    assert "a" not in [r.node for r in after.removals]
    assert next(r.code for v in after.blocked if v.node == "a" for r in v.reasons) is ReasonCode.DO_NOT_DISRUPT


def test_a_changed_pdb_or_policy_judges_again() -> None:
    """The same pods meet another PDB or another policy: the memo's verdicts are not reused."""
    nodes = (node("a"), node("b"))
    busy = pod("busy", "b", cpu="3", memory="12Gi")
    scratch = pod("p", "a", labels={"app": "x"}, local_storage=True)
    world = _clocked(World(nodes=nodes, pods=(scratch, busy), pdbs=(), pools=pools_for(nodes),
                           policy=Policy(skip_nodes_with_local_storage=False),
                           unneeded_since={"a": NOW - 5_000, "b": NOW - 5_000}))
    budget = PodDisruptionBudget(namespace=scratch.namespace, name="x", disruptions_allowed=0,
                                 selector=LabelSelector(match_labels=(("app", "x"),)))
    memo = ScaleDownCache()
    order = list(world.nodes)
    steps = [(world, None), (replace(world, pdbs=(budget,)), ReasonCode.PDB), (world, None),
             (replace(world, policy=Policy(skip_nodes_with_local_storage=True)), ReasonCode.LOCAL_STORAGE)]
    for step, blocked_by in steps:
        result = _plan(step, memo, order)
        assert result == _plan(step, None, order)
        codes = [r.code for v in result.blocked if v.node == "a" for r in v.reasons]
        assert (codes[0] if codes else None) is blocked_by
        assert ("a" in [r.node for r in result.removals]) is (blocked_by is None)


def test_nodes_appear_and_vanish() -> None:
    """From no node to some, to others that share none of the objects, and back to none."""
    nodes = (node("a"), node("b"))
    busy = pod("busy", "b", cpu="3", memory="12Gi")
    some = _clocked(World(nodes=nodes, pods=(pod("p", "a"), busy), pdbs=(), pools=pools_for(nodes), policy=Policy(),
                          unneeded_since={"a": NOW - 5_000}))
    others = replace(some, nodes=(node("a"), node("c")), pods=(pod("q", "c"),))
    empty = replace(some, nodes=(), pods=())
    memo = ScaleDownCache()
    for world in (empty, some, others, some, empty, others):
        order = list(world.nodes)
        result = _plan(world, memo, order)
        assert result == _plan(world, None, order)
        assert bool(result.removals or result.unneeded or result.blocked) is bool(world.nodes)


def test_a_node_that_stops_starting_is_judged_with_the_kept_node_set() -> None:
    """The node set keeps what utilization reads of its usable nodes alone; a not-Ready node that was still starting
    and is then judged (same node objects, a later clock) joins the evaluated nodes without the kept arrays standing
    in for them (a cache not tied to the usable positions fails here)."""
    nodes = (node("a"), node("b", ready=False, created_s=NOW - 60), node("c", cpu="8", memory="32Gi"))
    pods = (pod("p", "a"), pod("q", "b"), pod("r", "c", cpu="6", memory="24Gi"))
    pools = pools_for(nodes)
    by_node: dict[str, list[Pod]] = {n.name: [p for p in pods if p.node_name == n.name] for n in nodes}
    policy = Policy()
    memo = ScaleDownCache()
    facts = list(_facts(list(nodes), pools).values())
    results = []
    for now in (NOW, NOW, NOW + policy.max_node_provision_time_s, NOW):
        table = whatif_of(nodes, [n.allocatable for n in nodes], pods)
        fresh = plan_scale_down(nodes=nodes, table=table, pods_by_node=by_node, pools=pools,
                                pool_of={n.name: n.labels[POOL_LABEL] for n in nodes}, pdbs=(), policy=policy,
                                state=EngineState(), now=now, unneeded_since={})
        kept = memo.plan(facts, table=table, pods_by_node=by_node, pdbs=(), policy=policy,
                                    state=EngineState(), now=now)
        assert kept == fresh
        results.append(fresh)
    judged = [{v.node for v in (*r.blocked, *r.unneeded)} | {r.node for r in r.removals} for r in results]
    assert "b" not in judged[0] and "b" in judged[2]
