"""Differential test: gpuscale's feasibility (`explain_fit`, and the what-if rows `decide` builds) against the real
kube-scheduler v1.37.2.

A seeded generator makes kwok nodes (labels, taints of every effect with and without values, cordons, allocatable
cpu/memory/pods and extended resources) and then, one at a time, a few hundred pods (requests in several containers,
init containers and sidecars, extended resources, tolerations of every shape, nodeSelector, required node affinity
with every operator over several terms, required pod anti-affinity and sometimes affinity, host ports, topology
spread constraints over zone, hostname and custom keys with every option). For each pod, the cluster
is listed from the API just before the pod is created — the state the scheduler decides on, since nothing else
changes it meanwhile — and gpuscale explains the pod against that snapshot. Then:

- the scheduler bound the pod to node X → X must be among gpuscale's fitting nodes;
- the scheduler set PodScheduled=False/Unschedulable → gpuscale must fit it nowhere, and the scheduler's
  "0/N nodes are available: …" must give the same N and the same {reason: count} as gpuscale's;
- the what-if `decide` builds for the snapshot (`ReferenceStore`, no pools: its rows are the usable nodes) must find
  the pod feasible on exactly the rows among `fit`'s fitting nodes, the scheduler's node included.

Bound pods stay (they fill nodes up and carry anti-affinity, so later pods meet fuller, more varied nodes); a batch
of empty nodes comes a third and two thirds in, so that pods keep binding. Unschedulable pods are deleted once
compared.
Before the first pod and after each node batch, a probe pod that fits nowhere is recreated until the scheduler's
message for it equals gpuscale's: the scheduler then sees every node, with its final taints and cordon.

Only the scheduler's first verdict is compared: it comes within tens of milliseconds, long before its first backoff
retry (1 s), and nothing in between makes the pod schedulable. Known differences are kept out of the random mix and
pinned by a strict xfail test below (test_match_fields_prefilter_wording_differs); test_no_zero_count_reasons
guards a bug this test found and that is fixed.

GPUSCALE_DIFF_SEED / GPUSCALE_DIFF_PODS override the seed and the number of pods (e.g. to explore other seeds).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from typing import Any

import pytest
from differential import (
    HOSTNAME,
    Disagreement,
    Tally,
    categories,
    compare,
    decide_feasible,
    error_words,
    gpuscale_fit,
    list_objects,
    node_categories,
    parse_scheduler_message,
    random_nodes,
    random_pod,
    scheduler_outcome,
)
from differential_dra import NOT_YET, dra_unsupported
from harness import ignore_status, kwok_node_body, wait_for
from kubernetes import client

from gpuscale.engine.fit import explain_fit
from gpuscale.kube.convert import cluster_from_objects

SEED = int(os.environ.get("GPUSCALE_DIFF_SEED", "20261129"))
PODS = int(os.environ.get("GPUSCALE_DIFF_PODS", "500"))
BATCHES = {0: 12, PODS // 3: 6, 2 * PODS // 3: 6}
"""Pod index → number of new nodes created just before that pod."""
DECIDE_TIMEOUT_S = 30
POLL_S = 0.01
SHOWN = 10

# Every one of these must come up in the scheduler's messages, or the generator has drifted into testing little.
EXPECTED_REASONS = {
    "node(s) had untolerated taint(s)",
    "node(s) were unschedulable",
    "node(s) didn't match Pod's node affinity/selector",
    "Insufficient cpu",
    "Insufficient memory",
    "Insufficient nvidia.com/gpu",
    "Insufficient nvidia.com/mig-1g.10gb",
    "Insufficient example.com/foo",
    "Too many pods",
    "node(s) didn't match pod anti-affinity rules",
    "node(s) didn't have free ports for the requested pod ports",
    "node(s) didn't match pod topology spread constraints",
    "node(s) didn't match pod topology spread constraints (missing required label)",
}


def test_parse_scheduler_message() -> None:
    message = ("0/14 nodes are available: 1 Insufficient nvidia.com/gpu, 3 Insufficient cpu, 2 node(s) had untolerated "
               "taint(s). preemption: 0/14 nodes are available: 14 Preemption is not helpful for scheduling.")
    assert parse_scheduler_message(message) == (
        14, {"Insufficient nvidia.com/gpu": 1, "Insufficient cpu": 3, "node(s) had untolerated taint(s)": 2})
    assert parse_scheduler_message("0/3 nodes are available: 3 Too many pods.") == (3, {"Too many pods": 3})


def test_parse_dra_messages() -> None:
    """kube-scheduler v1.37.2's DRA words (tests/e2e/dra_messages.txt, asserted against it by test_dra.py): Filter
    failures counted per node, the missing-class PreFilter said once for all, a CEL error with its changing names
    taken out."""
    from test_dra import fixture_messages

    words = {k: v.replace("<ns>", "ns").replace("<node>", "n1") for k, v in fixture_messages().items()}
    assert parse_scheduler_message(words["exhausted"].removeprefix("Unschedulable: ")) == (
        1, {"cannot allocate all claims": 1})
    assert parse_scheduler_message(words["missing-device-class"].removeprefix("Unschedulable: ")) == (
        1, {"request gpu: device class nosuch does not exist": 1})
    error = words["cel-missing-attribute"].removeprefix("SchedulerError: ").replace("<claim>", "d1-c0-x7k2p")
    assert error_words(error.replace("<device>", "gpu-3")) == error_words(error.replace("<device>", "gpu-5")) == (
        "claim: selector #0 on device: CEL runtime error: no such key: nosuch. consider using CEL optional chaining "
        "(.? followed by orValue()) or guarding the check with has() for optional fields")
    updating = ("claim {ns}/d1-c0-x7k2p, request r0: asks for all devices, but resource pool gpu.nvidia.com/{node} is "
                "currently being updated")
    assert error_words(updating.format(ns="a", node="n-080-01")) == error_words(updating.format(ns="b", node="n-160")) \
        == "claim, request r0: asks for all devices, but resource pool is currently being updated"
    assert error_words("node n-3: timed out trying to allocate devices") == "timed out trying to allocate devices"


def _model_fit(objects: list[dict[str, Any]]) -> dict[str, int]:
    (fit,) = explain_fit(cluster_from_objects(objects))
    return dict(fit.reasons)


def _node(name: str, cpu: str, pods: str = "110", **spec: Any) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"x": name}}, "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods}}}


def _pod(name: str, cpu: str, node: str | None = None, **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], "nodeName": node, **spec}}


def test_no_zero_count_reasons() -> None:
    """Found by the differential run: a node out of pod slots that another filter already rejected is not counted."""
    # Node a is full (1 pod of 1) but fails the nodeSelector first; node b lacks CPU. kube-scheduler:
    # "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."
    reasons = _model_fit([_node("a", "4", pods="1"), _node("b", "4"), _pod("running", "1", node="a"),
                          _pod("new", "8", nodeSelector={"x": "b"})])
    assert reasons == {"Insufficient cpu": 1, "node(s) didn't match Pod's node affinity/selector": 1}


@pytest.mark.xfail(strict=True, reason="gpuscale does not model NodeAffinity's PreFilter: with `metadata.name In` "
                                       "fields in every term kube-scheduler filters only those nodes and reports the "
                                       "rest as `node(s) didn't satisfy plugin(s) [NodeAffinity]`")
def test_match_fields_prefilter_wording_differs() -> None:
    # Observed from kube-scheduler v1.37.2 in this harness: a pod with matchFields metadata.name In [n0] and no
    # tolerations, n0 tainted NoExecute, five other nodes (two cordoned, three tainted or not) →
    # "0/6 nodes are available: 1 node(s) had untolerated taint(s), 5 node(s) didn't satisfy plugin(s) [NodeAffinity]"
    # — the cordoned and tainted nodes outside the set are never filtered, so never reported as such.
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]}}}
    reasons = _model_fit([
        _node("a", "4", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        _node("b", "4", unschedulable=True),
        _node("c", "4"),
        _pod("new", "8", affinity=affinity),
    ])
    assert reasons == {"Insufficient cpu": 1, "node(s) didn't satisfy plugin(s) [NodeAffinity]": 2}


def _is_ready(node: client.V1Node) -> bool:
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    keys = {t.key for t in node.spec.taints or []}
    return (ready and "node.kubernetes.io/not-ready" not in keys
            and (not node.spec.unschedulable or "node.kubernetes.io/unschedulable" in keys))


def _read_pod(core_v1: client.CoreV1Api, name: str, namespace: str) -> dict[str, Any]:
    return json.loads(core_v1.read_namespaced_pod(name, namespace, _preload_content=False).data)


def _schedule(core_v1: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> tuple[Any, ...]:
    """Snapshot the cluster, create the pod, wait for the scheduler's first verdict; (snapshot, pod, outcome)."""
    objects = list_objects(core_v1)
    created = json.loads(core_v1.create_namespaced_pod(namespace, body, _preload_content=False).data)
    name = created["metadata"]["name"]
    outcome = wait_for(lambda: scheduler_outcome(_read_pod(core_v1, name, namespace)), DECIDE_TIMEOUT_S,
                       interval_s=POLL_S, desc=f"kube-scheduler to bind {name} or find it Unschedulable")
    return objects, created, outcome


