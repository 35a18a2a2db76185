"""The decision memo's node facts and node rows when nodes come and go: carried from the last decision by the
arrangement's node edits (`Arranged.node_edits`: taken out and put in where the arrangement says) they equal facts
and rows made afresh, whatever came, left or changed in between (nodes in every phase, of either pool or none, the
provider's answer changing, nodes expired), and so do the nodes still starting. The provider's answers are handed
in as the twin's cloud hands them out: the very same mapping until an answer changes, then another one (the memo
skips comparing the very same mapping again), or now and then a fresh one as the kube providers do. Equal usable
capacities (a pool's nodes, or starting nodes raised to their template: new objects each time) are one object in the
carried facts."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.memo import STARTING, DecideMemo, NodeRows, facts_of, node_rows_of
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect

POOLS = {
    "cpu": NodePool(name="cpu", allocatable=Resources.of(cpu=8000, memory=32 * 2**30, pods=20), max_size=40),
    "gpu": NodePool(name="gpu", allocatable=Resources.of({"cpu": 16_000, "memory": 64 * 2**30, "pods": 20,
                                                          NVIDIA_GPU: 2, GPU_MILLI: 2000}), max_size=40),
}


def node(name: str, pool: str, state: int) -> Node:
    """`state`: 0 usable, 1 not Ready, 2 Ready without its GPUs, 3 deleting, 4 to be deleted (taint), 5 start-up
    taint while not Ready."""
    allocatable = POOLS[pool].allocatable if pool in POOLS else Resources.of(cpu=2000, pods=10)
    if state == 2 and pool == "gpu":
        allocatable = Resources.of(cpu=16_000, memory=64 * 2**30, pods=20)
    taints = {4: (Taint(key="ToBeDeletedByClusterAutoscaler", value="1", effect=TaintEffect.NO_SCHEDULE),),
              5: (Taint(key="node.kubernetes.io/not-ready", value="", effect=TaintEffect.NO_SCHEDULE),)}.get(state, ())
    return Node(name=name, allocatable=allocatable, capacity=allocatable, ready=state not in (1, 5),
                labels={"gpuscale.io/pool": pool, "kubernetes.io/hostname": name}, taints=taints,
                deleting=state == 3)


TEMPLATES = [POOLS["gpu"].template("upcoming-1"), POOLS["cpu"].template("upcoming-2")]


def view(rows: NodeRows) -> tuple[object, ...]:
    return (rows.position, rows.names, rows.nodes, rows.capacity, rows.row_pool, rows.upcoming, rows.group_keys,
            rows.gpus, rows.upcoming_rows.tolist(), rows.gpu_rows.tolist(), rows.pool_keys,
            [(None if p is None else p.name, n) for p, n in rows.counted])


steps = st.lists(st.tuples(st.sampled_from(["add", "add", "drop", "drop-run", "change", "answer", "expire",
                                            "decide", "decide"]),
                           st.integers(0, 999), st.integers(0, 5), st.sampled_from(["cpu", "gpu", "none"])),
                 min_size=10, max_size=80)


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(0, 40), st.integers(0, 2**16))
def test_facts_and_rows_carried_through_node_edits_equal_fresh_ones(ops: list[tuple[str, int, int, str]],
                                                                    size: int, seed: int) -> None:
    shuffle = random.Random(seed)
    nodes = {f"n{i:03}": node(f"n{i:03}", ("cpu", "gpu")[i % 2], i % 6) for i in range(size)}
    answers: dict[str, str] = {}
    handed: list[dict[str, str]] = []  # the mapping handed out until an answer changes (none yet: make one)
    expired: frozenset[str] = frozenset()
    memo = DecideMemo()
    world: list[Node] = []  # the last world's rows (node rows, then templates)

    def decide() -> None:
        if shuffle.random() < 0.3:  # a kube provider: a fresh mapping each time, equal or not
            handed.clear()
        if not handed:
            handed.append(dict(answers))
        answers_now = handed[0]
        given = list(nodes.values())
        if shuffle.random() < 0.3:  # else in dict order, as the twin's snapshots keep it
            shuffle.shuffle(given)
        arranged = memo.arrange.arrange(Cluster(nodes=tuple(given)))
        ordered = arranged.cluster.nodes
        facts = memo.facts(ordered, answers_now, POOLS, (arranged.generation, arranged.replaced))
        fresh = facts_of(ordered, answers_now, POOLS, None)
        assert list(facts.items()) == list(fresh.items())
        assert all(facts[n].node is nodes[n] for n in nodes)
        canonical = {f.capacity: f.capacity for f in facts.values()}  # equal capacities are one object (`derive`)
        assert all(f.capacity is canonical[f.capacity] for f in facts.values())
        starting = memo.starting(facts)
        assert starting is None or starting == [f for f in fresh.values() if f.phase in STARTING]
        rows = memo.node_rows(ordered, POOLS, facts, expired, arranged.generation)
        assert view(rows) == view(node_rows_of(ordered, POOLS, fresh, expired))
        pick = shuffle.random()  # upcoming nodes: kept, made again under the same names, or others
        templates = (TEMPLATES[:shuffle.randrange(3)] if pick < 0.4 else list(world)[len(rows.nodes):] if pick < 0.7
                     else [replace(t, labels=dict(t.labels)) for t in TEMPLATES[:shuffle.randrange(3)]])
        edits = memo.world_edits(templates)
        now = [*rows.nodes, *templates]
        moves = memo.world_moves
        if edits[2] is None and moves is not None:  # rows came or went: where, as `RowMoves` says
            out, into, named = moves
            kept = [n for j, n in enumerate(world) if j not in set(out)]
            assert sorted(set(out)) == out and sorted(set(into)) == into and len(kept) + len(into) == len(now)
            assert all(0 <= i < len(now) and i not in into for i in named)
            at = 0
            for i, n in enumerate(now):
                if i in into:
                    continue
                assert n.name == kept[at].name
                assert i in named or n is kept[at]
                at += 1
        world[:] = now

    for op, i, state, pool in ops:
        names = sorted(nodes)
        if op == "add":
            name = f"n{i % 60:03}"
            nodes[name] = node(name, pool, state)
            if i % 3 == 0:  # the provider places it in another pool than its label says
                answers[name] = "gpu" if pool == "cpu" else "cpu"
                handed.clear()
        elif op == "drop" and names:
            del nodes[names[i % len(names)]]
        elif op == "drop-run" and names:
            for name in names[i % len(names):i % len(names) + state + 2]:
                del nodes[name]
        elif op == "change" and names:  # the same node in another state: replaced under its name
            name = names[i % len(names)]
            nodes[name] = node(name, nodes[name].pool or "none", state)
        elif op == "answer":  # the provider's answer for a node (there or not) comes, changes or goes
            name = f"n{i % 60:03}"
            if pool == "none":
                answers.pop(name, None)
            else:
                answers[name] = pool
            handed.clear()
        elif op == "expire" and names:
            expired = frozenset(names[i % len(names)::state + 2])
        else:
            decide()
    decide()
