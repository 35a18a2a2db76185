"""When the plan next matters (`Plan.next_at_s`): each stage that reads the clock says the first time it would read it
differently — deadlines of upcoming and starting nodes, batching and per-pod delays, backoff, unneeded waits,
cooldowns, deletion-candidate TTL, rechecks, protections (scale-down's and repair's) — and a plan changes at that time,
not before. A decision that changed the engine state matters again at once; a cluster nothing waits on, never."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Plan, Snapshot, UpcomingNode
from gpuscale.engine.policy import Policy
from gpuscale.engine.protection import DO_NOT_DISRUPT
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.scaleup import POD_SCALE_UP_DELAY
from gpuscale.engine.state import EngineState, FailureKind, PoolBackoff, Unremovable
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect
from tests.fakes import T0, make_pool, node_of, owned_pod

CPU = make_pool("cpu-general", cpu=16_000, max_size=10)
A100 = make_pool("gpu-training-a100", gpus=8, cpu=95_000, max_size=8)
LONG_AGO = T0 - 86_400
HOUR = 3600.0
POLICY = Policy()
"""Defaults: batching 2 s, provisioning 900 s, GPU initialisation 600 s, unneeded 600 s, backoff from 300 s, the
pool-scoped 600 s cooldown after a scale-up, no recheck timeout, no deletion-candidate TTL."""


def _plan(nodes: Sequence[Node] = (), pods: Sequence[Pod] = (), *, now: float = T0, policy: Policy = POLICY,
          state: EngineState | None = None, upcoming: Sequence[UpcomingNode] = ()) -> Plan:
    """The plan without and with a decision memo: the same, and its time the same."""
    snapshot = Snapshot(cluster=Cluster(nodes=tuple(nodes), pods=tuple(pods)), upcoming=tuple(upcoming))
    given = state if state is not None else EngineState()
    plain = decide(snapshot, [CPU, A100], given, policy, now)
    memo = decide(snapshot, [CPU, A100], given, policy, now, store=IncrementalStore())
    assert plain.next_at_s == memo.next_at_s
    return plain


def _busy(name: str = "cpu-busy") -> tuple[Node, Pod]:
    """A node above the utilization threshold: no candidate, no timer."""
    return node_of(CPU, name, created_s=LONG_AGO), owned_pod(f"{name}-work", node=name, cpu=12_000)


def _marked(node: Node, since: float) -> Node:
    taint = Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(since)), effect=TaintEffect.PREFER_NO_SCHEDULE)
    return replace(node, taints=(*node.taints, taint))


def _empty(name: str = "cpu-1", since: float | None = None) -> Node:
    node = node_of(CPU, name, created_s=LONG_AGO)
    return node if since is None else _marked(node, since)


def test_a_cluster_nothing_waits_on_never_matters_again_by_itself() -> None:
    node, pod = _busy()
    assert _plan([node], [pod]).next_at_s is None


def test_a_pending_pod_no_pool_fits_sets_no_time() -> None:
    node, pod = _busy()
    huge = owned_pod("huge", cpu=64_000, created_s=T0 - 600)
    plan = _plan([node], [pod, huge])
    assert [v.pod for v in plan.unplaceable] == ["default/huge"] and plan.next_at_s is None


def test_the_batching_delay_ends_when_the_oldest_pod_is_old_enough() -> None:
    aged = replace(POLICY, new_pod_delay_s=2.0, batch_idle_s=0.0)  # CA's age check (the ca-defaults preset)
    pod = owned_pod("p", created_s=T0 - 0.5)
    plan = _plan(pods=[pod], policy=aged)
    assert plan.scale_up == () and plan.next_at_s == T0 + 1.5
    assert _plan(pods=[pod], now=T0 + 1.4, policy=aged).scale_up == ()
    assert [s.pool for s in _plan(pods=[pod], now=T0 + 1.5, policy=aged).scale_up] == ["cpu-general"]


def test_the_batch_window_ends_when_it_closes() -> None:
    """The window's end is the plan's time: idle after the newest pod, capped at max after the first."""
    window = replace(POLICY, batch_idle_s=1.0, batch_max_s=10.0)
    pods = [owned_pod("a", created_s=T0 - 0.5), owned_pod("b", created_s=T0 - 0.2)]
    plan = _plan(pods=pods, policy=window)
    assert plan.scale_up == () and plan.next_at_s == T0 + 0.8
    assert [s.pool for s in _plan(pods=pods, now=T0 + 0.8, policy=window).scale_up] == ["cpu-general"]


def test_a_pod_scale_up_delay_ends_at_creation_plus_the_delay() -> None:
    pod = replace(owned_pod("p", created_s=T0 - 10), annotations={POD_SCALE_UP_DELAY: "1m"})
    plan = _plan(pods=[pod])
    assert plan.scale_up == () and plan.next_at_s == T0 + 50
    assert [s.pool for s in _plan(pods=[pod], now=T0 + 50).scale_up] == ["cpu-general"]


def test_a_backed_off_pool_matters_again_when_its_backoff_ends() -> None:
    pod = owned_pod("p", created_s=T0 - 600)
    backoff = PoolBackoff(failures=1, until_s=T0 + 120, last_failure_s=T0 - 180, kind=FailureKind.STOCKOUT)
    state = EngineState(backoff={"cpu-general": backoff})
    plan = _plan(pods=[pod], state=state)
    assert plan.scale_up == () and plan.next_at_s == T0 + 120
    assert [s.pool for s in _plan(pods=[pod], state=state, now=T0 + 120).scale_up] == ["cpu-general"]


def test_an_upcoming_request_matters_at_its_provisioning_deadline() -> None:
    request = UpcomingNode(pool="cpu-general", request_id="r-1", requested_s=T0 - 100)
    plan = _plan(upcoming=[request])
    assert plan.timed_out == () and plan.next_at_s == T0 + 800
    assert [t.request_id for t in _plan(upcoming=[request], now=T0 + 800.5).timed_out] == ["r-1"]


def test_a_registered_node_not_ready_matters_at_its_startup_deadline() -> None:
    node = node_of(CPU, "cpu-1", created_s=T0 - 100, ready=False)
    plan = _plan([node])
    assert plan.timed_out == () and plan.next_at_s == T0 + 800
    assert [t.node for t in _plan([node], now=T0 + 800.5).timed_out] == ["cpu-1"]


def test_a_ready_node_without_its_gpus_matters_at_its_gpu_initialisation_deadline() -> None:
    node = replace(node_of(A100, "a100-1", created_s=T0 - 200, gpus_registered=False), ready_since_s=T0 - 100)
    plan = _plan([node])
    assert plan.timed_out == () and plan.next_at_s == T0 + 500
    [late] = _plan([node], now=T0 + 500.5).timed_out
    assert late.node == "a100-1" and late.reasons[0].code is ReasonCode.GPU_INIT_TIMEOUT


def test_an_operators_set_up_cordon_counts_once_the_node_is_older_than_both_deadlines() -> None:
    node = replace(node_of(CPU, "cpu-1", created_s=T0 - 100), unschedulable=True)
    quiet = Policy(scale_down_enabled=False)
    assert _plan([node], policy=quiet).next_at_s == T0 - 100 + 900 + 600


def test_an_unneeded_node_matters_when_it_has_waited_its_time() -> None:
    node, pod = _busy()
    plan = _plan([node, _empty(since=T0 - 60)], [pod])
    assert plan.scale_down == () and [v.node for v in plan.unneeded] == ["cpu-1"]
    assert plan.next_at_s == T0 + 540
    assert [r.node for r in _plan([node, _empty(since=T0 - 60)], [pod], now=T0 + 540).scale_down] == ["cpu-1"]


def test_a_node_found_unneeded_now_waits_the_whole_time_from_now() -> None:
    node, pod = _busy()
    plan = _plan([node, _empty()], [pod])
    assert plan.mark_unneeded == {"cpu-1": T0} and plan.next_at_s == T0 + 600


def test_the_cooldown_after_a_scale_up_ends_delay_after_add_later() -> None:
    node, pod = _busy()
    state = EngineState(last_scale_up_s=T0 - 60, last_scale_up_by_pool={"cpu-general": T0 - 60})
    plan = _plan([node, _empty(since=T0 - 3600)], [pod], state=state)
    assert plan.scale_down == () and plan.unneeded[0].reasons[0].code is ReasonCode.SCALE_DOWN_COOLDOWN
    assert plan.next_at_s == T0 - 60 + Policy().scale_down_delay_after_add_s


def test_a_cooldown_sets_no_time_while_no_node_is_unneeded() -> None:
    node, pod = _busy()
    state = EngineState(last_scale_up_s=T0 - 60, last_scale_up_by_pool={"cpu-general": T0 - 60})
    assert _plan([node], [pod], state=state).next_at_s is None


def test_a_deletion_candidate_taint_matters_when_it_outlives_its_ttl() -> None:
    node, pod = _busy()
    policy = Policy(node_deletion_candidate_ttl_s=300)
    plan = _plan([node, _empty(since=T0 - 60)], [pod], policy=policy)
    assert plan.next_at_s == T0 + 240
    later = _plan([node, _empty(since=T0 - 60)], [pod], policy=policy, now=T0 + 241)
    assert later.mark_unneeded == {"cpu-1": T0 + 241}


def test_a_recently_unremovable_node_matters_at_its_recheck() -> None:
    node, pod = _busy()
    idle = node_of(CPU, "cpu-1", created_s=LONG_AGO)
    stuck = replace(owned_pod("stuck", node="cpu-1", cpu=500), owner=None)
    entry = Unremovable(failed_s=T0 - 100, until_s=T0 + 200, reason=Reason(ReasonCode.NO_CONTROLLER, "no owner"))
    state = EngineState(unremovable={"cpu-1": entry})
    policy = Policy(unremovable_node_recheck_timeout_s=300)
    plan = _plan([node, idle], [pod, stuck], policy=policy, state=state)
    [resting] = [v for v in plan.blocked if v.node == "cpu-1"]
    assert resting.reasons[0].code is ReasonCode.RECENTLY_UNREMOVABLE
    assert plan.state is state and plan.next_at_s == T0 + 200


def test_a_decision_that_changes_the_engine_state_matters_again_at_once() -> None:
    request = UpcomingNode(pool="cpu-general", request_id="r-1", requested_s=T0 - 1000)
    plan = _plan(upcoming=[request])
    assert [t.request_id for t in plan.timed_out] == ["r-1"] and "cpu-general" in plan.state.backoff
    assert plan.next_at_s == T0


def test_a_waiting_repair_matters_when_the_protection_keeping_its_node_ends() -> None:
    pool = replace(A100, node_repair=True)
    node = node_of(pool, "a100-1", created_s=LONG_AGO)
    node = replace(node, allocatable=Resources.of({**dict(node.allocatable.items), NVIDIA_GPU: 7}))
    pod = replace(owned_pod("serve", node="a100-1", gpus=1, cpu=2000), annotations={DO_NOT_DISRUPT: "4h"},
                  started_s=T0 - HOUR)
    snapshot = Snapshot(cluster=Cluster(nodes=(node,), pods=(pod,)))
    plan = decide(snapshot, [CPU, pool], EngineState(), POLICY, T0)
    assert plan.scale_down == () and plan.degraded[0].reasons[0].code is ReasonCode.REPAIR
    assert plan.next_at_s == T0 + 3 * HOUR
    later = decide(snapshot, [CPU, pool], EngineState(), POLICY, T0 + 3 * HOUR)
    assert [r.node for r in later.scale_down] == ["a100-1"]