def _delete_pod(core_v1: client.CoreV1Api, name: str, namespace: str) -> None:
    ignore_status(404, core_v1.delete_namespaced_pod, name, namespace, grace_period_seconds=0)


def _wait_scheduler_in_sync(core_v1: client.CoreV1Api, namespace: str, tag: str) -> None:
    """Barrier: a pod that fits nowhere (1000 CPUs), recreated until the scheduler's message for it equals gpuscale's
    on the same snapshot — the scheduler then counts every node, with its final taints and cordon."""
    deadline = time.monotonic() + DECIDE_TIMEOUT_S
    for attempt in range(10_000):
        body = {"metadata": {"name": f"probe-{tag}-{attempt}"},
                "spec": {"terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "registry.example/probe:1",
                                         "resources": {"requests": {"cpu": "1000"}}}]}}
        objects, created, outcome = _schedule(core_v1, namespace, body)
        _delete_pod(core_v1, created["metadata"]["name"], namespace)
        cluster, fit = gpuscale_fit(objects, created)
        try:
            disagreement = compare(-1, created, outcome, cluster, fit)
        except AssertionError as err:
            # A scheduler whose informer has seen no node yet answers "no nodes available to schedule pods": not a
            # verdict to compare, just not in sync yet.
            if "no nodes available" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        if disagreement is None:
            return
        if time.monotonic() > deadline:
            raise AssertionError("kube-scheduler never agreed on the probe pod:\n" + disagreement.render(SEED))
        time.sleep(0.1)


