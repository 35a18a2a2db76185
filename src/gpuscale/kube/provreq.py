"""ProvisioningRequests and PodTemplates from a real cluster: the `RequestSource` of `loop/provreq.py`.

`RequestCache` is a `WatchCache` over two other kinds — `autoscaling.x-k8s.io/v1` ProvisioningRequests and core/v1
PodTemplates — with the same list+watch, relist and synced gate. `requests()` raises `NotSynced` until both kinds
are listed (and while either relists). Conversion (`request_from_k8s`) is pure and follows the API: each pod set
references a PodTemplate in the request's namespace by `podTemplateRef.name` and asks for `count` pods of it.
A missing template leaves the request unaccepted (`Accepted=False/PodTemplateNotFound`, retried every tick: Kueue
creates the templates just before the request); an invalid one fails it (`Failed=True/InvalidPodTemplate`).

`write_conditions` reads the request, merges the conditions by type (keeping `lastTransitionTime` when the status
does not change, as `meta.SetStatusCondition` does) and sends a merge patch of `status` carrying the resourceVersion,
so a concurrent change is a 409 and the write is retried next tick.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.engine.provreq import ACCEPTED, FAILED, FALSE, TRUE, Condition, PodSet, ProvisioningRequest
from gpuscale.kube.cache import WatchCache
from gpuscale.kube.convert import pod_from_k8s
from gpuscale.loop.ports import NotSynced
from gpuscale.model.errors import InputError

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
PROVREQ, POD_TEMPLATE = "ProvisioningRequest", "PodTemplate"


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _conditions(obj: Mapping[str, Any]) -> dict[str, Condition]:
    out = {}
    for raw in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(raw, Mapping) and isinstance(raw.get("type"), str):
            out[raw["type"]] = Condition(type=raw["type"], status=str(raw.get("status", "")),
                                         reason=str(raw.get("reason", "")), message=str(raw.get("message", "")),
                                         since_s=_time(raw.get("lastTransitionTime")))
    return out


def template_pod(namespace: str, template: Mapping[str, Any]) -> Any:
    """The pod a PodTemplate describes, converted as the scheduler would see it (raises `InputError`)."""
    meta = template.get("metadata") or {}
    inner = template.get("template") or {}
    inner_meta = inner.get("metadata") or {}
    return pod_from_k8s({"kind": "Pod", "metadata": {**inner_meta, "namespace": namespace,
                                                     "name": meta.get("name", "template")},
                         "spec": inner.get("spec") or {}})


def request_from_k8s(obj: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]]) -> ProvisioningRequest:
    """A ProvisioningRequest with its templates resolved; `problem` set when it cannot be acted on as written."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
    spec = obj.get("spec") or {}
    base = ProvisioningRequest(namespace=namespace, name=name, class_name=str(spec.get("provisioningClassName", "")),
                               conditions=_conditions(obj), created_s=_time(meta.get("creationTimestamp")))
    sets: list[PodSet] = []
    for i, raw in enumerate(spec.get("podSets") or []):
        ref = ((raw or {}).get("podTemplateRef") or {}).get("name")
        count = (raw or {}).get("count")
        if not isinstance(ref, str) or not ref or type(count) is not int or not 1 <= count <= 2**31 - 1:
            return _problem(base, FAILED, TRUE, "InvalidProvisioningRequest",
                            f"spec.podSets[{i}]: needs podTemplateRef.name and count >= 1 (an int32)")
        template = templates.get(f"{namespace}/{ref}")
        if template is None:
            return _problem(base, ACCEPTED, FALSE, "PodTemplateNotFound",
                            f"spec.podSets[{i}].podTemplateRef: PodTemplate {namespace}/{ref} not found")
        try:
            pod = template_pod(namespace, template)
        except InputError as err:
            return _problem(base, FAILED, TRUE, "InvalidPodTemplate", f"spec.podSets[{i}]: {err}")
        sets.append(PodSet(template_name=ref, template=pod, count=count))
    if not sets:
        return _problem(base, FAILED, TRUE, "InvalidProvisioningRequest", "spec.podSets: empty")
    return ProvisioningRequest(namespace=namespace, name=name, class_name=base.class_name, pod_sets=tuple(sets),
                               conditions=base.conditions, created_s=base.created_s)


