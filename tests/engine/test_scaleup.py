"""Scale-up rules, one test each: which pool, how many nodes, and why not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.engine.decide import decide
from gpuscale.engine.fit import POOL_FITS, pool_verdict
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Plan, Snapshot, UpcomingNode
from gpuscale.engine.policy import Buffer, ExpanderName, Limits, Policy, PriorityRule
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.model.cluster import Cluster, PodGroupSpec
from gpuscale.model.node import POOL_LABEL, ZONE_LABEL, Node
from gpuscale.model.pod import HostPort, Pod, PodGroupRef, PodPhase
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.report.plan import plan_json
from tests.builders import make_pod, req, resources, spread, taint, term, toleration

NOW = 10_000.0
GPU_TAINT = taint("nvidia.com/gpu", "present")
GPU_TOL = toleration("nvidia.com/gpu", "Exists")
A100 = {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
T4 = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}


def pool(name: str, *, cpu: str = "16", memory: str = "64Gi", gpus: int = 0, labels: dict[str, str] | None = None,
         tainted: bool | None = None, price: float = 1.0, max_size: int = 10, model: str | None = None,
         zones: tuple[str, ...] = ()) -> NodePool:
    return NodePool(name=name, allocatable=resources(cpu, memory, gpus, {"pods": 110}), labels=labels or {},
                    taints=(GPU_TAINT,) if (gpus if tainted is None else tainted) else (),
                    gpu_model=model or (f"model-{name}" if gpus else None), gpus_per_node=gpus,
                    usd_per_hour=price, max_size=max_size, zones=zones)


SEED_POOLS = (
    pool("cpu-general", price=0.835),
    pool("gpu-training-a100", cpu="95", memory="630Gi", gpus=8, labels=A100, price=29.39, max_size=8,
         model="nvidia-tesla-a100"),
    pool("gpu-inference-t4", cpu="4", memory="12Gi", gpus=1, labels=T4, price=0.54, model="nvidia-tesla-t4"),
)


def pending(name: str = "p", *, created: float = 0.0, **kwargs: object) -> Pod:
    pod = make_pod(name, **kwargs)  # type: ignore[arg-type]
    return replace(pod, unschedulable=True, created_s=created)


def training_pod(name: str = "train-0", gpus: int = 1, **kwargs: object) -> Pod:
    return pending(name, cpu="8", memory="60Gi", gpus=gpus, tolerations=(GPU_TOL,), node_selector=A100, **kwargs)


def pool_node(p: NodePool, name: str, **changes: object) -> Node:
    node = replace(p.template(name), created_s=NOW - 60)
    return replace(node, **changes)  # type: ignore[arg-type]


def run(pods: tuple[Pod, ...], nodes: tuple[Node, ...] = (), pools: tuple[NodePool, ...] = SEED_POOLS,
        policy: Policy | None = None, state: EngineState | None = None, now: float = NOW,
        upcoming: tuple[UpcomingNode, ...] = (), groups: tuple[PodGroupSpec, ...] = ()) -> Plan:
    snapshot = Snapshot(cluster=Cluster(nodes=nodes, pods=pods, pod_groups=groups), upcoming=upcoming)
    return decide(snapshot, pools, state or EngineState(), policy or Policy(), now)


def scale_ups(plan: Plan) -> dict[str, int]:
    return {s.pool: s.nodes for s in plan.scale_up}


def codes(verdicts: tuple[object, ...]) -> set[ReasonCode]:
    return {r.code for v in verdicts for r in v.reasons}  # type: ignore[attr-defined]


def test_a100_training_pod_scales_exactly_one_a100_node() -> None:
    plan = run((training_pod(),))
    assert scale_ups(plan) == {"gpu-training-a100": 1}
    assert plan.scale_up[0].pods == ("default/train-0",)


def test_ready_a100_node_without_gpus_yet_absorbs_pending_gpu_pods() -> None:
    a100 = SEED_POOLS[1]
    starting = pool_node(a100, "a100-new", allocatable=a100.allocatable - Resources.of({"nvidia.com/gpu": 8}))
    pods = tuple(training_pod(f"train-{i}") for i in range(4))
    plan = run(pods, nodes=(starting,))
    assert plan.scale_up == ()
    assert codes(plan.covered) == {ReasonCode.FITS_UPCOMING}
    assert len(plan.covered) == 4


def test_gpu_node_detected_without_any_gpu_label_through_its_pool() -> None:
    a100 = SEED_POOLS[1]
    starting = Node(name="bare", allocatable=resources("95", "630Gi", 0, {"pods": 110}), labels={POOL_LABEL: a100.name,
                    **A100}, taints=(GPU_TAINT,), created_s=NOW - 60)
    plan = run((training_pod(),), nodes=(starting,))
    assert plan.scale_up == () and codes(plan.covered) == {ReasonCode.FITS_UPCOMING}


def test_registered_not_ready_node_and_requested_node_count_as_upcoming() -> None:
    a100 = SEED_POOLS[1]
    not_ready = pool_node(a100, "a100-boot", ready=False)
    assert run((training_pod(),), nodes=(not_ready,)).scale_up == ()
    requested = UpcomingNode(pool=a100.name, request_id="req-1", requested_s=NOW - 60)
    assert run((training_pod(),), upcoming=(requested,)).scale_up == ()


def test_starting_node_with_the_not_ready_taint_still_absorbs_the_pod() -> None:
    """Against the real control plane a starting node carries node.kubernetes.io/not-ready:NoSchedule; it must not
    count against the pod the node was ordered for."""
    a100 = SEED_POOLS[1]
    not_ready = Taint(key="node.kubernetes.io/not-ready", effect=TaintEffect.NO_SCHEDULE)
    starting = pool_node(a100, "a100-boot", ready=False, taints=(*a100.taints, not_ready))
    plan = run((training_pod(),), nodes=(starting,))
    assert plan.scale_up == () and codes(plan.covered) == {ReasonCode.FITS_UPCOMING}
    # Ready with its GPUs but a start-up taint left: not fully started, so it still counts as its template
    ready_but_tainted = pool_node(a100, "a100-odd", taints=(*a100.taints, not_ready))
    plan = run((training_pod(),), nodes=(ready_but_tainted,))
    assert plan.scale_up == () and codes(plan.covered) == {ReasonCode.FITS_UPCOMING}
    # a taint that is no start-up taint counts against the pod: another node is ordered
    other = Taint(key="example.com/maintenance", effect=TaintEffect.NO_SCHEDULE)
    usable_but_tainted = pool_node(a100, "a100-odd", taints=(*a100.taints, other))
    assert scale_ups(run((training_pod(),), nodes=(usable_but_tainted,))) == {"gpu-training-a100": 1}


def test_more_pods_than_upcoming_capacity_orders_only_the_difference() -> None:
    requested = UpcomingNode(pool="gpu-training-a100", request_id="req-1", requested_s=NOW - 60)
    pods = tuple(training_pod(f"train-{i}", gpus=4) for i in range(4))  # 16 GPUs; 8 are on their way
    assert scale_ups(run(pods, upcoming=(requested,))) == {"gpu-training-a100": 1}


WINDOW = Policy(batch_idle_s=1.0, batch_max_s=10.0)


def test_batch_window_waits_while_pods_keep_arriving_within_idle() -> None:
    """A burst 0.5 s apart is one batch: decided 1 s after its last pod, in one scale-up for all."""
    burst = tuple(training_pod(f"train-{i}", gpus=2, created=NOW - 2.0 + 0.5 * i) for i in range(4))  # up to NOW-0.5
    held = run(burst, policy=WINDOW)
    assert held.scale_up == () and codes(held.waiting) == {ReasonCode.WAITING_BATCH}
    assert held.next_at_s == pytest.approx(NOW + 0.5)
    plan = run(burst, policy=WINDOW, now=NOW + 0.5)
    assert scale_ups(plan) == {"gpu-training-a100": 1} and len(plan.scale_up[0].pods) == 4


def test_batch_window_closes_at_its_maximum_however_many_pods_join() -> None:
    """Pods every 0.5 s for 12 s: the batch opened by the first closes 10 s after it; later pods open the next."""
    stream = tuple(pending(f"web-{i}", cpu="1", created=NOW - 12.0 + 0.5 * i) for i in range(25))  # to NOW
    plan = run(stream, policy=WINDOW)
    decided = {p for s in plan.scale_up for p in s.pods}
    first = {f"default/web-{i}" for i in range(20)}  # created before NOW-2 = the first batch's close
    assert decided == first
    assert {v.pod for v in plan.waiting} == {f"default/web-{i}" for i in range(20, 25)}
    assert plan.next_at_s == pytest.approx(NOW + 1.0)


def test_an_old_pending_pod_does_not_open_the_window_for_a_new_one() -> None:
    """CA's age check lets a new pod through as soon as any pod is old; the window keeps batching the new one."""
    old, new = pending("old", cpu="1", created=NOW - 600), pending("new", cpu="1", created=NOW - 0.1)
    plan = run((old, new), policy=WINDOW)
    assert {p for s in plan.scale_up for p in s.pods} == {"default/old"}
    assert [v.pod for v in plan.waiting] == ["default/new"] and plan.next_at_s == pytest.approx(NOW + 0.9)


