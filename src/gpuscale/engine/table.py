"""A what-if view of node capacity for packing: free resources per node as NumPy arrays, with fork for what-ifs.

One `NodeTable` is built per decision from the snapshot (cost O(nodes × resources + pods)). `fork()` copies the
mutable arrays — free capacity, free pod slots, enabled flags — and shares the immutable parts (nodes, the static
feasibility cache), so a what-if costs O(nodes × resources) to start and never touches the original: there is nothing
to revert. Placing a pod is O(resources); finding a node for a pod is one vectorised pass over the nodes plus Python
checks (inter-pod affinity) on the few candidates only when some pod uses affinity.

Columns are fixed at construction: the union of every resource name any node offers or any pod requests. A request
naming a resource outside the columns fits nowhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuscale.engine.scheduling import Topology, static_failures
from gpuscale.model.node import HOSTNAME_LABEL, Node
from gpuscale.model.pod import Pod, SchedulingConstraints
from gpuscale.model.resources import PODS, Resources

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def names_nodes_individually(constraints: SchedulingConstraints) -> bool:
    """Whether node-only filters must run per node (the constraints name nodes or hostnames), not per node group."""
    if constraints.node_name is not None:
        return True
    terms = constraints.affinity.required_terms or ()
    if any(t.match_fields for t in terms):
        return True
    keys = {k for k, _ in constraints.affinity.node_selector}
    keys.update(r.key for t in terms for r in t.match_expressions)
    return HOSTNAME_LABEL in keys


def node_group_key(node: Node) -> tuple[object, ...]:
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if k != HOSTNAME_LABEL))
    return labels, node.taints, node.unschedulable


@dataclass(slots=True)
class _Shared:
    """Immutable per-decision data every fork shares."""

    nodes: list[Node]
    index: dict[str, int]
    columns: list[str]
    column_of: dict[str, int]
    group_of: list[int]
    group_members: list[list[int]]
    static_cache: dict[SchedulingConstraints, BoolArray]
    request_cache: dict[Resources, IntArray | None]


class NodeTable:
    """Free capacity of a set of nodes (real, upcoming or hypothetical), for what-if placement."""

    __slots__ = ("_s", "enabled", "free", "free_pods", "topology")

    def __init__(self, shared: _Shared, free: IntArray, free_pods: IntArray, enabled: BoolArray,
                 topology: Topology | None) -> None:
        self._s = shared
        self.free = free
        self.free_pods = free_pods
        self.enabled = enabled
        self.topology = topology

    @staticmethod
    def build(nodes: Sequence[Node], capacity: Sequence[Resources], placed: Iterable[Pod],
              extra_names: Iterable[str] = (), with_topology: bool = False) -> NodeTable:
        """Nodes with their usable capacity (`capacity[i]`, e.g. a template's for a GPU node still initialising),
        minus the requests of `placed` pods bound to them. `extra_names` adds columns (the pending pods' requests)."""
        placed = list(placed)
        names = sorted({*extra_names, *(r for c in capacity for r in c.names()),
                        *(r for p in placed for r in p.requests.names())} - {PODS})
        column_of = {n: i for i, n in enumerate(names)}
        index = {n.name: i for i, n in enumerate(nodes)}
        free = np.zeros((len(nodes), len(names)), dtype=np.int64)
        free_pods = np.zeros(len(nodes), dtype=np.int64)
        for i, cap in enumerate(capacity):
            for name, amount in cap.items:
                if name == PODS:
                    free_pods[i] = amount
                else:
                    free[i, column_of[name]] = amount
        for pod in placed:
            at = index.get(pod.node_name or "")
            if at is None:
                continue
            free_pods[at] -= 1
            for name, amount in pod.requests.items:
                free[at, column_of[name]] -= amount
        groups: dict[tuple[object, ...], int] = {}
        group_of: list[int] = []
        members: list[list[int]] = []
        for i, node in enumerate(nodes):
            g = groups.setdefault(node_group_key(node), len(groups))
            if g == len(members):
                members.append([])
            members[g].append(i)
            group_of.append(g)
        shared = _Shared(list(nodes), index, names, column_of, group_of, members, {}, {})
        topology = Topology(nodes, placed) if with_topology else None
        return NodeTable(shared, free, free_pods, np.ones(len(nodes), dtype=bool), topology)

    # ------------------------------------------------------------------------------------------------ structure
    @property
    def nodes(self) -> list[Node]:
        return self._s.nodes

    @property
    def columns(self) -> list[str]:
        return self._s.columns

    def __len__(self) -> int:
        return len(self._s.nodes)

    def fork(self) -> NodeTable:
        topology = self.topology.copy() if self.topology is not None else None
        return NodeTable(self._s, self.free.copy(), self.free_pods.copy(), self.enabled.copy(), topology)

    def extend(self, nodes: Sequence[Node], capacity: Sequence[Resources]) -> NodeTable:
        """A new table with extra, empty nodes appended (a pool's template nodes for scale-up estimation).

        Cost O((n + k) × resources); the static cache is rebuilt lazily since masks grow by k entries. Resources the
        new nodes offer beyond the table's columns are ignored: no placed or pending pod requests them.
        """
        s = self._s
        start = len(s.nodes)
        extra_free = np.zeros((len(nodes), len(s.columns)), dtype=np.int64)
        extra_pods = np.zeros(len(nodes), dtype=np.int64)
        for k, cap in enumerate(capacity):
            for name, amount in cap.items:
                if name == PODS:
                    extra_pods[k] = amount
                elif name in s.column_of:
                    extra_free[k, s.column_of[name]] = amount
        groups = {node_group_key(s.nodes[m[0]]): g for g, m in enumerate(s.group_members)}
        members = [list(m) for m in s.group_members]
        group_of = list(s.group_of)
        index = dict(s.index)
        for k, node in enumerate(nodes):
            g = groups.setdefault(node_group_key(node), len(groups))
            if g == len(members):
                members.append([])
            members[g].append(start + k)
            group_of.append(g)
            index[node.name] = start + k
        shared = _Shared([*s.nodes, *nodes], index, s.columns, s.column_of, group_of, members, {}, s.request_cache)
        topology = self.topology.copy() if self.topology is not None else None
        if topology is not None:
            for node in nodes:
                topology.add_node(node)
        return NodeTable(shared, np.vstack([self.free, extra_free]), np.concatenate([self.free_pods, extra_pods]),
                         np.concatenate([self.enabled, np.ones(len(nodes), dtype=bool)]), topology)

    # ----------------------------------------------------------------------------------------------- feasibility
    def request_vector(self, requests: Resources) -> IntArray | None:
        """The request as a row over the table's columns; `None` if it names a resource no node offers."""
        cache = self._s.request_cache
        if requests in cache:
            return cache[requests]
        row: IntArray | None = np.zeros(len(self._s.columns), dtype=np.int64)
        for name, amount in requests.items:
            column = self._s.column_of.get(name)
            if column is None:
                if amount > 0:
                    row = None
                    break
                continue
            assert row is not None
            row[column] = amount
        cache[requests] = row
        return row

    def static_mask(self, constraints: SchedulingConstraints) -> BoolArray:
        """Nodes that pass the node-only filters (cordon, name, taints, labels) for these constraints; cached."""
        cached = self._s.static_cache.get(constraints)
        if cached is not None:
            return cached
        mask = np.zeros(len(self._s.nodes), dtype=bool)
        nodes = self._s.nodes
        if names_nodes_individually(constraints):
            for i, node in enumerate(nodes):
                mask[i] = not static_failures(constraints, node)
        else:
            for members in self._s.group_members:
                if not static_failures(constraints, nodes[members[0]]):
                    mask[members] = True
        self._s.static_cache[constraints] = mask
        return mask

    def feasible(self, pod: Pod) -> BoolArray:
        """Nodes (enabled) where the pod fits now: every filter, inter-pod affinity included."""
        row = self.request_vector(pod.requests)
        if row is None or pod.constraints.unsupported:
            return np.zeros(len(self._s.nodes), dtype=bool)
        mask = self.enabled & self.static_mask(pod.constraints) & (self.free_pods >= 1)
        columns = np.flatnonzero(row)
        if len(columns):
            mask &= (self.free[:, columns] >= row[columns]).all(axis=1)
        if self.topology is not None and (self.topology.relevant or pod.constraints.pod_affinity
                                          or pod.constraints.pod_anti_affinity):
            for i in np.flatnonzero(mask).tolist():
                if self.topology.failures(pod, self._s.nodes[i]):
                    mask[i] = False
        return mask

    def first_fit(self, pod: Pod) -> int | None:
        """Index of the first feasible node in table order, or `None`."""
        mask = self.feasible(pod)
        if not mask.any():
            return None
        return int(np.argmax(mask))

    # ----------------------------------------------------------------------------------------------- mutation
    def place(self, index: int, pod: Pod) -> None:
        row = self.request_vector(pod.requests)
        assert row is not None, "placing a pod whose request names a resource outside the table"
        self.free[index] -= row
        self.free_pods[index] -= 1
        if self.topology is not None:
            self.topology.add(pod, self._s.nodes[index])

    def unplace(self, index: int, pod: Pod) -> None:
        """Give back a pod's requests (a pod leaving a node in a drain what-if)."""
        row = self.request_vector(pod.requests)
        assert row is not None
        self.free[index] += row
        self.free_pods[index] += 1

    def disable(self, index: int) -> None:
        """Take a node out of consideration (it is being removed in this what-if)."""
        self.enabled[index] = False

    def index_of(self, name: str) -> int | None:
        return self._s.index.get(name)

    def free_of(self, index: int, resource: str) -> int:
        column = self._s.column_of.get(resource)
        return 0 if column is None else int(self.free[index, column])