def _add_nodes(core_v1: client.CoreV1Api, namespace: str, rng: random.Random, names: list[str],
               created: list[str], tally: Tally) -> None:
    """Create a batch of random kwok nodes, wait until they are Ready and the scheduler sees them as they are."""
    for body in random_nodes(rng, names):
        core_v1.create_node(body)
        created.append(body.metadata.name)
    wait_for(lambda: all(_is_ready(core_v1.read_node(n)) for n in names), 60, interval_s=0.05,
             desc="differential nodes Ready (not-ready taint lifted, cordons tainted)")
    for name in names:
        tally.categories.update(node_categories(core_v1.read_node(name)))
    _wait_scheduler_in_sync(core_v1, namespace, names[0])


def test_feasibility_matches_kube_scheduler(core_v1: client.CoreV1Api, namespace: str) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    run = uuid.uuid4().hex[:6]
    tally = Tally()
    disagreements: list[Disagreement] = []
    whatif_disagreements: list[str] = []
    node_names: list[str] = []
    created_nodes: list[str] = []
    try:
        for i in range(PODS):
            # Bound pods stay, so nodes fill up; batches of empty nodes a third and two thirds in keep pods binding.
            batch = BATCHES.get(i)
            if batch is not None:
                names = [f"diff-{run}-{i:03d}-{j:02d}" for j in range(batch)]
                _add_nodes(core_v1, namespace, rng, names, created_nodes, tally)
                node_names += names
            body = random_pod(rng, f"p{i:03d}", node_names)
            objects, created, outcome = _schedule(core_v1, namespace, body)
            cluster, fit = gpuscale_fit(objects, created)
            disagreement = compare(i, body, outcome, cluster, fit)
            if disagreement is not None:
                disagreements.append(disagreement)
            rows, feasible = decide_feasible(cluster, fit.pod)
            placeable = set(fit.fits) & rows  # `compare` holds `fit.fits` to the scheduler's verdict
            if feasible != placeable or (outcome.node in rows and outcome.node not in feasible):
                whatif_disagreements.append(f"pod {i}: decide's what-if fits {sorted(feasible)}, the scheduler "
                                            f"{outcome.node or 'nowhere'}, fit {sorted(placeable)}")
            tally.record(bound=outcome.node is not None)
            tally.categories.update(categories(body))
            if outcome.node is None:
                tally.reasons.update(parse_scheduler_message(outcome.message)[1].keys())
                _delete_pod(core_v1, created["metadata"]["name"], namespace)
    finally:
        try:
            core_v1.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        finally:
            for name in created_nodes:
                ignore_status(404, core_v1.delete_node, name)

    elapsed = time.monotonic() - started
    summary = (f"seed {SEED}, {len(node_names)} nodes in {len(BATCHES)} batches, {elapsed:.1f}s in all\n"
               f"{tally.summary()}")
    print("\n" + summary)
    assert not disagreements, (
        f"gpuscale disagrees with kube-scheduler on {len(disagreements)} of {tally.pods} pods "
        f"(seed {SEED}; rerun with GPUSCALE_DIFF_SEED={SEED}):\n"
        + "\n".join(d.render(SEED) for d in disagreements[:SHOWN])
        + (f"\n… and {len(disagreements) - SHOWN} more" if len(disagreements) > SHOWN else "")
        + f"\n{summary}"
    )
    assert not whatif_disagreements, (f"decide's what-if disagrees on {len(whatif_disagreements)} pods:\n"
                                      + "\n".join(whatif_disagreements[:SHOWN]))
    assert tally.bound >= PODS // 5 and tally.unschedulable >= PODS // 5, f"outcomes too one-sided:\n{summary}"
    missing = EXPECTED_REASONS - set(tally.reasons)
    assert not missing, f"the scheduler never gave {sorted(missing)} — the generator no longer covers them:\n{summary}"