def test_fits_on_existing_free_capacity_needs_no_scale_up() -> None:
    plan = run((pending("web", cpu="1"),), nodes=(pool_node(SEED_POOLS[0], "cpu-1"),))
    assert plan.scale_up == () and codes(plan.covered) == {ReasonCode.FITS_EXISTING}


@pytest.mark.parametrize(("age", "gpu", "acts"), [(1.0, False, False), (3.0, False, True), (5.0, True, False),
                                                  (11.0, True, True)])
def test_batching_waits_for_the_oldest_pod_to_age(age: float, gpu: bool, acts: bool) -> None:
    """CA's age check (the ca-defaults preset's batching): 2 s, 10 s with a GPU pod here."""
    pod = training_pod(created=NOW - age) if gpu else pending("web", cpu="1", created=NOW - age)
    plan = run((pod,), policy=Policy(new_pod_delay_s=2.0, new_gpu_pod_delay_s=10.0, batch_idle_s=0.0))
    assert bool(plan.scale_up) is acts
    if not acts:
        assert codes(plan.waiting) == {ReasonCode.WAITING_BATCH}


def test_gated_expendable_and_not_yet_unschedulable_pods_do_not_trigger() -> None:
    gated = replace(pending("gated", cpu="1"), scheduling_gated=True)
    pause = pending("pause", cpu="1", priority=-11)
    fresh = make_pod("fresh", cpu="1")  # the scheduler has not tried it yet
    plan = run((gated, pause, fresh))
    assert plan.scale_up == ()
    assert codes(plan.waiting) == {ReasonCode.SCHEDULING_GATED, ReasonCode.EXPENDABLE}


