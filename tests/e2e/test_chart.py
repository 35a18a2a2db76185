"""The Helm chart (charts/gpuscale) against the real API server: `helm template` (the real helm, GPUSCALE_HELM_BIN)
renders it with two replicas and test timings set through chart values; every object is server-side applied (the
Deployment as a server-side dry run: a real one would start a pod of an image this cluster cannot run, one more
pending pod for the controller under test); then `gpuscale run` runs here as a process with exactly the rendered
ConfigMap's config, the rendered Deployment's arguments and environment, and a token of the rendered ServiceAccount
(TokenRequest), so only the chart's RBAC stands behind it, until it scales a pending A100 pod up — with no 403, the
Lease held, the status ConfigMap written, and every metric the chart's Grafana dashboard queries on its /metrics.
Three arguments are replaced, each for a stated reason (below)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import _set_pdeathsig, ignore_status, wait_for
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from test_controller import A100, _delete_managed_nodes, training_pod
from test_deploy import NS, SA, system_namespace  # noqa: F401 (a fixture)
from test_restart import Proc

from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpuscale"
DEFAULT_HELM = Path.home() / ".cache" / "gpuscale" / "helm-v3.22.0" / "bin" / "helm"
TEST_VALUES = ["--set", "replicaCount=2", "--set", "grafanaDashboard.enabled=true",
               "--set", "config.scan_interval=0.5s", "--set", "config.new_pod_scale_up_delay=0s",
               "--set", "config.new_gpu_pod_scale_up_delay=0s", "--set-json", "config.warm_capacity=[]",
               "--set", "extraArgs.lease-duration=3s", "--set", "extraArgs.renew-deadline=2s",
               "--set", "extraArgs.retry-period=0.5s"]
FIELD_MANAGER = "gpuscale-e2e-chart"


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    helm = Path(os.environ.get("GPUSCALE_HELM_BIN") or DEFAULT_HELM)
    if not helm.is_file():
        pytest.fail(f"helm is missing at {helm}: run `make helm-binary` or set GPUSCALE_HELM_BIN", pytrace=False)
    out = subprocess.run([str(helm), "template", "gpuscale", str(CHART), "--namespace", NS, "--include-crds",
                          *TEST_VALUES], capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def apply(dynamic: DynamicClient, doc: dict[str, Any], dry_run: bool = False) -> Any:
    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    return resource.server_side_apply(body=doc, name=doc["metadata"]["name"],
                                      namespace=doc["metadata"].get("namespace"), field_manager=FIELD_MANAGER,
                                      force_conflicts=True, **({"dry_run": "All"} if dry_run else {}))


@pytest.fixture(scope="module")
def applied(api_client: client.ApiClient, rendered: list[dict[str, Any]],
            system_namespace: str) -> Iterator[list[dict[str, Any]]]:  # noqa: F811
    dynamic = DynamicClient(api_client)
    crd = by_kind(rendered, "CustomResourceDefinition")
    apply(dynamic, crd)  # left installed, as the other e2e modules leave it

    def established() -> bool:
        got = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(crd["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    wait_for(established, 30, desc="the chart's CRD Established")
    dynamic = DynamicClient(api_client)  # discovery again: the CRD's resource is served now
    stored = [d for d in rendered if d["kind"] not in ("CustomResourceDefinition", "Deployment")]
    for doc in stored:
        assert apply(dynamic, doc).metadata.name == doc["metadata"]["name"]
    dry = apply(dynamic, by_kind(rendered, "Deployment"), dry_run=True)
    assert dry.spec.template.spec.priorityClassName == "system-cluster-critical"  # the class exists and admits
    yield stored
    for doc in reversed(stored):
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        ignore_status(404, resource.delete, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))


def test_the_rendered_chart_applies_and_is_stored(api_client: client.ApiClient, applied: list[dict[str, Any]],
                                                  core_v1: client.CoreV1Api) -> None:
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in applied)
    assert kinds == sorted(["ServiceAccount/gpuscale", "ClusterRole/gpuscale", "ClusterRoleBinding/gpuscale",
                            "Role/gpuscale", "RoleBinding/gpuscale", "ConfigMap/gpuscale-config",
                            "ConfigMap/gpuscale-dashboard", "Service/gpuscale", "PodDisruptionBudget/gpuscale"])
    service = core_v1.read_namespaced_service("gpuscale", NS)
    assert service.spec.ports[0].target_port == "http" and service.spec.cluster_ip
    managers = {m.manager for m in core_v1.read_namespaced_config_map("gpuscale-config", NS).metadata.managed_fields}
    assert FIELD_MANAGER in managers
    dashboard = core_v1.read_namespaced_config_map("gpuscale-dashboard", NS)
    assert dashboard.metadata.labels["grafana_dashboard"] == "1"
    assert json.loads(dashboard.data["gpuscale.json"])["uid"] == "gpuscale"


def service_account_kubeconfig(control_plane: Any, core_v1: client.CoreV1Api, path: Path) -> Path:
    """A kubeconfig with a bound token of the chart's ServiceAccount (what the kubelet mounts in the pod)."""
    token = core_v1.create_namespaced_service_account_token(
        SA, NS, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=3600))).status.token
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "e2e", "cluster": {"server": control_plane.api_url,
                                                 "certificate-authority": str(control_plane.ca_path)}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "sa", "namespace": NS}}]}))
    path.chmod(0o600)
    return path


