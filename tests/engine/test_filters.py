"""`WhatIf.explain` per filter (`engine.whatif.filters`): one what-if whose rows each fail one filter for the same
pod, each row's failures asserted in kube-scheduler's words, and `feasible` agreeing that exactly the passing rows
are candidates."""

from __future__ import annotations

from collections import Counter

from gpuscale.engine.scheduling import Topology
from gpuscale.engine.whatif.filters import FILTERS
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import ZONE_LABEL, Node
from gpuscale.model.pod import HostPort, Pod, depends_on_placed
from gpuscale.model.resources import GPU_MILLI, Resources
from tests.builders import make_node, make_pod, pod_term, spread, taint, toleration
from tests.engine.oracle import node_failures

GPU_TAINT = taint("nvidia.com/gpu", "present", "NoSchedule")

NODES = (
    make_node("ok", labels={"pool": "a"}),
    make_node("cordoned", labels={"pool": "a"}, unschedulable=True),
    make_node("tainted", labels={"pool": "a"}, taints=(GPU_TAINT,)),
    make_node("elsewhere", labels={"pool": "b"}),
    make_node("small", cpu="1", memory="1Gi", labels={"pool": "a"}),
    make_node("full", pods=1, labels={"pool": "a"}),
    make_node("apart", labels={"pool": "a"}),
)
PLACED = (
    make_pod("filler", node="full", cpu="0", memory="0"),
    make_pod("other", node="apart", labels={"app": "apart"}, cpu="0", memory="0"),
)
POD = make_pod("p", cpu="2", memory="2Gi", node_selector={"pool": "a"}, anti_affinity=(pod_term({"app": "apart"}),),
               labels={"app": "p"})


def table_of(nodes: tuple[Node, ...], placed: tuple[Pod, ...], pod: Pod, topology: bool = True) -> WhatIf:
    return whatif_of(nodes, [n.allocatable for n in nodes], placed, pod.requests.names(), with_topology=topology)


def messages(table: WhatIf, pod: Pod, name: str) -> list[str]:
    row = table.index_of(name)
    assert row is not None
    return [f.message for f in table.explain(pod, row)]


def test_each_filter_explains_its_row_in_the_schedulers_words() -> None:
    table = table_of(NODES, PLACED, POD)
    assert messages(table, POD, "ok") == []
    assert messages(table, POD, "cordoned") == ["node(s) were unschedulable"]
    assert messages(table, POD, "tainted") == ["node(s) had untolerated taint(s)"]
    assert messages(table, POD, "elsewhere") == ["node(s) didn't match Pod's node affinity/selector"]
    assert messages(table, POD, "small") == ["Insufficient cpu", "Insufficient memory"]  # every resource reported
    assert messages(table, POD, "full") == ["Too many pods"]
    assert messages(table, POD, "apart") == ["node(s) didn't match pod anti-affinity rules"]
    feasible = table.feasible(POD)
    assert [n.name for n, ok in zip(table.nodes, feasible.tolist(), strict=True) if ok] == ["ok"]
    assert table.depends_on_placed and depends_on_placed(POD)


def test_node_name_comes_before_every_other_filter() -> None:
    pod = make_pod("p", node_name="ok", cpu="64")
    table = table_of(NODES, PLACED, pod)
    assert messages(table, pod, "cordoned") == ["node(s) didn't match the requested node name"]
    assert messages(table, pod, "ok") == ["Insufficient cpu"]


def test_existing_pods_anti_affinity_and_pod_affinity() -> None:
    guard = make_pod("guard", node="apart", anti_affinity=(pod_term({"app": "p"}),), cpu="0", memory="0")
    plain = make_pod("p", labels={"app": "p"})
    table = table_of(NODES, (guard,), plain)
    assert messages(table, plain, "apart") == ["node(s) didn't satisfy existing pods anti-affinity rules"]
    assert messages(table, plain, "ok") == []
    wants = make_pod("w", affinity=(pod_term({"app": "nowhere"}),))
    assert messages(table, wants, "ok") == ["node(s) didn't match pod affinity rules"]
    assert not table.feasible(wants).any()


