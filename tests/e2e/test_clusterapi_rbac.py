"""The Cluster API overlay (deploy/kustomize/overlays/clusterapi) against the real API server with Cluster API's CRDs:
(a) the overlay renders (base + the `gpuscale-clusterapi` ClusterRole and binding + its patches: `--provider=
    clusterapi`, no node create/delete) — as `kubectl kustomize` renders it, when kubectl is installed — and every
    object it adds or changes passes a server-side dry run;
(b) its RBAC is sufficient: bound for real to the ServiceAccount, the controller built on a client impersonating
    `system:serviceaccount:gpuscale-system:gpuscale` discovers the node groups, scales a T4 MachineDeployment from
    zero (pending pod → replicas 0 → 1), follows the Machine to its Node (providerID), removes the node when it is
    idle (delete-machine annotation, replicas 1 → 0) and scales an unowned MachineSet through its scale subresource,
    with no error in any tick and no failed status write;
(c) and least-privilege: deleting a Machine, updating or patching a MachineDeployment outside the scale subresource,
    creating a MachineSet, writing a Machine's status, watching Machines, creating or deleting a Node (the base's
    kwok-only verbs) and the rest below answer 403 from the RBAC authorizer, naming the verb and resource.

No Cluster API controller runs: the test plays the infrastructure provider as test_clusterapi.py does.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml
from harness import ignore_status, wait_for
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException
from test_clusterapi import (
    CAPACITY,
    CLUSTER,
    DELETE_MACHINE,
    GPU_TAINTS,
    GROUP,
    MAX_SIZE,
    MIN_SIZE,
    T4_LABELS,
    TICK_EVERY_S,
    VERSION,
    Capi,
    capi,  # noqa: F401 (a fixture)
    capi_crds,  # noqa: F401 (a fixture)
    config_for_capi,
    pods,  # noqa: F401 (a fixture)
)
from test_deploy import (
    BASE,
    NS,
    SA,
    as_service_account,  # noqa: F401 (a fixture, using this module's `rbac`)
    created_rbac,
    manifests,
    system_namespace,  # noqa: F401 (a fixture)
)

from gpuscale.controller import Controller, RunOptions, build_controller
from gpuscale.kube.lease import LeaseSettings
from gpuscale.kube.tracer import Tracer
from gpuscale.loop.report import TickReport
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.clusterapi import ClusterAPIProvider

OVERLAY = BASE.parent / "overlays" / "clusterapi"


# --- rendering the overlay (kustomize may not be installed: resources + JSON patches, as the overlay uses them)


def _json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """RFC 6902 `test`, `replace` and `add` (the ops the overlay uses); anything else fails the render."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = (len(target) if last == "-" else int(last)) if isinstance(target, list) else last
        if op["op"] == "test":
            assert target[key] == op["value"], f"patch test failed at {op['path']}: {target[key]!r}"
        elif op["op"] == "replace":
            target[key] = op["value"]
        elif op["op"] == "add" and isinstance(target, list):
            target.insert(key, op["value"])
        elif op["op"] == "add":
            target[key] = op["value"]
        else:
            raise AssertionError(f"JSON patch op {op['op']!r} is not rendered by this test")


def render_overlay() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text(encoding="utf-8"))
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        if name == "../../base":
            docs += manifests()
        else:
            docs += [d for d in yaml.safe_load_all((OVERLAY / name).read_text(encoding="utf-8")) if d]
    for patch in kustomization["patches"]:
        target = patch["target"]
        matches = [d for d in docs if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]]
        assert len(matches) == 1, target
        _json_patch(matches[0], yaml.safe_load(patch["patch"]))
    return docs


