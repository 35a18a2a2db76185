"""Helpers for test_differential.py: random kwok nodes and pods, the cluster snapshot gpuscale reads, the parse of
kube-scheduler's FailedScheduling message, and the comparison of the two verdicts.

Pods are plain dicts in API (camelCase) form, POSTed as they are and converted by `cluster_from_objects` exactly as
`kubectl get -o json` output would be. Nodes are `kwok_node_body` nodes (registered NotReady, so the not-ready taint
holds until kwok makes them Ready) with `status.allocatable`/`capacity` set at create — kwok's node-initialize stage
keeps the allocatable it is given.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness import kwok_node_body
from kubernetes import client

from gpuscale.engine.decide import decide
from gpuscale.engine.fit import PodFit, explain_fit
from gpuscale.engine.plan import Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.scheduling import is_prefilter_message
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.store import ReferenceStore
from gpuscale.kube.convert import cluster_from_objects
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import Pod

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
FOO = "example.com/foo"
HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"

POOL = "diff.gpuscale.io/pool"
TIER = "diff.gpuscale.io/tier"
GPU_MEM = "diff.gpuscale.io/gpu-mem"  # integers for Gt/Lt, plus one value that is not an integer
ZONE = "diff.gpuscale.io/zone"
K8S_ZONE = "topology.kubernetes.io/zone"
LABEL_VALUES: dict[str, list[str]] = {
    POOL: ["a", "b", "c"],
    TIER: ["gold", "silver"],
    GPU_MEM: ["16", "24", "40", "80", "lots"],
    ZONE: ["z1", "z2", "z3"],
    K8S_ZONE: ["za", "zb", "zc", "zd"],
}
TAINT_KEYS = ["diff.gpuscale.io/dedicated", GPU, "diff.gpuscale.io/spot"]
TAINT_VALUES = ["", "ml", "batch"]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]
APPS = ["a", "b", "c"]
APP = "diff.gpuscale.io/app"
REV = "diff.gpuscale.io/rev"
SPREAD_KEYS = [K8S_ZONE, K8S_ZONE, HOSTNAME, ZONE, POOL]


# --------------------------------------------------------------------------------------------------------- generators

def random_nodes(rng: random.Random, names: Sequence[str]) -> list[client.V1Node]:
    """kwok nodes (registered NotReady, Ready 0 s later) with random labels, taints, cordons and allocatable
    (extended resources included). Whatever the seed, two nodes are cordoned, two hold only 3 pods, and every taint
    effect appears with and without a value."""
    n = len(names)
    cordoned = set(rng.sample(range(n), 2))
    few_pods = set(rng.sample(range(n), 2))
    forced_taints = dict(zip(rng.sample(range(n), 2 * len(EFFECTS)),
                             [(e, v) for e in EFFECTS for v in ("", rng.choice(TAINT_VALUES[1:]))], strict=True))
    nodes = []
    for i, name in enumerate(names):
        labels = {k: rng.choice(vs) for k, vs in LABEL_VALUES.items() if rng.random() < 0.75}
        taints: dict[tuple[str, str], client.V1Taint] = {}
        if i in forced_taints:
            effect, value = forced_taints[i]
            taints[TAINT_KEYS[0], effect] = client.V1Taint(key=TAINT_KEYS[0], value=value or None, effect=effect)
        for _ in range(rng.choices([0, 1], weights=[70, 30])[0]):
            key, effect = rng.choice(TAINT_KEYS), rng.choice(EFFECTS)
            taints[key, effect] = client.V1Taint(key=key, value=rng.choice(TAINT_VALUES) or None, effect=effect)
        body = kwok_node_body(name, labels=labels, annotations={"gpuscale.io/ready-after": "0s"},
                              taints=list(taints.values()) or None)
        allocatable = {
            "cpu": rng.choice(["8", "16", "32", "48"]),
            "memory": rng.choice(["32Gi", "64Gi", "128Gi"]),
            "pods": "3" if i in few_pods else rng.choices(["6", "110"], weights=[30, 70])[0],
        }
        if i % 2 == 0:
            allocatable[GPU] = rng.choice(["1", "2", "4", "8"])
        if i % 4 == 1:
            allocatable[MIG] = rng.choice(["7", "14"])
        if i % 4 == 3:
            allocatable[FOO] = rng.choice(["1", "4"])
        body.status.allocatable = allocatable
        body.status.capacity = dict(allocatable)
        body.spec.unschedulable = True if i in cordoned else None
        nodes.append(body)
    return nodes


def _requirement(rng: random.Random, node_names: Sequence[str]) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.1:
        return {"key": HOSTNAME, "operator": rng.choice(["In", "NotIn"]),
                "values": rng.sample(list(node_names), rng.randint(1, 3))}
    if roll < 0.3:
        key = GPU_MEM if rng.random() < 0.85 else rng.choice([POOL, TIER])  # not an integer label: never matches
        return {"key": key, "operator": rng.choice(["Gt", "Lt"]), "values": [rng.choice(["20", "30", "50"])]}
    key = rng.choice(list(LABEL_VALUES))
    op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    values = LABEL_VALUES[key]
    return {"key": key, "operator": op, "values": rng.sample(values, rng.randint(1, min(2, len(values))))}


def _node_selector_terms(rng: random.Random, node_names: Sequence[str]) -> list[dict[str, Any]]:
    """1–3 ORed terms of 1–2 ANDed expressions; sometimes a `matchFields` on metadata.name (one value, as the API
    requires). When every term has a `metadata.name In` field, kube-scheduler's NodeAffinity PreFilter narrows the
    nodes it looks at and words the others differently (see test_match_fields_prefilter_wording_differs); that
    shape is kept out of the random mix so the comparison stays exact: a term without `In` fields is added."""
    terms: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        term: dict[str, Any] = {"matchExpressions": [_requirement(rng, node_names) for _ in range(rng.randint(1, 2))]}
        if rng.random() < 0.15:
            field_req = {"key": "metadata.name", "operator": rng.choice(["In", "NotIn"]),
                         "values": [rng.choice(node_names)]}
            if rng.random() < 0.4:
                term = {"matchFields": [field_req]}
            else:
                term["matchFields"] = [field_req]
        terms.append(term)
    if all(any(f["operator"] == "In" for f in t.get("matchFields", [])) for t in terms):
        terms.append({"matchExpressions": [_requirement(rng, node_names)]})
    return terms


def _pod_term(rng: random.Random, topology_keys: Sequence[str]) -> dict[str, Any]:
    if rng.random() < 0.75:
        selector: dict[str, Any] = {"matchLabels": {APP: rng.choice(APPS)}}
    else:
        op = rng.choice(["In", "NotIn", "Exists"])
        req: dict[str, Any] = {"key": APP, "operator": op}
        if op != "Exists":
            req["values"] = rng.sample(APPS, rng.randint(1, 2))
        selector = {"matchExpressions": [req]}
    return {"labelSelector": selector, "topologyKey": rng.choice(topology_keys)}


def _toleration(rng: random.Random) -> dict[str, Any]:
    effect = rng.choice([None, None, *EFFECTS])
    roll = rng.random()
    if roll < 0.08:
        tol: dict[str, Any] = {"operator": "Exists"}  # empty key: every taint (of that effect)
    elif roll < 0.2:
        tol = {"key": UNSCHEDULABLE_KEY, "operator": "Exists"}
        effect = rng.choice([None, "NoSchedule"])
    elif roll < 0.55:
        tol = {"key": rng.choice(TAINT_KEYS), "operator": "Exists"}
    else:
        tol = {"key": rng.choice(TAINT_KEYS), "value": rng.choice(TAINT_VALUES)}  # operator defaults to Equal
        if rng.random() < 0.5:
            tol["operator"] = "Equal"
    if effect is not None:
        tol["effect"] = effect
    return tol


def _resources(rng: random.Random, cpu: Sequence[str], memory: Sequence[str], extended: float) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if (c := rng.choice(cpu)) is not None:
        requests["cpu"] = c
    if (m := rng.choice(memory)) is not None:
        requests["memory"] = m
    for name, amounts, p in ((GPU, ["0", "1", "1", "2", "4", "8"], 0.3), (MIG, ["1", "2"], 0.12),
                             (FOO, ["1", "2"], 0.12)):
        if rng.random() < p * extended:
            limits[name] = rng.choice(amounts)
            if rng.random() < 0.5:
                requests[name] = limits[name]  # extended resources: request == limit, or limit alone
    res: dict[str, Any] = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return res


HOST_PORTS = [8080, 8081, 9100]
HOST_IPS = [None, None, "0.0.0.0", "127.0.0.1", "10.1.0.1"]
PROTOCOLS = [None, None, "TCP", "UDP"]


def _add_host_ports(rng: random.Random, spec: dict[str, Any]) -> None:
    """Some containers (app, sidecar or plain init: the scheduler ignores the last) get host ports from a few
    numbers, protocols and host IPs, unique within the pod as the API requires; now and then a host-network pod whose
    ports take no `hostPort` (the API server sets it to the `containerPort`)."""
    host_network = rng.random() < 0.15
    if host_network:
        spec["hostNetwork"] = True
    used: set[tuple[str, str, int]] = set()
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        if rng.random() < 0.5:
            continue
        ports = []
        for _ in range(rng.choice([1, 1, 2])):
            port, ip, protocol = rng.choice(HOST_PORTS), rng.choice(HOST_IPS), rng.choice(PROTOCOLS)
            key = (ip or "", protocol or "TCP", port)
            if host_network:
                ip = None
                key = ("", protocol or "TCP", port)
            if key in used:
                continue
            used.add(key)
            entry: dict[str, Any] = {"containerPort": port if host_network else 1000 + len(used)}
            if not host_network or rng.random() < 0.5:
                entry["hostPort"] = port
            if ip is not None:
                entry["hostIP"] = ip
            if protocol is not None:
                entry["protocol"] = protocol
            ports.append(entry)
        if ports:
            c["ports"] = ports


def _spread_constraints(rng: random.Random, app: str) -> list[dict[str, Any]]:
    """1–2 topology spread constraints over distinct keys (zone labels, hostname, a custom label): mostly
    `DoNotSchedule`, maxSkew 1–3, a selector of the pod's app (or another, an expression, `{}` or none), sometimes
    `matchLabelKeys` (the pods' revision label), `minDomains` and either inclusion policy."""
    constraints = []
    for key in dict.fromkeys(rng.sample(SPREAD_KEYS, rng.choices([1, 2], weights=[75, 25])[0])):
        when = rng.choices(["DoNotSchedule", "ScheduleAnyway"], weights=[85, 15])[0]
        c: dict[str, Any] = {"maxSkew": rng.choice([1, 1, 1, 2, 3]), "topologyKey": key, "whenUnsatisfiable": when}
        roll = rng.random()
        if roll < 0.7:
            c["labelSelector"] = {"matchLabels": {APP: app if rng.random() < 0.8 else rng.choice(APPS)}}
        elif roll < 0.85:
            c["labelSelector"] = {"matchExpressions": [{"key": APP, "operator": rng.choice(["In", "NotIn"]),
                                                        "values": rng.sample(APPS, 2)}]}
        elif roll < 0.93:
            c["labelSelector"] = {}
        if "labelSelector" in c and rng.random() < 0.3:
            c["matchLabelKeys"] = [REV]
        if when == "DoNotSchedule" and rng.random() < 0.25:
            c["minDomains"] = rng.choice([2, 3, 5, 40])
        if rng.random() < 0.3:
            c["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            c["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
        constraints.append(c)
    return constraints


def random_pod(rng: random.Random, name: str, node_names: Sequence[str]) -> dict[str, Any]:
    """A pod (API dict) with random requests (init containers and sidecars too), tolerations, nodeSelector, required
    node affinity, sometimes required pod (anti-)affinity, host ports or topology spread constraints."""
    app = rng.choice(APPS)
    cpu = [None, "100m", "250m", "0.5", "1", "1", "1500m", "2", "4"]
    memory = [None, "256Mi", "500M", "1Gi", "1.5Gi", "2G", "4Gi", "8Gi"]
    containers = [{"name": f"c{i}", "image": "registry.example/app:1",
                   "resources": _resources(rng, cpu, memory, extended=1.0 if i == 0 else 0.3)}
                  for i in range(rng.choices([1, 2, 3], weights=[60, 30, 10])[0])]
    spec: dict[str, Any] = {"containers": containers, "terminationGracePeriodSeconds": 0}
    if rng.random() < 0.3:
        inits = []
        for i in range(rng.randint(1, 2)):
            init = {"name": f"init{i}", "image": "registry.example/init:1",
                    "resources": _resources(rng, [None, "500m", "2", "4", "12"], [None, "1Gi", "8Gi", "20Gi"],
                                            extended=0.5)}
            if rng.random() < 0.3:
                init["restartPolicy"] = "Always"  # a sidecar: its requests add to the app containers'
            inits.append(init)
        spec["initContainers"] = inits
    if rng.random() < 0.25:
        if rng.random() < 0.1:
            spec["nodeSelector"] = {HOSTNAME: rng.choice(node_names)}
        else:
            key = rng.choice(list(LABEL_VALUES))
            spec["nodeSelector"] = {key: rng.choice(LABEL_VALUES[key])}
    tolerations = [_toleration(rng) for _ in range(rng.choices([0, 1, 2, 3], weights=[35, 30, 20, 15])[0])]
    if tolerations:
        spec["tolerations"] = tolerations
    affinity: dict[str, Any] = {}
    if rng.random() < 0.4:
        terms = _node_selector_terms(rng, node_names)
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    if rng.random() < 0.3:
        anti = [_pod_term(rng, [HOSTNAME] * 6 + [ZONE]) for _ in range(rng.choices([1, 2], weights=[85, 15])[0])]
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    if rng.random() < 0.05:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(rng, [HOSTNAME, ZONE])]}
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.3:
        _add_host_ports(rng, spec)
    if rng.random() < 0.3:
        spec["topologySpreadConstraints"] = _spread_constraints(rng, app)
    labels = {APP: app, REV: rng.choice(["r1", "r2"])}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def categories(pod: Mapping[str, Any]) -> set[str]:
    """What a generated pod exercises, for the coverage summary."""
    spec = pod["spec"]
    found: set[str] = set()
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        res = c.get("resources", {})
        for name in {*res.get("requests", {}), *res.get("limits", {})}:
            found.add(f"request {name}")
    if len(spec["containers"]) > 1:
        found.add("several containers")
    for init in spec.get("initContainers", []):
        found.add("sidecar" if init.get("restartPolicy") == "Always" else "init container")
    if "nodeSelector" in spec:
        found.add("nodeSelector hostname" if HOSTNAME in spec["nodeSelector"] else "nodeSelector")
    for tol in spec.get("tolerations", []):
        op = tol.get("operator", "Equal")
        key = "unschedulable" if tol.get("key") == UNSCHEDULABLE_KEY else ("key" if tol.get("key") else "empty key")
        found.add(f"toleration {op}/{key}/{tol.get('effect') or 'any effect'}")
    if spec.get("hostNetwork"):
        found.add("hostNetwork")
    for kind in ("containers", "initContainers"):
        for c in spec.get(kind, []):
            for port in c.get("ports", []):
                where = "sidecar" if c.get("restartPolicy") == "Always" else kind[:-1]
                found.add(f"host port {where}{' hostIP' if port.get('hostIP') else ''}"
                          f"{' ' + port['protocol'] if 'protocol' in port else ''}"
                          f"{'' if 'hostPort' in port else ' defaulted'}")
    affinity = spec.get("affinity", {})
    if "nodeAffinity" in affinity:
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        if len(terms) > 1:
            found.add("node affinity: several terms")
        for t in terms:
            for r in t.get("matchExpressions", []):
                found.add(f"node affinity {r['operator']}" + (" hostname" if r["key"] == HOSTNAME else ""))
            for r in t.get("matchFields", []):
                found.add(f"node affinity matchFields metadata.name {r['operator']}")
    for c in spec.get("topologySpreadConstraints", []):
        found.add(f"spread {c['whenUnsatisfiable']} {c['topologyKey']} maxSkew {c['maxSkew']}")
        selector = c.get("labelSelector")
        found.add("spread selector " + ("nil" if selector is None else "{}" if not selector else next(iter(selector))))
        found.update(f"spread {field}" + (f" {c[field]}" if field != "matchLabelKeys" else "")
                     for field in ("matchLabelKeys", "minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy")
                     if field in c)
    for kind in ("podAntiAffinity", "podAffinity"):
        for term in affinity.get(kind, {}).get("requiredDuringSchedulingIgnoredDuringExecution", []):
            found.add(f"{kind} {term['topologyKey']}"
                      + (" matchExpressions" if "matchExpressions" in term["labelSelector"] else ""))
    return found


