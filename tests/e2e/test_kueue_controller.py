"""The real Kueue controller (v0.17.0, built from the Go module proxy by scripts/kueue-binary.sh) and gpuscale on the
real control plane: a suspended Job in a LocalQueue → Kueue makes a Workload, reserves quota and creates the
ProvisioningRequest (its ProvisioningRequest admission check points at gpuscale's best-effort-atomic class) →
gpuscale orders the whole request and sets Provisioned → Kueue admits and unsuspends the Job → its pods, annotated as
consumers of the request, run on the new nodes; nothing else is ordered.

Kueue runs with its webhooks unregistered (the test creates the Job suspended itself, as Kueue's mutating webhook
would), leader election off, the visibility server off, every listener on 127.0.0.1. Kueue reads its metrics
serving certificate from the fixed path /etc/kueue/metrics/certs when it does not manage certificates itself: the
fixture writes a throwaway self-signed pair there if none exists.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ControlPlane, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_controller import A100, Driver, make_driver, seed_config  # noqa: F401  (a fixture)
from test_kueue import KUEUE_CRDS, kueue_setup
from test_provisioning_request import CRD, create_and_clean, gpu_spec, install_crds  # noqa: F401  (a fixture)

from gpuscale.config import Config
from gpuscale.engine.provreq import CONSUME_ANNOTATIONS
from gpuscale.kube.provreq import GROUP, PLURAL, VERSION

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
DEFAULT_KUEUE_BIN = CACHE / "gpuscale" / "kueue-v0.17.0" / "bin"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
KUEUE, KV = "kueue.x-k8s.io", "v1beta2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _self_signed(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def kueue_manager(control_plane: ControlPlane, api_client: client.ApiClient,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    binary = Path(os.environ.get("GPUSCALE_KUEUE_BIN", DEFAULT_KUEUE_BIN)) / "kueue-manager"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `bash scripts/kueue-binary.sh` (make test does) or set "
                    "GPUSCALE_KUEUE_BIN to the directory holding kueue-manager", pytrace=False)
    install_crds(api_client, [CRD, *KUEUE_CRDS])
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": "kueue-system"}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    work = tmp_path_factory.mktemp("kueue")
    _self_signed(work / "webhook-certs")
    if not (METRICS_CERTS / "tls.crt").exists():
        _self_signed(METRICS_CERTS)
    health = _free_port()
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
              "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}, "metrics": {"bindAddress": "0"},
              "webhook": {"host": "127.0.0.1", "port": _free_port(), "certDir": str(work / "webhook-certs")},
              "internalCertManagement": {"enable": False}, "leaderElection": {"leaderElect": False},
              "integrations": {"frameworks": ["batch/job"]}}
    (work / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    log_path = control_plane.run_dir / "logs" / "kueue.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen([str(binary), "--config", str(work / "config.yaml"),
                                    "--kubeconfig", str(control_plane.kubeconfig_path),
                                    "--feature-gates=VisibilityOnDemand=false"], stdout=log, stderr=subprocess.STDOUT)

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"kueue-manager exited {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for(healthy, 90, desc="kueue-manager ready")
    yield process
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
    shutil.rmtree(work, ignore_errors=True)


def test_real_kueue_admits_a_job_once_gpuscale_provisions_its_request(
        kueue_manager: subprocess.Popen[bytes], api_client: client.ApiClient, core_v1: client.CoreV1Api,
        namespace: str, make_driver: Callable[[Config], Driver],  # noqa: F811
        create_and_clean: Callable[..., Any]) -> None:  # noqa: F811
    custom = client.CustomObjectsApi(api_client)
    kueue_setup(custom, namespace, create_and_clean)
    batch = client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "labels": {f"{KUEUE}/queue-name": "team-a"}},
        "spec": {"suspend": True, "parallelism": 2, "completions": 2,
                 "template": {"spec": {**gpu_spec(), "restartPolicy": "Never"}}}})
    driver = make_driver(seed_config())

    def running() -> list[client.V1Pod]:
        pods = core_v1.list_namespaced_pod(namespace, label_selector="job-name=train").items
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else []

    pods = driver.tick_until(running, 150, "the Job's 2 pods Running")
    assert driver.scale_ups() == [(A100, 2)]  # one scale-up, for the whole request
    [request] = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    conditions = {c["type"]: c for c in request["status"]["conditions"]}
    assert conditions["Provisioned"]["status"] == "True" and conditions["Accepted"]["status"] == "True"
    [workload] = custom.list_namespaced_custom_object(KUEUE, KV, namespace, "workloads")["items"]
    assert request["metadata"]["name"].startswith(f"{workload['metadata']['name']}-gpuscale-prov-")
    assert {c["type"]: c["status"] for c in workload["status"]["conditions"]}.get("Admitted") == "True"
    assert [s["state"] for s in workload["status"]["admissionChecks"]] == ["Ready"]
    nodes = {n.metadata.name for n in driver.pool_nodes()[A100]}
    for pod in pods:
        assert pod.metadata.annotations[CONSUME_ANNOTATIONS[0]] == request["metadata"]["name"]
        assert pod.spec.node_name in nodes
    batch.delete_namespaced_job("train", namespace, propagation_policy="Background")