def _by_key(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def _args(docs: list[dict[str, Any]]) -> list[str]:
    return list(_by_key(docs)["Deployment/gpuscale"]["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_overlay_renders_and_its_objects_pass_a_server_side_dry_run(
        api_client: client.ApiClient, system_namespace: str) -> None:  # noqa: F811
    docs = render_overlay()
    base = _by_key(manifests())
    rendered = _by_key(docs)
    assert set(rendered) - set(base) == {"ClusterRole/gpuscale-clusterapi", "ClusterRoleBinding/gpuscale-clusterapi"}
    assert _args(docs).count("--provider=clusterapi") == 1 and not any("kwok" in a for a in _args(docs))
    assert _args(docs) == [a.replace("--provider=kwok", "--provider=clusterapi") for a in _args(list(base.values()))]
    node_rules = [r for r in rendered["ClusterRole/gpuscale"]["rules"] if "nodes" in r["resources"]]
    assert node_rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]
    binding = rendered["ClusterRoleBinding/gpuscale-clusterapi"]
    assert binding["roleRef"]["name"] == "gpuscale-clusterapi"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]
    # Everything else is the base's, unchanged.
    changed = {k for k in base if rendered[k] != base[k]}
    assert changed == {"Deployment/gpuscale", "ClusterRole/gpuscale"}

    for key in sorted(changed | {"ClusterRole/gpuscale-clusterapi", "ClusterRoleBinding/gpuscale-clusterapi"}):
        assert utils.create_from_dict(api_client, rendered[key], dry_run="All"), key
    with pytest.raises(ApiException) as err:  # a dry run stores nothing
        client.RbacAuthorizationV1Api(api_client).read_cluster_role("gpuscale-clusterapi")
    assert err.value.status == 404