def gang(n: int, gpus: int = 8, key: str = "default/job", min_member: int | None = None) -> tuple[Pod, ...]:
    group = PodGroupRef(key=key, source="kueue", min_member=min_member)
    return tuple(replace(training_pod(f"worker-{i}", gpus=gpus), group=group) for i in range(n))


def test_gang_scales_all_nodes_in_one_decision() -> None:
    plan = run(gang(4))
    assert scale_ups(plan) == {"gpu-training-a100": 4}
    assert len(plan.scale_up[0].pods) == 4


def test_gang_larger_than_pool_max_orders_nothing_and_says_why() -> None:
    pools = (SEED_POOLS[0], replace(SEED_POOLS[1], max_size=3), SEED_POOLS[2])
    plan = run(gang(4), pools=pools)
    assert plan.scale_up == ()
    assert len(plan.unplaceable) == 4
    assert codes(plan.unplaceable) == {ReasonCode.GANG_DOES_NOT_FIT}
    assert "max_size 3" in plan.unplaceable[0].reasons[0].message


def test_incomplete_gang_waits_for_all_members() -> None:
    plan = run(gang(3, min_member=4))
    assert plan.scale_up == () and codes(plan.waiting) == {ReasonCode.GANG_INCOMPLETE}
    plan = run(gang(3), groups=(PodGroupSpec(key="default/job", min_member=4),))
    assert plan.scale_up == () and codes(plan.waiting) == {ReasonCode.GANG_INCOMPLETE}


def test_gang_uses_free_capacity_plus_new_nodes() -> None:
    a100 = SEED_POOLS[1]
    half_free = pool_node(a100, "a100-0")
    plan = run(gang(3), nodes=(half_free,))
    assert scale_ups(plan) == {"gpu-training-a100": 2}


def test_gang_no_single_pool_can_host_spans_pools_within_each_limit() -> None:
    a100, other = replace(SEED_POOLS[1], max_size=3), replace(SEED_POOLS[1], name="gpu-training-a100-b", max_size=2)
    plan = run(gang(4), pools=(SEED_POOLS[0], a100, other, SEED_POOLS[2]))
    assert scale_ups(plan) == {"gpu-training-a100": 3, "gpu-training-a100-b": 1}
    assert sorted(p for s in plan.scale_up for p in s.pods) == sorted(p.key for p in gang(4))
    assert plan.unplaceable == ()


def test_gang_spans_pools_only_when_all_of_it_fits_and_never_past_a_global_limit() -> None:
    a100, other = replace(SEED_POOLS[1], max_size=3), replace(SEED_POOLS[1], name="gpu-training-a100-b", max_size=2)
    pools = (SEED_POOLS[0], a100, other, SEED_POOLS[2])
    plan = run(gang(6), pools=pools)  # 3 + 2 nodes: one pod short, so nothing is ordered
    assert plan.scale_up == () and codes(plan.unplaceable) == {ReasonCode.GANG_DOES_NOT_FIT}
    plan = run(gang(4), pools=pools, policy=Policy(limits=Limits(max_nodes_total=3)))
    assert plan.scale_up == () and len(plan.unplaceable) == 4


