"""engine.health and the time-out rules: a node that has been usable, or runs workloads, is never timed out (a
time-out deletes with no drain); a usable node short of GPUs is degraded, counts with its real capacity and never
backs its pool off."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuscale.engine.decide import decide
from gpuscale.engine.nodes import degraded_gpus, gpus_registered
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import OwnerRef, Pod
from gpuscale.model.resources import NVIDIA_GPU, Resources
from tests.fakes import T0, make_pool, node_of, owned_pod

A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8)
LONG_AGO = T0 - 200_000


def _with_gpus(node: Node, gpus: int, *, ready: bool = True) -> Node:
    amounts = {**dict(node.allocatable.items), NVIDIA_GPU: gpus}
    return replace(node, allocatable=Resources.of(amounts), ready=ready, ready_since_s=LONG_AGO)


def _node(gpus: int, *, ready: bool = True) -> Node:
    return _with_gpus(node_of(A100, "a100-1", created_s=LONG_AGO), gpus, ready=ready)


def _decide(nodes: Sequence[Node], pods: Sequence[Pod], memo: IncrementalStore | None = None) -> Plan:
    cluster = Cluster(nodes=tuple(nodes), pods=tuple(pods))
    return decide(Snapshot(cluster=cluster), [A100], EngineState(), Policy(), T0, memo)


def _training(name: str = "train-0", node: str | None = "a100-1", gpus: int = 7) -> Pod:
    return owned_pod(name, namespace="ml", node=node, gpus=gpus, cpu=8000, owner="Job")


def test_a_node_advertising_some_of_its_gpus_has_registered_them_and_is_degraded_not_starting() -> None:
    node = _node(7)
    assert gpus_registered(node, A100)
    assert dict(degraded_gpus(node, A100).items) == {NVIDIA_GPU: 1}
    assert not gpus_registered(_node(0), A100)
    assert not degraded_gpus(_node(0), A100) and not degraded_gpus(_node(8), A100)


def test_the_xid79_node_under_a_training_job_is_not_timed_out_and_the_pool_is_not_backed_off() -> None:
    for memo in (None, IncrementalStore()):
        plan = _decide([_node(7)], [_training()], memo)
        assert plan.timed_out == ()
        assert plan.state.backoff == {}
        assert [v.node for v in plan.degraded] == ["a100-1"]
        assert plan.degraded[0].reasons[0].code is ReasonCode.DEGRADED
        assert "nvidia.com/gpu 7 of 8" in plan.degraded[0].reasons[0].message


def test_a_degraded_node_counts_its_real_capacity_so_a_pod_wanting_its_lost_gpu_scales_up() -> None:
    pending = _training("train-1", node=None, gpus=1)
    plan = _decide([_node(7)], [_training(), pending])
    assert [(s.pool, s.pods) for s in plan.scale_up] == [("gpu-training-a100", ("ml/train-1",))]


def test_a_ready_node_whose_gpus_are_all_gone_under_its_pods_is_degraded_with_its_real_capacity() -> None:
    pending = _training("train-1", node=None, gpus=1)
    for memo in (None, IncrementalStore()):
        plan = _decide([_node(0)], [_training(gpus=0), pending], memo)
        assert plan.timed_out == () and plan.state.backoff == {}
        assert "GPUs gone while 1 pod(s) run there" in plan.degraded[0].reasons[0].message
        assert [s.pods for s in plan.scale_up] == [("ml/train-1",)]  # its 8 template GPUs are not counted


def test_a_node_that_went_not_ready_under_its_pods_is_not_timed_out() -> None:
    plan = _decide([_node(8, ready=False)], [_training()])
    assert plan.timed_out == ()
    assert "not Ready while 1 pod(s) run there" in plan.degraded[0].reasons[0].message


def test_daemonset_and_mirror_pods_do_not_make_a_node_usable_so_a_stuck_starting_node_still_times_out() -> None:
    daemon = replace(owned_pod("dcgm", namespace="gpu-operator", node="a100-1"),
                     owner=OwnerRef(kind="DaemonSet", name="dcgm"))
    mirror = replace(owned_pod("kube-proxy", namespace="kube-system", node="a100-1", owner=None),
                     annotations={"kubernetes.io/config.mirror": "x"})
    done = replace(_training(), phase=type(_training().phase)("Succeeded"))
    plan = _decide([_node(0)], [daemon, mirror, done])
    assert [(t.node, t.reasons[0].code) for t in plan.timed_out] == [("a100-1", ReasonCode.GPU_INIT_TIMEOUT)]
    assert plan.degraded == ()


def test_memo_and_no_memo_agree_as_a_ready_node_gains_and_loses_workload() -> None:
    memo = IncrementalStore()
    node = _node(0)
    pending = _training("train-1", node=None, gpus=1)
    for pods in ([pending], [_training(gpus=0), pending], [pending], [_training(gpus=0), pending]):
        with_memo, without = _decide([node], pods, memo), _decide([node], pods)
        assert with_memo.scale_up == without.scale_up and with_memo.covered == without.covered
        assert with_memo.timed_out == without.timed_out and with_memo.degraded == without.degraded