def node_categories(node: client.V1Node) -> set[str]:
    found = {f"node taint {t.effect}" + (" with value" if t.value else " without value")
             for t in node.spec.taints or [] if not t.key.startswith("node.kubernetes.io/")}
    if node.spec.unschedulable:
        found.add("node cordoned")
    found.update(f"node allocatable {r}" for r in node.status.allocatable if r not in ("cpu", "memory"))
    return found


# ----------------------------------------------------------------------------------------------------------- snapshot

def list_objects(core_v1: client.CoreV1Api, storage: bool = False, dra: bool = False) -> list[dict[str, Any]]:
    """Every node and every pod (all namespaces) as the API returns them (JSON, as `kubectl get -o json`); with
    `storage`, the PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes too; with `dra`, the
    ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates."""
    objects: list[dict[str, Any]] = []
    calls: list[tuple[Any, str]] = [(core_v1.list_node, "Node"), (core_v1.list_pod_for_all_namespaces, "Pod")]
    if storage:
        storage_v1 = client.StorageV1Api(core_v1.api_client)
        calls += [(core_v1.list_persistent_volume, "PersistentVolume"),
                  (core_v1.list_persistent_volume_claim_for_all_namespaces, "PersistentVolumeClaim"),
                  (storage_v1.list_storage_class, "StorageClass"), (storage_v1.list_csi_node, "CSINode")]
    if dra:
        resource_v1 = client.ResourceV1Api(core_v1.api_client)
        calls += [(resource_v1.list_resource_slice, "ResourceSlice"), (resource_v1.list_device_class, "DeviceClass"),
                  (resource_v1.list_resource_claim_for_all_namespaces, "ResourceClaim"),
                  (resource_v1.list_resource_claim_template_for_all_namespaces, "ResourceClaimTemplate")]
    for call, kind in calls:
        items = json.loads(call(_preload_content=False).data)["items"]
        objects.extend({**item, "kind": kind} for item in items)
    return objects


