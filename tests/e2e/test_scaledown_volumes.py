"""Scale-down with a volume against the real control plane, the controller composed as `gpuscale run` does and ticked
in-process (test_controller.Driver): a ReplicaSet's pod whose claim is bound to a zone-b PV (node affinity on the
zone, pre-bound through claimRef, no provisioner) runs on an underused zone-b T4 node.

1. The only other node, in zone a, has room: the node is kept, its pod untouched, and its verdict names the claim and
   VolumeBinding's words.
2. A zone-b node with room joins: gpuscale removes the underused node, the pod is evicted, and the real scheduler
   runs its replacement on the zone-b node — never on the zone-a one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness import ignore_status, wait_for
from kubernetes import client
from test_controller import T4, Driver, make_driver  # noqa: F401 (fixtures)
from test_scaledown import GPU_TOLERATION, T4_SELECTOR, UNNEEDED_S, _exists, scale_down_config

from gpuscale.config import Config
from gpuscale.engine.reasons import ReasonCode
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.kwok import KwokProfile, KwokProvider, KwokSettings
from gpuscale.report.plan import plan_json

ZONE = "topology.kubernetes.io/zone"
ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"


def _node_in(api_client: client.ApiClient, core: client.CoreV1Api, config: Config, zone: str) -> str:
    """A Ready T4 node in `zone`, its GPU registered."""
    kwok = KwokProvider(api_client, config.pools, KwokSettings(default=KwokProfile(ready_after_s=0,
                                                                                   gpu_register_after_s=0)))
    (name,) = kwok.increase(T4, 1, zone)
    wait_for(lambda: (core.read_node(name).status.allocatable or {}).get(NVIDIA_GPU) == "1", 30,
             desc=f"{name} Ready with its GPU")
    assert core.read_node(name).metadata.labels[ZONE] == zone
    return name


def _busy(core: client.CoreV1Api, namespace: str, node: str) -> None:
    """A pod taking the node's GPU (above the threshold: not a candidate), with CPU and memory left over."""
    resources = client.V1ResourceRequirements(requests={"cpu": "100m", "memory": "64Mi", NVIDIA_GPU: "1"},
                                              limits={NVIDIA_GPU: "1"})
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"busy-{node}"),
        spec=client.V1PodSpec(node_selector={"kubernetes.io/hostname": node}, tolerations=GPU_TOLERATION,
                              containers=[client.V1Container(name="c", image="gpu", resources=resources)])))
    wait_for(lambda: core.read_namespaced_pod(f"busy-{node}", namespace).status.phase == "Running", 30,
             desc=f"busy pod Running on {node}")


def _db_pods(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    return [p for p in core.list_namespaced_pod(namespace, label_selector="app=db").items
            if p.metadata.deletion_timestamp is None]


def _claimed(core: client.CoreV1Api, namespace: str, pv: str) -> None:
    """PV `pv` in zone b, pre-bound to claim `data`, and the claim, Bound by kube-controller-manager's PV controller."""
    core.create_persistent_volume({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain", "csi": {"driver": "csi.example.com", "volumeHandle": pv},
        "claimRef": {"namespace": namespace, "name": "data"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": ZONE, "operator": "In", "values": [ZONE_B]}]}]}}}})
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
        "resources": {"requests": {"storage": "1Gi"}}}})
    wait_for(lambda: core.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound",
             60, desc="the claim Bound by the PV controller")


def _db(apps: client.AppsV1Api, namespace: str) -> None:
    spec = client.V1PodSpec(
        node_selector=T4_SELECTOR, tolerations=GPU_TOLERATION,
        containers=[client.V1Container(name="c", image="db", resources=client.V1ResourceRequirements(
            requests={"cpu": "100m", "memory": "64Mi"}))],
        volumes=[client.V1Volume(name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
            claim_name="data"))])
    apps.create_namespaced_replica_set(namespace, client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="db"),
        spec=client.V1ReplicaSetSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "db"}),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels={"app": "db"}), spec=spec))))


def test_a_pvc_pod_is_drained_only_to_a_node_in_its_volumes_zone(
        make_driver: Callable[[Config], Driver], api_client: client.ApiClient,  # noqa: F811
        core_v1: client.CoreV1Api, namespace: str) -> None:
    config = scale_down_config()
    apps = client.AppsV1Api(api_client)
    pv = f"data-{namespace}"
    _claimed(core_v1, namespace, pv)
    try:
        home = _node_in(api_client, core_v1, config, ZONE_B)  # the only node when the pod schedules
        _db(apps, namespace)
        wait_for(lambda: [p.spec.node_name for p in _db_pods(core_v1, namespace) if p.status.phase == "Running"]
                 == [home], 30, desc="db pod Running on the zone-b node")
        (first,) = _db_pods(core_v1, namespace)
        zone_a = _node_in(api_client, core_v1, config, ZONE_A)
        _busy(core_v1, namespace, zone_a)

        # 1. Room in zone a only: the node is kept and says why, for longer than twice the unneeded time.
        driver = make_driver(config)
        deadline = time.monotonic() + 2 * UNNEEDED_S
        while time.monotonic() < deadline:
            driver.tick()
            time.sleep(0.2)
        assert _exists(core_v1, home)
        assert [p.metadata.uid for p in _db_pods(core_v1, namespace)] == [first.metadata.uid]
        assert not [e for r in driver.reports for e in r.evictions], "no pod may be evicted"
        plan = driver.reports[-1].plan
        assert plan is not None
        (verdict,) = [v for v in plan.blocked if v.node == home]
        reason = verdict.reasons[0]
        assert reason.code is ReasonCode.NO_PLACE_TO_MOVE, verdict
        assert f"pod {namespace}/{first.metadata.name} fits on no other node" in reason.message
        assert f"its volume claim(s) {namespace}/data" in reason.message
        assert "node(s) didn't match PersistentVolume's node affinity" in reason.message
        shown = {entry["node"]: entry for entry in plan_json(plan)["blocked"]}  # what `gpuscale plan` prints
        assert any(f"{namespace}/data" in r["message"] for r in shown[home]["reasons"]), shown

        # 2. A zone-b node with room: the underused node goes, and the pod's replacement runs in zone b.
        zone_b = _node_in(api_client, core_v1, config, ZONE_B)
        _busy(core_v1, namespace, zone_b)
        seen: set[str] = set()

        def record() -> None:
            seen.update(p.spec.node_name for p in _db_pods(core_v1, namespace) if p.spec.node_name)

        def moved() -> Any:
            running = [p for p in _db_pods(core_v1, namespace) if p.status.phase == "Running"]
            return not _exists(core_v1, home) and [p.spec.node_name for p in running] == [zone_b]

        driver.tick_until(moved, 60, "the underused node removed and the db pod Running on the zone-b node",
                          check=record)
        assert zone_a not in seen, seen
        assert [n for r in driver.reports for n in r.deleted] == [home]
        evicted = [e.pod for r in driver.reports for e in r.evictions]
        assert f"{namespace}/{first.metadata.name}" in evicted, evicted
        assert _exists(core_v1, zone_a) and _exists(core_v1, zone_b)
    finally:
        ignore_status(404, core_v1.delete_persistent_volume, pv)