def test_gpu_devices_after_resources() -> None:
    nodes = (make_node("g", gpus=2, extra={GPU_MILLI: 2000}),)
    held = make_pod("held", node="g", cpu="0", memory="0", extra={GPU_MILLI: 600})
    held_too = make_pod("held2", node="g", cpu="0", memory="0", extra={GPU_MILLI: 600})
    pod = make_pod("p", extra={GPU_MILLI: 600})
    table = table_of(nodes, (held, held_too), pod, topology=False)
    assert messages(table, pod, "g") == ["node(s) didn't have 600 gpu-milli free on one GPU device"]
    assert not table.feasible(pod).any()
    small = make_pod("s", extra={GPU_MILLI: 400})
    assert messages(table, small, "g") == [] and table.feasible(small).all()


def test_unsupported_only_where_everything_else_passes() -> None:
    pod = make_pod("p", unsupported=("host ports",))
    table = table_of(NODES, PLACED, pod, topology=False)
    assert messages(table, pod, "ok") == ["unsupported constraint: host ports"]
    assert messages(table, pod, "cordoned") == ["node(s) were unschedulable"]
    assert not table.feasible(pod).any()


def test_filters_in_the_profiles_order() -> None:
    assert [f.name for f in FILTERS] == ["NodeName, NodeUnschedulable, TaintToleration, NodeAffinity",
                                         "NodePorts", "NodeResourcesFit", "GpuDevices", "VolumeRestrictions",
                                         "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "PodTopologySpread",
                                         "InterPodAffinity", "DynamicResources", "Unsupported"]


def test_reasons_count_each_rows_explain() -> None:
    """`reasons` (each filter's vectorised `count`) equals `explain` row by row, summed, for pods failing each way."""
    pods = (POD, make_pod("n", node_name="ok", cpu="64"), make_pod("u", unsupported=("host ports",)),
            make_pod("ports", cpu="2", host_ports=(HostPort(80), HostPort(53, "UDP", "10.0.0.1"))),
            make_pod("big", cpu="7", memory="40Gi", extra={"example.com/none": 1}, node_selector={"pool": "a"}))
    placed = (*PLACED, make_pod("port", node="ok", cpu="0", memory="0", host_ports=(HostPort(80),)),
              make_pod("dns", node="small", cpu="0", memory="0", host_ports=(HostPort(53, "UDP"),)))
    for pod in pods:
        table = table_of(NODES, placed, pod)
        mask, counts = table.reasons(pod)
        assert mask.tolist() == table.feasible(pod).tolist()
        summed: Counter[str] = Counter()
        for row in range(len(table)):
            summed.update(f.message for f in table.explain(pod, row))
        assert counts == summed and sum(summed.values()) >= len(table) - int(mask.sum())


PORT_NODES = (make_node("any-ip"), make_node("one-ip"), make_node("udp"), make_node("free"),
              make_node("small", cpu="1"), make_node("tainted", taints=(GPU_TAINT,)))
PORT_PLACED = (make_pod("a", node="any-ip", host_ports=(HostPort(80),)),
               make_pod("b", node="one-ip", host_ports=(HostPort(80, host_ip="10.0.0.1"),)),
               make_pod("c", node="udp", host_ports=(HostPort(80, "UDP"),)),
               make_pod("d", node="small", host_ports=(HostPort(80),)),
               make_pod("e", node="tainted", host_ports=(HostPort(80),)))


