"""Kueue interop against the real control plane, with the pinned Kueue CRDs (no Kueue controller: the test creates
the objects Kueue's ProvisioningRequest admission check creates, named as Kueue names them) and gpuscale's controller.

- A ClusterQueue whose admission check `gpuscale-prov` (controller `kueue.x-k8s.io/provisioning-request`) points at a
  ProvisioningRequestConfig of class best-effort-atomic; a Workload with quota reserved and the check Pending; the
  ProvisioningRequest `<workload>-<check>-1` owned by the Workload, and its PodTemplate `ppt-<request>-main`.
  gpuscale scales the whole request up and sets Provisioned, which is what Kueue's check waits for.
- Suspended Jobs and pods held by Kueue's scheduling gate never trigger a scale-up; once the gate is lifted (as Kueue
  does on admission) the pod does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import wait_for
from kubernetes import client
from test_controller import A100, SEED_CONFIG, Driver, make_driver, seed_config  # noqa: F401  (a fixture)
from test_provisioning_request import (  # noqa: F401  (create_and_clean is a fixture)
    CRD,
    condition_true,
    conditions,
    create_and_clean,
    gpu_spec,
    install_crds,
)
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.config import Config
from gpuscale.engine.provreq import BEST_EFFORT_ATOMIC
from gpuscale.engine.reasons import ReasonCode
from gpuscale.kube.provreq import GROUP, PLURAL, VERSION

REPO = Path(__file__).resolve().parents[2]
KUEUE_CRDS = sorted((REPO / "deploy" / "crds" / "kueue").glob("*.yaml"))
KUEUE, KV = "kueue.x-k8s.io", "v1beta2"
CHECK = "gpuscale-prov"
GATE = "kueue.x-k8s.io/admission"


def _now() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kueue_setup(custom: client.CustomObjectsApi, namespace: str, create: Callable[..., Any]) -> None:
    """ResourceFlavor, ProvisioningRequestConfig, AdmissionCheck, ClusterQueue and LocalQueue, as docs/kueue.md."""
    suffix = namespace.removeprefix("e2e-")
    create(KUEUE, KV, None, "resourceflavors", {
        "metadata": {"name": f"a100-{suffix}"},
        "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}}})
    create(KUEUE, KV, None, "provisioningrequestconfigs", {
        "metadata": {"name": f"gpuscale-atomic-{suffix}"},
        "spec": {"provisioningClassName": BEST_EFFORT_ATOMIC, "managedResources": ["nvidia.com/gpu"]}})
    create(KUEUE, KV, None, "admissionchecks", {
        "metadata": {"name": f"{CHECK}-{suffix}"},
        "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                 "parameters": {"apiGroup": KUEUE, "kind": "ProvisioningRequestConfig",
                                "name": f"gpuscale-atomic-{suffix}"}}})
    create(KUEUE, KV, None, "clusterqueues", {
        "metadata": {"name": f"team-a-{suffix}"},
        "spec": {"namespaceSelector": {},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
                     {"name": f"a100-{suffix}", "resources": [{"name": "cpu", "nominalQuota": "400"},
                                                              {"name": "memory", "nominalQuota": "4Ti"},
                                                              {"name": "nvidia.com/gpu", "nominalQuota": "16"}]}]}],
                 "admissionChecksStrategy": {"admissionChecks": [{"name": f"{CHECK}-{suffix}"}]}}})
    create(KUEUE, KV, namespace, "localqueues", {"metadata": {"name": "team-a"},
                                                  "spec": {"clusterQueue": f"team-a-{suffix}"}})


def explain_live(control_plane: Any, target: str) -> dict[str, Any]:
    """`gpuscale explain --kubeconfig` against the live control plane."""
    result = CliRunner().invoke(app, ["explain", target, "--kubeconfig", str(control_plane.kubeconfig_path),
                                      "--config", str(SEED_CONFIG), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_kueue_provisioning_admission_check_is_answered_by_gpuscale(
        control_plane: Any, api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str,
        make_driver: Callable[[Config], Driver], create_and_clean: Callable[..., Any]) -> None:  # noqa: F811
    install_crds(api_client, [CRD, *KUEUE_CRDS])
    custom = client.CustomObjectsApi(api_client)
    suffix = namespace.removeprefix("e2e-")
    kueue_setup(custom, namespace, create_and_clean)
    workload = create_and_clean(KUEUE, KV, namespace, "workloads", {
        "metadata": {"name": "job-train-7f3a1"},
        "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 2,
                                                     "template": {"spec": gpu_spec()}}]}})
    # What Kueue's scheduler writes when it reserves quota: the admission, QuotaReserved, and the check Pending.
    custom.patch_namespaced_custom_object_status(KUEUE, KV, namespace, "workloads", "job-train-7f3a1", {"status": {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": f"Quota reserved in ClusterQueue team-a-{suffix}", "lastTransitionTime": _now()}],
        "admission": {"clusterQueue": f"team-a-{suffix}", "podSetAssignments": [{
            "name": "main", "count": 2, "flavors": {"nvidia.com/gpu": f"a100-{suffix}", "cpu": f"a100-{suffix}",
                                                    "memory": f"a100-{suffix}"},
            "resourceUsage": {"nvidia.com/gpu": "16", "cpu": "8", "memory": "32Gi"}}]},
        "admissionChecks": [{"name": f"{CHECK}-{suffix}", "state": "Pending", "message": "",
                             "lastTransitionTime": _now()}]}}, _content_type="application/merge-patch+json")

    # What Kueue's provisioning controller creates: the PodTemplate (flavor's node labels merged in) and the request,
    # owned by the Workload.
    request = f"job-train-7f3a1-{CHECK}-{suffix}-1"
    ppt = f"ppt-{request}-main"
    core_v1.create_namespaced_pod_template(namespace, {
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": ppt, "labels": {f"{KUEUE}/managed": "true"}},
        "template": {"spec": gpu_spec()}})
    owner = {"apiVersion": f"{KUEUE}/{KV}", "kind": "Workload", "name": "job-train-7f3a1",
             "uid": workload["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProvisioningRequest",
        "metadata": {"name": request, "labels": {f"{KUEUE}/managed": "true"}, "ownerReferences": [owner]},
        "spec": {"provisioningClassName": BEST_EFFORT_ATOMIC, "parameters": {},
                 "podSets": [{"podTemplateRef": {"name": ppt}, "count": 2}]}})

    driver = make_driver(seed_config())
    provisioned = driver.tick_until(lambda: condition_true(api_client, namespace, request, "Provisioned"), 90,
                                    "Provisioned=True")
    assert provisioned["reason"] == "Provisioned"
    assert driver.scale_ups() == [(A100, 2)]
    assert len(driver.pool_nodes()[A100]) == 2
    seen = conditions(api_client, namespace, request)
    assert seen["Accepted"]["status"] == "True" and "Failed" not in seen
    assert explain_live(control_plane, f"{namespace}/{request}")["hold"] == "none"
    # Kueue's check would now turn Ready; the request is still owned by its Workload.
    owners = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, request)["metadata"][
        "ownerReferences"]
    assert [o["name"] for o in owners] == ["job-train-7f3a1"]


def test_suspended_jobs_and_gated_pods_never_trigger_scale_up(
        control_plane: Any, api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str,
        make_driver: Callable[[Config], Driver]) -> None:  # noqa: F811
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "suspended", "labels": {
            f"{KUEUE}/queue-name": "team-a"}},
        "spec": {"suspend": True, "parallelism": 2, "completions": 2, "template": {
            "spec": {**gpu_spec(), "restartPolicy": "Never"}}}})
    core_v1.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated"},
        "spec": {**gpu_spec(), "schedulingGates": [{"name": GATE}]}})

    def scheduling_gated() -> bool:
        pod = core_v1.read_namespaced_pod("gated", namespace)
        return any(c.type == "PodScheduled" and c.reason == "SchedulingGated" for c in pod.status.conditions or [])

    wait_for(scheduling_gated, 30, desc="the scheduler reports the pod SchedulingGated")
    driver = make_driver(seed_config())
    waited = driver.tick_until(lambda: [v for v in (driver.reports[-1].plan.waiting if driver.reports[-1].plan
                                                    else ()) if v.pod == f"{namespace}/gated"], 30,
                               "the gated pod listed as waiting")
    assert waited[0].reasons[0].code is ReasonCode.SCHEDULING_GATED
    for _ in range(5):
        driver.tick()
    assert driver.scale_ups() == [] and driver.pool_nodes() == {}
    assert not core_v1.list_namespaced_pod(namespace, label_selector="job-name=suspended").items
    assert explain_live(control_plane, f"{namespace}/gated")["hold"] == "gated"

    # Kueue admits the workload: it removes the gate; now the pod is Unschedulable and triggers one A100 node.
    core_v1.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": None}})
    driver.tick_until(driver.scale_ups, 60, "a scale-up for the released pod")
    assert driver.scale_ups() == [(A100, 1)]
    core_v1.delete_namespaced_pod("gated", namespace, grace_period_seconds=0)
    batch.delete_namespaced_job("suspended", namespace, propagation_policy="Background")
