"""`ArrangeCache`: the snapshot arranged from the last arrangement's sorted lists and pod index equals one arranged from
scratch, whatever changed in between (pods created, bound, finished, deleted, regrouped, given affinity terms; nodes
added, removed and changed; objects with the same name; input in any order), and what it says changed covers what
did."""

from __future__ import annotations

import random
from dataclasses import replace
from operator import attrgetter

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.arrange import ArrangeCache, Arranged, _Sorted, arrange
from gpuscale.model.cluster import Cluster, PodGroupSpec
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod, PodGroupRef, PodPhase
from gpuscale.model.selectors import LabelSelector, PodAffinityTerm
from tests.builders import make_node, make_pod

NODES = [f"n{i}" for i in range(5)]
AFFINITY = (PodAffinityTerm(selector=LabelSelector(match_labels=(("app", "x"),)),
                            topology_key="kubernetes.io/hostname"),)


def ids(objects: object) -> list[int]:
    return [id(o) for o in objects]  # type: ignore[attr-defined]


def view(a: Arranged) -> tuple[object, ...]:
    """An arrangement by object identity (equal objects that are not the same would hide a stale entry)."""
    c, p = a.cluster, a.pods
    return (ids(c.nodes), ids(c.pods), ids(c.pdbs), ids(c.pod_groups), dict(c.other_kinds), ids(p.pending),
            ids(p.placed), {name: ids(held) for name, held in p.by_node.items()}, p.depends_on_placed,
            dict(p.group_members))


def pod(i: int, state: int, node: int, group: int) -> Pod:
    base = make_pod(f"p{i % 40}", namespace=("a", "b")[i % 2], cpu="1",
                    affinity=AFFINITY if state == 5 else (), node=NODES[node] if state in (1, 2, 3, 5) else None)
    phase = {2: PodPhase.SUCCEEDED, 3: PodPhase.RUNNING}.get(state, base.phase)
    return replace(base, phase=phase, deleting=state == 4,
                   group=PodGroupRef(key=f"g{group}", source="kueue") if group else None)


ops = st.lists(st.tuples(st.sampled_from(["pod", "pod", "pod", "delete", "node", "drop-node", "twin", "again",
                                          "budget", "gang", "kinds", "arrange"]),
                         st.integers(0, 200), st.integers(0, 5), st.integers(0, 4), st.integers(0, 2)),
               min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 2**16))
@example([("pod", 0, 1, 0, 0), ("arrange", 0, 0, 0, 0), ("delete", 0, 0, 0, 0)], 0)  # pods only left
@example([("budget", 0, 1, 0, 0), ("arrange", 0, 0, 0, 0), ("arrange", 0, 0, 0, 0), ("budget", 0, 2, 0, 0)],
         0)  # a budget replaced by another of the same name
def test_carried_arrangements_equal_fresh_ones(steps: list[tuple[str, int, int, int, int]], seed: int) -> None:
    shuffle = random.Random(seed)
    memo = ArrangeCache()
    nodes: dict[str, Node] = {}
    pods: dict[str, Pod] = {}
    extra: list[Pod] = []  # same-named duplicates, as a broken snapshot could hold
    budgets: dict[str, PodDisruptionBudget] = {}
    gangs: dict[str, PodGroupSpec] = {}
    kinds: dict[str, int] = {}
    last: Arranged | None = None

    def check() -> Arranged:
        node_list, pod_list = list(nodes.values()), [*pods.values(), *extra]
        budget_list, gang_list = list(budgets.values()), list(gangs.values())
        if shuffle.random() < 0.5:  # else in the order of the last input, as a snapshot of a dict keeps it
            shuffle.shuffle(node_list)
            shuffle.shuffle(pod_list)
            shuffle.shuffle(budget_list)
            shuffle.shuffle(gang_list)
        cluster = Cluster(nodes=tuple(node_list), pods=tuple(pod_list), pdbs=tuple(budget_list),
                          pod_groups=tuple(gang_list), other_kinds=dict(kinds))
        carried, fresh = memo.arrange(cluster), arrange(cluster)
        assert view(carried) == view(fresh)
        return carried

    for op, i, state, node, group in steps:
        if op == "pod":
            p = pod(i, state, node % len(NODES), group)
            pods[p.key] = p
        elif op == "delete" and pods:
            del pods[sorted(pods)[i % len(pods)]]
        elif op == "node":
            name = NODES[node % len(NODES)]
            nodes[name] = make_node(name, cpu=str(4 + state))
        elif op == "drop-node":
            nodes.pop(NODES[node % len(NODES)], None)
        elif op == "twin" and pods:
            extra.append(replace(pods[sorted(pods)[i % len(pods)]], uid=f"twin-{i}"))
            if len(extra) > 2:
                extra.pop(0)
        elif op == "budget":  # a budget created or replaced (by an equal one, now and then), or deleted
            name = f"b{i % 4}"
            if state == 0:
                budgets.pop(name, None)
            else:
                budgets[name] = PodDisruptionBudget(namespace="a", name=name, selector=LabelSelector(),
                                                    disruptions_allowed=state % 3)
        elif op == "gang":
            key = f"a/g{i % 3}"
            if state == 0:
                gangs.pop(key, None)
            else:
                gangs[key] = PodGroupSpec(key=key, min_member=state)
        elif op == "kinds":  # objects of kinds gpuscale does not read come and go
            kinds["ConfigMap"] = state
        elif op == "again" and pods:  # the very same object twice in one snapshot
            if extra:
                extra[-1] = pods[sorted(pods)[i % len(pods)]]
            else:
                extra.append(pods[sorted(pods)[i % len(pods)]])
        else:
            now = check()
            if last is not None:
                if now.replaced is not None:
                    assert [n.name for n in now.cluster.nodes] == [n.name for n in last.cluster.nodes]
                    assert {n.name for n, m in zip(now.cluster.nodes, last.cluster.nodes, strict=True)
                            if n is not m} == now.replaced.keys()
                    assert all(now.replaced[n.name] is n for n in now.cluster.nodes if n.name in now.replaced)
                if now.moved is not None:
                    before = {n: ids(h) for n, h in last.pods.by_node.items()}
                    after = {n: ids(h) for n, h in now.pods.by_node.items()}
                    assert {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)} <= now.moved
            last = Arranged(cluster=now.cluster, pods=replace(
                now.pods, by_node={n: list(h) for n, h in now.pods.by_node.items()}), replaced=now.replaced,
                moved=now.moved, generation=now.generation)  # the memo's lists change at its next arrangement
    check()