def test_the_render_matches_kubectl_kustomize() -> None:
    """This module's render of the overlay is what kustomize makes of it (the base's `labels` and `images`
    transformers aside: they are kustomize's to apply), so the RBAC bound below is the RBAC a cluster would get."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the overlay is rendered by this module only")
    out = subprocess.run([kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, check=True).stdout

    def unlabelled(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        docs = copy.deepcopy(docs)
        for d in docs:
            d["metadata"].pop("labels", None)
            for container in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                container["image"] = container["image"].partition(":")[0]
        return _by_key(docs)

    assert unlabelled([d for d in yaml.safe_load_all(out) if d]) == unlabelled(render_overlay())


# --- the RBAC, bound for real


@pytest.fixture(scope="module")
def rbac(api_client: client.ApiClient, system_namespace: str) -> Iterator[None]:  # noqa: F811
    """The ServiceAccount and every (Cluster)Role(Binding) of the rendered overlay, created for real (test_deploy's
    `as_service_account` impersonates the ServiceAccount bound to these)."""
    yield from created_rbac(api_client, render_overlay())


def unowned_machine_set(capi: Capi, name: str, *, min_size: int, max_size: int) -> None:  # noqa: F811
    """A MachineSet no MachineDeployment owns, autoscaled (CA's min/max annotations), scale-from-zero CPU template."""
    capi.custom.create_namespaced_custom_object(GROUP, VERSION, capi.namespace, "machinesets", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MachineSet",
        "metadata": {"name": name, "namespace": capi.namespace,
                     "annotations": {MIN_SIZE: str(min_size), MAX_SIZE: str(max_size), CAPACITY + "cpu": "16",
                                     CAPACITY + "memory": "64G"}},
        "spec": {"clusterName": CLUSTER, "replicas": 0,
                 "selector": {"matchLabels": {f"{GROUP}/set-name": name}},
                 "template": {"metadata": {"labels": {f"{GROUP}/set-name": name}},
                              "spec": {"clusterName": CLUSTER, "bootstrap": {"dataSecretName": "bootstrap"},
                                       "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                                             "kind": "KwokMachineTemplate", "name": name}}}}})
    capi.made.append(("machinesets", name))


def machine_set_replicas(capi: Capi, name: str) -> int:  # noqa: F811
    ms = capi.custom.get_namespaced_custom_object(GROUP, VERSION, capi.namespace, "machinesets", name)
    return int(ms["spec"].get("replicas", 0))


def tick_until(controller: Controller, predicate: Callable[[], bool], timeout_s: float,
               desc: str) -> list[TickReport]:
    """`Controller.tick()` (autoscaler, status, metrics, tracer: all as the ServiceAccount) until `predicate`; any
    error in a tick (a 403 among them) fails at once."""
    reports = []
    deadline = time.monotonic() + timeout_s
    while True:
        reports.append(controller.tick())
        assert not reports[-1].errors, [str(e) for e in reports[-1].errors]
        if predicate():
            return reports
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {desc}; last report: {reports[-1]}")
        time.sleep(TICK_EVERY_S)


def test_the_clusterapi_provider_runs_as_its_service_account_and_nothing_more(
        as_service_account: client.ApiClient, api_client: client.ApiClient,  # noqa: F811
        core_v1: client.CoreV1Api, capi: Capi, pods: Callable[..., str], namespace: str) -> None:  # noqa: F811
    sa = as_service_account
    t4 = {CAPACITY + "cpu": "4", CAPACITY + "memory": "15G", CAPACITY + "gpu-type": NVIDIA_GPU,
          CAPACITY + "gpu-count": "1", CAPACITY + "labels": T4_LABELS, CAPACITY + "taints": GPU_TAINTS}
    capi.machine_deployment("t4-pool", replicas=0, min_size=0, max_size=2, annotations=t4)
    unowned_machine_set(capi, "cpu-set", min_size=0, max_size=2)
    cfg = config_for_capi()
    lease = LeaseSettings(name="gpuscale", namespace=NS, lease_duration_s=3, renew_deadline_s=2.0,
                          retry_period_s=0.25)
    # As `gpuscale run --provider clusterapi` builds it (tracer, Lease, status ConfigMap), on the SA's client.
    controller = build_controller(sa, cfg, provider_name="clusterapi", tracer=Tracer(),
                                  settings=replace(LoopSettings.from_config(cfg), scan_interval_s=TICK_EVERY_S),
                                  options=RunOptions(namespace=NS, leader_elect=True, lease=lease,
                                                     status_name="gpuscale-status", identity="capi-sa"))
    reports: list[TickReport] = []
    try:
        provider = controller.provider
        assert isinstance(provider, ClusterAPIProvider)
        assert sorted(p.name for p in controller.autoscaler.pools) == ["cpu-set", "t4-pool"], provider.problems()
        assert controller.cache.wait_synced(30), controller.cache.status()
        wait_for(controller.is_leader, 10, interval_s=0.05, desc="the SA acquires the Lease")

        pod = pods("infer", accelerator="nvidia-tesla-t4", gpus=1)
        reports += tick_until(controller, lambda: capi.replicas("t4-pool") > 0, 30, "a T4 scale-up from zero")
        assert [(s.pool, s.nodes) for r in reports for s in r.scaled_up] == [("t4-pool", 1)]
        assert capi.replicas("t4-pool") == 1

        node = f"t4-node-{uuid.uuid4().hex[:5]}"
        machine = capi.machine("t4-pool", node, node_ref=False)  # found through the Nodes' providerIDs

        def running() -> bool:
            p = core_v1.read_namespaced_pod(pod, namespace)
            return bool(p.status.phase == "Running" and p.spec.node_name == node)

        reports += tick_until(controller, running, 60, "the pod Running on the T4 node")
        assert provider.node_pools() == {node: "t4-pool"}

        core_v1.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        wait_for(lambda: not ignore_status(404, core_v1.read_namespaced_pod, pod, namespace), 30, desc="pod gone")
        reports += tick_until(controller, lambda: DELETE_MACHINE in capi.machine_annotations(machine), 60,
                              "the idle T4 node removed")
        assert capi.replicas("t4-pool") == 0
        assert len({d for r in reports for d in r.deleted}) == 1

        # An unowned MachineSet is scaled through machinesets/scale (the loop has no pod for it: call the port).
        assert provider.increase("cpu-set", 1) == ("cpu-set#0",)
        assert machine_set_replicas(capi, "cpu-set") == 1
        provider.cancel(["cpu-set#0"])
        assert machine_set_replicas(capi, "cpu-set") == 0

        assert all(r.synced for r in reports)  # (and no errors: tick_until checks every report)
        assert provider.problems() == []
        wait_for(lambda: controller.status is not None and controller.status.writes >= 1, 10,
                 desc="the status ConfigMap written")
        assert controller.status is not None and controller.status.failures == 0
    finally:
        controller.close()

    sa_custom, sa_core = client.CustomObjectsApi(sa), client.CoreV1Api(sa)
    ns = capi.namespace
    md = capi.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "machinedeployments", "t4-pool")
    machine_obj = capi.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "machines", machine)
    new_machine_set = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MachineSet", "metadata": {"name": "x"},
                       "spec": {"clusterName": CLUSTER, "selector": {}}}
    forbidden: dict[str, tuple[str, str, Callable[[], Any]]] = {
        "delete a Machine": ("delete", "machines", lambda: sa_custom.delete_namespaced_custom_object(
            GROUP, VERSION, ns, "machines", machine)),
        "update a Machine": ("update", "machines", lambda: sa_custom.replace_namespaced_custom_object(
            GROUP, VERSION, ns, "machines", machine, machine_obj)),
        "write a Machine's status": ("patch", "machines/status", lambda: sa_custom.
                                     patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "machines", machine, {"status": {"nodeRef": {"name": "elsewhere"}}})),
        "watch Machines": ("watch", "machines", lambda: sa_custom.list_cluster_custom_object(
            GROUP, VERSION, "machines", watch=True, _preload_content=False)),
        "update a MachineDeployment's spec": ("update", "machinedeployments", lambda: sa_custom.
                                              replace_namespaced_custom_object(
            GROUP, VERSION, ns, "machinedeployments", "t4-pool", {**md, "spec": {**md["spec"], "replicas": 2}})),
        "raise a MachineDeployment's max size": ("patch", "machinedeployments", lambda: sa_custom.
                                                 patch_namespaced_custom_object(
            GROUP, VERSION, ns, "machinedeployments", "t4-pool", {"metadata": {"annotations": {MAX_SIZE: "99"}}})),
        "delete a MachineDeployment": ("delete", "machinedeployments", lambda: sa_custom.
                                       delete_namespaced_custom_object(
            GROUP, VERSION, ns, "machinedeployments", "t4-pool")),
        "create a MachineSet": ("create", "machinesets", lambda: sa_custom.create_namespaced_custom_object(
            GROUP, VERSION, ns, "machinesets", new_machine_set)),
        "read a Cluster": ("get", "clusters", lambda: sa_custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, "clusters", CLUSTER)),
        "read the bootstrap Secret": ("get", "secrets", lambda: sa_core.read_namespaced_secret("bootstrap", ns)),
        "create a Node (kwok only)": ("create", "nodes", lambda: sa_core.create_node(
            client.V1Node(metadata=client.V1ObjectMeta(name=f"x-{uuid.uuid4().hex[:5]}")))),
        "delete a Node (kwok only)": ("delete", "nodes", lambda: sa_core.delete_node(node)),
    }
    for what, (verb, resource, call) in forbidden.items():
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403, (what, err.value.status, err.value.body)
        message = json.loads(err.value.body)["message"]  # the RBAC authorizer's, not admission's
        assert f'User "system:serviceaccount:{NS}:{SA}" cannot {verb} resource "{resource}"' in message, (what,
                                                                                                        message)
    # Nothing of it happened.
    assert capi.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "machinedeployments", "t4-pool")[
        "metadata"]["annotations"][MAX_SIZE] == "2"
    assert capi.machine_annotations(machine).get(DELETE_MACHINE)
    assert core_v1.read_node(node).metadata.name == node
    ignore_status(404, core_v1.delete_namespaced_config_map, "gpuscale-status", NS)
    ignore_status(404, client.CoordinationV1Api(api_client).delete_namespaced_lease, "gpuscale", NS)


