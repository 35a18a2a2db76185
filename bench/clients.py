"""Benchmark: list + watch of 100,000 pods with three Python Kubernetes clients, against the real API server.

Clients, each in a fresh child process (so RSS is its own):
- `official`: the `kubernetes` package, raw-dict path exactly as `WatchCache` uses it (paged list with
  `_preload_content=False` + `json.loads`; `gpuscale.kube.cache._RawWatch`, i.e. `Watch` without model
  deserialisation);
- `asyncio`: `kubernetes_asyncio`, the same raw-dict path (`_preload_content=False` list, a `Watch` whose return type
  is empty so events stay dicts);
- `lightkube`: `Client.list(Pod, chunk_size=500)` / `Client.watch(Pod, resource_version=…)` with its default lazy
  models (decoded on attribute access); the benchmark reads `metadata.name`/`namespace` of each object.

Per client: the initial list (limit 500, following `continue`) into a dict keyed by namespace/name; then it watches
from the list's resourceVersion while the parent updates N pods (a label patch each, 24 threads; nothing else writes —
bench/k8s_load.py's quiet control plane), until it has N events. Events/s is bounded by the writer (≈ 300 writes/s on
this API server), so the figures that compare the clients are the CPU seconds (user + system) per listed pod and per
watch event, the lag of the last event behind the last write, and peak RSS. (Replaying the events from the API
server's watch cache after the writes, to measure each client's ceiling, failed: the cache kept only ≈ 5,000 events
and answered 410 Gone.)

Run: `.venv/bin/python bench/clients.py --run-dir DIR` — with the DIR of an earlier `bench/watch.py --run-dir DIR`
its 100,000 pods are reused, else they are created first (≈ 5 min here); or `--kubeconfig` for a running API server.
kubernetes_asyncio and lightkube are not project dependencies: `pip install kubernetes_asyncio lightkube` first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from k8s_load import api_client, peak_rss_mib, quiet_control_plane, request

CLIENTS = ("official", "asyncio", "lightkube")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


EVENTS = 0


def _handshake(listed: int, rv: str, list_s: float, list_cpu: float) -> int:
    """Report the list; the parent starts its updates a moment later, while this process watches."""
    print(json.dumps({"listed": listed, "rv": rv, "list_s": list_s, "list_cpu_s": list_cpu,
                      "rss_after_list_mib": peak_rss_mib()}), flush=True)
    return EVENTS


def run_official(kubeconfig: Path) -> dict[str, Any]:
    from kubernetes import client

    from gpuscale.kube.cache import _RawWatch

    api = api_client(kubeconfig, pool_size=4)
    core = client.CoreV1Api(api)
    t, c = time.monotonic(), cpu_s()
    items: dict[str, dict[str, Any]] = {}
    cont, rv = None, ""
    while True:
        kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False}
        if cont:
            kwargs["_continue"] = cont
        resp = core.list_pod_for_all_namespaces(**kwargs)
        body = json.loads(resp.data)
        resp.release_conn()
        for obj in body["items"]:
            items[_key(obj)] = obj
        rv, cont = body["metadata"]["resourceVersion"], body["metadata"].get("continue")
        if not cont:
            break
    n = _handshake(len(items), rv, time.monotonic() - t, cpu_s() - c)
    t, c, seen = time.monotonic(), cpu_s(), 0
    w = _RawWatch()
    for event in w.stream(core.list_pod_for_all_namespaces, resource_version=rv, allow_watch_bookmarks=True,
                          timeout_seconds=300):
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            items[_key(event["object"])] = event["object"]
            seen += 1
            if seen >= n:
                break
    w.stop()
    return {"events": seen, "watch_s": time.monotonic() - t, "watch_cpu_s": cpu_s() - c, "cached": len(items)}


def run_asyncio(kubeconfig: Path) -> dict[str, Any]:
    from kubernetes_asyncio import client, config, watch

    class RawWatch(watch.Watch):  # type: ignore[misc]
        def get_return_type(self, func: object) -> str:
            return ""

    async def main() -> dict[str, Any]:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        async with client.ApiClient(cfg) as api:
            core = client.CoreV1Api(api)
            t, c = time.monotonic(), cpu_s()
            items: dict[str, dict[str, Any]] = {}
            cont, rv = None, ""
            while True:
                kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False}
                if cont:
                    kwargs["_continue"] = cont
                resp = await core.list_pod_for_all_namespaces(**kwargs)
                body = json.loads(await resp.read())
                for obj in body["items"]:
                    items[_key(obj)] = obj
                rv, cont = body["metadata"]["resourceVersion"], body["metadata"].get("continue")
                if not cont:
                    break
            n = await asyncio.get_running_loop().run_in_executor(
                None, _handshake, len(items), rv, time.monotonic() - t, cpu_s() - c)
            t, c, seen = time.monotonic(), cpu_s(), 0
            async with RawWatch() as w:
                async for event in w.stream(core.list_pod_for_all_namespaces, resource_version=rv,
                                            allow_watch_bookmarks=True, timeout_seconds=300):
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        items[_key(event["object"])] = event["object"]
                        seen += 1
                        if seen >= n:
                            break
            return {"events": seen, "watch_s": time.monotonic() - t, "watch_cpu_s": cpu_s() - c, "cached": len(items)}

    return asyncio.run(main())


def run_lightkube(kubeconfig: Path) -> dict[str, Any]:
    from lightkube import ALL_NS, Client, KubeConfig
    from lightkube.resources.core_v1 import Pod

    kc = Client(KubeConfig.from_file(str(kubeconfig)))
    t, c = time.monotonic(), cpu_s()
    items: dict[str, Any] = {}
    listing = kc.list(Pod, namespace=ALL_NS, chunk_size=500)
    for pod in listing:
        items[f"{pod.metadata.namespace}/{pod.metadata.name}"] = pod
    rv = listing.resourceVersion
    n = _handshake(len(items), rv, time.monotonic() - t, cpu_s() - c)
    t, c, seen = time.monotonic(), cpu_s(), 0
    for _kind, pod in kc.watch(Pod, namespace=ALL_NS, resource_version=rv, server_timeout=300):
        items[f"{pod.metadata.namespace}/{pod.metadata.name}"] = pod
        seen += 1
        if seen >= n:
            break
    return {"events": seen, "watch_s": time.monotonic() - t, "watch_cpu_s": cpu_s() - c, "cached": len(items)}


RUNNERS = {"official": run_official, "asyncio": run_asyncio, "lightkube": run_lightkube}


def update_pods(kubeconfig: Path, names: list[tuple[str, str]], round_: int) -> float:
    api = api_client(kubeconfig)
    # A value never written before: a patch that changes nothing makes no event.
    patch = {"metadata": {"labels": {"gpuscale.io/bench-round": f"{time.time_ns()}-{round_}"}}}
    t = time.monotonic()
    with ThreadPoolExecutor(24) as pool:
        list(pool.map(lambda nn: request(api, "PATCH", f"/api/v1/namespaces/{nn[0]}/pods/{nn[1]}", body=patch,
                                         content_type="application/merge-patch+json"), names))
    api.close()
    return len(names) / (time.monotonic() - t)


def pod_names(kubeconfig: Path, n: int) -> list[tuple[str, str]]:
    api = api_client(kubeconfig)
    body = json.loads(request(api, "GET", "/api/v1/pods", query=[("limit", n)]))
    api.close()
    return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in body["items"]]


def measure(kubeconfig: Path, which: str, updates: int, round_: int) -> dict[str, Any]:
    names = pod_names(kubeconfig, updates)
    child = subprocess.Popen([sys.executable, __file__, "--child", which, "--kubeconfig", str(kubeconfig),
                              "--updates", str(updates)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    listed = json.loads(child.stdout.readline())
    time.sleep(1.0)  # let the child's watch connect: its events are the updates below, as they happen
    rate = update_pods(kubeconfig, names, round_)
    writes_done = time.time()
    result = json.loads(child.stdout.readline())
    child.wait()
    ev_s = result["events"] / result["watch_s"]
    return {"client": which, "pods": listed["listed"], "list_s": round(listed["list_s"], 1),
            "list_cpu_s": round(listed["list_cpu_s"], 1), "watch_events": result["events"],
            "watch_events_per_s": round(ev_s), "watch_cpu_us_per_event": round(1e6 * result["watch_cpu_s"]
                                                                                / max(1, result["events"])),
            "lag_after_last_write_s": round(result["last_event_at"] - writes_done, 2),
            "peak_rss_mib": round(result["peak_rss_mib"]), "writer_updates_per_s": round(rate)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, help="use this running API server (with the pods in it)")
    parser.add_argument("--run-dir", type=Path, help="control-plane run directory to reuse (bench/watch.py --run-dir)")
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=10_000, help="pod updates each client's watch receives")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        global EVENTS
        EVENTS = args.updates
        result = RUNNERS[args.child](args.kubeconfig)
        result["peak_rss_mib"] = peak_rss_mib()
        result["last_event_at"] = time.time()
        print(json.dumps(result), flush=True)
        return
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    cp = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        from watch import NAMESPACES, populate

        cp = quiet_control_plane(NAMESPACES, args.run_dir)
        kubeconfig = cp.kubeconfig_path
        populate(kubeconfig, max(1, args.pods // 20), args.pods, 0)  # skipped when the run dir has them
    try:
        rows = [measure(kubeconfig, which, args.updates, i) for i, which in enumerate(args.clients.split(","))]
        for row in rows:
            print(json.dumps(row))
    finally:
        if cp is not None:
            cp.stop(keep_run_dir=args.run_dir is not None)


if __name__ == "__main__":
    main()