@pytest.mark.parametrize(("limits", "binding"), [
    (Limits(max_nodes_total=2), "max_nodes_total 2"),
    (Limits(max_gpus_by_model={"nvidia-tesla-a100": 16}), "gpu_total nvidia-tesla-a100 16"),
    (Limits(max_usd_per_hour=60.0), "max_usd_per_hour 60"),
    (Limits(max_cores_total=200), "cores_total 200"),
])
def test_limits_cap_scale_up_and_name_the_limit(limits: Limits, binding: str) -> None:
    pods = tuple(training_pod(f"train-{i}", gpus=8) for i in range(5))
    plan = run(pods, policy=Policy(limits=limits))
    assert scale_ups(plan) == {"gpu-training-a100": 2}
    assert any(binding in r.message for r in plan.scale_up[0].reasons)
    assert len(plan.unplaceable) == 3
    assert binding in plan.unplaceable[0].reasons[0].message


def test_stockout_backoff_falls_back_to_another_feasible_pool() -> None:
    other_zone = replace(SEED_POOLS[1], name="gpu-training-a100-b", zones=("us-central1-b",), usd_per_hour=31.0)
    pools = (*SEED_POOLS, other_zone)
    state = record_failure(EngineState(), "gpu-training-a100", FailureKind.STOCKOUT, NOW - 10, Policy())
    plan = run((training_pod(),), pools=pools, state=state)
    assert scale_ups(plan) == {"gpu-training-a100-b": 1}
    alone = run((training_pod(),), state=state)
    assert alone.scale_up == () and codes(alone.unplaceable) == {ReasonCode.POOL_BACKOFF}


def test_backoff_doubles_and_resets() -> None:
    policy = Policy()
    state = EngineState()
    durations = []
    for k in range(5):
        state = record_failure(state, "a", FailureKind.STOCKOUT, NOW + k, policy)
        durations.append(state.backoff["a"].until_s - (NOW + k))
    assert durations == [300, 600, 1200, 1800, 1800]
    later = NOW + 4 + policy.backoff_reset_s + 1
    assert record_failure(state, "a", FailureKind.STOCKOUT, later, policy).backoff["a"].until_s == later + 300


def test_least_waste_counts_gpus_and_price_never_puts_cpu_pods_on_gpu_pools() -> None:
    untainted_gpu = pool("gpu-open", cpu="16", memory="64Gi", gpus=1, tainted=False, price=0.5)
    cpu = pool("cpu", cpu="16", memory="64Gi", price=0.8)
    pods = (pending("web", cpu="8", memory="32Gi"),)
    assert scale_ups(run(pods, pools=(untainted_gpu, cpu))) == {"cpu": 1}
    price_only = Policy(expanders=(ExpanderName.PRICE,))
    assert scale_ups(run(pods, pools=(untainted_gpu, cpu), policy=price_only)) == {"cpu": 1}
    ca_waste = Policy(expanders=(ExpanderName.LEAST_WASTE,), least_waste_counts_gpus=False)
    assert scale_ups(run(pods, pools=(untainted_gpu, cpu), policy=ca_waste)) == {"cpu": 1}  # ties → name order


def test_priority_expander_prefers_matching_pools() -> None:
    small = pool("cpu-small", cpu="4", memory="16Gi", price=0.2)
    big = pool("cpu-big", cpu="32", memory="128Gi", price=1.6)
    pods = (pending("web", cpu="2", memory="4Gi"),)
    policy = Policy(priorities=(PriorityRule(priority=50, patterns=("cpu-big",)),
                                PriorityRule(priority=10, patterns=("cpu-.*",))))
    assert scale_ups(run(pods, pools=(small, big), policy=policy)) == {"cpu-big": 1}
    assert scale_ups(run(pods, pools=(small, big))) == {"cpu-small": 1}


@pytest.mark.parametrize(("expander", "expected"), [(ExpanderName.MOST_PODS, "cpu-big"),
                                                    (ExpanderName.LEAST_NODES, "cpu-big")])
def test_most_pods_and_least_nodes(expander: ExpanderName, expected: str) -> None:
    small = pool("cpu-small", cpu="4", memory="16Gi", max_size=1)
    big = pool("cpu-big", cpu="32", memory="128Gi", max_size=1)
    pods = tuple(pending(f"web-{i}", cpu="2", memory="4Gi") for i in range(8))
    plan = run(pods, pools=(small, big), policy=Policy(expanders=(expander,)))
    assert plan.scale_up[0].pool == expected


def test_random_expander_is_reproducible() -> None:
    pools = tuple(pool(f"cpu-{c}") for c in "abcd")
    policy = Policy(expanders=(ExpanderName.RANDOM,), random_seed=3)
    picks = {run((pending("web", cpu="1"),), pools=pools, policy=policy).scale_up[0].pool for _ in range(3)}
    assert len(picks) == 1


