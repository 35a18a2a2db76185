"""`engine.whatif.facts.derive` from the facts of the node it replaced (the incremental store's usual change: a
taint set or cleared) equals `derive` from scratch, whatever changed: taints (start-up, blocking, PreferNoSchedule,
ToBeDeleted), cordon, Ready, deletion, GPUs registered, labels, the pool (by label or by the provider's answer); and
its group key and capacity are the store's canonical objects."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT
from gpuscale.engine.whatif.facts import derive
from gpuscale.engine.whatif.model import GroupKey
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect

GPU = Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 20, NVIDIA_GPU: 2})
NO_GPU = Resources.of(cpu=16_000, memory=64 * 2**30, pods=20)
POOLS = {"gpu": NodePool(name="gpu", allocatable=GPU, max_size=8),
         "cpu": NodePool(name="cpu", allocatable=NO_GPU, max_size=8)}
TAINTS = [Taint(key="node.kubernetes.io/not-ready", effect=TaintEffect.NO_SCHEDULE),
          Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE),
          Taint(key=DELETION_CANDIDATE_TAINT, value="5", effect=TaintEffect.PREFER_NO_SCHEDULE),
          Taint(key=TO_BE_DELETED_TAINT, value="9", effect=TaintEffect.NO_SCHEDULE)]
LABELS = [{"gpuscale.io/pool": "gpu", "kubernetes.io/hostname": "n"}, {"gpuscale.io/pool": "cpu"},
          {"gpuscale.io/pool": "gpu", "zone": "b"}]

change = st.sampled_from(["taint", "untaint", "cordon", "ready", "deleting", "gpus", "labels", "same-labels",
                          "provider"])


def node(labels: int, allocatable: Resources) -> Node:
    return Node(name="n", allocatable=allocatable, capacity=allocatable, ready=True, labels=dict(LABELS[labels]))


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2), st.booleans(), st.sampled_from([None, "gpu", "cpu"]),
       st.lists(st.tuples(change, st.integers(0, 3)), min_size=1, max_size=8))
@example(0, True, None, [("untaint", 0), ("taint", 2)])  # the usual change: a deletion-candidate mark
@example(0, True, None, [("ready", 0), ("ready", 0)])  # not Ready and back: the GPU phase taken from before
@example(0, False, None, [("gpus", 0)])  # the GPUs registered: allocatable changed
def test_derived_from_the_last_facts_equal_fresh_ones(labels: int, gpus: bool, provider: str | None,
                                                     changes: list[tuple[str, int]]) -> None:
    keys: dict[GroupKey, GroupKey] = {}
    capacities: dict[Resources, Resources] = {}
    current = node(labels, GPU if gpus else NO_GPU)
    facts = derive(current, provider, POOLS, keys, capacities)
    for what, i in changes:
        if what == "taint":
            current = replace(current, taints=(*current.taints, TAINTS[i]))
        elif what == "untaint":
            current = replace(current, taints=current.taints[1:])
        elif what == "cordon":
            current = replace(current, unschedulable=not current.unschedulable)
        elif what == "ready":
            current = replace(current, ready=not current.ready)
        elif what == "deleting":
            current = replace(current, deleting=not current.deleting)
        elif what == "gpus":
            flipped = NO_GPU if current.allocatable.get(NVIDIA_GPU) else GPU
            current = replace(current, allocatable=flipped, capacity=flipped)
        elif what == "labels":
            current = replace(current, labels=dict(LABELS[i % len(LABELS)]))
        elif what == "same-labels":  # equal labels, another mapping
            current = replace(current, labels=dict(current.labels))
        else:
            provider = [None, "gpu", "cpu", "gone"][i]
        fresh = derive(current, provider, POOLS)
        facts = derive(current, provider, POOLS, keys, capacities, facts)
        assert facts == fresh
        assert keys[facts.group_key] is facts.group_key
        assert capacities.get(facts.capacity, facts.capacity) is facts.capacity
