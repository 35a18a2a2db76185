"""Drains in progress: which node is being emptied, since when, and which of its pods still need an eviction.

A drain lives across ticks: the node is tainted `ToBeDeleted` and cordoned, each pod is evicted (a PDB may refuse —
the eviction is retried on later ticks, never forced), and the node is deleted once none of the evicted pods is on it
any more. Lifecycle of one drain (each edge with its trigger):
    started   → deleted    every pod of the drain has left the node (or the node is gone)
    started   → abandoned  the drain outlived the graceful-termination bound: the node is unmarked and kept
The tracker is in memory, like Cluster Autoscaler's: after a restart, orphaned `ToBeDeleted` taints are removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from gpuscale.model.cluster import Cluster


@dataclass(frozen=True, slots=True, kw_only=True)
class Drain:
    node: str
    pool: str
    started_s: float
    pods: frozenset[str]
    """`namespace/name` of every pod the drain evicts."""
    unevicted: frozenset[str]
    """Pods whose eviction was not accepted yet (PDB, API error): retried every tick."""

    def remaining(self, cluster: Cluster) -> frozenset[str]:
        """Pods of this drain still holding capacity on the node (terminating pods count until they are gone).

        Matched by key *and* node: a StatefulSet pod recreated under the same name elsewhere has left the node."""
        return frozenset(p.key for p in cluster.pods
                         if p.key in self.pods and p.node_name == self.node and not p.is_terminal())


class DrainTracker:
    """Node name → `Drain`, in the order drains started."""

    def __init__(self) -> None:
        self._drains: dict[str, Drain] = {}

    def start(self, node: str, pool: str, started_s: float, pods: Iterable[str], unevicted: Iterable[str]) -> Drain:
        drain = Drain(node=node, pool=pool, started_s=started_s, pods=frozenset(pods), unevicted=frozenset(unevicted))
        self._drains[node] = drain
        return drain

    def set_unevicted(self, node: str, unevicted: Iterable[str]) -> None:
        self._drains[node] = replace(self._drains[node], unevicted=frozenset(unevicted))

    def finish(self, node: str) -> Drain:
        return self._drains.pop(node)

    def get(self, node: str) -> Drain | None:
        return self._drains.get(node)

    def __contains__(self, node: object) -> bool:
        return node in self._drains

    def __iter__(self) -> Iterator[Drain]:
        return iter(tuple(self._drains.values()))

    def __len__(self) -> int:
        return len(self._drains)