def local_command(container: dict[str, Any], config: Path, kubeconfig: Path,
                  pod_name: str) -> tuple[list[str], dict[str, str]]:
    """The container's command line as the kubelet would run it, but here. Replaced: the config path (the
    ConfigMap's file, written to `config`), the metrics address (tests listen on 127.0.0.1 only; the pod listens on
    its pod IP) and the in-cluster ServiceAccount login (`--kubeconfig` with the SA's token instead)."""
    env = {e["name"]: {"metadata.name": pod_name, "metadata.namespace": NS}[e["valueFrom"]["fieldRef"]["fieldPath"]]
           for e in container["env"]}
    args = []
    for arg in container["args"]:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)  # the kubelet's $(VAR) expansion
        if arg.startswith("--config="):
            assert arg == "--config=/etc/gpuscale/config.yaml"  # the ConfigMap's mount
            arg = f"--config={config}"
        elif arg.startswith("--metrics-address="):
            assert arg == "--metrics-address=0.0.0.0:8085"
            arg = "--metrics-address=127.0.0.1:0"
        args.append(arg)
    return [str(Path(sys.executable).parent / "gpuscale"), *args, f"--kubeconfig={kubeconfig}"], env


@pytest.fixture
def chart_controller(control_plane: Any, applied: list[dict[str, Any]], rendered: list[dict[str, Any]],
                     core_v1: client.CoreV1Api, tmp_path: Path) -> Iterator[Proc]:
    _delete_managed_nodes(core_v1)
    config = tmp_path / "config.yaml"
    config.write_text(by_kind(rendered, "ConfigMap", "gpuscale-config")["data"]["config.yaml"], encoding="utf-8")
    deployment = by_kind(rendered, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    kubeconfig = service_account_kubeconfig(control_plane, core_v1, tmp_path / "sa.kubeconfig")
    cmd, env = local_command(container, config, kubeconfig, "gpuscale-chart-0")
    assert cmd[1:] == ["run", f"--config={config}", "--provider=kwok", "--leader-elect", f"--namespace={NS}",
                       "--lease-name=gpuscale", "--status-configmap=gpuscale-status", "--metrics-address=127.0.0.1:0",
                       "--lease-duration=3s", "--renew-deadline=2s", "--retry-period=0.5s",
                       f"--kubeconfig={kubeconfig}"]
    log = tmp_path / "gpuscale.log"
    popen = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
                             env={"PATH": os.environ.get("PATH", ""), **env},
                             preexec_fn=_set_pdeathsig if sys.platform == "linux" else None)
    proc = Proc("chart", popen, log)
    yield proc
    popen.terminate()
    try:
        popen.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill9()
    _delete_managed_nodes(core_v1)
    ignore_status(404, core_v1.delete_namespaced_config_map, "gpuscale-status", NS)
    ignore_status(404, client.CoordinationV1Api(core_v1.api_client).delete_namespaced_lease, "gpuscale", NS)