# --- and nothing granted is unused


def _granted(role: dict[str, Any]) -> list[tuple[str, str]]:
    return [(verb, resource) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]]


def _without(role: dict[str, Any], verb: str, resource: str) -> dict[str, Any]:
    """`role` with one (verb, resource) pair taken out, every other pair kept."""
    rules = [{"apiGroups": rule["apiGroups"], "resources": [res], "verbs": [v for v in rule["verbs"]
                                                                             if (v, res) != (verb, resource)]}
             for rule in role["rules"] for res in rule["resources"]]
    return {**role, "rules": [r for r in rules if r["verbs"]]}


def _allowed(api_client: client.ApiClient, verb: str, resource: str, namespace: str) -> bool:
    """The RBAC authorizer's answer for the ServiceAccount now (a SubjectAccessReview, as the admin)."""
    plural, _, sub = resource.partition("/")
    review = client.AuthorizationV1Api(api_client).create_subject_access_review(client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{NS}:{SA}", groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}"],
            resource_attributes=client.V1ResourceAttributes(group=GROUP, resource=plural, subresource=sub or None,
                                                            verb=verb, namespace=namespace))))
    return bool(review.status.allowed)


def test_every_verb_of_the_clusterapi_role_is_one_the_provider_uses(
        as_service_account: client.ApiClient, api_client: client.ApiClient, capi: Capi,  # noqa: F811
        core_v1: client.CoreV1Api) -> None:
    """Each (verb, resource) of `gpuscale-clusterapi` taken away in turn, for real: the provider's discovery, a
    scale-up of a MachineDeployment, a MachineSet and a MachinePool, and a node removal, run as the ServiceAccount,
    stop at a 403 naming exactly that verb and resource. With the whole role they all succeed."""
    role = _by_key(render_overlay())["ClusterRole/gpuscale-clusterapi"]
    rbac_api = client.RbacAuthorizationV1Api(api_client)
    ns = capi.namespace
    capi.machine_deployment("t4-pool", replicas=1, min_size=0, max_size=3, annotations={
        CAPACITY + "cpu": "4", CAPACITY + "memory": "15G"})
    unowned_machine_set(capi, "cpu-set", min_size=0, max_size=2)
    capi.machine_pool("cpu-mp", replicas=0, min_size=0, max_size=2, annotations={
        CAPACITY + "cpu": "16", CAPACITY + "memory": "64G"})
    node = f"t4-node-{uuid.uuid4().hex[:5]}"
    machine = capi.machine("t4-pool", node, node_ref=False)

    def reset() -> None:
        for plural, name in (("machinedeployments", "t4-pool"), ("machinesets", "cpu-set")):
            capi.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, name,
                                                       {"spec": {"replicas": 1 if plural == "machinedeployments"
                                                                 else 0}})
        capi.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "machinepools", "cpu-mp",
                                                   {"spec": {"replicas": 0}})
        capi.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "machines", machine,
                                                   {"metadata": {"annotations": {DELETE_MACHINE: None}}})

    def exercise() -> None:
        provider = ClusterAPIProvider(as_service_account, ())  # discovery: list the three kinds, cluster-wide
        assert sorted(provider.groups) == ["cpu-mp", "cpu-set", "t4-pool"]
        provider.increase("t4-pool", 1)
        provider.increase("cpu-set", 1)
        provider.increase("cpu-mp", 1)
        provider.delete([node])  # get the groups, list Machines (and Nodes), patch the Machine, lower the replicas

    def set_role(body: dict[str, Any], verb: str, resource: str, allowed: bool) -> None:
        rbac_api.replace_cluster_role(role["metadata"]["name"], {
            **body, "metadata": {**body["metadata"],
                                 "resourceVersion": rbac_api.read_cluster_role(role["metadata"]["name"])
                                 .metadata.resource_version}})
        wait_for(lambda: _allowed(api_client, verb, resource, ns) is allowed, 10,
                 desc=f"{verb} {resource} {'allowed' if allowed else 'denied'} for the ServiceAccount")

    exercise()
    assert (capi.replicas("t4-pool"), machine_set_replicas(capi, "cpu-set")) == (1, 1)  # 1 + 1 - 1
    assert capi.replicas("cpu-mp", "machinepools") == 1
    assert DELETE_MACHINE in capi.machine_annotations(machine)
    pairs = _granted(role)
    assert len(pairs) == 14, pairs
    try:
        for verb, resource in pairs:
            reset()
            set_role(_without(role, verb, resource), verb, resource, allowed=False)
            with pytest.raises(ApiException) as err:
                exercise()
            assert err.value.status == 403, (verb, resource, err.value.body)
            message = json.loads(err.value.body)["message"]
            assert f'cannot {verb} resource "{resource}"' in message, (verb, resource, message)
    finally:
        set_role(role, "list", "machines", allowed=True)
    assert core_v1.read_node(node).metadata.name == node
