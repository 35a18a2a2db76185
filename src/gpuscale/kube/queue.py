"""What `gpuscale explain` reads: a cluster dump (or a live cluster) with Kueue Workloads, ProvisioningRequests and
PodTemplates besides nodes, pods and budgets. Pure conversion, except `live_objects`, which lists through the API.

Kueue's verdict on quota is read from the Workload, not recomputed: a Workload without `QuotaReserved=True` holds its
pods on quota, and the condition's message (Kueue writes e.g. "couldn't assign flavors to pod set main: insufficient
unused quota for nvidia.com/gpu in flavor a100, 8 more needed") says why. A Workload's pods are the pods controlled by
the Workload's owner (a Job, JobSet, … — the same object Kueue created the Workload for), or the pod itself for
Kueue's plain-pod integration.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.engine.explain import QueueHold
from gpuscale.engine.provreq import ProvisioningRequest
from gpuscale.inputs.files import one_line
from gpuscale.kube.convert import cluster_from_objects
from gpuscale.kube.provreq import GROUP, PLURAL, VERSION, request_from_k8s
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import InputError

KUEUE_GROUP = "kueue.x-k8s.io"
QUEUE_KINDS = ("Workload", "ProvisioningRequest", "PodTemplate")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainInput:
    cluster: Cluster
    requests: tuple[ProvisioningRequest, ...]
    holds: Mapping[str, QueueHold]


def _flatten(objects: Iterable[Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for obj in objects:
        if isinstance(obj, Mapping) and str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"),
                                                                                                 list):
            out += _flatten(obj["items"])
        elif isinstance(obj, Mapping):
            out.append(obj)
    return out


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def _workload_hold(workload: Mapping[str, Any]) -> QueueHold | None:
    status = workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    reserved = conditions.get("QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return None
    spec = workload.get("spec") or {}
    message = (reserved or conditions.get("Pending") or {}).get("message") or \
        f"waiting in LocalQueue {spec.get('queueName', '?')} for quota"
    admission = status.get("admission") or {}
    return QueueHold(workload=_key(workload), cluster_queue=admission.get("clusterQueue"), message=str(message))


def queue_holds(objects: Iterable[Mapping[str, Any]], cluster: Cluster) -> dict[str, QueueHold]:
    """Pod key → the quota hold of its Workload, for pods whose Workload has no quota reserved."""
    by_owner: dict[tuple[str, str, str], QueueHold] = {}
    for obj in objects:
        if obj.get("kind") != "Workload" or not str(obj.get("apiVersion", "")).startswith(KUEUE_GROUP):
            continue
        with _malformed(obj):
            hold = _workload_hold(obj)
            if hold is None:
                continue
            namespace = (obj.get("metadata") or {}).get("namespace", "default")
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
                by_owner[(namespace, str(ref.get("kind")), str(ref.get("name")))] = hold
    holds = {}
    for pod in cluster.pods:
        owner = pod.owner
        hold = by_owner.get((pod.namespace, owner.kind, owner.name)) if owner else None
        hold = hold or by_owner.get((pod.namespace, "Pod", pod.name))
        if hold is not None:
            holds[pod.key] = hold
    return holds


def explain_input(objects: Iterable[Any], source: str = "input") -> ExplainInput:
    """Split a dump into the cluster, the ProvisioningRequests (templates resolved) and the quota holds."""
    flat = _flatten(objects)
    queue = [o for o in flat if o.get("kind") in QUEUE_KINDS]
    cluster = cluster_from_objects([o for o in flat if o.get("kind") not in QUEUE_KINDS], source)
    templates = {_key(o): o for o in queue if o.get("kind") == "PodTemplate"}
    requests = []
    for obj in queue:
        with _malformed(obj):
            if obj.get("kind") == "ProvisioningRequest":
                if not isinstance(obj.get("spec"), Mapping):
                    raise InputError(f"ProvisioningRequest {_key(obj)}", "spec", "expected an object")
                requests.append(request_from_k8s(obj, templates))
            elif obj.get("kind") == "Workload":
                _workload_hold(obj)
    return ExplainInput(cluster=cluster, requests=tuple(sorted(requests, key=lambda r: r.key)),
                        holds=queue_holds(queue, cluster))


@contextmanager
def _malformed(obj: Mapping[str, Any]) -> Iterator[None]:
    """A queue object of a shape its reader does not expect (a list where an object belongs, a bad timestamp) is one
    `InputError` naming it, not a traceback."""
    try:
        yield
    except (AttributeError, TypeError, ValueError, KeyError) as err:
        raise InputError(f"{str(obj.get('kind'))[:40]} {_key(obj)[:120]}", "(object)",
                         f"malformed: {one_line(str(err), 160)}") from None


def live_objects(api_client: client.ApiClient) -> list[Any]:
    """Nodes, pods, PDBs, PodTemplates, and — where served — ProvisioningRequests and Kueue Workloads, as raw JSON."""
    core, policy = client.CoreV1Api(api_client), client.PolicyV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    calls: list[tuple[str, Any]] = [
        ("Node", core.list_node), ("Pod", core.list_pod_for_all_namespaces),
        ("PodDisruptionBudget", policy.list_pod_disruption_budget_for_all_namespaces),
        ("PodTemplate", core.list_pod_template_for_all_namespaces),
        ("ProvisioningRequest", lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)),
        ("Workload", lambda **kw: custom.list_cluster_custom_object(KUEUE_GROUP, "v1beta2", "workloads", **kw)),
    ]
    objects: list[Any] = []
    for kind, call in calls:
        try:
            response = call(_preload_content=False)
        except ApiException as err:
            if err.status == 404 and kind in ("ProvisioningRequest", "Workload"):
                continue  # CRD not installed
            raise
        body = json.loads(response.data)
        for item in body.get("items") or []:
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", body.get("apiVersion", "v1"))
            objects.append(item)
    return objects