def test_an_unchanged_snapshot_is_the_same_nodes_and_moves_nothing() -> None:
    nodes = tuple(make_node(n) for n in NODES)
    pods = tuple(make_pod(f"p{i}", node=NODES[i % 5]) for i in range(40))
    memo = ArrangeCache()
    first = memo.arrange(Cluster(nodes=nodes, pods=pods))
    again = memo.arrange(Cluster(nodes=nodes[::-1], pods=pods[::-1]))
    assert (first.replaced, first.moved) == (None, None)
    assert (again.replaced, again.moved, again.generation) == ({}, frozenset(), 2)
    bound = replace(pods[3], node_name="n4")
    rebound = (*pods[:3], bound, *pods[4:])
    moved = memo.arrange(Cluster(nodes=nodes, pods=rebound))
    assert moved.replaced == {} and moved.moved == {"n3", "n4"}
    cordoned = replace(nodes[1], unschedulable=True)
    again = memo.arrange(Cluster(nodes=(nodes[0], cordoned, *nodes[2:]), pods=rebound))
    assert again.replaced == {"n1": cordoned} and again.moved == frozenset()
    assert memo.arrange(Cluster(nodes=nodes[1:], pods=rebound)).replaced is None


class _Obj:
    """An object with a name, told apart from another of the same name by identity only."""

    def __init__(self, name: str) -> None:
        self.name = name


walk = st.lists(st.tuples(st.sampled_from(["replace", "delete", "delete-run", "add", "back", "twice", "shuffle",
                                           "update", "update"]),
                          st.integers(0, 999), st.integers(1, 12)),
                min_size=1, max_size=80)


@settings(max_examples=300, deadline=None)
@given(walk, st.integers(20, 120))
def test_sorted_list_follows_a_dict_snapshot_by_what_left_and_came(steps: list[tuple[str, int, int]],
                                                                   size: int) -> None:
    """`_Sorted` over inputs kept in dict order (changed objects in place, new ones last, runs of objects gone, an
    object back where it was, the same object twice, now and then a shuffle): after every update its list is the
    input sorted (object by object), its keys are those of its list (what it searches instead of calling the key),
    what it says left and came is the identity difference, and its edits turn the last list into this one."""
    objects = {f"o{i:03}": _Obj(f"o{i:03}") for i in range(size)}
    listed = _Sorted[_Obj](attrgetter("name"))
    listed.update(tuple(objects.values()))
    before: list[_Obj] = list(listed.items)
    last: tuple[_Obj, ...] = tuple(objects.values())
    order: list[_Obj] | None = None  # a shuffled input, kept until the next change
    removed: list[_Obj] = []
    extra: list[_Obj] = []
    for op, i, run in steps:
        names = list(objects)
        if op == "replace" and names:
            objects[names[i % len(names)]] = _Obj(names[i % len(names)])
        elif op == "delete-run" and names:
            for name in names[i % len(names):i % len(names) + run]:
                removed.append(objects.pop(name))
        elif op == "delete" and names:
            removed.append(objects.pop(names[i % len(names)]))
        elif op == "add":
            objects[f"o{i:03}"] = _Obj(f"o{i:03}")
        elif op == "back" and removed:  # the very object that left comes back (last, in a dict)
            back = removed.pop(i % len(removed))
            objects.setdefault(back.name, back)
        elif op == "twice" and objects:
            extra = [] if extra else [objects[names[i % len(names)]]]
        elif op == "shuffle":
            order = [*objects.values(), *extra]
            random.Random(i).shuffle(order)
        if op != "update":
            if op != "shuffle":
                order = None
            continue
        given = tuple(order) if order is not None else (*objects.values(), *extra)
        change = listed.update(given)
        assert ids(listed.items) == ids(sorted(given, key=attrgetter("name")))
        assert listed._keys == [o.name for o in listed.items]
        if change is not None:
            left, came = change
            assert set(ids(left)) == set(ids(last)) - set(ids(given))
            assert set(ids(came)) == set(ids(given)) - set(ids(last))
            assert listed.edits is not None
            for at, obj in listed.edits:
                if obj is None:
                    del before[at]
                else:
                    before.insert(at, obj)
            assert ids(before) == ids(listed.items)
        else:
            assert listed.edits is None
        before, last = list(listed.items), given