def test_node_ports_conflict_by_port_protocol_and_host_ip() -> None:
    """HostPortInfo's rule: same port and protocol, and the same IP or either one 0.0.0.0; NodePorts runs after
    the node-only filters and before NodeResourcesFit."""
    taken = "node(s) didn't have free ports for the requested pod ports"
    wide = make_pod("w", cpu="2", host_ports=(HostPort(80),))
    table = table_of(PORT_NODES, PORT_PLACED, wide, topology=False)
    assert {n.name: messages(table, wide, n.name) for n in PORT_NODES} == {
        "any-ip": [taken], "one-ip": [taken], "udp": [], "free": [],
        "small": [taken], "tainted": ["node(s) had untolerated taint(s)"]}
    other_ip = make_pod("o", host_ports=(HostPort(80, host_ip="10.0.0.2"),))
    assert [n.name for n, ok in zip(table.nodes, table.feasible(other_ip).tolist(), strict=True) if ok] == [
        "one-ip", "udp", "free"]
    same_ip = make_pod("s", host_ports=(HostPort(80, host_ip="10.0.0.1"),))
    assert messages(table, same_ip, "one-ip") == [taken]
    no_ports = make_pod("n", cpu="2")
    assert messages(table, no_ports, "any-ip") == [] and messages(table, no_ports, "small") == ["Insufficient cpu"]
    assert not depends_on_placed(wide)


def test_ports_of_pods_placed_in_one_decision_count() -> None:
    """A placement takes its ports on the row (also on a fork, not on the original), unplacing frees them, and a
    template row appended by `extend` starts free."""
    wide = make_pod("w", host_ports=(HostPort(80),))
    table = table_of(PORT_NODES, PORT_PLACED, wide, topology=False)
    free = table.index_of("free")
    assert free is not None
    trial = table.fork()
    trial.place(free, wide)
    assert not trial.feasible(wide)[free] and not trial.fits_row(free, wide)
    assert table.feasible(wide)[free] and table.fits_row(free, wide)
    trial.unplace(free, wide)
    assert trial.feasible(wide)[free]
    grown = trial.extend([make_node("template")], [make_node("template").allocatable])
    assert grown.feasible(wide).tolist() == [False, False, True, True, False, False, True]
    bare = table_of(PORT_NODES, (), wide, topology=False)
    assert bare.ports is None
    bare.place(free, wide)
    assert not bare.feasible(wide)[free] and bare.feasible(make_pod("udp", host_ports=(HostPort(80, "UDP"),)))[free]


# ------------------------------------------------------------------------------------------------ PodTopologySpread

SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
ZONES = (
    make_node("a1", zone="a", labels={"pool": "x"}),
    make_node("a2", zone="a", labels={"pool": "x"}),
    make_node("b1", zone="b", labels={"pool": "x"}),
    make_node("c1", zone="c", labels={"pool": "y"}),
    make_node("bare", labels={"pool": "x"}),
)


def web(name: str, node: str, namespace: str = "default", deleting: bool = False,
        labels: dict[str, str] | None = None) -> Pod:
    return make_pod(name, namespace, node=node, cpu="0", memory="0", labels=labels or {"app": "web"},
                    deleting=deleting)


def spread_verdicts(pod: Pod, nodes: tuple[Node, ...], placed: tuple[Pod, ...]) -> dict[str, list[str]]:
    """Each node's messages for the pod, checked against the oracle node by node and `reasons` against `explain`."""
    table = table_of(nodes, placed, pod)
    topology = Topology(nodes, placed)
    verdicts = {}
    for row, node in enumerate(nodes):
        here = [p for p in placed if p.node_name == node.name]
        used = sum((p.requests for p in here), Resources())
        failures = table.explain(pod, row)
        assert failures == node_failures(pod, node, used, len(here), topology, here, (nodes, placed)), node.name
        verdicts[node.name] = [f.message for f in failures]
    mask, counts = table.reasons(pod)
    assert [n.name for n, ok in zip(nodes, mask.tolist(), strict=True) if ok] == [
        n for n, m in verdicts.items() if not m]
    assert counts == Counter(m for ms in verdicts.values() for m in ms)
    return verdicts