def _problem(request: ProvisioningRequest, type_: str, status: str, reason: str, message: str) -> ProvisioningRequest:
    return ProvisioningRequest(namespace=request.namespace, name=request.name, class_name=request.class_name,
                               conditions=request.conditions, created_s=request.created_s,
                               problem=Condition(type=type_, status=status, reason=reason, message=message))


def merged_conditions(existing: Sequence[Mapping[str, Any]], updates: Sequence[Condition], now_s: float,
                      generation: int | None = None) -> list[dict[str, Any]]:
    """`status.conditions` with `updates` applied by type; `lastTransitionTime` moves only when the status does."""
    stamp = datetime.fromtimestamp(now_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    by_type = {str(c.get("type")): dict(c) for c in existing if isinstance(c, Mapping)}
    for c in updates:
        old = by_type.get(c.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == c.status else stamp
        new = {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
               "lastTransitionTime": since or stamp}
        if generation is not None:
            new["observedGeneration"] = generation
        by_type[c.type] = new
    return list(by_type.values())


class RequestCache(WatchCache):
    """List+watch of ProvisioningRequests and PodTemplates; `RequestSource` for the loop.

    When the API server does not serve ProvisioningRequests (404: the CRD is not installed) the kind counts as listed
    and empty — no CRD, no requests — and is listed again every `absent_recheck_s`, so installing the CRD later is
    picked up without a restart."""

    kinds = (PROVREQ, POD_TEMPLATE)

    def __init__(self, api_client: client.ApiClient, *, absent_recheck_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self._custom = client.CustomObjectsApi(api_client)
        self._absent_recheck_s = absent_recheck_s
        self.absent = False
        """The last list of ProvisioningRequests answered 404."""

    def _relist(self, kind: str) -> None:
        if kind != PROVREQ:
            super()._relist(kind)
            return
        try:
            super()._relist(kind)
        except ApiException as err:
            if err.status != 404:
                raise
            with self._lock:
                store = self._stores[kind]
                store.objects, store.converted, store.resource_version = {}, {}, None
                store.synced, store.relisting, store.last_error = True, False, "not served (CRD not installed)"
            self.absent = True
            return
        self.absent = False

    def _watch(self, kind: str) -> None:
        if kind == PROVREQ and self.absent:
            if not self._stop.wait(self._absent_recheck_s):
                self._relist(kind)
            return
        super()._watch(kind)

    def _list_call(self, kind: str) -> Callable[..., Any]:
        if kind == PROVREQ:
            return partial(self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        return self._core.list_pod_template_for_all_namespaces

    def requests(self) -> tuple[ProvisioningRequest, ...]:
        with self._lock:
            waiting = [s.kind for s in self._stores.values() if not s.synced or s.relisting]
            if waiting:
                raise NotSynced(f"provisioning-request cache not synced: {', '.join(waiting)}")
            raw = list(self._stores[PROVREQ].objects.values())
            templates = dict(self._stores[POD_TEMPLATE].objects)
        return tuple(sorted((request_from_k8s(obj, templates) for obj in raw), key=lambda r: r.key))

    def write_conditions(self, request: str, conditions: Sequence[Condition], now_s: float) -> None:
        namespace, _, name = request.partition("/")
        current = cast(dict[str, Any],
                       self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
        meta = current.get("metadata") or {}
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"conditions": merged_conditions((current.get("status") or {}).get("conditions") or [],
                                                           conditions, now_s, meta.get("generation"))}}
        self._custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body,
                                                           _content_type="application/merge-patch+json")