def test_mixed_demand_scales_several_pools_in_one_decision() -> None:
    pods = (training_pod(), pending("web", cpu="4"),
            pending("chat", cpu="2", memory="8Gi", gpus=1, tolerations=(GPU_TOL,), node_selector=T4))
    assert scale_ups(run(pods)) == {"gpu-training-a100": 1, "cpu-general": 1, "gpu-inference-t4": 1}


def test_pod_no_pool_can_host_is_unplaceable_with_each_pool_reason() -> None:
    plan = run((training_pod(gpus=16),))
    assert plan.scale_up == ()
    message = plan.unplaceable[0].reasons[0].message
    assert "gpu-training-a100: Insufficient nvidia.com/gpu" in message
    assert codes(plan.unplaceable) == {ReasonCode.NO_POOL_FITS}


def test_provision_and_gpu_init_timeouts_back_the_pool_off() -> None:
    a100 = SEED_POOLS[1]
    late = UpcomingNode(pool=a100.name, request_id="req-old", requested_s=NOW - 901)
    plan = run((training_pod(),), upcoming=(late,))
    assert [t.request_id for t in plan.timed_out] == ["req-old"]
    assert plan.state.in_backoff(a100.name, NOW) is not None
    assert plan.scale_up == ()  # the pool is backed off now; no other pool takes A100 pods
    stuck = pool_node(a100, "a100-stuck", allocatable=a100.allocatable - Resources.of({"nvidia.com/gpu": 8}),
                      ready_since_s=NOW - 601)
    plan = run((), nodes=(stuck,))
    assert [t.node for t in plan.timed_out] == ["a100-stuck"]
    assert codes(plan.timed_out) == {ReasonCode.GPU_INIT_TIMEOUT}


def test_a_registered_node_has_the_startup_time_to_become_ready() -> None:
    """CA's max node startup time: registered but not Ready past it, a node is given back; requests not registered
    yet keep the provisioning deadline. Unset, the provisioning deadline applies to both (from the node's creation)."""
    a100 = SEED_POOLS[1]
    booting = pool_node(a100, "a100-booting", ready=False, created_s=NOW - 400)
    asked = UpcomingNode(pool=a100.name, request_id="req", requested_s=NOW - 400)
    assert run((), nodes=(booting,), upcoming=(asked,)).timed_out == ()
    plan = run((), nodes=(booting,), upcoming=(asked,), policy=Policy(max_node_startup_time_s=300))
    assert [t.node for t in plan.timed_out] == ["a100-booting"] and "limit 300s" in plan.timed_out[0].reasons[0].message
    slow = (SEED_POOLS[0], replace(a100, max_node_startup_time_s=1200), *SEED_POOLS[2:])
    late = replace(booting, created_s=NOW - 1000)
    assert [t.node for t in run((), nodes=(late,)).timed_out] == ["a100-booting"]
    assert run((), nodes=(late,), pools=slow, policy=Policy(max_node_startup_time_s=300)).timed_out == ()


def test_warm_buffer_keeps_an_idle_node_ready() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-training-a100", idle_nodes=1),), scale_down_enabled=False)
    plan = run((), policy=policy)
    assert scale_ups(plan) == {"gpu-training-a100": 1}
    assert codes(plan.scale_up) == {ReasonCode.BUFFER}
    idle = pool_node(SEED_POOLS[1], "a100-idle")
    assert run((), nodes=(idle,), policy=policy).scale_up == ()


def test_warm_buffer_counts_free_gpus() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-inference-t4", free_gpus=3),), scale_down_enabled=False)
    assert scale_ups(run((), policy=policy)) == {"gpu-inference-t4": 3}


def test_warm_buffer_does_not_count_a_node_a_pending_pod_will_take_as_idle() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-training-a100", idle_nodes=1),), scale_down_enabled=False)
    idle = pool_node(SEED_POOLS[1], "a100-idle")
    assert run((), nodes=(idle,), policy=policy).scale_up == ()
    plan = run((training_pod(),), nodes=(idle,), policy=policy)  # the pod lands on it: the buffer needs a new node
    assert codes(plan.covered) == {ReasonCode.FITS_EXISTING}
    assert scale_ups(plan) == {"gpu-training-a100": 1} and codes(plan.scale_up) == {ReasonCode.BUFFER}


# ------------------------------------------------------------------------------------- warm capacity ∝ use
T4_POOL = SEED_POOLS[2]


def t4_serving(count: int, *, start: int = 0) -> tuple[tuple[Node, ...], tuple[Pod, ...]]:
    """`count` T4 nodes, each running one 1-GPU inference replica."""
    nodes = tuple(pool_node(T4_POOL, f"t4-{i}") for i in range(start, start + count))
    pods = tuple(replace(make_pod(f"chat-{n.name}", cpu="3", memory="10Gi", gpus=1, tolerations=(GPU_TOL,),
                                  node_selector=T4, node=n.name), phase=PodPhase.RUNNING) for n in nodes)
    return nodes, pods