# ------------------------------------------------------------------------------------------------- volume cases

VOLUME_ZONE = "topology.kubernetes.io/zone"
DRIVER = "csi.diff.gpuscale.io"


def volume_storage(rng: random.Random, nodes: Sequence[str], namespace: str,
                   run: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """StorageClasses, PVs and PVCs (API dicts) for the volume cases, and the claim names pods pick from: claims
    pre-bound to PVs with zone node affinity, zone labels only, or a hostname (local PV), CSI volumes for the attach
    limit, a ReadWriteOncePod claim, unbound WaitForFirstConsumer claims that bind a local PV or find none, an unbound
    Immediate claim, and a claim name that does not exist. Nothing needs a provisioner to run: a pod kube-scheduler
    binds never waits on one."""
    classes = [
        {"metadata": {"name": f"static-{run}"}, "provisioner": "kubernetes.io/no-provisioner",
         "volumeBindingMode": "WaitForFirstConsumer"},
        {"metadata": {"name": f"nowhere-{run}"}, "provisioner": DRIVER, "volumeBindingMode": "WaitForFirstConsumer",
         "allowedTopologies": [{"matchLabelExpressions": [{"key": VOLUME_ZONE, "values": ["nowhere"]}]}]},
        {"metadata": {"name": f"imm-{run}"}, "provisioner": DRIVER, "volumeBindingMode": "Immediate"},
    ]
    pvs: list[dict[str, Any]] = []
    pvcs: list[dict[str, Any]] = []
    claims: list[str] = [f"missing-{run}"]

    def pv(name: str, cls: str, claim: str | None, affinity: tuple[str, str] | None = None,
           labels: dict[str, str] | None = None, csi: bool = False,
           modes: tuple[str, ...] = ("ReadWriteOnce",)) -> None:
        spec: dict[str, Any] = {"capacity": {"storage": "10Gi"}, "accessModes": list(modes), "storageClassName": cls,
                                "persistentVolumeReclaimPolicy": "Retain"}
        spec["csi" if csi else "hostPath"] = {"driver": DRIVER, "volumeHandle": name} if csi else {"path": "/tmp"}
        if affinity is not None:
            spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": affinity[0], "operator": "In", "values": [affinity[1]]}]}]}}
            if affinity[0] == HOSTNAME:
                spec.pop("hostPath")
                spec["local"] = {"path": "/mnt/disk"}
        if claim is not None:
            spec["claimRef"] = {"namespace": namespace, "name": claim}
        pvs.append({"metadata": {"name": name, "labels": labels or {}}, "spec": spec})

    def pvc(name: str, cls: str, volume: str | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",)) -> None:
        spec: dict[str, Any] = {"accessModes": list(modes), "storageClassName": cls,
                                "resources": {"requests": {"storage": "1Gi"}}}
        if volume is not None:
            spec["volumeName"] = volume
        pvcs.append({"metadata": {"name": name}, "spec": spec})
        claims.append(name)

    static = f"static-{run}"
    for zone in ("a", "b", "c"):
        pv(f"zonal-{zone}-{run}", static, f"zonal-{zone}-{run}", affinity=(VOLUME_ZONE, zone))
        pvc(f"zonal-{zone}-{run}", static, f"zonal-{zone}-{run}")
        pv(f"labelled-{zone}-{run}", static, f"labelled-{zone}-{run}", labels={VOLUME_ZONE: zone})
        pvc(f"labelled-{zone}-{run}", static, f"labelled-{zone}-{run}")
    for i in range(3):
        pv(f"csi-{i}-{run}", static, f"csi-{i}-{run}", csi=True)
        pvc(f"csi-{i}-{run}", static, f"csi-{i}-{run}")
    pv(f"rwop-{run}", static, f"rwop-{run}", modes=("ReadWriteOncePod",))
    pvc(f"rwop-{run}", static, f"rwop-{run}", modes=("ReadWriteOncePod",))
    pv(f"shared-{run}", static, f"shared-{run}", modes=("ReadWriteMany",))
    pvc(f"shared-{run}", static, f"shared-{run}", modes=("ReadWriteMany",))
    for node in rng.sample(list(nodes), 3):  # local PVs for unbound claims to bind
        pv(f"local-{node}", static, None, affinity=(HOSTNAME, node))
    for i in range(4):
        pvc(f"wait-{i}-{run}", static)
    pvc(f"nowhere-{run}", f"nowhere-{run}")
    pvc(f"imm-{run}", f"imm-{run}")
    return classes, pvs, pvcs, claims


def random_volume_pod(rng: random.Random, name: str, claims: Sequence[str], zones: Sequence[str]) -> dict[str, Any]:
    """A pod using one or two of the claims, with a CPU request and sometimes a zone nodeSelector."""
    chosen = rng.sample(list(claims), rng.choices([1, 2], weights=[75, 25])[0])
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": rng.choice(["100m", "1", "2", "6"])}}}],
        "volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(chosen)],
    }
    if rng.random() < 0.2:
        spec["nodeSelector"] = {VOLUME_ZONE: rng.choice(list(zones))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def gpuscale_fit(objects: Sequence[Mapping[str, Any]], pod: Mapping[str, Any]) -> tuple[Cluster, PodFit]:
    cluster = cluster_from_objects([*objects, {**pod, "kind": "Pod"}])
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    (fit,) = [f for f in explain_fit(cluster) if f.pod.key == key]
    return cluster, fit


class _KeptTables(ReferenceStore):
    """The reference store, keeping the what-ifs `decide` builds (the first: its usable and upcoming rows)."""

    def __init__(self) -> None:
        self.made: list[WhatIf] = []

    def table(self, *args: Any, **kwargs: Any) -> WhatIf:
        made = super().table(*args, **kwargs)
        self.made.append(made)
        return made


def decide_feasible(cluster: Cluster, pod: Pod) -> tuple[set[str], set[str]]:
    """The rows of the what-if `decide` builds for this snapshot (no pools, so its usable nodes), and those where
    `feasible(pod)` holds: what the engine would call "fits on an existing node"."""
    store = _KeptTables()
    decide(Snapshot(cluster=cluster), (), EngineState(), Policy(), 0.0, store=store)
    assert store.made, "decide built no what-if for a snapshot with a pending pod"
    table = store.made[0]
    mask = table.feasible(pod)
    return {n.name for n in table.nodes}, {table.nodes[i].name for i in mask.nonzero()[0].tolist()}


# -------------------------------------------------------------------------------------------- the scheduler's verdict

_MESSAGE = re.compile(r"0/(\d+) nodes are available: (.*?)\.(?: preemption: .*| not found)?", re.S)
"""The tail is the PostFilter's (preemption) message; after a missing claim's PreFilter rejection kube-scheduler
v1.37.2 words it ` not found` (observed: `… persistentvolumeclaim "x" not found. not found`)."""
_PART = re.compile(r"(\d+) (.+)")
_DRA_PREFILTER = re.compile(r"request \S+: device class \S+ does not exist")
"""DynamicResources' PreFilter rejection of a claim whose request names a DeviceClass that does not exist (observed
from kube-scheduler v1.37.2: `0/8 nodes are available: request r0: device class x does not exist.`)."""


def parse_scheduler_message(message: str) -> tuple[int, dict[str, int]]:
    """`0/N nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint(s). preemption: …` →
    (N, {"Insufficient cpu": 3, "node(s) had untolerated taint(s)": 2})."""
    m = _MESSAGE.fullmatch(message.strip())
    if m is None:
        raise AssertionError(f"unexpected FailedScheduling message: {message!r}")
    reasons: Counter[str] = Counter()
    for part in m.group(2).split(", "):
        pm = _PART.fullmatch(part)
        if pm is None and (is_prefilter_message(part) or _DRA_PREFILTER.fullmatch(part)):
            # a PreFilter's rejection: said once, for every node
            reasons[part] += int(m.group(1))
            continue
        if pm is None:
            raise AssertionError(f"unexpected reason {part!r} in FailedScheduling message {message!r}")
        reasons[pm.group(2)] += int(pm.group(1))
    return int(m.group(1)), dict(reasons)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What kube-scheduler did with a pod: bound it to `node`, found it Unschedulable with `message`, or met an
    `error` running a plugin (a DRA selector failing at run time: reason SchedulerError, no node count)."""

    node: str | None = None
    message: str | None = None
    error: str | None = None


PLUGIN_ERROR = 'running "DynamicResources" filter plugin: '
_DEVICE = re.compile(r"on device [^: ]+:")
_CLAIM = re.compile(r"claim [^/ ]+/[^:, ]+")
_POOL = re.compile(r"resource pool [^ ]+ is")
_NODE = re.compile(r"^node [^: ]+: ")


def error_words(message: str) -> str:
    """A DRA plugin error without the names that change between runs and between the scheduler's attempts: the
    plugin prefix, the claim's name, and the node whose check erred first (kube-scheduler checks nodes in parallel):
    the device the failing selector met first (`class big: selector #0 on device: CEL runtime error: no such key:
    memory. consider …`), the incomplete pool an All request met, the node of a timed-out search."""
    words = _CLAIM.sub("claim", message.strip().removeprefix(PLUGIN_ERROR))
    return _NODE.sub("", _POOL.sub("resource pool is", _DEVICE.sub("on device:", words)))


def scheduler_outcome(pod: Mapping[str, Any]) -> Outcome | None:
    """The scheduler's first verdict on a pod (API dict), or None while it has not decided yet. A pod bound after an
    Unschedulable attempt (not expected: nothing frees capacity meanwhile) is reported as bound."""
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return Outcome(node=node)
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            if cond.get("reason") == "SchedulerError" and str(cond.get("message")).startswith(PLUGIN_ERROR):
                return Outcome(error=cond["message"])
            if cond.get("reason") != "Unschedulable":
                raise AssertionError(f"PodScheduled=False with reason {cond.get('reason')!r}: {cond.get('message')}")
            return Outcome(message=cond.get("message", ""))
    return None


@dataclass
class Disagreement:
    index: int
    pod: Mapping[str, Any]
    """The pod as generated (before API defaulting), for the report."""
    outcome: Outcome
    fit: PodFit
    detail: str

    def render(self, seed: int) -> str:
        spec = self.pod["spec"]
        verdict = f"bound to {self.outcome.node}" if self.outcome.node else self.outcome.message or self.outcome.error
        return (f"pod #{self.index} {self.pod['metadata']['name']} (seed {seed}): {self.detail}\n"
                f"  real scheduler: {verdict}\n"
                f"  gpuscale      : fits={list(self.fit.fits)} reasons={dict(self.fit.reasons)}\n"
                f"  gpuscale msg  : {self.fit.message}\n"
                f"  pod spec      : {json.dumps(spec, sort_keys=True)} (as generated; the API server adds "
                f"the not-ready/unreachable NoExecute tolerations)")


def compare(index: int, pod: Mapping[str, Any], outcome: Outcome, cluster: Cluster,
            fit: PodFit) -> Disagreement | None:
    """None when gpuscale agrees with the scheduler: the node it bound to is among gpuscale's fits; or, when it found
    the pod Unschedulable, gpuscale fits nowhere and gives the same node count and the same {reason: count}."""
    if outcome.node is not None:
        if outcome.node in fit.fits:
            return None
        # Why gpuscale rejects that node: explain the pod against the chosen node alone.
        node = next((n for n in cluster.nodes if n.name == outcome.node), None)
        if node is None:
            return Disagreement(index, pod, outcome, fit, f"bound to {outcome.node}, which gpuscale does not know")
        alone = replace(cluster, nodes=(node,))  # its storage and DRA objects kept
        (why,) = [f for f in explain_fit(alone) if f.pod.key == fit.pod.key]
        return Disagreement(index, pod, outcome, fit,
                            f"scheduler bound it to {outcome.node}; gpuscale says no: {dict(why.reasons)}")
    if outcome.error is not None:  # the attempt's one error, said alone (no node count), names aside
        ours = error_words(fit.message)
        if not fit.fits and ours == error_words(outcome.error) and list(fit.reasons) == [fit.message]:
            return None
        return Disagreement(index, pod, outcome, fit, f"scheduler: plugin error {error_words(outcome.error)!r}; "
                                                      f"gpuscale: fits={list(fit.fits)}, said {ours!r}")
    assert outcome.message is not None
    total, reasons = parse_scheduler_message(outcome.message)
    ours = dict(fit.reasons)
    problems = []
    if fit.fits:
        problems.append(f"gpuscale fits it on {list(fit.fits)}")
    if total != len(cluster.nodes):
        problems.append(f"scheduler saw {total} nodes, the snapshot has {len(cluster.nodes)}")
    if reasons != ours:
        diff = {r: (reasons.get(r, 0), ours.get(r, 0)) for r in sorted({*reasons, *ours})
                if reasons.get(r, 0) != ours.get(r, 0)}
        problems.append(f"reason counts differ, {{reason: (scheduler, gpuscale)}}: {diff}")
    if not problems:
        return None
    return Disagreement(index, pod, outcome, fit, "scheduler: Unschedulable; " + "; ".join(problems))


@dataclass
class Tally:
    """Coverage of a run: what the pods and nodes exercised, the outcomes and the reasons the scheduler gave."""

    pods: int = 0
    bound: int = 0
    unschedulable: int = 0
    categories: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    timeline: list[str] = field(default_factory=list)
    """One letter per pod, in order: B bound, u Unschedulable."""

    def record(self, bound: bool) -> None:
        self.pods += 1
        self.bound += bound
        self.unschedulable += not bound
        self.timeline.append("B" if bound else "u")

    def summary(self) -> str:
        lines = [f"{self.pods} pods compared: {self.bound} bound, {self.unschedulable} Unschedulable",
                 *("  " + "".join(self.timeline[i:i + 100]) for i in range(0, len(self.timeline), 100)),
                 "scheduler reasons (pods whose message had it): "
                 + ", ".join(f"{r} ×{n}" for r, n in sorted(self.reasons.items())),
                 "categories exercised: " + ", ".join(f"{c} ×{n}" for c, n in sorted(self.categories.items()))]
        return "\n".join(lines)