def test_spread_skew_counts_matching_pods_per_zone_against_the_global_minimum() -> None:
    placed = (web("w1", "a1"), web("w2", "a2"), web("w3", "b1"))
    pod = make_pod("p", labels={"app": "web"}, spread=(spread(ZONE_LABEL, {"app": "web"}),))
    # a: 2 + 1 - 0 > 1, b: 1 + 1 - 0 > 1, c (empty) is the minimum; "bare" has no zone label
    assert spread_verdicts(pod, ZONES, placed) == {"a1": [SKEW], "a2": [SKEW], "b1": [SKEW], "c1": [],
                                                   "bare": [MISSING]}
    wide = make_pod("p", labels={"app": "web"}, spread=(spread(ZONE_LABEL, {"app": "web"}, max_skew=2),))
    assert spread_verdicts(wide, ZONES, placed) == {"a1": [SKEW], "a2": [SKEW], "b1": [], "c1": [],
                                                    "bare": [MISSING]}
    assert depends_on_placed(pod)


def test_spread_counts_only_selected_pods_of_the_namespace_that_are_not_terminating() -> None:
    placed = (web("w1", "a1"), web("w2", "a2", namespace="other"), web("w3", "a2", deleting=True),
              web("w4", "a1", labels={"app": "db"}), web("w5", "b1"), web("w6", "c1"))
    pod = make_pod("p", labels={"app": "web"}, spread=(spread(ZONE_LABEL, {"app": "web"}),))
    assert spread_verdicts(pod, ZONES, placed)["a1"] == []  # a counts 1, as b and c do
    # a pod its own selector does not match adds nothing to the count (self-match 0)
    other = make_pod("q", labels={"app": "db"}, spread=(spread(ZONE_LABEL, {"app": "web"}, max_skew=1),))
    assert spread_verdicts(other, ZONES, (*placed, web("w7", "a1")))["a1"] == []  # 2 + 0 - 1 ≤ 1
    # a nil selector counts nothing and the pod does not match it; {} counts nothing but the pod matches it
    nil = make_pod("n", labels={"app": "web"}, spread=(spread(ZONE_LABEL, None),))
    assert spread_verdicts(nil, ZONES, placed)["a1"] == []


def test_spread_min_domains_makes_the_minimum_zero_below_that_many_domains() -> None:
    placed = (web("w1", "a1"), web("w2", "b1"), web("w3", "c1"))
    for min_domains, verdict in ((3, []), (4, [SKEW])):
        pod = make_pod("p", labels={"app": "web"},
                       spread=(spread(ZONE_LABEL, {"app": "web"}, min_domains=min_domains),))
        verdicts = spread_verdicts(pod, ZONES, placed)
        assert verdicts["a1"] == verdicts["b1"] == verdicts["c1"] == verdict, min_domains


def test_spread_node_affinity_policy_honor_leaves_out_nodes_the_pod_may_not_use() -> None:
    placed = (web("w1", "a1"), web("w2", "b1"))  # c (pool y) is empty
    for policy, verdict in (("Honor", []), ("Ignore", [SKEW])):
        pod = make_pod("p", labels={"app": "web"}, node_selector={"pool": "x"},
                       spread=(spread(ZONE_LABEL, {"app": "web"}, affinity_policy=policy),))
        verdicts = spread_verdicts(pod, ZONES, placed)
        assert verdicts["a2"] == verdict, policy
        assert verdicts["c1"] == ["node(s) didn't match Pod's node affinity/selector"]


def test_spread_node_taints_policy_honor_leaves_out_nodes_whose_taints_the_pod_does_not_tolerate() -> None:
    tainted = (*ZONES[:3], make_node("c1", zone="c", taints=(GPU_TAINT,)))
    placed = (web("w1", "a1"), web("w2", "b1"))
    for policy, verdict in (("Ignore", [SKEW]), ("Honor", [])):
        pod = make_pod("p", labels={"app": "web"},
                       spread=(spread(ZONE_LABEL, {"app": "web"}, taints_policy=policy),))
        assert spread_verdicts(pod, tainted, placed)["a2"] == verdict, policy
    tolerant = make_pod("p", labels={"app": "web"}, tolerations=(toleration("nvidia.com/gpu", "Exists"),),
                        spread=(spread(ZONE_LABEL, {"app": "web"}, taints_policy="Honor"),))
    assert spread_verdicts(tolerant, tainted, placed)["a2"] == [SKEW]  # tolerated: c counts (empty), min 0


