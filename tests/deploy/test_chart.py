"""charts/gpuscale rendered by the real helm: lint, the golden renders (regenerate with scripts/chart-golden.sh),
the RBAC equal to deploy/kustomize's rule for rule, the default config equal to the kustomize one, every flag the
Deployment passes known to `gpuscale run`, the copied CRD and dashboard identical to their sources, and bad values
refused with one line naming the value. The e2e half (tests/e2e/test_chart.py) applies the render to a real API
server and runs the controller with it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from gpuscale.cli import app
from gpuscale.config import load_config

from .conftest import CHART, ROOT, run_helm

GOLDEN = Path(__file__).resolve().parent / "golden"
CAPI_VALUES = Path(__file__).resolve().parent / "values-clusterapi.yaml"
KUSTOMIZE = ROOT / "deploy" / "kustomize"
NS = "gpuscale-system"


def render(helm: Path, *args: str) -> str:
    result = run_helm(helm, "template", "gpuscale", str(CHART), "--namespace", NS, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def objects(text: str) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    found = {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}
    assert len(found) == len(docs), "two objects of one kind share a name"
    return found


def kustomize_doc(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((KUSTOMIZE / path).read_text(encoding="utf-8"))
    return doc


def container(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = rendered["Deployment/gpuscale"]["spec"]["template"]["spec"]
    only: dict[str, Any] = spec["containers"][0]
    return only


@pytest.mark.parametrize("values", [[], ["--values", str(CAPI_VALUES)]], ids=["default", "clusterapi"])
def test_helm_lint_passes(helm: Path, values: list[str]) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *values)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(("golden", "values"),
                         [("default.yaml", []), ("clusterapi.yaml", ["--values", str(CAPI_VALUES)])])
def test_the_render_is_the_committed_golden_file(helm: Path, golden: str, values: list[str]) -> None:
    rendered = render(helm, *values)
    assert rendered == (GOLDEN / golden).read_text(encoding="utf-8"), (
        f"charts/gpuscale renders differently from tests/deploy/golden/{golden}: if the change is intended, run "
        "`bash scripts/chart-golden.sh` and review `git diff tests/deploy/golden`")


def test_the_kwok_rbac_is_the_kustomize_base_rbac(helm: Path) -> None:
    rendered = objects(render(helm))
    for kind, path in (("ClusterRole", "base/clusterrole.yaml"), ("Role", "base/role.yaml")):
        assert rendered[f"{kind}/gpuscale"]["rules"] == kustomize_doc(path)["rules"], kind
    for kind, path in (("ClusterRoleBinding", "base/clusterrolebinding.yaml"),
                       ("RoleBinding", "base/rolebinding.yaml")):
        expected = kustomize_doc(path)
        assert rendered[f"{kind}/gpuscale"]["roleRef"] == expected["roleRef"]
        assert rendered[f"{kind}/gpuscale"]["subjects"] == expected["subjects"]
    assert not any(name.endswith("-clusterapi") for name in rendered)


def test_the_clusterapi_rbac_is_the_kustomize_overlay_rbac(helm: Path) -> None:
    rendered = objects(render(helm, "--set", "cloudProvider=clusterapi"))
    overlay = yaml.safe_load((KUSTOMIZE / "overlays" / "clusterapi" / "kustomization.yaml").read_text())
    base_rules = kustomize_doc("base/clusterrole.yaml")["rules"]
    role_patch = next(p for p in overlay["patches"] if p["target"]["kind"] == "ClusterRole")
    for op in yaml.safe_load(role_patch["patch"]):
        if op["op"] == "replace":  # the overlay's one change: /rules/0/verbs without create and delete
            assert op["path"] == "/rules/0/verbs"
            base_rules[0]["verbs"] = op["value"]
    assert rendered["ClusterRole/gpuscale"]["rules"] == base_rules
    assert "create" not in rendered["ClusterRole/gpuscale"]["rules"][0]["verbs"]
    assert rendered["ClusterRole/gpuscale-clusterapi"]["rules"] == kustomize_doc(
        "overlays/clusterapi/clusterrole.yaml")["rules"]
    binding = kustomize_doc("overlays/clusterapi/clusterrolebinding.yaml")
    assert rendered["ClusterRoleBinding/gpuscale-clusterapi"]["roleRef"] == binding["roleRef"]
    assert rendered["ClusterRoleBinding/gpuscale-clusterapi"]["subjects"] == binding["subjects"]
    assert "--provider=clusterapi" in container(rendered)["args"]


def test_the_default_config_loads_and_is_the_kustomize_config(helm: Path, tmp_path: Path) -> None:
    chart_config = tmp_path / "chart.yaml"
    chart_config.write_text(objects(render(helm))["ConfigMap/gpuscale-config"]["data"]["config.yaml"])
    kustomize_config = tmp_path / "kustomize.yaml"
    kustomize_config.write_text(kustomize_doc("base/configmap.yaml")["data"]["config.yaml"])
    assert load_config(chart_config) == load_config(kustomize_config)
    assert {p.name for p in load_config(chart_config).pools} == {"cpu-general", "gpu-training-a100",
                                                                 "gpu-inference-t4"}


def run_options() -> set[str]:
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("values", [[], ["--values", str(CAPI_VALUES)]], ids=["default", "clusterapi"])
def test_every_flag_the_deployment_passes_is_a_run_option(helm: Path, values: list[str]) -> None:
    args = container(objects(render(helm, *values)))["args"]
    assert args[0] == "run"
    known = run_options()
    unknown = [a for a in args[1:] if a.split("=", 1)[0] not in known]
    assert not unknown, unknown


def test_leader_election_with_more_than_one_replica_only(helm: Path) -> None:
    one = objects(render(helm))["Deployment/gpuscale"]
    two = objects(render(helm, "--set", "replicaCount=2"))["Deployment/gpuscale"]
    assert "--no-leader-elect" in one["spec"]["template"]["spec"]["containers"][0]["args"]
    assert one["spec"]["strategy"] == {"type": "Recreate"}
    assert "--leader-elect" in two["spec"]["template"]["spec"]["containers"][0]["args"]
    assert two["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert "podAntiAffinity" in two["spec"]["template"]["spec"]["affinity"]


def test_the_pod_serves_metrics_on_the_pod_network_for_the_service(helm: Path) -> None:
    rendered = objects(render(helm, "--values", str(CAPI_VALUES)))
    c = container(rendered)
    assert "--metrics-address=0.0.0.0:8085" in c["args"]
    assert c["ports"] == [{"name": "http", "containerPort": 8085, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    service = rendered["Service/gpuscale"]["spec"]
    assert service["ports"][0]["targetPort"] == "http"
    pod_labels = rendered["Deployment/gpuscale"]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= pod_labels.items()
    monitor = rendered["ServiceMonitor/gpuscale"]["spec"]
    assert monitor["endpoints"][0]["port"] == "http" and monitor["endpoints"][0]["path"] == "/metrics"
    assert monitor["selector"]["matchLabels"].items() <= rendered["Service/gpuscale"]["metadata"]["labels"].items()
    pod = rendered["Deployment/gpuscale"]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    pdb = rendered["PodDisruptionBudget/gpuscale"]["spec"]
    assert pdb == {"selector": {"matchLabels": pdb["selector"]["matchLabels"]}, "maxUnavailable": 1}
    assert pdb["selector"]["matchLabels"].items() <= pod_labels.items()


def test_the_crd_and_the_dashboard_are_copies_of_their_sources(helm: Path) -> None:
    crd = "autoscaling.x-k8s.io_provisioningrequests.yaml"
    assert (CHART / "crds" / crd).read_bytes() == (ROOT / "deploy" / "crds" / "provisioning-request" / crd).read_bytes()
    dashboard = (ROOT / "deploy" / "grafana" / "gpuscale.json").read_bytes()
    assert (CHART / "dashboards" / "gpuscale.json").read_bytes() == dashboard
    configmap = objects(render(helm, "--set", "grafanaDashboard.enabled=true"))["ConfigMap/gpuscale-dashboard"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gpuscale.json"]) == json.loads(dashboard)
    assert "ConfigMap/gpuscale-dashboard" not in objects(render(helm))
    with_crds = [d for d in yaml.safe_load_all(render(helm, "--include-crds")) if d]
    assert [d["metadata"]["name"] for d in with_crds if d["kind"] == "CustomResourceDefinition"] == [
        "provisioningrequests.autoscaling.x-k8s.io"]


def test_the_default_image_tag_is_the_package_version(helm: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == pyproject["project"]["version"]
    image = container(objects(render(helm)))["image"]
    assert image == f"gpuscale:{pyproject['project']['version']}"  # what `make image` tags, less `localhost/`


def test_release_names_flow_into_the_role_and_the_args(helm: Path) -> None:
    result = run_helm(helm, "template", "team-a", str(CHART), "--namespace", "ops", "--set", "replicaCount=2")
    assert result.returncode == 0, result.stderr
    rendered = objects(result.stdout)
    args = rendered["Deployment/team-a-gpuscale"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--lease-name=team-a-gpuscale" in args and "--status-configmap=team-a-gpuscale-status" in args
    rules = rendered["Role/team-a-gpuscale"]["rules"]
    assert [r.get("resourceNames") for r in rules] == [None, ["team-a-gpuscale"], None, ["team-a-gpuscale-status"]]
    assert rendered["ClusterRoleBinding/team-a-gpuscale"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "team-a-gpuscale", "namespace": "ops"}]


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "cloudProvider=aws"], 'cloudProvider: expected kwok or clusterapi, got "aws"'),
    (["--set", "extraArgs.provider=kwok"], "extraArgs.provider: set by the chart"),
    (["--set", "autoDiscovery.clusterName=x"], "autoDiscovery: applies to cloudProvider clusterapi, not kwok"),
    (["--set", "serviceMonitor.enabled=true", "--set", "service.create=false"], "serviceMonitor.enabled: needs"),
])
def test_bad_values_fail_the_render_naming_the_value(helm: Path, values: list[str], message: str) -> None:
    result = run_helm(helm, "template", "gpuscale", str(CHART), *values)
    assert result.returncode != 0 and not result.stdout
    assert message in result.stderr, result.stderr