VOLUME_PODS = int(os.environ.get("GPUSCALE_DIFF_VOLUME_PODS", "200"))
VOLUME_REASONS = {
    "node(s) didn't match PersistentVolume's node affinity",
    "node(s) had no available volume zone",
    "node(s) didn't find available persistent volumes to bind",
    "pod has unbound immediate PersistentVolumeClaims",
}


def test_volume_feasibility_matches_kube_scheduler(core_v1: client.CoreV1Api, namespace: str) -> None:
    """Random pods using PersistentVolumeClaims (bound to zonal, zone-labelled, local and CSI PVs; ReadWriteOncePod
    and ReadWriteMany; unbound WaitForFirstConsumer claims binding local PVs or finding none; an unbound Immediate
    claim; a missing claim) on kwok nodes in three zones, one with a CSINode attach limit of 1: gpuscale's verdict
    (with the storage objects listed from the API) against kube-scheduler's, pod by pod, as the main test does.
    kube-controller-manager's PV controller completes the pre-bound claims and the bindings the scheduler makes."""
    from differential import DRIVER, VOLUME_ZONE, random_volume_pod, volume_storage

    rng = random.Random(SEED + 1)
    run = uuid.uuid4().hex[:6]
    storage_v1 = client.StorageV1Api(core_v1.api_client)
    zones = {f"vol-{run}-{i}": z for i, z in enumerate(["a", "a", "b", "b", "c", None])}
    names = list(zones)
    classes, pvs, pvcs, claims = volume_storage(rng, names, namespace, run)
    tally = Tally()
    disagreements: list[Disagreement] = []
    whatif_disagreements: list[str] = []
    try:
        for name, zone in zones.items():
            body = kwok_node_body(name, labels={HOSTNAME: name, **({VOLUME_ZONE: zone} if zone else {})},
                                  annotations={"gpuscale.io/ready-after": "0s"})
            body.status.allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
            body.status.capacity = dict(body.status.allocatable)
            core_v1.create_node(body)
        storage_v1.create_csi_node({"metadata": {"name": names[0]}, "spec": {"drivers": [
            {"name": DRIVER, "nodeID": names[0], "allocatable": {"count": 1}}]}})
        for cls in classes:
            storage_v1.create_storage_class(cls)
        for pv in pvs:
            core_v1.create_persistent_volume(pv)
        for pvc in pvcs:
            core_v1.create_namespaced_persistent_volume_claim(namespace, pvc)
        prebound = {p["metadata"]["name"] for p in pvcs if "volumeName" in p["spec"]}
        wait_for(lambda: all(c.status.phase == "Bound" for c in core_v1.list_namespaced_persistent_volume_claim(
            namespace).items if c.metadata.name in prebound), 60, interval_s=0.1, desc="pre-bound claims Bound")
        wait_for(lambda: all(_is_ready(core_v1.read_node(n)) for n in names), 60, interval_s=0.05,
                 desc="volume nodes Ready")
        _wait_scheduler_in_sync(core_v1, namespace, f"vol-{run}")
        for i in range(VOLUME_PODS):
            body = random_volume_pod(rng, f"v{i:03d}", claims, ["a", "b", "c"])
            objects = list_objects(core_v1, storage=True)
            created = json.loads(core_v1.create_namespaced_pod(namespace, body, _preload_content=False).data)
            pod_name = created["metadata"]["name"]
            outcome = wait_for(lambda n=pod_name: scheduler_outcome(_read_pod(core_v1, n, namespace)),
                               DECIDE_TIMEOUT_S, interval_s=POLL_S, desc=f"kube-scheduler's verdict on {pod_name}")
            cluster, fit = gpuscale_fit(objects, created)
            disagreement = compare(i, body, outcome, cluster, fit)
            if disagreement is not None:
                disagreements.append(disagreement)
            rows, feasible = decide_feasible(cluster, fit.pod)
            placeable = set(fit.fits) & rows
            if feasible != placeable:
                whatif_disagreements.append(f"pod {i}: decide's what-if fits {sorted(feasible)}, "
                                            f"fit {sorted(placeable)}")
            tally.record(bound=outcome.node is not None)
            tally.categories.update(f"claim {c['persistentVolumeClaim']['claimName'].rsplit('-', 1)[0]}"
                                    for c in body["spec"]["volumes"])
            if outcome.node is None:
                tally.reasons.update(parse_scheduler_message(outcome.message)[1].keys())
                _delete_pod(core_v1, pod_name, namespace)
            else:  # the claims it bound are bound before the next pod is listed
                wait_for(lambda: all(c.status.phase == "Bound" or c.spec.volume_name is None
                                     for c in core_v1.list_namespaced_persistent_volume_claim(namespace).items),
                         30, interval_s=0.05, desc="claims the scheduler bound completed")
    finally:
        try:
            core_v1.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            core_v1.delete_collection_namespaced_persistent_volume_claim(namespace)
        finally:
            for pv in pvs:
                ignore_status(404, core_v1.delete_persistent_volume, pv["metadata"]["name"])
            for cls in classes:
                ignore_status(404, storage_v1.delete_storage_class, cls["metadata"]["name"])
            ignore_status(404, storage_v1.delete_csi_node, names[0])
            for name in names:
                ignore_status(404, core_v1.delete_node, name)
    summary = tally.summary()
    print("\n" + summary)
    assert not disagreements, (
        f"gpuscale disagrees with kube-scheduler on {len(disagreements)} of {tally.pods} volume pods:\n"
        + "\n".join(d.render(SEED + 1) for d in disagreements[:SHOWN]) + f"\n{summary}")
    assert not whatif_disagreements, "\n".join(whatif_disagreements[:SHOWN])
    missing = VOLUME_REASONS - set(tally.reasons)
    assert not missing, f"the scheduler never gave {sorted(missing)}:\n{summary}"
    assert tally.bound >= VOLUME_PODS // 5, summary