def test_spread_eligible_nodes_carry_every_constraints_key() -> None:
    nodes = (make_node("a1", zone="a", labels={"rack": "r1"}), make_node("b1", zone="b", labels={"rack": "r2"}),
             make_node("c1", zone="c"))
    placed = (web("w1", "a1"), web("w2", "b1"))
    pod = make_pod("p", labels={"app": "web"},
                   spread=(spread(ZONE_LABEL, {"app": "web"}), spread("rack", {"app": "web"}, max_skew=5)))
    # c1 lacks "rack": it is no domain of the zone constraint either (min stays 1), and fails on the missing label
    assert spread_verdicts(pod, nodes, placed) == {"a1": [], "b1": [], "c1": [MISSING]}


def test_spread_match_label_keys_count_only_the_pods_own_revision() -> None:
    from gpuscale.kube.convert import pod_from_k8s
    from tests.builders import k8s_pod
    old = {"app": "web", "pod-template-hash": "old"}
    placed = (web("w1", "a1", labels=old), web("w2", "a2", labels=old))
    raw = k8s_pod("p", labels={"app": "web", "pod-template-hash": "new"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"]}])
    pod = pod_from_k8s(raw)
    assert spread_verdicts(pod, ZONES, placed)["a1"] == []  # the old revision's pods do not count
    raw["spec"]["topologySpreadConstraints"][0]["matchLabelKeys"] = []
    assert spread_verdicts(pod_from_k8s(raw), ZONES, placed)["a1"] == [SKEW]


def test_spread_pods_placed_in_one_what_if_count_and_templates_join_when_used() -> None:
    nodes = (make_node("a1", zone="a"), make_node("b1", zone="b"))
    pods = [make_pod(f"p{i}", labels={"app": "web"}, spread=(spread(ZONE_LABEL, {"app": "web"}),))
            for i in range(3)]
    table = table_of(nodes, (), pods[0])
    table.place(0, pods[0])  # a: 1, b: 0
    assert table.feasible(pods[1]).tolist() == [False, True]
    table.place(1, pods[1])
    assert table.feasible(pods[2]).tolist() == [True, True]
    # hostname spread: an unused template is no domain until a pod lands on it (Cluster Autoscaler adds nodes to its
    # snapshot one at a time), so a second pod may join the first on the first template
    host = [make_pod(f"h{i}", labels={"app": "h"}, spread=(spread("kubernetes.io/hostname", {"app": "h"}),))
            for i in range(3)]
    base = table_of(nodes, (web("x1", "a1", labels={"app": "h"}), web("x2", "b1", labels={"app": "h"})), host[0])
    grown = base.extend([make_node("t0", zone="a"), make_node("t1", zone="a")], [nodes[0].allocatable] * 2)
    assert grown.feasible(host[0]).tolist() == [True, True, True, True]
    grown.place(2, host[0])
    assert grown.feasible(host[1]).tolist() == [True, True, True, True]  # t0: 1 + 1 - 1 (t1 not joined yet)
    grown.place(2, host[1])
    assert grown.feasible(host[2]).tolist() == [True, True, False, True]  # t1 judged as joined: its own domain, 0
    assert [f.message for f in grown.explain(host[2], 2)] == [SKEW]
    assert [f.message for f in grown.fork().explain(host[2], 3)] == []
# ---------------------------------------------------------------------------------------------------------- volumes

ZONE = "topology.kubernetes.io/zone"


def _node_obj(name: str, zone: str | None = "a", cpu: str = "8") -> dict[str, object]:
    labels = {"kubernetes.io/hostname": name, **({ZONE: zone} if zone else {})}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


def _pod_obj(name: str, *claims: str, node: str | None = None, ephemeral: dict[str, object] | None = None,
             cpu: str = "1") -> dict[str, object]:
    volumes: list[dict[str, object]] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                                        for i, c in enumerate(claims)]
    if ephemeral is not None:
        volumes.append({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": ephemeral}}})
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], "volumes": volumes,
                     **({"nodeName": node} if node else {})},
            **({"status": {"phase": "Running"}} if node else {})}