def idle_t4(name: str, since: float = NOW - 3600) -> Node:
    """An empty T4 node unneeded for an hour: scale-down removes it unless the buffer keeps it."""
    return pool_node(T4_POOL, name, taints=(GPU_TAINT, Taint(key=DELETION_CANDIDATE_TAINT, value=str(since),
                                                             effect=TaintEffect.PREFER_NO_SCHEDULE)))


def test_buffer_target_is_proportional_to_use_rounded_to_the_nearest_gpu_with_a_floor() -> None:
    buffer = Buffer(pool="p", free_gpus=1, free_gpus_ratio=0.1)
    assert [buffer.free_gpus_target(n) for n in (0, 5, 14, 15, 30, 34, 35)] == [1, 1, 1, 2, 3, 3, 4]
    night = Buffer(pool="p", free_gpus_ratio=0.05)
    assert [night.free_gpus_target(n) for n in (0, 2, 9, 10)] == [0, 0, 0, 1]
    assert Buffer(pool="p", free_gpus_ratio=0.15).free_gpus_target(10) == 2  # 1.5000000000000002 → 2, not noise


@pytest.mark.parametrize(("serving", "warm"), [(0, 0), (2, 0), (9, 0), (10, 1), (29, 1), (30, 2), (40, 2)])
def test_proportional_buffer_follows_gpus_in_use(serving: int, warm: int) -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-inference-t4", free_gpus_ratio=0.05),), scale_down_enabled=False)
    nodes, pods = t4_serving(serving)
    plan = run(pods, nodes=nodes, pools=(replace(T4_POOL, max_size=60),), policy=policy)
    assert scale_ups(plan) == ({"gpu-inference-t4": warm} if warm else {})
    if warm:
        assert plan.scale_up[0].reasons[0].numbers["gpus_in_use"] == serving


def test_proportional_buffer_counts_pods_this_decision_places_as_in_use() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-inference-t4", free_gpus_ratio=0.1),), scale_down_enabled=False)
    nodes, pods = t4_serving(8)
    waiting = tuple(pending(f"chat-new-{i}", cpu="3", memory="10Gi", gpus=1, tolerations=(GPU_TOL,),
                            node_selector=T4) for i in range(7))
    plan = run((*pods, *waiting), nodes=nodes, pools=(replace(T4_POOL, max_size=60),), policy=policy)
    # 7 nodes for the pods, then 15 GPUs in use want 1.5 → 2 free (8 running alone would want 1): 2 more nodes
    assert scale_ups(plan) == {"gpu-inference-t4": 9}


def test_proportional_buffer_never_exceeds_max_size_or_a_gpu_limit() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-inference-t4", free_gpus_ratio=0.5),), scale_down_enabled=False)
    nodes, pods = t4_serving(8)
    plan = run(pods, nodes=nodes, policy=policy)  # wants 4 more, max_size 10 leaves room for 2
    assert scale_ups(plan) == {"gpu-inference-t4": 2}
    assert codes(plan.scale_up) == {ReasonCode.BUFFER, ReasonCode.LIMIT_REACHED}
    limited = replace(policy, limits=Limits(max_gpus_by_model={"nvidia-tesla-t4": 9}))
    assert scale_ups(run(pods, nodes=nodes, policy=limited)) == {"gpu-inference-t4": 1}


def test_scale_down_keeps_the_idle_gpus_the_proportional_buffer_needs() -> None:
    policy = Policy(buffers=(Buffer(pool="gpu-inference-t4", free_gpus_ratio=0.1),))
    nodes, pods = t4_serving(20)
    idle = tuple(idle_t4(f"t4-idle-{i}") for i in range(3))
    plan = run(pods, nodes=(*nodes, *idle), pools=(replace(T4_POOL, max_size=60),), policy=policy)
    assert len(plan.scale_down) == 1  # 20 in use want 2 of the 3 idle GPUs: one node goes
    assert len([v for v in plan.blocked if v.node.startswith("t4-idle")]) == 2 and plan.scale_up == ()
    assert ReasonCode.BUFFER in codes(plan.blocked)
    nodes, pods = t4_serving(5)  # use fell: 0.5 → 1 warm GPU, two idle nodes go
    plan = run(pods, nodes=(*nodes, *idle), policy=policy)
    assert len(plan.scale_down) == 2 and plan.scale_up == ()