DRA_PODS = int(os.environ.get("GPUSCALE_DIFF_DRA_PODS", "240"))
DRA_BATCHES = {0: 8, DRA_PODS // 3: 6, 2 * DRA_PODS // 3: 6}
SLICES_SEEN_S = 2.0
"""After a batch's ResourceSlices are created, how long to let the scheduler's informers see them before the next pod
(the informers take milliseconds; no pod's verdict can show that a slice was seen, so there is no probe to poll)."""


def _dra_nodes(core_v1: client.CoreV1Api, resource_v1: client.ResourceV1Api, rng: random.Random, names: list[str],
               tally: Tally) -> None:
    from differential_dra import node_slices

    for name in names:
        body = kwok_node_body(name, labels={HOSTNAME: name}, annotations={"gpuscale.io/ready-after": "0s"})
        body.status.allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        body.status.capacity = dict(body.status.allocatable)
        core_v1.create_node(body)
    for name in names:
        shape, slices = node_slices(rng, name)
        tally.categories[f"node {shape}"] += 1
        for one in slices:
            resource_v1.create_resource_slice(one)
    wait_for(lambda: all(_is_ready(core_v1.read_node(n)) for n in names), 60, interval_s=0.05, desc="DRA nodes Ready")
    time.sleep(SLICES_SEEN_S)


def _claims_of(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaims a pod uses: those it names and those made from its templates (its status names them)."""
    named = [c["resourceClaimName"] for c in pod["spec"].get("resourceClaims", []) if c.get("resourceClaimName")]
    made = [s["resourceClaimName"] for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if s.get("resourceClaimName")]
    return named + made


@pytest.mark.xfail(dra_unsupported(), reason=NOT_YET, strict=True)
def test_dra_feasibility_matches_kube_scheduler(core_v1: client.CoreV1Api, namespace: str) -> None:
    """Random pods asking for devices through ResourceClaims (templates of their own, or claims they share), on kwok
    nodes whose ResourceSlices are shaped as NVIDIA's DRA driver publishes them (H100, A100, L4, MIG partitions, a
    second driver's NICs, nodes without slices, an incomplete pool), with DeviceClasses selecting by driver,
    attributes and capacity: gpuscale's verdict against kube-scheduler's, pod by pod, as the main test does.
    kube-controller-manager's ResourceClaim controller makes the claims from the templates; the scheduler allocates
    them (nothing prepares a device: kwok runs no kubelet)."""
    from differential_dra import device_class_body, device_classes, random_dra_pod, shared_claims

    rng = random.Random(SEED + 2)
    run = uuid.uuid4().hex[:6]
    resource_v1 = client.ResourceV1Api(core_v1.api_client)
    classes = device_classes(run)
    tally = Tally()
    disagreements: list[Disagreement] = []
    whatif_disagreements: list[str] = []
    created_nodes: list[str] = []
    try:
        for name, selectors in classes.items():
            resource_v1.create_device_class(device_class_body(name, selectors))
        shared = shared_claims(rng, list(classes), run, 4)
        for claim in shared:
            resource_v1.create_namespaced_resource_claim(namespace, claim)
        for i in range(DRA_PODS):
            batch = DRA_BATCHES.get(i)
            if batch is not None:
                names = [f"dra-{run}-{i:03d}-{j:02d}" for j in range(batch)]
                created_nodes += names
                _dra_nodes(core_v1, resource_v1, rng, names, tally)
            case = random_dra_pod(rng, f"d{i:03d}", list(classes), [c["metadata"]["name"] for c in shared], run)
            for template in case.templates:
                resource_v1.create_namespaced_resource_claim_template(namespace, template)
            objects = list_objects(core_v1, dra=True)
            created = json.loads(core_v1.create_namespaced_pod(namespace, case.pod, _preload_content=False).data)
            pod_name = created["metadata"]["name"]
            outcome = wait_for(lambda n=pod_name: scheduler_outcome(_read_pod(core_v1, n, namespace)),
                               DECIDE_TIMEOUT_S, interval_s=POLL_S, desc=f"kube-scheduler's verdict on {pod_name}")
            cluster, fit = gpuscale_fit(objects, created)
            disagreement = compare(i, case.pod, outcome, cluster, fit)
            if disagreement is not None:
                disagreements.append(disagreement)
            rows, feasible = decide_feasible(cluster, fit.pod)
            placeable = set(fit.fits) & rows
            if feasible != placeable or (outcome.node in rows and outcome.node not in feasible):
                whatif_disagreements.append(f"pod {i}: decide's what-if fits {sorted(feasible)}, the scheduler "
                                            f"{outcome.node or 'nowhere'}, fit {sorted(placeable)}")
            tally.record(bound=outcome.node is not None)
            tally.categories.update(case.categories)
            if outcome.error is not None:
                tally.reasons["plugin error: " + error_words(outcome.error)[:60]] += 1
            elif outcome.node is None:
                tally.reasons.update(parse_scheduler_message(outcome.message or "")[1].keys())
            if outcome.node is None:
                _delete_pod(core_v1, pod_name, namespace)
            else:  # its claims are allocated before the next pod is listed (the scheduler writes them before binding)
                bound = _read_pod(core_v1, pod_name, namespace)
                wait_for(lambda b=bound: all(
                    (resource_v1.read_namespaced_resource_claim(c, namespace).status or client.V1ResourceClaimStatus())
                    .allocation for c in _claims_of(b)), 30, interval_s=0.05, desc=f"{pod_name}'s claims allocated")
    finally:
        try:
            core_v1.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            resource_v1.delete_collection_namespaced_resource_claim(namespace)
        finally:
            for name in created_nodes:
                ignore_status(404, core_v1.delete_node, name)
                for suffix in ("gpu", "nic"):
                    ignore_status(404, resource_v1.delete_resource_slice, f"{name}-{suffix}")
            for name in classes:
                ignore_status(404, resource_v1.delete_device_class, name)
    summary = tally.summary()
    print("\n" + summary)
    report = os.environ.get("GPUSCALE_DIFF_DRA_REPORT")
    if report:  # every disagreement, in full, for the engineer who fixes them
        with open(report, "w", encoding="utf-8") as out:
            out.write("\n".join([*(d.render(SEED + 2) for d in disagreements), *whatif_disagreements, summary]))
    assert not disagreements, (
        f"gpuscale disagrees with kube-scheduler on {len(disagreements)} of {tally.pods} DRA pods "
        f"(seed {SEED + 2}):\n" + "\n".join(d.render(SEED + 2) for d in disagreements[:SHOWN]) + f"\n{summary}")
    assert not whatif_disagreements, "\n".join(whatif_disagreements[:SHOWN])
    assert tally.bound >= DRA_PODS // 5 and tally.unschedulable >= DRA_PODS // 5, summary