def test_the_controller_runs_with_the_charts_config_args_and_rbac_until_it_scales_up(
        chart_controller: Proc, core_v1: client.CoreV1Api, namespace: str,
        api_client: client.ApiClient) -> None:
    proc = chart_controller
    wait_for(proc.leading, 30, desc=f"the controller leads\n{proc.tail()}")
    core_v1.create_namespaced_pod(namespace, training_pod("train"))
    wait_for(lambda: (A100, 1) in proc.scaled_up(), 60, desc=f"an A100 scale-up\n{proc.tail()}")
    nodes = core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items
    assert any(n.metadata.labels.get("cloud.google.com/gke-nodepool") == A100 for n in nodes)
    assert proc.popen.poll() is None, proc.tail()
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease("gpuscale", NS)
    assert lease.spec.holder_identity.startswith("gpuscale-chart-0")  # POD_NAME, from the downward API
    wait_for(lambda: ignore_status(404, core_v1.read_namespaced_config_map, "gpuscale-status", NS) is not None, 20,
             desc=f"the status ConfigMap written\n{proc.tail()}")
    text = proc.log.read_text(encoding="utf-8", errors="replace")
    assert "(403)" not in text and "Forbidden" not in text and "Traceback" not in text, proc.tail()
    errors = [f for f in proc.lines() if f.get("msg") == "tick" and f.get("errors")]
    assert not errors, errors
    assert_dashboard_metrics_served(proc)


SUFFIX = re.compile(r"_(total|created|bucket|count|sum)$")


def assert_dashboard_metrics_served(proc: Proc) -> None:
    """Every metric the Grafana dashboard (deploy/grafana, also in the chart) queries is a family this running
    controller's /metrics serves (its HELP/TYPE lines appear before any sample does)."""
    port = re.search(r"serving /metrics\S* .*? on 127\.0\.0\.1:(\d+)", proc.log.read_text(encoding="utf-8"))
    assert port, proc.tail()
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5) as response:
        served = {SUFFIX.sub("", line.split()[2]) for line in response.read().decode().splitlines()
                  if line.startswith("# TYPE ")}
    queried = {SUFFIX.sub("", name) for name in re.findall(r"gpuscale_[a-z0-9_]+", (
        REPO / "deploy" / "grafana" / "gpuscale.json").read_text(encoding="utf-8"))}
    assert len(queried) >= 10 and queried <= served, sorted(queried - served)


def test_the_token_has_the_charts_rbac_and_nothing_more(control_plane: Any, applied: list[dict[str, Any]],
                                                        core_v1: client.CoreV1Api, tmp_path: Path,
                                                        namespace: str) -> None:
    from kubernetes import config as kube_config

    kubeconfig = service_account_kubeconfig(control_plane, core_v1, tmp_path / "sa.kubeconfig")
    sa = kube_config.new_client_from_config(config_file=str(kubeconfig))
    try:
        sa_core = client.CoreV1Api(sa)
        assert sa_core.list_node(limit=1) is not None and sa_core.list_pod_for_all_namespaces(limit=1) is not None
        for what, call in {"read secrets": lambda: sa_core.list_namespaced_secret(NS),
                           "delete a pod": lambda: sa_core.delete_collection_namespaced_pod(namespace),
                           "patch the config": lambda: sa_core.patch_namespaced_config_map(
                               "gpuscale-config", NS, {"data": {"x": "y"}})}.items():
            with pytest.raises(client.exceptions.ApiException) as err:
                call()
            assert err.value.status == 403, what
    finally:
        sa.close()

