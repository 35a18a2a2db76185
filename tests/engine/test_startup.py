"""A starting node is judged as its pool's template (engine.nodes): template labels where it lacks them, its cordon
and start-up / status taints ignored until it is fully started (Ready, GPUs registered, start-up taints gone); a node
that never finishes times out naming what it still lacks. Start-up and status taints are options (policy and pool)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.config import parse_config
from gpuscale.engine.decide import decide
from gpuscale.engine.nodes import NodePhase, as_it_will_be, phase, with_policy_taints
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import ConfigError
from gpuscale.model.node import Node
from gpuscale.model.pod import NodeAffinity, Pod, SchedulingConstraints
from gpuscale.model.pool import NodePool
from gpuscale.model.taints import StartupTaints, Taint, TaintEffect
from tests.fakes import T0, make_pool, node_of, owned_pod

PRODUCT = "nvidia.com/gpu.product"
A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8,
                 labels={PRODUCT: "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8"})


def _taint(key: str) -> Taint:
    return Taint(key=key, value="pending", effect=TaintEffect.NO_SCHEDULE)


def _booting(name: str = "a100-1", *, labels: bool = False, cordoned: bool = False, taints: tuple[str, ...] = (),
             gpus: bool = True, created_s: float = T0 - 60, pool: NodePool = A100) -> Node:
    node = node_of(pool, name, created_s=created_s, gpus_registered=gpus)
    kept = dict(node.labels) if labels else {k: v for k, v in node.labels.items() if not k.startswith("nvidia.com/")}
    return replace(node, labels=kept, unschedulable=cordoned, ready_since_s=created_s,
                   taints=(*node.taints, *map(_taint, taints)))


def _selecting_pod(name: str = "train-0") -> Pod:
    pod = owned_pod(name, namespace="ml", gpus=8, cpu=8000, owner="Job")
    affinity = NodeAffinity(node_selector=((PRODUCT, "NVIDIA-A100-SXM4-40GB"),))
    return replace(pod, constraints=SchedulingConstraints(affinity=affinity,
                                                          tolerations=pod.constraints.tolerations))


def _decide(nodes: tuple[Node, ...], pods: tuple[Pod, ...], pools: tuple[NodePool, ...] = (A100,),
            now: float = T0) -> Plan:
    return decide(Snapshot(cluster=Cluster(nodes=nodes, pods=pods)), pools, EngineState(), Policy(), now)


@pytest.mark.parametrize("state", [
    {"gpus": False},                                   # device plugin not registered yet
    {"cordoned": True, "gpus": False},                 # the GPU operator cordons during set-up
    {"cordoned": True, "taints": ("readiness.k8s.io/GPUReady",)},  # GPUs registered, not uncordoned yet
    {"taints": ("readiness.k8s.io/NetworkReady",)},    # the Node Readiness Controller's taint
    {"taints": ("startup-taint.cluster-autoscaler.kubernetes.io/gpu",)},
    {"taints": ("ignore-taint.cluster-autoscaler.kubernetes.io/driver",)},
    {"taints": ("nodewright.nvidia.com",)},
])
def test_a_starting_node_without_gfd_labels_takes_the_pod_that_selects_them(state: dict[str, object]) -> None:
    plan = _decide((_booting(**state),), (_selecting_pod(),))  # type: ignore[arg-type]
    assert plan.scale_up == ()
    assert {r.code for v in plan.covered for r in v.reasons} == {ReasonCode.FITS_UPCOMING}


def test_a_cordon_counts_on_a_usable_node_that_is_old_or_runs_workloads_not_on_a_young_empty_one() -> None:
    young = _booting(labels=True, cordoned=True)  # created a minute ago: an operator's set-up cordon
    assert phase(young, A100) is NodePhase.USABLE
    assert _decide((young,), (_selecting_pod(),)).scale_up == ()
    old = _booting(labels=True, cordoned=True, created_s=T0 - 86_400)  # a day old: cordoned for maintenance
    assert [s.nodes for s in _decide((old,), (_selecting_pod(),)).scale_up] == [1]
    small = owned_pod("svc", node="a100-1", cpu=500)
    assert [s.nodes for s in _decide((young,), (_selecting_pod(), small)).scale_up] == [1]  # drained by hand


def test_an_operators_cordon_with_the_taint_the_lifecycle_controller_mirrors_is_ignored_while_starting() -> None:
    node = _booting(cordoned=True, taints=("readiness.k8s.io/GPUReady",))
    node = replace(node, taints=(*node.taints, Taint(key="node.kubernetes.io/unschedulable",
                                                     effect=TaintEffect.NO_SCHEDULE)))
    assert _decide((node,), (_selecting_pod(),)).scale_up == ()


def test_the_template_fills_labels_the_node_lacks_and_never_overrides_its_own() -> None:
    node = replace(_booting(taints=("readiness.k8s.io/x",), cordoned=True), labels={PRODUCT: "NVIDIA-H100"})
    row = as_it_will_be(node, A100)
    assert row.labels[PRODUCT] == "NVIDIA-H100" and row.labels["nvidia.com/gpu.count"] == "8"
    assert not row.unschedulable and [t.key for t in row.taints] == ["nvidia.com/gpu"]


def test_a_node_that_never_finishes_times_out_naming_what_it_still_lacks() -> None:
    late = T0 + 3600
    plan = _decide((_booting(taints=("readiness.k8s.io/NetworkReady",)),), (), now=late)
    [item] = plan.timed_out
    assert item.reasons[0].code is ReasonCode.PROVISION_TIMEOUT
    assert "not fully started" in item.reasons[0].message
    assert "still lacks: start-up taints gone (readiness.k8s.io/NetworkReady)" in item.reasons[0].message
    plan = _decide((_booting(gpus=False, taints=("readiness.k8s.io/NetworkReady",)),), (), now=late)
    message = plan.timed_out[0].reasons[0].message
    assert plan.timed_out[0].reasons[0].code is ReasonCode.GPU_INIT_TIMEOUT
    assert "GPUs registered (nvidia.com/gpu 0 of 8)" in message and "readiness.k8s.io/NetworkReady" in message
    not_ready = replace(_booting(gpus=False), ready=False)
    assert "still lacks: Ready, GPUs registered" in _decide((not_ready,), (), now=late).timed_out[0].reasons[0].message


def test_a_taint_named_only_in_the_options_is_a_start_up_taint_then() -> None:
    key = "example.com/driver-pending"
    assert _decide((_booting(taints=(key,)),), (_selecting_pod(),)).scale_up != ()
    own = replace(A100, startup_taints=A100.startup_taints.merged(StartupTaints(keys=frozenset({key}))))
    assert _decide((_booting(taints=(key,), pool=own),), (_selecting_pod(),), pools=(own,)).scale_up == ()
    [merged] = with_policy_taints((A100,), StartupTaints(keys=frozenset({key}), prefixes=()))
    assert merged.startup_taints.is_startup(key) and merged.startup_taints.is_startup("readiness.k8s.io/x")
    assert with_policy_taints((A100,), StartupTaints())[0] is A100


def test_a_status_taint_is_ignored_in_the_simulation_but_does_not_make_a_node_starting() -> None:
    key = "status-taint.cluster-autoscaler.kubernetes.io/gpu-health"
    node = replace(_booting(labels=True), taints=(*A100.taints, _taint(key)))
    assert phase(node, A100) is NodePhase.USABLE
    plan = _decide((node,), (_selecting_pod(),))
    assert plan.scale_up == () and {r.code for v in plan.covered for r in v.reasons} == {ReasonCode.FITS_EXISTING}


POOL = {"name": "a100", "allocatable": {"cpu": "95", "memory": "600Gi"},
        "gpu": {"model": "NVIDIA-A100-SXM4-40GB", "count": 8}}


def test_options_in_the_config_file() -> None:
    config = parse_config({"pools": [{**POOL, "startup_taints": ["example.com/pool-only"]}],
                           "startup_taints": ["example.com/global"], "startup_taint_prefixes": ["setup.example/"],
                           "status_taints": ["example.com/health"]})
    rules = config.pools[0].startup_taints
    assert rules.is_startup("example.com/pool-only") and rules.is_startup("example.com/global")
    assert rules.is_startup("setup.example/x") and rules.is_startup("readiness.k8s.io/y")
    assert rules.is_status("example.com/health") and rules.is_status("status-taint.cluster-autoscaler.kubernetes.io/z")
    assert config.policy.startup_taints.is_startup("example.com/global")


@pytest.mark.parametrize(("raw", "where"), [
    ({"startup_taints": ["not a key"]}, "startup_taints"),
    ({"status_taint_prefixes": [""]}, "status_taint_prefixes"),
    ({"pools": [{**POOL, "startup_taints": ["bad/key/x"]}]}, "pools[0].startup_taints"),
])
def test_a_bad_taint_option_names_the_setting(raw: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"pools": [POOL], **raw})
    assert where in str(err.value)


def test_a_usable_node_whose_gfd_labels_come_late_counts_with_them_but_not_with_other_pool_labels() -> None:
    node = _booting(labels=False)  # Ready, GPUs registered, no start-up taint; GFD has not labelled it yet
    assert phase(node, A100) is NodePhase.USABLE
    plan = _decide((node,), (_selecting_pod(),))
    assert plan.scale_up == () and {r.code for v in plan.covered for r in v.reasons} == {ReasonCode.FITS_EXISTING}
    team = replace(A100, labels={**A100.labels, "team": "research"})
    pod = replace(_selecting_pod(), constraints=replace(
        _selecting_pod().constraints, affinity=NodeAffinity(node_selector=(("team", "research"),))))
    unlabelled = replace(_booting(labels=True, pool=team), labels={
        k: v for k, v in _booting(labels=True, pool=team).labels.items() if k != "team"})
    assert [s.nodes for s in _decide((unlabelled,), (pod,), pools=(team,)).scale_up] == [1]


def test_memo_and_no_memo_agree_through_a_start_up() -> None:
    memo = IncrementalStore()
    steps = [_booting(gpus=False, cordoned=True, taints=("readiness.k8s.io/GPUReady",)),
             _booting(cordoned=True, taints=("readiness.k8s.io/GPUReady",)), _booting(cordoned=True),
             _booting(labels=True, cordoned=True), _booting(labels=True), _booting(labels=True, cordoned=True),
             _booting(labels=True, cordoned=True, created_s=T0 - 86_400)]
    for node in steps:
        pods = (_selecting_pod(),)
        with_memo = decide(Snapshot(cluster=Cluster(nodes=(node,), pods=pods)), (A100,), EngineState(), Policy(),
                           T0, memo)
        assert with_memo.scale_up == _decide((node,), pods).scale_up
        assert with_memo.covered == _decide((node,), pods).covered
