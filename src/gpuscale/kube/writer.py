"""`KubeWriter`: the autoscaler's writes on Nodes and Pods through the API server (`ClusterWriter`).

Taints: read the Node, compute its new `spec.taints` (and `spec.unschedulable`), and write them with a strategic-merge
patch that carries `metadata.resourceVersion`, so a concurrent change (the node controller adding a taint, a user
cordoning) makes the API server answer 409 and the write is redone on the fresh object instead of overwriting it.
`spec.taints` has no merge key, so the list is replaced as a whole — hence the optimistic concurrency. Writing what is
already there sends nothing. Evictions go through the Eviction API only; a pod is never deleted directly.
Nominations (`status.nominatedNodeName`) are written the same way on the pod's status, from a fresh read, and not
retried on a conflict: the pod changed (bound, nominated by the scheduler), and the next decision looks again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT
from gpuscale.loop.ports import EvictionOutcome

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
Taints = list[dict[str, Any]]


class KubeWriter:
    def __init__(self, api_client: client.ApiClient, *, conflict_retries: int = 5) -> None:
        self._core = client.CoreV1Api(api_client)
        self._retries = conflict_retries

    def _update_node(self, node: str, change: Callable[[Taints, bool], tuple[Taints, bool]]) -> None:
        """Apply `change(taints, unschedulable) -> (taints, unschedulable)` to the node, retrying on conflicts."""
        for attempt in range(self._retries + 1):
            read_raw: Callable[..., Any] = self._core.read_node
            resp = read_raw(node, _preload_content=False)
            try:
                obj = json.loads(resp.data)
            finally:
                resp.release_conn()
            spec = obj.get("spec") or {}
            taints: Taints = list(spec.get("taints") or [])
            unschedulable = bool(spec.get("unschedulable", False))
            new_taints, new_unschedulable = change(taints, unschedulable)
            if new_taints == taints and new_unschedulable == unschedulable:
                return
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    "spec": {"taints": new_taints, "unschedulable": new_unschedulable}}
            try:
                self._core.patch_node(node, body, _content_type=STRATEGIC_MERGE)
                return
            except ApiException as err:
                if err.status != 409 or attempt == self._retries:
                    raise

    def set_deletion_candidate(self, node: str, since_s: float) -> None:
        taint = {"key": DELETION_CANDIDATE_TAINT, "value": str(int(since_s)), "effect": "PreferNoSchedule"}
        self._update_node(node, lambda ts, u: ([t for t in ts if t.get("key") != DELETION_CANDIDATE_TAINT] + [taint]
                                               if taint not in ts else ts, u))

    def clear_deletion_candidate(self, node: str) -> None:
        self._update_node(node, lambda ts, u: ([t for t in ts if t.get("key") != DELETION_CANDIDATE_TAINT], u))

    def mark_to_be_deleted(self, node: str, now_s: float) -> None:
        taint = {"key": TO_BE_DELETED_TAINT, "value": str(int(now_s)), "effect": "NoSchedule"}

        def change(ts: Taints, _: bool) -> tuple[Taints, bool]:
            if any(t.get("key") == TO_BE_DELETED_TAINT for t in ts):
                return ts, True  # keep the first mark's time
            return [*ts, taint], True

        self._update_node(node, change)

    def unmark_to_be_deleted(self, node: str) -> None:
        self._update_node(node, lambda ts, u: ([t for t in ts if t.get("key") != TO_BE_DELETED_TAINT], False))

    def _nominated(self, pod_key: str, expect: str | None, to: str | None) -> bool:
        """Set the pod's nomination to `to` if the pod is unbound and nominated to `expect` (None: nowhere)."""
        namespace, _, name = pod_key.partition("/")
        read_raw: Callable[..., Any] = self._core.read_namespaced_pod
        try:
            resp = read_raw(name, namespace, _preload_content=False)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        try:
            obj = json.loads(resp.data)
        finally:
            resp.release_conn()
        if (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("nominatedNodeName") != expect:
            return False
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": {"nominatedNodeName": to}}
        try:
            self._core.patch_namespaced_pod_status(name, namespace, body)
        except ApiException as err:
            if err.status in (404, 409):
                return False
            raise
        return True

    def nominate(self, pod_key: str, node: str) -> bool:
        return self._nominated(pod_key, None, node)

    def clear_nomination(self, pod_key: str, node: str) -> bool:
        return self._nominated(pod_key, node, None)

    def evict(self, pod_key: str) -> EvictionOutcome:
        namespace, _, name = pod_key.partition("/")
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            self._core.create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as err:
            if err.status == 429:
                return EvictionOutcome.BLOCKED_BY_PDB
            if err.status == 404:
                return EvictionOutcome.GONE
            return EvictionOutcome.FAILED
        return EvictionOutcome.EVICTED