def _pv(name: str, zone: str | None = None, hostname: str | None = None, claim: str | None = None,
        cls: str = "fast", phase: str = "Available", size: str = "10Gi", driver: str | None = None,
        modes: tuple[str, ...] = ("ReadWriteOnce",), zone_label: bool = False) -> dict[str, object]:
    spec: dict[str, object] = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls}
    key, value = (ZONE, zone) if zone else ("kubernetes.io/hostname", hostname)
    if value:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}}
    if claim:
        spec["claimRef"] = {"namespace": "default", "name": claim}
    if driver:
        spec["csi"] = {"driver": driver, "volumeHandle": f"h-{name}"}
    labels = {ZONE: zone} if zone and zone_label else {}
    return {"kind": "PersistentVolume", "metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"phase": phase}}


def _pvc(name: str, cls: str | None = "fast", volume: str | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",),
         size: str = "1Gi") -> dict[str, object]:
    spec: dict[str, object] = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if cls is not None:
        spec["storageClassName"] = cls
    annotations = {}
    if volume:
        spec["volumeName"] = volume
        annotations = {"pv.kubernetes.io/bind-completed": "yes"}
    return {"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default",
                                                         "annotations": annotations}, "spec": spec}


def _class(name: str, wffc: bool = True, zones: tuple[str, ...] = (), provisioner: str = "csi.example.com",
           default: bool = False) -> dict[str, object]:
    obj: dict[str, object] = {"kind": "StorageClass", "metadata": {"name": name}, "provisioner": provisioner,
                              "volumeBindingMode": "WaitForFirstConsumer" if wffc else "Immediate"}
    if zones:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": list(zones)}]}]
    if default:
        obj["metadata"] = {"name": name, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}
    return obj


def _fit(*objects: dict[str, object]) -> tuple[tuple[str, ...], dict[str, int], str]:
    from gpuscale.engine.fit import explain_fit
    from gpuscale.kube.convert import cluster_from_objects

    cluster = cluster_from_objects(objects)
    fits = explain_fit(cluster)
    (fit,) = [f for f in fits if f.pod.name == "p"]
    _agrees_with_oracle(cluster, fit.pod)
    return fit.fits, dict(fit.reasons), fit.message


def _agrees_with_oracle(cluster: Cluster, pod: Pod) -> None:
    """Each node's `explain` equals the plain per-node oracle's (tests/engine/oracle.py) with the storage objects."""
    placed = tuple(p for p in cluster.pods if p.consumes_capacity())
    table = whatif_of(cluster.nodes, [n.allocatable for n in cluster.nodes], placed, pod.requests.names(),
                      storage=cluster.storage)
    for row, node in enumerate(cluster.nodes):
        here = [p for p in placed if p.node_name == node.name]
        used = sum((p.requests for p in here), Resources())
        assert table.explain(pod, row) == node_failures(pod, node, used, len(here), None, here,
                                                        (cluster.nodes, placed), cluster.storage), node.name


ZONED = (_node_obj("a1", "a"), _node_obj("b1", "b"), _node_obj("c1", "c", cpu="0"))


def test_bound_pv_node_affinity_and_zone() -> None:
    fits, reasons, _ = _fit(*ZONED, _class("fast"), _pv("pv-b", zone="b", claim="data"), _pvc("data", volume="pv-b"),
                            _pod_obj("p", "data"))
    assert fits == ("b1",)
    assert reasons == {"node(s) didn't match PersistentVolume's node affinity": 1, "Insufficient cpu": 1}
    # a zone label and no node affinity: VolumeZone words it
    pv = _pv("pv-b", claim="data", zone="b", zone_label=True)
    pv["spec"].pop("nodeAffinity")  # type: ignore[attr-defined]
    fits, reasons, _ = _fit(*ZONED, _class("fast"), pv, _pvc("data", volume="pv-b"), _pod_obj("p", "data"))
    assert fits == ("b1",) and reasons == {"node(s) had no available volume zone": 1, "Insufficient cpu": 1}