def test_templates_carry_the_labels_every_kubelet_sets() -> None:
    """`nodeSelector: kubernetes.io/os: linux` (in many charts) must not make a pod unschedulable on every template;
    an Arm pool says so in its labels, and the beta label follows."""
    linux = pending("web", cpu="1", node_selector={"kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"})
    assert scale_ups(run((linux,))) == {"cpu-general": 1}
    arm = pending("grace", cpu="1", node_selector={"kubernetes.io/arch": "arm64"})
    assert run((arm,)).scale_up == ()
    arm_pool = replace(SEED_POOLS[0], name="cpu-arm", labels={"kubernetes.io/arch": "arm64"})
    assert scale_ups(run((arm,), pools=(*SEED_POOLS, arm_pool))) == {"cpu-arm": 1}
    assert arm_pool.template().labels["beta.kubernetes.io/arch"] == "arm64"


def test_a_pool_that_does_not_give_ephemeral_storage_says_so_and_one_that_does_scales() -> None:
    asks = replace(pending("web", cpu="1"), requests=Resources.of({"cpu": 1000, "memory": 2**30,
                                                                  "ephemeral-storage": 10 * 2**30}))
    plan = run((asks,))
    assert plan.scale_up == ()
    assert ("cpu-general: Insufficient ephemeral-storage (the pool's allocatable does not give ephemeral-storage: "
            "add it)") in plan.unplaceable[0].reasons[0].message
    disk = replace(SEED_POOLS[0], allocatable=SEED_POOLS[0].allocatable + Resources.of({"ephemeral-storage": 2**37}))
    assert scale_ups(run((asks,), pools=(disk, *SEED_POOLS[1:]))) == {"cpu-general": 1}


def test_the_expander_line_names_only_pools_that_could_host_the_pods_of_its_scale_up() -> None:
    """An 8-GPU training pod only the A100 pool hosts, and a 1-GPU pod both GPU pools host: whichever way the
    expanders go, a pool named as passed over must have been able to take every pod of that scale-up."""
    big = training_pod("train-8", gpus=8)
    small = pending("infer-0", cpu="1", memory="2Gi", gpus=1, tolerations=(GPU_TOL,), created=NOW - 600)
    pools = {p.name: p for p in SEED_POOLS}
    a100_first = Policy(priorities=(PriorityRule(priority=10, patterns=("gpu-training-a100",)),))
    for pods, policy in (((big, small), None), ((big, small), a100_first), ((big,), None), ((small,), None)):
        plan = run(pods, policy=policy)
        for item in plan.scale_up:
            lines = [r.message for r in item.reasons if r.code is ReasonCode.EXPANDER]
            for line in lines:
                passed_over = line.split(" over ")[1].split(", ")
                for name in passed_over:
                    hostable = run(tuple(p for p in pods if p.key in item.pods), pools=(pools[name],))
                    assert hostable.unplaceable == (), (item.pool, name, line)
    [both] = run((big, small), policy=a100_first).scale_up  # the A100 pool takes both: the T4 one could not
    assert both.pods == ("default/infer-0", "default/train-8")
    assert not [r for r in both.reasons if r.code is ReasonCode.EXPANDER]
    [only] = run((big,)).scale_up
    assert not [r for r in only.reasons if r.code is ReasonCode.EXPANDER]  # nothing else could host it
    infer = run((small,)).scale_up[0]
    assert next(r.message for r in infer.reasons if r.code is ReasonCode.EXPANDER).endswith("over gpu-training-a100")


def test_pods_asking_one_host_port_take_a_node_each() -> None:
    """Three pods asking host port 8080 do not share a node (NodePorts); an existing node whose DaemonSet-style pod
    binds 8080 takes none of them, one binding 8080 on another IP or over UDP takes one."""
    ports = (HostPort(8080),)
    pods = tuple(pending(f"web-{i}", cpu="1", host_ports=ports) for i in range(3))
    cpu = SEED_POOLS[0]
    assert scale_ups(run(pods, pools=(cpu,))) == {"cpu-general": 3}
    taken = (pool_node(cpu, "cpu-1"), pool_node(cpu, "cpu-2"))
    bound = (replace(make_pod("agent-1", node="cpu-1", host_ports=ports), phase=PodPhase.RUNNING),
             replace(make_pod("agent-2", node="cpu-2", host_ports=(HostPort(8080, "UDP"),)), phase=PodPhase.RUNNING))
    plan = run((*pods, *bound), nodes=taken, pools=(cpu,))
    assert scale_ups(plan) == {"cpu-general": 2}
    plain = run((pending("plain", cpu="1"), *bound), nodes=taken[:1], pools=(cpu,))
    assert plain.scale_up == ()


ZONED = pool("cpu-zoned", price=0.835, zones=("zone-a", "zone-b", "zone-c"))


