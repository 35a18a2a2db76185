"""The deployment manifests (deploy/kustomize) against the real API server:
(a) every object of the base passes a server-side dry run (admission and validation included) once its namespace
    exists, the overlay points at the base, and the ConfigMap's gpuscale config loads;
(b) the RBAC is sufficient and least-privilege: bound for real to the ServiceAccount, a client impersonating
    `system:serviceaccount:gpuscale-system:gpuscale` runs the controller (watch cache sync, Lease, scale-up, Events,
    status ConfigMap, taints, eviction, node deletion) without a single 403, and verbs outside the roles are refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ignore_status, wait_for
from kubernetes import client, config, utils
from kubernetes.client.exceptions import ApiException
from test_controller import (
    A100,
    KWOK,
    create_pod,  # noqa: F401 (a fixture)
    seed_config,
    training_pod,
)

from gpuscale.config import load_config
from gpuscale.controller import RunOptions, build_controller
from gpuscale.kube.lease import LeaseSettings
from gpuscale.kube.writer import KubeWriter
from gpuscale.loop.ports import EvictionOutcome
from gpuscale.loop.tick import LoopSettings
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProvider

BASE = Path(__file__).resolve().parents[2] / "deploy" / "kustomize" / "base"
OVERLAY = BASE.parent / "overlays" / "example"
NS, SA = "gpuscale-system", "gpuscale"


def manifests() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((BASE / name).read_text(encoding="utf-8")) if d]
    return docs


@pytest.fixture(scope="module")
def system_namespace(core_v1: client.CoreV1Api) -> Iterator[str]:
    """`gpuscale-system`, created for real. Another module's copy (test_clusterapi_rbac.py) may still be
    terminating: wait until it is gone rather than create objects in a namespace being deleted."""

    def usable() -> bool:
        try:
            return bool(core_v1.read_namespace(NS).status.phase != "Terminating")
        except ApiException as err:
            if err.status != 404:
                raise
            ignore_status(409, core_v1.create_namespace, client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
            return False

    wait_for(usable, 60, desc=f"namespace {NS} created and not terminating")
    yield NS
    ignore_status(404, core_v1.delete_namespace, NS)


def test_every_manifest_passes_a_server_side_dry_run(api_client: client.ApiClient, system_namespace: str,
                                                      tmp_path: Path) -> None:
    docs = manifests()
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert kinds == sorted(["Namespace/gpuscale-system", "ServiceAccount/gpuscale", "ClusterRole/gpuscale",
                            "ClusterRoleBinding/gpuscale", "Role/gpuscale", "RoleBinding/gpuscale",
                            "ConfigMap/gpuscale-config", "Deployment/gpuscale", "PodDisruptionBudget/gpuscale"])
    files = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert files == set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    for doc in docs:
        if doc["kind"] == "Namespace":
            continue  # created for real by the fixture (a dry-run create of an existing one would only say 409)
        created = utils.create_from_dict(api_client, doc, dry_run="All")
        assert created, doc["kind"]
    # dry run means nothing was stored
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(api_client).read_namespaced_deployment("gpuscale", NS)
    assert err.value.status == 404

    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--leader-elect" in container["args"] and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {e["name"] for e in container["env"]} == {"POD_NAME", "POD_NAMESPACE"}
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
        "labels"].items()

    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"], encoding="utf-8")
    assert {p.name for p in load_config(path).pools} == {"cpu-general", A100, "gpu-inference-t4"}

    overlay = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text(encoding="utf-8"))
    assert overlay["resources"] == ["../../base"]
    assert all(p["target"]["kind"] == "Deployment" and p["target"]["name"] == "gpuscale" for p in overlay["patches"])


def created_rbac(api_client: client.ApiClient, docs: list[dict[str, Any]]) -> Iterator[None]:
    """The ServiceAccount and (Cluster)Role(Binding)s among `docs`, created for real; deleted afterwards."""
    docs = [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                             "RoleBinding")]
    for doc in docs:
        utils.create_from_dict(api_client, doc)
    yield
    rbac_api, core = client.RbacAuthorizationV1Api(api_client), client.CoreV1Api(api_client)
    delete = {"ClusterRoleBinding": rbac_api.delete_cluster_role_binding, "ClusterRole": rbac_api.delete_cluster_role}
    delete_namespaced = {"RoleBinding": rbac_api.delete_namespaced_role_binding,
                         "Role": rbac_api.delete_namespaced_role,
                         "ServiceAccount": core.delete_namespaced_service_account}
    for doc in reversed(docs):
        name = doc["metadata"]["name"]
        if doc["kind"] in delete:
            ignore_status(404, delete[doc["kind"]], name)
        else:
            ignore_status(404, delete_namespaced[doc["kind"]], name, NS)


@pytest.fixture(scope="module")
def rbac(api_client: client.ApiClient, system_namespace: str) -> Iterator[None]:
    """The ServiceAccount and its (Cluster)Role(Binding)s, created for real from the manifests."""
    yield from created_rbac(api_client, manifests())


@pytest.fixture
def as_service_account(control_plane: Any, rbac: None) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{NS}:{SA}")
    yield api
    api.close()


def test_the_controller_runs_as_its_service_account_and_nothing_more(
        as_service_account: client.ApiClient, api_client: client.ApiClient, core_v1: client.CoreV1Api,
        namespace: str, create_pod: Callable[[client.V1Pod], None]) -> None:  # noqa: F811
    sa = as_service_account
    cfg = seed_config()
    lease = LeaseSettings(name="gpuscale", namespace=NS, lease_duration_s=3, renew_deadline_s=2.0,
                          retry_period_s=0.25)
    controller = build_controller(sa, cfg, kwok=KWOK,
                                  settings=replace(LoopSettings.from_config(cfg), scan_interval_s=0.2),
                                  options=RunOptions(namespace=NS, leader_elect=True, lease=lease,
                                                     status_name="gpuscale-status", identity="as-sa"))
    try:
        assert controller.cache.wait_synced(30), controller.cache.status()  # list+watch nodes, pods, PDBs
        wait_for(controller.is_leader, 10, interval_s=0.05, desc="the SA acquires the Lease")
        create_pod(training_pod("train"))
        reports = []

        def scaled() -> bool:
            reports.append(controller.tick())
            return bool(reports[-1].scaled_up)

        wait_for(scaled, 30, desc="a scale-up as the ServiceAccount")
        errors = [str(e) for r in reports for e in r.errors]
        assert not errors, errors
        assert all(r.synced for r in reports)
        node = core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items[0].metadata.name
        wait_for(lambda: controller.status is not None and controller.status.writes >= 1, 10,
                 desc="the status ConfigMap written")
        assert controller.status is not None and controller.status.failures == 0
        assert "gpu-training-a100" in core_v1.read_namespaced_config_map("gpuscale-status", NS).data["status"]
        events = core_v1.list_namespaced_event(namespace, field_selector="reason=TriggeredScaleUp").items
        assert [e.involved_object.name for e in events] == ["train"]
        pool_events = core_v1.list_namespaced_event(NS, field_selector="reason=ScaledUpGroup").items
        assert pool_events and pool_events[0].involved_object.name == "gpuscale-status"

        writer = KubeWriter(sa)  # scale-down's writes, as the SA
        writer.set_deletion_candidate(node, time.time())
        writer.mark_to_be_deleted(node, time.time())
        assert writer.evict(f"{namespace}/no-such-pod") is EvictionOutcome.GONE  # allowed: 404, not 403
        KwokProvider(sa, cfg.pools).delete([node])
        wait_for(lambda: not ignore_status(404, core_v1.read_node, node), 10, desc="node deleted by the SA")
    finally:
        controller.close()
    lease_obj = client.CoordinationV1Api(api_client).read_namespaced_lease("gpuscale", NS)
    assert not lease_obj.spec.holder_identity  # released on close

    sa_core = client.CoreV1Api(sa)
    forbidden = {
        "delete a pod": lambda: sa_core.delete_namespaced_pod("train", namespace),
        "read secrets": lambda: sa_core.list_namespaced_secret(NS),
        "patch another ConfigMap": lambda: sa_core.patch_namespaced_config_map(
            "gpuscale-config", NS, {"data": {"x": "y"}}),
        "update another Lease": lambda: client.CoordinationV1Api(sa).read_namespaced_lease("other", NS),
        "update a node": lambda: sa_core.replace_node("x", client.V1Node(metadata=client.V1ObjectMeta(name="x"))),
        "write a ConfigMap elsewhere": lambda: sa_core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))),
    }
    for what, call in forbidden.items():
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403, (what, err.value.status)
    ignore_status(404, core_v1.delete_namespaced_config_map, "gpuscale-status", NS)
    ignore_status(404, client.CoordinationV1Api(api_client).delete_namespaced_lease, "gpuscale", NS)