def test_prefilter_rejections_fail_every_node_once() -> None:
    fits, reasons, message = _fit(*ZONED, _pod_obj("p", "nothere"))
    assert not fits and reasons == {'persistentvolumeclaim "nothere" not found': 3}
    assert message == '0/3 nodes are available: persistentvolumeclaim "nothere" not found.'
    _, reasons, message = _fit(*ZONED, _class("slow", wffc=False), _pvc("data", cls="slow"), _pod_obj("p", "data"))
    assert message == "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    _, reasons, _ = _fit(*ZONED, _pvc("data", cls="missing-class"), _pod_obj("p", "data"))
    assert reasons == {"pod has unbound immediate PersistentVolumeClaims": 3}
    _, reasons, _ = _fit(*ZONED, _class("fast"), _pvc("data", volume="gone"), _pod_obj("p", "data"))
    assert reasons == {'persistentvolume "gone" not found': 3}


def test_wait_for_first_consumer_claims() -> None:
    # dynamic provisioning within the class's allowed zones
    fits, reasons, _ = _fit(*ZONED, _class("fast", zones=("b", "c")), _pvc("data"), _pod_obj("p", "data"))
    assert fits == ("b1",)
    assert reasons == {"node(s) didn't find available persistent volumes to bind": 1, "Insufficient cpu": 1}
    # no provisioner: only an available PV of the class binds (a local PV pins its node)
    fits, reasons, _ = _fit(*ZONED, _class("fast", provisioner="kubernetes.io/no-provisioner"),
                            _pv("local", hostname="a1"), _pvc("data"), _pod_obj("p", "data"))
    assert fits == ("a1",)
    assert reasons == {"node(s) didn't find available persistent volumes to bind": 1, "Insufficient cpu": 1}
    # too small, wrong access mode, not Available: no match
    for pv in (_pv("local", hostname="a1", size="512Mi"), _pv("local", hostname="a1", modes=("ReadOnlyMany",)),
               _pv("local", hostname="a1", phase="Pending")):
        fits, _, _ = _fit(*ZONED, _class("fast", provisioner="kubernetes.io/no-provisioner"), pv, _pvc("data"),
                          _pod_obj("p", "data"))
        assert fits == ()


def test_generic_ephemeral_volume_is_a_claim_of_its_class() -> None:
    template = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    fits, _, _ = _fit(*ZONED, _class("fast", zones=("a",), default=True), _pod_obj("p", ephemeral=template))
    assert fits == ("a1",)
    fits, _, message = _fit(*ZONED, _class("fast", zones=("a",)), _pod_obj("p", ephemeral=template))
    assert message == "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    fits, _, _ = _fit(*ZONED, _class("fast", zones=("a",)), _class("any", zones=()),
                      _pod_obj("p", ephemeral={**template, "storageClassName": "any"}))
    assert fits == ("a1", "b1")


def test_read_write_once_pod_and_many_readers() -> None:
    objects = (*ZONED, _class("fast"), _pv("pv", claim="data", modes=("ReadWriteOncePod", "ReadWriteMany")),
               _pod_obj("holder", "data", node="a1"))
    fits, reasons, _ = _fit(*objects, _pvc("data", volume="pv", modes=("ReadWriteOncePod",)), _pod_obj("p", "data"))
    assert not fits
    rwop = ("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by "
            "another pod")
    assert reasons == {rwop: 2, "Insufficient cpu": 1}
    fits, _, _ = _fit(*objects, _pvc("data", volume="pv", modes=("ReadWriteMany",)), _pod_obj("p", "data"))
    assert fits == ("a1", "b1")