def zone_pod(name: str, *zones: str) -> Pod:
    return pending(name, cpu="1", required_terms=(term(req(ZONE_LABEL, "In", *zones)),))


def test_a_pool_listing_several_zones_adds_nodes_in_the_zone_the_pods_need() -> None:
    """One template per zone: pods whose node affinity asks zone-c get a zone-c node (the scale-up names the zone),
    pods for zone-a or zone-b get one of those; pods that take any zone leave the zone to the provider."""
    plan = run((zone_pod("c-0", "zone-c"), zone_pod("c-1", "zone-c")), pools=(ZONED,))
    assert [(s.pool, s.zone, s.nodes) for s in plan.scale_up] == [("cpu-zoned", "zone-c", 1)]
    assert "in zone zone-c" in plan.scale_up[0].reasons[0].message
    assert plan_json(plan)["scale_up"][0]["zone"] == "zone-c"
    either = run((zone_pod("ab", "zone-b", "zone-a"), zone_pod("c", "zone-c")), pools=(ZONED,))
    assert sorted((s.zone, s.nodes, s.pods) for s in either.scale_up) == [
        ("zone-a", 1, ("default/ab",)), ("zone-c", 1, ("default/c",))]
    anywhere = run((pending("any", cpu="1"),), pools=(ZONED,))
    assert [(s.zone, s.nodes) for s in anywhere.scale_up] == [(None, 1)]
    nowhere = run((zone_pod("d", "zone-d"),), pools=(ZONED,))
    assert nowhere.scale_up == () and len(nowhere.unplaceable) == 1


def test_an_upcoming_node_requested_in_a_zone_counts_in_that_zone() -> None:
    ask = UpcomingNode(pool="cpu-zoned", request_id="r1", requested_s=NOW - 10, zone="zone-c")
    assert run((zone_pod("c-0", "zone-c"),), pools=(ZONED,), upcoming=(ask,)).scale_up == ()
    elsewhere = replace(ask, zone="zone-a")
    assert [(s.zone, s.nodes) for s in run((zone_pod("c-0", "zone-c"),), pools=(ZONED,),
                                           upcoming=(elsewhere,)).scale_up] == [("zone-c", 1)]


def test_limits_count_per_pool_across_its_zones() -> None:
    small = replace(ZONED, max_size=2)
    pods = tuple(zone_pod(f"{z}-{i}", f"zone-{z}") for z in "abc" for i in range(2))
    plan = run(tuple(replace(p, requests=resources("15", "1Gi")) for p in pods), pools=(small,))
    assert sum(s.nodes for s in plan.scale_up) == 2


def test_a_pool_verdict_looks_at_every_zone_of_the_pool() -> None:
    """`gpuscale fit` says a multi-zone pool hosts a pod that needs its second zone; a zone it lacks is refused in
    the scheduler's words."""
    assert pool_verdict(zone_pod("b", "zone-b"), ZONED) == POOL_FITS
    assert pool_verdict(zone_pod("d", "zone-d"), ZONED) == "node(s) didn't match Pod's node affinity/selector"


def test_a_zone_spread_deployment_gets_one_node_in_each_zone_of_a_multi_zone_pool() -> None:
    """Three replicas spread over zones (DoNotSchedule, maxSkew 1), each needing a node of its own, with a full node
    in each of the pool's three zones: one node in each zone, each scale-up naming its zone (the estimate counted the
    replica in that zone)."""
    full = tuple(replace(pool_node(ZONED, f"full-{z}", labels={**ZONED.template(f"full-{z}", f"zone-{z}").labels}),
                         allocatable=resources("1", "1Gi", 0, {"pods": 110})) for z in "abc")
    replicas = tuple(pending(f"web-{i}", cpu="15", labels={"app": "web"}, spread=(spread(ZONE_LABEL, {"app": "web"}),))
                     for i in range(3))
    plan = run(replicas, nodes=full, pools=(ZONED,))
    assert sorted((s.zone, s.nodes) for s in plan.scale_up) == [("zone-a", 1), ("zone-b", 1), ("zone-c", 1)]


def test_a_zone_in_backoff_keeps_its_pods_waiting_while_the_other_zones_scale() -> None:
    state = record_failure(EngineState(), "cpu-zoned/zone-c", FailureKind.STOCKOUT, NOW - 10, Policy())
    plan = run((zone_pod("c-0", "zone-c"), zone_pod("a-0", "zone-a")), pools=(ZONED,), state=state)
    assert [(s.zone, s.pods) for s in plan.scale_up] == [("zone-a", ("default/a-0",))]
    [stuck] = plan.unplaceable
    assert stuck.pod == "default/c-0" and ReasonCode.POOL_BACKOFF in {r.code for r in stuck.reasons}
    assert "cpu-zoned/zone-c: backed off" in stuck.reasons[0].message
