"""Scale-down's carried verdicts under churn that keeps every node's utilization: pods swapped for others of the same
shape on the same node, pods gaining or losing an owner or a `do-not-disrupt` annotation under the same name, nodes
replaced by equal ones or by ones that only differ in what their verdict reads (the `scale-down-disabled` annotation,
a pool label no pool answers to) — next to ordinary churn. A verdict reused where it must not be (a pod that moved, a
record that changed) shows as a plan that differs from the plan made without the memo: the node is blocked by another
pod's name, is drained though a pod or the node now forbids it, or evicts a pod that left."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.drain import DO_NOT_DISRUPT, SCALE_DOWN_DISABLED
from gpuscale.engine.policy import Policy
from gpuscale.model.node import POOL_LABEL, Node
from gpuscale.model.pod import OwnerRef, Pod
from tests.engine.test_store_property import NAMES, POOLS, RecordingIncremental, assert_decides_as_reference, node, pod

OWNER = OwnerRef(kind="ReplicaSet", name="rs", controller=True)


def _dressed(p: Pod, style: int) -> Pod:
    """`style`: 0 no owner (blocks its node), 1 owned (moves), 2 owned and `do-not-disrupt` (blocks), 3 owned and
    expendable by priority (evicted, no new home)."""
    if style == 0:
        return p
    owned = replace(p, owner=OWNER)
    if style == 2:
        return replace(owned, annotations={DO_NOT_DISRUPT: "true"})
    if style == 3:
        return replace(owned, priority=-100)
    return owned


steps = st.lists(st.tuples(st.sampled_from(["pod", "pod", "swap", "swap", "dress", "dress", "same", "disable", "orphan",
                                            "flip", "delete", "decide", "decide", "decide"]),
                           st.integers(0, 100), st.integers(0, 6), st.integers(0, 3), st.integers(0, 3)),
                 min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(0, 2**16))
def test_carried_verdicts_equal_fresh_ones(ops: list[tuple[str, int, int, int, int]], seed: int) -> None:
    shuffle = random.Random(seed)
    memo = RecordingIncremental()
    now = 1000.0
    nodes: dict[str, Node] = {name: node(name, i % 2, 0, now) for i, name in enumerate(NAMES)}
    pods: dict[str, Pod] = {}
    policy = Policy(scale_down_unneeded_time_s=0.0)  # unneeded at once: removals (and their evictions) show

    def check() -> None:
        assert_decides_as_reference(memo, nodes, pods, shuffle, policy, now)

    def bound() -> list[Pod]:
        return sorted((p for p in pods.values() if p.node_name is not None), key=lambda p: p.key)

    for op, i, state, kind, style in ops:
        name = NAMES[i % len(NAMES)]
        on = bound()
        if op == "pod":  # a new pod (or one replacing a pod of that name), bound or pending, of any style
            p = _dressed(pod(i, kind, name if state % 3 else None, 0), style)
            pods[p.key] = p
        elif op == "swap" and on:  # another pod of the same shape on the same node: the node's numbers stay
            old = on[i % len(on)]
            del pods[old.key]
            p = _dressed(replace(pod(i + 1, 0, old.node_name, 0), requests=old.requests), style)
            pods[p.key] = p
        elif op == "dress" and on:  # the same pod, its drainability changed
            old = on[i % len(on)]
            pods[old.key] = _dressed(replace(old, owner=None, annotations={}, priority=0), style)
        elif op == "same" and name in nodes:  # an equal node, another object
            nodes[name] = replace(nodes[name])
        elif op == "disable" and name in nodes:  # the same numbers and pods; scale-down disabled, or enabled again
            disabled = nodes[name].annotations.get(SCALE_DOWN_DISABLED) == "true"
            nodes[name] = replace(nodes[name], annotations={} if disabled else {SCALE_DOWN_DISABLED: "true"})
        elif op == "orphan" and name in nodes and nodes[name].pool == "cpu":  # no pool answers: UNKNOWN_POOL
            nodes[name] = replace(nodes[name], labels={**nodes[name].labels, POOL_LABEL: "gone"})
        elif op == "flip" and name in nodes:
            nodes[name] = node(name, POOLS.index(next((p for p in POOLS if p.name == nodes[name].pool), POOLS[0])),
                               state % 6, now)
        elif op == "delete" and pods:
            del pods[sorted(pods)[i % len(pods)]]
        elif op == "decide":
            now += 10.0
            check()
    check()
