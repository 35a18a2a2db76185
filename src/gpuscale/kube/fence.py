"""Leader fencing around the loop's ports, and a reader that remembers what the last tick read.

With leader election, only the Lease holder may act. Checking "am I leader?" once before a tick is not enough: a tick
can take longer than the renew deadline (a slow API server, a long drain step), and the standby may take over in the
middle of it. So every write port is wrapped: each call first asks `allowed()` (the elector's `is_leader()`, which
also turns False as soon as the renew deadline passes) and raises `NotLeader` otherwise. The tick records that like
any failed action and goes on to the next one, which fails the same way — nothing more is written.

`ObservedReader` / `FencedProvider` also keep the last snapshot, upcoming nodes and node → pool map they returned, so
the status ConfigMap and the metrics describe exactly the view the tick decided on. Reads are never fenced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuscale.engine.plan import Snapshot, UpcomingNode
from gpuscale.engine.provreq import Condition, ProvisioningRequest
from gpuscale.loop.ports import ClusterReader, ClusterWriter, EventSink, EventType, EvictionOutcome, NodeProvider
from gpuscale.loop.provreq import RequestSource
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import GpuscaleError

Allowed = Callable[[], bool]


class NotLeader(GpuscaleError):
    """This replica does not hold the leader Lease (any more): the write was not made."""


def _check(allowed: Allowed, what: str) -> None:
    if not allowed():
        raise NotLeader(f"not the leader: {what} not done")


class ObservedReader:
    def __init__(self, inner: ClusterReader) -> None:
        self.inner = inner
        self.last: Cluster | None = None

    def snapshot(self) -> Cluster:
        self.last = None
        self.last = self.inner.snapshot()
        return self.last


class FencedWriter:
    def __init__(self, inner: ClusterWriter, allowed: Allowed) -> None:
        self.inner, self._allowed = inner, allowed

    def set_deletion_candidate(self, node: str, since_s: float) -> None:
        _check(self._allowed, f"taint {node}")
        self.inner.set_deletion_candidate(node, since_s)

    def clear_deletion_candidate(self, node: str) -> None:
        _check(self._allowed, f"untaint {node}")
        self.inner.clear_deletion_candidate(node)

    def mark_to_be_deleted(self, node: str, now_s: float) -> None:
        _check(self._allowed, f"mark {node}")
        self.inner.mark_to_be_deleted(node, now_s)

    def unmark_to_be_deleted(self, node: str) -> None:
        _check(self._allowed, f"unmark {node}")
        self.inner.unmark_to_be_deleted(node)

    def evict(self, pod_key: str) -> EvictionOutcome:
        _check(self._allowed, f"evict {pod_key}")
        return self.inner.evict(pod_key)

    def nominate(self, pod_key: str, node: str) -> bool:
        _check(self._allowed, f"nominate {pod_key}")
        return self.inner.nominate(pod_key, node)

    def clear_nomination(self, pod_key: str, node: str) -> bool:
        _check(self._allowed, f"clear nomination {pod_key}")
        return self.inner.clear_nomination(pod_key, node)


class FencedEvents:
    def __init__(self, inner: EventSink, allowed: Allowed, *, redirect: Mapping[tuple[str, str], str] | None = None
                 ) -> None:
        self.inner, self._allowed = inner, allowed
        self._redirect = dict(redirect or {})

    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        """`redirect` maps `(kind, key)` to another key: pool-level events go to the configured status ConfigMap."""
        _check(self._allowed, f"event {reason}")
        self.inner.emit(obj_kind, self._redirect.get((obj_kind, obj_key), obj_key), event_type, reason, message)


class FencedProvider:
    def __init__(self, inner: NodeProvider, allowed: Allowed) -> None:
        self.inner, self._allowed = inner, allowed
        self.last_upcoming: tuple[UpcomingNode, ...] = ()
        self.last_node_pools: Mapping[str, str] = {}

    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        _check(self._allowed, f"scale-up of {pool}")
        return self.inner.increase(pool, count, zone)

    def delete(self, nodes: Sequence[str]) -> None:
        _check(self._allowed, f"delete {', '.join(nodes)}")
        self.inner.delete(nodes)

    def cancel(self, request_ids: Sequence[str]) -> None:
        _check(self._allowed, f"cancel {', '.join(request_ids)}")
        self.inner.cancel(request_ids)

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        self.last_upcoming = tuple(self.inner.upcoming())
        return self.last_upcoming

    def node_pools(self) -> Mapping[str, str]:
        self.last_node_pools = dict(self.inner.node_pools())
        return self.last_node_pools


def last_snapshot(reader: ObservedReader, provider: FencedProvider) -> Snapshot | None:
    """The view the last tick read, or None if its read failed."""
    if reader.last is None:
        return None
    return Snapshot(cluster=reader.last, upcoming=provider.last_upcoming, node_pools=provider.last_node_pools)


class FencedRequests:
    """A `RequestSource` whose ProvisioningRequest condition writes are the leader's only; reads pass through."""

    def __init__(self, inner: RequestSource, allowed: Allowed) -> None:
        self.inner, self._allowed = inner, allowed

    def requests(self) -> tuple[ProvisioningRequest, ...]:
        return self.inner.requests()

    def write_conditions(self, request: str, conditions: Sequence[Condition], now_s: float) -> None:
        _check(self._allowed, f"conditions of ProvisioningRequest {request}")
        self.inner.write_conditions(request, conditions, now_s)