def test_csi_attach_limits_count_volumes_already_there() -> None:
    csinode = {"kind": "CSINode", "metadata": {"name": "a1"},
               "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "a1", "allocatable": {"count": 1}}]}}
    objects = (*ZONED, csinode, _class("fast"), _pv("one", claim="one", driver="csi.example.com"),
               _pv("two", claim="two", driver="csi.example.com"), _pvc("one", volume="one"), _pvc("two", volume="two"),
               _pod_obj("holder", "one", node="a1"))
    fits, reasons, _ = _fit(*objects, _pod_obj("p", "two"))
    assert fits == ("b1",) and reasons == {"node(s) exceed max volume count": 1, "Insufficient cpu": 1}
    fits, _, _ = _fit(*objects, _pod_obj("p", "one"))  # the volume already attached there counts once
    assert fits == ("a1", "b1")


def test_placed_pods_claims_in_one_decision() -> None:
    """A ReadWriteOncePod claim placed in a what-if is in use for the next pod; a provisioned WFFC claim keeps
    the later pods that share it on its node."""
    from gpuscale.kube.convert import cluster_from_objects

    cluster = cluster_from_objects([*ZONED[:2], _class("fast"), _pvc("rwop", modes=("ReadWriteOncePod",)),
                                    _pod_obj("p", "rwop"), _pod_obj("q", "rwop")])
    table = whatif_of(cluster.nodes, [n.allocatable for n in cluster.nodes], (), {"cpu"}, storage=cluster.storage)
    p, q = cluster.pods
    assert table.feasible(q).tolist() == [True, True]
    table.place(1, p)
    assert table.feasible(q).tolist() == [False, False]
    assert [f.message for f in table.explain(q, 0)] == [
        "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by "
        "another pod"]
    table.unplace(1, p)
    assert table.feasible(q).tolist() == [True, True]
    shared = cluster_from_objects([*ZONED[:2], _class("fast"), _pvc("data"), _pod_obj("p", "data"),
                                   _pod_obj("q", "data")])
    table = whatif_of(shared.nodes, [n.allocatable for n in shared.nodes], (), {"cpu"}, storage=shared.storage)
    fork = table.fork()
    fork.place(1, shared.pods[0])
    assert fork.feasible(shared.pods[1]).tolist() == [False, True]
    assert table.feasible(shared.pods[1]).tolist() == [True, True]


def test_volume_counts_equal_each_rows_why() -> None:
    from gpuscale.engine.whatif.filters import _count_each
    from gpuscale.kube.convert import cluster_from_objects

    cluster = cluster_from_objects([*ZONED, _class("fast"), _pv("pv-b", zone="b", claim="data"),
                                    _pvc("data", volume="pv-b"), _pod_obj("p", "data")])
    table = whatif_of(cluster.nodes, [n.allocatable for n in cluster.nodes], (), {"cpu"}, storage=cluster.storage)
    (pod,) = cluster.pods
    for f in FILTERS:
        rejected = [i for i in range(len(table)) if f.why(pod, table, i)]
        if rejected:
            assert f.count(pod, table, rejected) == _count_each(f, pod, table, rejected)


def test_dynamic_resources_words_from_a_dump() -> None:
    """A pod whose claim template asks a device only node b publishes: b takes it, a says kube-scheduler's words,
    and `reasons` counts what each row's `why` says."""
    from gpuscale.engine.fit import explain_fit
    from gpuscale.kube.convert import cluster_from_objects
    from tests.builders import k8s_node, k8s_pod

    slice_b = {"kind": "ResourceSlice", "metadata": {"name": "b-gpus"}, "spec": {
        "driver": "gpu.example.com", "pool": {"name": "b", "generation": 0, "resourceSliceCount": 1},
        "nodeName": "b", "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "H100"}}}]}}
    cls = {"kind": "DeviceClass", "metadata": {"name": "gpu"}, "spec": {}}
    template = {"kind": "ResourceClaimTemplate", "metadata": {"name": "h100", "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu", "selectors": [
                        {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "H100"'}}]}}]}}}}
    pod = k8s_pod("p", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "h100"}])
    cluster = cluster_from_objects([k8s_node("a"), k8s_node("b"), slice_b, cls, template, pod])
    (fit,) = explain_fit(cluster)
    assert fit.fits == ("b",) and fit.reasons == {"cannot allocate all claims": 1}
