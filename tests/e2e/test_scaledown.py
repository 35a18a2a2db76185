"""Scenarios 2 and 3 against the real control plane, with the controller composed as `gpuscale run` does and ticked
in-process (test_controller.Driver):

2. Three underutilized GPU nodes: an empty T4 node is removed after the (shortened, 4 s) unneeded time; a T4 node
   whose only pod (a real ReplicaSet's) is covered by a PDB with `maxUnavailable: 0` is kept; an A100 node running a
   1-GPU pod of a real batch Job is kept and the pod is never evicted.
3. A Kueue-style gang of 4 pods × 8 GPUs: 4 A100 nodes in one decision; with the pool's max at 3, no node at all,
   a NotTriggerScaleUp event on every pod and the status document saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import yaml
from harness import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_controller import (  # noqa: F401 (fixtures)
    A100,
    T4,
    Driver,
    create_pod,
    make_driver,
    seed_config,
    training_pod,
)

from gpuscale.config import Config
from gpuscale.engine.reasons import ReasonCode
from gpuscale.kube.status import History, build_status, render
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.kwok import KwokProfile, KwokProvider, KwokSettings

T4_SELECTOR = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
GPU_TOLERATION = [client.V1Toleration(key=NVIDIA_GPU, operator="Exists", effect="NoSchedule")]
UNNEEDED_S = 4.0


def scale_down_config() -> Config:
    config = seed_config()
    policy = replace(config.policy, scale_down_unneeded_time_s=UNNEEDED_S, scale_down_gpu_unneeded_time_s=UNNEEDED_S,
                     scale_down_delay_after_add_s=0.0)
    return replace(config, policy=policy)


def _ready_node(api_client: client.ApiClient, core: client.CoreV1Api, config: Config, pool: str = T4) -> str:
    kwok = KwokProvider(api_client, config.pools, KwokSettings(default=KwokProfile(ready_after_s=0,
                                                                                   gpu_register_after_s=0)))
    (name,) = kwok.increase(pool, 1)
    gpus = str(next(p for p in config.pools if p.name == pool).gpus_per_node)
    wait_for(lambda: (core.read_node(name).status.allocatable or {}).get(NVIDIA_GPU) == gpus, 30,
             desc=f"{name} Ready with its GPU")
    return name


def _exists(core: client.CoreV1Api, node: str) -> bool:
    try:
        core.read_node(node)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _running_on(core: client.CoreV1Api, namespace: str, selector: str) -> tuple[str, str] | None:
    pods = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
            if p.status.phase == "Running"]
    return (pods[0].metadata.uid, pods[0].spec.node_name) if len(pods) == 1 else None


def test_idle_node_goes_pdb_and_gpu_job_keep_theirs(make_driver: Callable[[Config], Driver],  # noqa: F811
                                                     api_client: client.ApiClient, core_v1: client.CoreV1Api,
                                                     namespace: str) -> None:
    config = scale_down_config()
    apps, batch, policy = client.AppsV1Api(api_client), client.BatchV1Api(api_client), client.PolicyV1Api(api_client)
    template = client.V1PodSpec(node_selector=T4_SELECTOR, tolerations=GPU_TOLERATION, containers=[
        client.V1Container(name="c", image="web", resources=client.V1ResourceRequirements(
            requests={"cpu": "100m", "memory": "64Mi"}))])

    pdb_node = _ready_node(api_client, core_v1, config)  # the only node when the ReplicaSet's pod schedules
    apps.create_namespaced_replica_set(namespace, client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ReplicaSetSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "web"}),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels={"app": "web"}), spec=template))))
    policy.create_namespaced_pod_disruption_budget(namespace, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="web"), spec=client.V1PodDisruptionBudgetSpec(
            max_unavailable=0, selector=client.V1LabelSelector(match_labels={"app": "web"}))))
    web = wait_for(lambda: _running_on(core_v1, namespace, "app=web"), 30, desc="web pod Running")
    assert web[1] == pdb_node

    job_node = _ready_node(api_client, core_v1, config, A100)  # 1 of 8 GPUs busy: underutilized, a candidate
    job_spec = replace_spec(template, node_selector={"kubernetes.io/hostname": job_node},
                            requests={"cpu": "1", "memory": "1Gi", NVIDIA_GPU: "1"}, restart_policy="Never")
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="train"),
        spec=client.V1JobSpec(backoff_limit=0, template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "train"}), spec=job_spec))))
    job = wait_for(lambda: _running_on(core_v1, namespace, "app=train"), 30, desc="Job pod Running")
    assert job[1] == job_node
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("web", namespace).status.observed_generation
                      or 0) >= 1, 30, desc="PDB status computed")

    idle_node = _ready_node(api_client, core_v1, config)
    driver = make_driver(config)
    started = time.monotonic()
    driver.tick_until(lambda: not _exists(core_v1, idle_node), 30, "the idle node removed")
    removed_after = time.monotonic() - started
    # not before its unneeded time; the taint stores whole Unix seconds (as CA's), so the clock read back from it can
    # start up to 1 s before the first tick
    assert removed_after >= UNNEEDED_S - 1.0, removed_after

    # keep deciding for longer than the unneeded time again: the other two stay, their pods untouched
    deadline = time.monotonic() + 2 * UNNEEDED_S
    while time.monotonic() < deadline:
        driver.tick()
        time.sleep(0.2)
    assert _exists(core_v1, pdb_node) and _exists(core_v1, job_node)
    assert _running_on(core_v1, namespace, "app=web") == web
    assert _running_on(core_v1, namespace, "app=train") == job
    deleted = [n for r in driver.reports for n in r.deleted]
    assert deleted == [idle_node], deleted
    assert not [e for r in driver.reports for e in r.evictions], "no pod may be evicted"
    blocked = {v.node: {r.code for r in v.reasons} for v in driver.reports[-1].plan.blocked}  # type: ignore[union-attr]
    assert ReasonCode.PDB in blocked.get(pdb_node, set()), blocked
    assert ReasonCode.TRAINING_JOB in blocked.get(job_node, set()), blocked
    events = core_v1.list_namespaced_event("default", field_selector=f"involvedObject.name={idle_node}").items
    assert [e.reason for e in events if e.source.component == "gpuscale"] == ["ScaleDown"]


def replace_spec(spec: client.V1PodSpec, *, node_selector: dict[str, str], requests: dict[str, str],
                 restart_policy: str) -> client.V1PodSpec:
    container = client.V1Container(name="c", image="train", resources=client.V1ResourceRequirements(
        requests=requests, limits={NVIDIA_GPU: requests[NVIDIA_GPU]}))
    return client.V1PodSpec(node_selector=node_selector, tolerations=spec.tolerations, containers=[container],
                            restart_policy=restart_policy)


def gang_pod(name: str, group: str, size: int) -> client.V1Pod:
    pod = training_pod(name)
    pod.metadata.labels = {"app": "gang", "kueue.x-k8s.io/pod-group-name": group}
    pod.metadata.annotations = {"kueue.x-k8s.io/pod-group-total-count": str(size)}
    pod.spec.containers[0].resources = client.V1ResourceRequirements(
        requests={"cpu": "8", "memory": "64Gi", NVIDIA_GPU: "8"}, limits={NVIDIA_GPU: "8"})
    return pod


def test_gang_of_four_scales_four_nodes_in_one_decision(make_driver: Callable[[Config], Driver],  # noqa: F811
                                                         create_pod: Callable[[client.V1Pod], None],  # noqa: F811
                                                         core_v1: client.CoreV1Api, namespace: str) -> None:
    driver = make_driver(seed_config())
    for i in range(4):
        create_pod(gang_pod(f"worker-{i}", "llm", 4))
    driver.tick_until(driver.scale_ups, 30, "the gang's scale-up")
    decisions = [r.scaled_up for r in driver.reports if r.scaled_up]
    assert [[(s.pool, s.nodes) for s in d] for d in decisions] == [[(A100, 4)]]
    assert len(driver.pool_nodes()[A100]) == 4

    def all_running() -> bool:
        pods = core_v1.list_namespaced_pod(namespace, label_selector="app=gang").items
        return len(pods) == 4 and all(p.status.phase == "Running" for p in pods)

    driver.tick_until(all_running, 60, "all four workers Running")
    assert driver.scale_ups() == [(A100, 4)]
    nodes = {p.spec.node_name for p in core_v1.list_namespaced_pod(namespace, label_selector="app=gang").items}
    assert len(nodes) == 4


def test_gang_that_exceeds_the_pool_max_orders_nothing(make_driver: Callable[[Config], Driver],  # noqa: F811
                                                        create_pod: Callable[[client.V1Pod], None],  # noqa: F811
                                                        core_v1: client.CoreV1Api, namespace: str) -> None:
    config = seed_config()
    config = replace(config, pools=tuple(replace(p, max_size=3) if p.name == A100 else p for p in config.pools))
    driver = make_driver(config)
    for i in range(4):
        create_pod(gang_pod(f"worker-{i}", "llm", 4))

    def refused() -> Any:
        plan = driver.reports[-1].plan
        return plan is not None and len(plan.unplaceable) == 4 and plan
    plan = driver.tick_until(refused, 30, "the gang judged unplaceable")
    for _ in range(10):
        driver.tick()
        time.sleep(0.1)
    assert driver.scale_ups() == [] and A100 not in driver.pool_nodes()
    codes = {r.code for v in plan.unplaceable for r in v.reasons}
    assert codes & {ReasonCode.GANG_DOES_NOT_FIT, ReasonCode.LIMIT_REACHED}, plan.unplaceable
    events = wait_for(lambda: [e for e in core_v1.list_namespaced_event(
        namespace, field_selector="reason=NotTriggerScaleUp").items], 10, desc="NotTriggerScaleUp events")
    assert {e.involved_object.name for e in events} == {f"worker-{i}" for i in range(4)}
    assert all("didn't trigger scale-up" in e.message for e in events)
    doc = build_status(report=driver.reports[-1], snapshot=None, pools=config.pools, limits=config.policy.limits,
                       state=driver.controller.autoscaler.state, history=History(), leader=None)
    assert doc["clusterWide"]["unschedulablePods"]["unplaceable"] == 4
    listed = {u["pod"]: u["reasons"] for u in yaml.safe_load(render(doc))["clusterWide"]["unplaceable"]}
    assert set(listed) == {f"{namespace}/worker-{i}" for i in range(4)}
    assert all("max_size 3" in " ".join(reasons) for reasons in listed.values()), listed
