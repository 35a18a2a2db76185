"""`WhatIf.explain` per filter (`engine.whatif.filters`): one what-if whose rows each fail one filter for the same
pod, each row's failures asserted in kube-scheduler's words, and `feasible` agreeing that exactly the passing rows
are candidates."""

from __future__ import annotations

from collections import Counter

from gpuscale.engine.whatif.filters import FILTERS
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import HostPort, Pod, depends_on_placed
from gpuscale.model.resources import GPU_MILLI
from tests.builders import make_node, make_pod, pod_term, taint

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
                                         "NodePorts", "NodeResourcesFit", "GpuDevices", "InterPodAffinity",
                                         "Unsupported"]


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
