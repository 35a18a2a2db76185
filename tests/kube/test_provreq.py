"""kube/provreq.py: ProvisioningRequest + PodTemplate JSON → engine values, and the condition merge."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.engine.provreq import ACCEPTED, BEST_EFFORT_ATOMIC, FAILED, PROVISIONED, Condition
from gpuscale.kube.provreq import POD_TEMPLATE, PROVREQ, RequestCache, merged_conditions, request_from_k8s
from gpuscale.loop.ports import NotSynced
from gpuscale.model.resources import NVIDIA_GPU
from tests.kube.test_cache import lister

T = 1_800_000_000.0


def pr(pod_sets: list[dict[str, Any]], conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": "wl-check-1", "namespace": "team", "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"provisioningClassName": BEST_EFFORT_ATOMIC, "podSets": pod_sets},
            "status": {"conditions": conditions or []}}


def template(name: str, gpus: Any = "8") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "namespace": "team"},
            "template": {"metadata": {"labels": {"app": "train"}},
                         "spec": {"nodeSelector": {"pool": "a100"},
                                  "containers": [{"name": "c", "resources": {"requests": {NVIDIA_GPU: gpus}}}]}}}


def test_pod_sets_resolve_their_templates() -> None:
    obj = pr([{"podTemplateRef": {"name": "ppt-wl-check-1-main"}, "count": 4}],
             [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
               "lastTransitionTime": "2027-01-15T08:00:05Z"}])
    request = request_from_k8s(obj, {"team/ppt-wl-check-1-main": template("ppt-wl-check-1-main")})
    assert request.problem is None and request.key == "team/wl-check-1" and request.pod_count() == 4
    [pod_set] = request.pod_sets
    assert pod_set.template.requests.get(NVIDIA_GPU) == 8 and pod_set.template.labels == {"app": "train"}
    assert pod_set.template.constraints.affinity.node_selector == (("pool", "a100"),)
    assert request.conditions[ACCEPTED].since_s is not None and request.created_s is not None


def test_missing_template_is_not_accepted_and_bad_template_fails() -> None:
    obj = pr([{"podTemplateRef": {"name": "ppt-x"}, "count": 1}])
    missing = request_from_k8s(obj, {})
    assert missing.problem is not None and (missing.problem.type, missing.problem.reason) == (
        ACCEPTED, "PodTemplateNotFound")
    assert "team/ppt-x" in missing.problem.message
    bad = request_from_k8s(obj, {"team/ppt-x": template("ppt-x", gpus="eight")})
    assert bad.problem is not None and (bad.problem.type, bad.problem.reason) == (FAILED, "InvalidPodTemplate")
    assert "spec.podSets[0]" in bad.problem.message and "nvidia.com/gpu" in bad.problem.message


def test_merge_keeps_transition_time_unless_the_status_changes() -> None:
    existing = [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "m",
                 "lastTransitionTime": "2027-01-15T08:00:05Z"},
                {"type": "Provisioned", "status": "False", "reason": "ScaleUpInProgress", "message": "m",
                 "lastTransitionTime": "2027-01-15T08:00:05Z"}]
    merged = merged_conditions(existing, [
        Condition(type=ACCEPTED, status="True", reason="Accepted", message="new words"),
        Condition(type=PROVISIONED, status="True", reason="Provisioned", message="ready")], T, generation=2)
    by_type = {c["type"]: c for c in merged}
    assert by_type["Accepted"]["lastTransitionTime"] == "2027-01-15T08:00:05Z"
    assert by_type["Accepted"]["message"] == "new words"
    assert by_type["Provisioned"]["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    assert by_type["Provisioned"]["observedGeneration"] == 2


def test_request_cache_is_gated_until_both_kinds_list_and_follows_events() -> None:
    cache = RequestCache(client.ApiClient())
    calls: list[dict[str, Any]] = []
    obj = pr([{"podTemplateRef": {"name": "ppt-wl-check-1-main"}, "count": 2}])
    obj["metadata"]["resourceVersion"] = "1"
    cache._list_call = lister({PROVREQ: [[obj]], POD_TEMPLATE: [[]]}, calls)  # type: ignore[method-assign]
    cache._relist(PROVREQ)
    with pytest.raises(NotSynced, match="PodTemplate"):
        cache.requests()
    cache._relist(POD_TEMPLATE)
    [request] = cache.requests()
    assert request.problem is not None and request.problem.reason == "PodTemplateNotFound"
    cache._apply(POD_TEMPLATE, {"type": "ADDED", "object": template("ppt-wl-check-1-main")})
    [request] = cache.requests()
    assert request.problem is None and request.pod_count() == 2
    cache._apply(PROVREQ, {"type": "DELETED", "object": obj})
    assert cache.requests() == ()


def test_an_absent_crd_counts_as_no_requests_and_is_rechecked() -> None:
    cache = RequestCache(client.ApiClient(), absent_recheck_s=0.0)
    served = {"yes": False}
    calls: list[dict[str, Any]] = []
    found = lister({PROVREQ: [[pr([{"podTemplateRef": {"name": "t"}, "count": 1}])]], POD_TEMPLATE: [[]]}, calls)

    def list_call(kind: str) -> Any:
        if kind == PROVREQ and not served["yes"]:
            def not_found(**kwargs: Any) -> Any:
                raise ApiException(status=404, reason="Not Found")
            return not_found
        return found(kind)

    cache._list_call = list_call  # type: ignore[method-assign]
    cache._relist(PROVREQ)
    cache._relist(POD_TEMPLATE)
    assert cache.absent and cache.requests() == () and cache.synced()
    served["yes"] = True  # the CRD gets installed: the next recheck lists it
    cache._watch(PROVREQ)
    assert not cache.absent and [r.name for r in cache.requests()] == ["wl-check-1"]
