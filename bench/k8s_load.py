"""Shared by bench/watch.py and bench/clients.py: a quiet real control plane and many objects in it.

`quiet_control_plane()` starts the e2e harness's control plane (tests/e2e/harness.py) and then stops the
controller-manager, the scheduler and kwok, so the only writes are the benchmark's own: nodes created Ready stay as
they are (nothing heartbeats them, nothing marks them NotReady or evicts their pods), pods bound with `spec.nodeName`
stay Pending-bound. Namespaces are created (and their `default` ServiceAccount awaited, which pod admission needs)
before the controller-manager stops.

`create_many()` POSTs raw JSON bodies from a thread pool through the official client's connection pool; creating is
idempotent (409 Already Exists counts as done), so an interrupted population can be resumed with `--kubeconfig`.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from harness import ControlPlane, wait_for  # noqa: E402

BENCH_LABEL = "gpuscale.io/bench"
QUIET_STOP = ("kwok", "kube-scheduler", "kube-controller-manager")


def quiet_control_plane(namespaces: Iterable[str], run_dir: Path | None = None) -> ControlPlane:
    """With `run_dir` from an earlier run, etcd's data directory there is reused: the objects are still there (new
    certificates, token and ports; the control plane's processes never outlive the benchmark process)."""
    cp = ControlPlane(run_dir=run_dir)
    cp.start()
    api = config.new_client_from_config(config_file=str(cp.kubeconfig_path))
    core = client.CoreV1Api(api)
    for ns in namespaces:
        try:
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        except ApiException as err:
            if err.status != 409:
                raise
    for ns in namespaces:
        wait_for(lambda ns=ns: _has_default_sa(core, ns), 60, desc=f"ServiceAccount {ns}/default")
    for name in QUIET_STOP:
        cp.components[name].stop()
    api.close()
    return cp


def _has_default_sa(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespaced_service_account("default", ns)
        return True
    except ApiException as err:
        if err.status == 404:
            return False
        raise


def api_client(kubeconfig: Path, pool_size: int = 32) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


def create_many(api: client.ApiClient, path_of: Callable[[dict[str, Any]], str], bodies: Iterable[dict[str, Any]],
                *, threads: int = 24, what: str = "objects") -> float:
    """POST every body to `path_of(body)`; returns objects/s. Prints progress every 10,000."""
    started = time.monotonic()
    done = 0

    def post(body: dict[str, Any]) -> None:
        request(api, "POST", path_of(body), body=body, ok=(409,))

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(post, bodies):
            done += 1
            if done % 10_000 == 0:
                print(f"  {done:,} {what} created ({done / (time.monotonic() - started):.0f}/s)", flush=True)
    elapsed = time.monotonic() - started
    return done / elapsed if elapsed else 0.0


def request(api: client.ApiClient, method: str, path: str, *, query: list[tuple[str, Any]] | None = None,
            body: Any = None, content_type: str = "application/json", ok: tuple[int, ...] = ()) -> bytes:
    """One raw HTTP call through the official client's connection pool and auth; raises ApiException on an HTTP
    error unless its status is in `ok`."""
    _, url, headers, body, _ = api.param_serialize(method, path, query_params=query,
                                                   header_params={"Content-Type": content_type}, body=body,
                                                   auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers, body=body)
    data: bytes = resp.read()
    if resp.status >= 400 and resp.status not in ok:
        raise ApiException(http_resp=resp, body=data.decode(errors="replace"), data=None)
    return data


def count(api: client.ApiClient, path: str, label_selector: str) -> int:
    """Objects at `path` matching the selector, by paging with limit=500 (the list's remainingItemCount is not
    returned with a label selector)."""
    total, cont = 0, ""
    while True:
        query = [("labelSelector", label_selector), ("limit", 500)] + ([("continue", cont)] if cont else [])
        body = json.loads(request(api, "GET", path, query=query))
        total += len(body.get("items") or [])
        cont = (body.get("metadata") or {}).get("continue") or ""
        if not cont:
            return total


def node_body(name: str, labels: dict[str, str], allocatable: dict[str, str],
              taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Node that looks like a kwok node once Ready (conditions, addresses, capacity) but that kwok does not manage
    (no `kwok.x-k8s.io/node` annotation), so nothing touches it after creation."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [{"type": t, "status": "False", "reason": r, "lastHeartbeatTime": now, "lastTransitionTime": now}
                  for t, r in (("MemoryPressure", "KubeletHasSufficientMemory"),
                               ("DiskPressure", "KubeletHasNoDiskPressure"),
                               ("PIDPressure", "KubeletHasSufficientPID"))]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
                       "lastTransitionTime": now})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok", BENCH_LABEL: "1",
                                                  **labels}},
            "spec": {"providerID": f"kwok://{name}", "taints": taints or []},
            "status": {"capacity": allocatable, "allocatable": allocatable, "conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                     {"type": "Hostname", "address": name}]}}


def pod_body(name: str, namespace: str, node: str | None, requests: dict[str, str],
             tolerations: list[dict[str, str]] | None = None, node_selector: dict[str, str] | None = None,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.invalid/app:1",
                                            "resources": {"requests": requests, "limits": {
                                                k: v for k, v in requests.items() if "/" in k}}}],
                            "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0}
    if node:
        spec["nodeName"] = node
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {BENCH_LABEL: "1", "app": name.rsplit("-", 1)[0], **(labels or {})}},
            "spec": spec}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]
