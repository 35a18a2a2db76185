"""Smoke tests of the real control plane and of the kwok stages in deploy/kwok/stages.yaml.

Timing is checked with lower bounds (a stage must not fire before its delay) and with ordering between objects
created together, never with tight upper bounds. Kubernetes timestamps have one-second resolution: an event that
happens d whole seconds after another is stamped at least d seconds later, so ``>= d`` comparisons are exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from harness import ControlPlane, wait_for
from kubernetes import client

GPU = "nvidia.com/gpu"
GPU_TAINT = client.V1Taint(key=GPU, value="present", effect="NoSchedule")
GPU_TOLERATION = client.V1Toleration(key=GPU, operator="Exists", effect="NoSchedule")
STAGE_DEFAULT_READY_AFTER_S = 2  # node-initialize durationMilliseconds in deploy/kwok/stages.yaml
T = TypeVar("T")


def condition(obj: client.V1Node | client.V1Pod, type_: str) -> client.V1NodeCondition | None:
    for cond in (obj.status and obj.status.conditions) or []:
        if cond.type == type_:
            return cond
    return None


def is_ready(node: client.V1Node) -> bool:
    cond = condition(node, "Ready")
    return cond is not None and cond.status == "True"


def allocatable(node: client.V1Node, resource: str) -> str | None:
    return ((node.status and node.status.allocatable) or {}).get(resource)


def when(read: Callable[[], T], predicate: Callable[[T], object]) -> Callable[[], T | None]:
    """A wait_for predicate: read the object, return it if ``predicate`` holds for it."""

    def probe() -> T | None:
        obj = read()
        return obj if predicate(obj) else None

    return probe


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def has_not_ready_taint(node: client.V1Node) -> bool:
    return any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])


def observe_ready_order(
    core_v1: client.CoreV1Api,
    names: list[str],
    timeout_s: float,
    while_not_ready: Callable[[client.V1Node], None] | None = None,
) -> dict[str, float]:
    """Poll the nodes until all are Ready; return the monotonic time each was first seen Ready. Every observation
    of a node that is not Ready yet is passed to ``while_not_ready``."""
    seen: dict[str, float] = {}

    def all_ready() -> bool:
        for name in names:
            if name in seen:
                continue
            node = core_v1.read_node(name)
            if is_ready(node):
                seen[name] = time.monotonic()
            elif while_not_ready is not None:
                while_not_ready(node)
        return len(seen) == len(names)

    wait_for(all_ready, timeout_s, interval_s=0.1, desc=f"nodes {names} Ready")
    return seen


def gpu_pod(name: str, node_name: str, annotations: dict[str, str] | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(
            node_selector={"kubernetes.io/hostname": node_name},
            tolerations=[GPU_TOLERATION],
            containers=[
                client.V1Container(
                    name="train",
                    image="registry.example/train:1",
                    resources=client.V1ResourceRequirements(limits={GPU: "1"}, requests={"cpu": "1"}),
                )
            ],
        ),
    )


def test_control_plane_basics(control_plane: ControlPlane, core_v1: client.CoreV1Api) -> None:
    assert control_plane.api_url.startswith("https://127.0.0.1:")
    assert control_plane.kubeconfig_path.is_file()
    assert control_plane.token
    version = client.VersionApi(core_v1.api_client).get_code()
    assert version.git_version == "v1.37.2"
    assert core_v1.read_namespaced_service_account("default", "default").metadata.name == "default"


def test_node_becomes_ready_after_ready_after_delay(
    core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node]
) -> None:
    fast = make_node("fast", annotations={"gpuscale.io/ready-after": "0s"}).metadata.name
    created = make_node("slow", annotations={"gpuscale.io/ready-after": "4s"})
    slow = created.metadata.name
    # POSTed without any status: kwok's node-register stage reports Ready=False/KubeletNotReady at once.
    bare = make_node("bare", annotations={"gpuscale.io/ready-after": "4s"}, registered=False).metadata.name
    assert has_not_ready_taint(created)  # the TaintNodesByCondition admission plugin

    bare_reasons: list[str] = []

    def while_not_ready(node: client.V1Node) -> None:
        ready = condition(node, "Ready")
        if node.metadata.name == slow:
            # Registered NotReady, so kube-controller-manager keeps the not-ready taint: nothing can land on it.
            assert ready.status == "False" and ready.reason == "KubeletNotReady", ready
            assert has_not_ready_taint(node)
        elif node.metadata.name == bare and ready is not None:
            bare_reasons.append(f"{ready.status}/{ready.reason}")

    seen = observe_ready_order(core_v1, [fast, slow, bare], timeout_s=60, while_not_ready=while_not_ready)
    assert seen[fast] < seen[slow]
    assert seen[fast] < seen[bare]
    assert "False/KubeletNotReady" in bare_reasons

    for name in (slow, bare):
        node = core_v1.read_node(name)
        ready = condition(node, "Ready")
        assert ready is not None and ready.reason == "KubeletReady"
        assert seconds(ready.last_transition_time, node.metadata.creation_timestamp) >= 4
        assert allocatable(node, "cpu") and allocatable(node, "pods")
        assert {a.type: a.address for a in node.status.addresses} == {"InternalIP": "127.0.0.1", "Hostname": name}
    # kube-controller-manager's node lifecycle controller lifts the not-ready taint once the node is Ready.
    wait_for(lambda: not has_not_ready_taint(core_v1.read_node(slow)), 30, desc="not-ready taint removed")


def test_duration_from_falls_back_to_constant(
    core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node]
) -> None:
    instant = make_node("instant", annotations={"gpuscale.io/ready-after": "0s"}).metadata.name
    absent = make_node("absent").metadata.name  # no annotation: durationMilliseconds (2 s)
    garbage = make_node("garbage", annotations={"gpuscale.io/ready-after": "soon"}).metadata.name  # unparseable

    # Without the fallback the delay would be 0 and `absent` would be Ready as early as `instant`.
    seen = observe_ready_order(core_v1, [instant, absent, garbage], timeout_s=60)
    assert seen[instant] < seen[absent]
    assert seen[instant] < seen[garbage]
    for name in (absent, garbage):
        node = core_v1.read_node(name)
        ready = condition(node, "Ready")
        assert ready is not None
        waited = seconds(ready.last_transition_time, node.metadata.creation_timestamp)
        assert STAGE_DEFAULT_READY_AFTER_S <= waited < 30, (name, waited)


def test_gpus_register_after_delay_and_survive_heartbeats(
    core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node]
) -> None:
    name = make_node(
        "gpu",
        labels={"gpuscale.io/gpu-count": "8"},
        annotations={
            "gpuscale.io/ready-after": "1s",
            "gpuscale.io/gpu-register-after": "4s",
            "gpuscale.io/heartbeat-every": "1s",
        },
        taints=[GPU_TAINT],
    ).metadata.name

    # Ready first, without GPUs: the device plugin has not registered yet.
    read = lambda: core_v1.read_node(name)  # noqa: E731
    node = wait_for(when(read, is_ready), 60, desc="GPU node Ready")
    assert allocatable(node, GPU) is None
    ready_at = condition(node, "Ready").last_transition_time

    node = wait_for(when(read, lambda n: allocatable(n, GPU)), 60, desc="GPUs")
    assert allocatable(node, GPU) == "8"
    assert node.status.capacity[GPU] == "8"
    assert allocatable(node, "cpu") and allocatable(node, "pods")  # the GPU patch merged, it did not replace
    gpu_seen = datetime.now(tz=ready_at.tzinfo)
    assert seconds(gpu_seen, ready_at) >= 4

    # The node now heartbeats every second; the GPUs, the Ready transition time and the taint must all survive.
    beats: set[datetime] = set()

    def heartbeats_seen() -> bool:
        n = core_v1.read_node(name)
        assert allocatable(n, GPU) == "8" and n.status.capacity[GPU] == "8"
        cond = condition(n, "Ready")
        assert cond.status == "True" and cond.last_transition_time == ready_at
        assert any(t.key == GPU for t in n.spec.taints or [])
        beats.add(cond.last_heartbeat_time)
        return len(beats) >= 3  # two heartbeats after the first observation

    wait_for(heartbeats_seen, 30, desc="two node heartbeats")

    # kwok also keeps the node's Lease (what kube-controller-manager actually watches for liveness).
    lease = client.CoordinationV1Api(core_v1.api_client).read_namespaced_lease(name, "kube-node-lease")
    assert lease.spec.lease_duration_seconds == 40 and lease.spec.renew_time is not None


def test_gpu_pod_unschedulable_until_gpus_register(
    core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node], namespace: str
) -> None:
    node_name = make_node(
        "gpu",
        labels={"gpuscale.io/gpu-count": "8"},
        annotations={"gpuscale.io/ready-after": "1s", "gpuscale.io/gpu-register-after": "5s"},
        taints=[GPU_TAINT],
    ).metadata.name
    core_v1.create_namespaced_pod(
        namespace, gpu_pod("train-0", node_name, annotations={"gpuscale.io/image-pull-after": "2s"})
    )

    def unschedulable_on_ready_node() -> bool:
        pod = core_v1.read_namespaced_pod("train-0", namespace)
        sched = condition(pod, "PodScheduled")
        node = core_v1.read_node(node_name)
        if sched is None or not is_ready(node) or allocatable(node, GPU) is not None:
            return False
        assert not pod.spec.node_name
        return sched.status == "False" and sched.reason == "Unschedulable"

    # The race the autoscaler must not misread: the node is Ready, but the pod is still Unschedulable.
    wait_for(unschedulable_on_ready_node, 60, interval_s=0.1, desc="pod Unschedulable while the node is Ready")

    read_pod = lambda: core_v1.read_namespaced_pod("train-0", namespace)  # noqa: E731
    pod = wait_for(when(read_pod, lambda p: p.spec.node_name), 60, desc="pod bound by kube-scheduler")
    assert pod.spec.node_name == node_name
    assert allocatable(core_v1.read_node(node_name), GPU) == "8"  # bound only once the GPUs were there

    pod = wait_for(when(read_pod, lambda p: p.status.phase == "Running"), 60, desc="pod Running")
    assert condition(pod, "Ready").status == "True"
    assert condition(pod, "PodScheduled").status == "True"
    assert pod.status.container_statuses[0].state.running is not None
    assert pod.status.pod_ip and pod.status.host_ip == "127.0.0.1"

    def kubelet_events() -> dict[str, client.CoreV1Event] | None:
        events = core_v1.list_namespaced_event(namespace, field_selector="involvedObject.name=train-0").items
        by_reason = {e.reason: e for e in events}
        return by_reason if {"Scheduled", "Pulling", "Pulled", "Created", "Started"} <= by_reason.keys() else None

    events = wait_for(kubelet_events, 30, desc="Scheduled/Pulling/Pulled/Created/Started events")
    assert any(e.reason == "FailedScheduling" for e in core_v1.list_namespaced_event(namespace).items)
    # kube-scheduler writes events.k8s.io Events (eventTime, microseconds), kwok core/v1 Events (firstTimestamp).
    first = {reason: (e.first_timestamp or e.event_time).replace(microsecond=0) for reason, e in events.items()}
    assert first["Scheduled"] <= first["Pulling"] <= first["Pulled"] <= first["Started"]
    assert seconds(first["Pulled"], first["Pulling"]) >= 2  # gpuscale.io/image-pull-after


def test_job_pod_completes_after_run_for_and_deleted_pod_goes_away(
    core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node], namespace: str
) -> None:
    node_name = make_node("cpu", annotations={"gpuscale.io/ready-after": "0s"}).metadata.name
    batch = client.BatchV1Api(core_v1.api_client)
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(annotations={"gpuscale.io/run-for": "2s"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            node_selector={"kubernetes.io/hostname": node_name},
            containers=[client.V1Container(name="step", image="registry.example/step:1")],
        ),
    )
    batch.create_namespaced_job(
        namespace,
        client.V1Job(metadata=client.V1ObjectMeta(name="once"), spec=client.V1JobSpec(template=template)),
    )
    # A bare pod (with an init container and a sidecar) and the default 30 s grace period: the pod-delete stage
    # must remove it well before that.
    core_v1.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="svc"),
            spec=client.V1PodSpec(
                node_selector={"kubernetes.io/hostname": node_name},
                init_containers=[
                    client.V1Container(name="init", image="registry.example/init:1"),
                    client.V1Container(name="proxy", image="registry.example/proxy:1", restart_policy="Always"),
                ],
                containers=[client.V1Container(name="svc", image="registry.example/svc:1")],
            ),
        ),
    )

    def job_complete() -> bool:
        status = batch.read_namespaced_job_status("once", namespace).status
        return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])

    wait_for(job_complete, 60, desc="Job Complete")
    (job_pod,) = core_v1.list_namespaced_pod(namespace, label_selector="job-name=once").items
    assert job_pod.status.phase == "Succeeded"
    terminated = job_pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.reason == "Completed"
    assert seconds(terminated.finished_at, terminated.started_at) >= 2  # gpuscale.io/run-for

    svc = wait_for(
        when(lambda: core_v1.read_namespaced_pod("svc", namespace), lambda p: p.status.phase == "Running"),
        30,
        desc="svc Running",
    )
    init = {s.name: s for s in svc.status.init_container_statuses}
    assert init["init"].state.terminated.reason == "Completed"
    assert init["proxy"].state.running is not None and init["proxy"].started
    core_v1.delete_namespaced_pod("svc", namespace)
    deleted_at = time.monotonic()
    wait_for(
        lambda: not core_v1.list_namespaced_pod(namespace, field_selector="metadata.name=svc").items,
        25,
        desc="pod removed by the pod-delete stage",
    )
    assert time.monotonic() - deleted_at < 25  # well inside the 30 s grace period nobody else would honour


def test_components_survive_apiserver_and_kwok_restarts(
    control_plane: ControlPlane, core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node], namespace: str
) -> None:
    instant = {"gpuscale.io/ready-after": "0s"}
    before = make_node("before", annotations=instant).metadata.name
    wait_for(lambda: is_ready(core_v1.read_node(before)), 30, desc="node Ready before the restart")

    control_plane.restart_apiserver()
    assert is_ready(core_v1.read_node(before))  # state lives in etcd

    # kwok, kube-scheduler and kube-controller-manager re-established their watches.
    after = make_node("after", annotations=instant).metadata.name
    wait_for(lambda: is_ready(core_v1.read_node(after)), 60, desc="node created after the restart Ready")
    core_v1.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1PodSpec(
                node_selector={"kubernetes.io/hostname": after},
                containers=[client.V1Container(name="web", image="registry.example/web:1")],
            ),
        ),
    )
    wait_for(
        lambda: core_v1.read_namespaced_pod("web", namespace).status.phase == "Running", 60, desc="pod Running"
    )

    with control_plane.kwok_stopped():
        late = make_node("late", annotations=instant).metadata.name
        assert not is_ready(core_v1.read_node(late))  # no kubelet stand-in while kwok is down
    wait_for(lambda: is_ready(core_v1.read_node(late)), 60, desc="node Ready once kwok is back")


def test_boot_deadline_is_absolute_under_churn(
    core_v1: client.CoreV1Api, make_node: Callable[..., client.V1Node]
) -> None:
    """kwok restarts a pending delay on every change of its object, and a booting node changes often (the not-ready
    taint, labels and annotations written by autoscalers). node-initialize counts ready-after from the node's creation
    instead, so a burst of nodes relabelled every few seconds all turn Ready 60 s after creation (second precision),
    not 60 s after their last change."""
    names = [make_node("boot", annotations={"gpuscale.io/ready-after": "60s"}).metadata.name for _ in range(4)]
    churned = [0]

    def churn(node: client.V1Node) -> None:
        # At most one write per node per ~5 s of polling: each would restart a relative delay.
        stamp = str(int(time.monotonic() // 5))
        if (node.metadata.labels or {}).get("gpuscale.io/churn") != stamp:
            core_v1.patch_node(node.metadata.name, {"metadata": {"labels": {"gpuscale.io/churn": stamp}}})
            churned[0] += 1

    observe_ready_order(core_v1, names, timeout_s=150, while_not_ready=churn)
    assert churned[0] >= 4 * 10  # every node was changed at least ten times while it booted
    for name in names:
        node = core_v1.read_node(name)
        ready = condition(node, "Ready")
        assert ready is not None and ready.status == "True"
        waited = seconds(ready.last_transition_time, node.metadata.creation_timestamp)
        assert 60 <= waited <= 61.5, (name, waited)
