"""Annotation parity (docs/config.md, *Annotations*): karpenter.sh/do-not-disrupt as "true" and as a duration on pods
and Nodes, a malformed value read the safe way, CA's scale-down-disabled, safe-to-evict-local-volumes,
enable-ds-eviction, pod-scale-up-delay and --node-deletion-candidate-ttl."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscale.engine.decide import decide
from gpuscale.engine.drain import ENABLE_DS_EVICTION, SAFE_TO_EVICT_LOCAL_VOLUMES, SCALE_DOWN_DISABLED
from gpuscale.engine.plan import DELETION_CANDIDATE_TAINT, Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.protection import DO_NOT_DISRUPT, do_not_disrupt, parse_go_duration
from gpuscale.engine.reasons import ReasonCode
from gpuscale.engine.scaleup import POD_SCALE_UP_DELAY
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.cluster import Cluster
from gpuscale.model.node import Node
from gpuscale.model.pod import OwnerRef, Pod
from gpuscale.model.taints import Taint, TaintEffect
from tests.fakes import T0, make_pool, node_of, owned_pod

CPU = make_pool("cpu-general", cpu=16_000, max_size=10)
POLICY = Policy(scale_down_unneeded_time_s=60, scale_down_delay_after_add_s=0)
HOUR = 3600.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("4h", 4 * HOUR), ("90m", 5400.0), ("1h30m45s", 5445.0), ("1.5h", 5400.0), ("0", 0.0), ("300ms", 0.3),
    ("2h45m", 9900.0), (".5s", 0.5), ("-1h", -HOUR)])
def test_go_durations_parse_as_go_parses_them(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "4", "4 hours", "h", "1d", "true1h", "1h ", "--1h"])
def test_what_go_refuses_does_not_parse(text: str) -> None:
    assert parse_go_duration(text) is None


def test_a_duration_protects_from_the_start_until_it_has_passed() -> None:
    assert do_not_disrupt({DO_NOT_DISRUPT: "4h"}, T0, T0 + HOUR).until_s == T0 + 4 * HOUR  # type: ignore[union-attr]
    assert do_not_disrupt({DO_NOT_DISRUPT: "4h"}, T0, T0 + 4 * HOUR) is None
    assert do_not_disrupt({DO_NOT_DISRUPT: "4h"}, None, T0).until_s is None  # type: ignore[union-attr]
    assert do_not_disrupt({DO_NOT_DISRUPT: "false"}, T0, T0) is None
    bad = do_not_disrupt({DO_NOT_DISRUPT: "4 hours"}, T0, T0 + 100 * HOUR)
    assert bad is not None and bad.until_s is None and bad.malformed and "'4 hours'" in bad.malformed
    assert do_not_disrupt({DO_NOT_DISRUPT: "-1h"}, T0, T0) is not None  # negative: malformed, protected


def _idle(name: str = "cpu-1", **annotations: str) -> Node:
    return replace(node_of(CPU, name, created_s=T0 - 10 * HOUR), annotations=dict(annotations))


def _marked(node: Node, since: float) -> Node:
    taint = Taint(key=DELETION_CANDIDATE_TAINT, value=str(int(since)), effect=TaintEffect.PREFER_NO_SCHEDULE)
    return replace(node, taints=(*node.taints, taint))


def _plan(nodes: list[Node], pods: list[Pod], now: float, policy: Policy = POLICY,
          store: IncrementalStore | None = None) -> Plan:
    cluster = Cluster(nodes=tuple(nodes), pods=tuple(pods))
    return decide(Snapshot(cluster=cluster), [CPU], EngineState(), policy, now, store)


def _worker(**annotations: str) -> Pod:
    pod = owned_pod("w-0", node="cpu-1", cpu=500, created_s=T0 - 10 * HOUR)
    return replace(pod, annotations=dict(annotations), started_s=T0 - HOUR)


def _nodes(now: float) -> list[Node]:  # the idle node, unneeded long enough, and room for its pod elsewhere
    return [_marked(_idle(), now - 600), _idle("cpu-2")]


BUSY = owned_pod("busy", node="cpu-2", cpu=12_000)
"""Keeps cpu-2 above the threshold: a home for cpu-1's pod, not a candidate itself."""


def test_a_pod_do_not_disrupt_duration_keeps_its_node_until_start_plus_duration_and_the_plan_says_when() -> None:
    pod = _worker(**{DO_NOT_DISRUPT: "4h"})  # started an hour before T0: protected until T0 + 3h
    for memo in (None, IncrementalStore()):
        plan = _plan(_nodes(T0), [pod, BUSY], T0, store=memo)
        assert "cpu-1" not in [r.node for r in plan.scale_down]
        [kept] = [v for v in plan.blocked if v.node == "cpu-1"]
        assert kept.reasons[0].code is ReasonCode.DO_NOT_DISRUPT
        assert plan.next_at_s == T0 + 3 * HOUR
        # the memo must not keep the verdict past the protection
        later = _plan(_nodes(T0 + 3 * HOUR), [pod, BUSY], T0 + 3 * HOUR, store=memo)
        assert [(r.node, r.evict) for r in later.scale_down if r.node == "cpu-1"] == [("cpu-1", ("default/w-0",))]
        assert later.next_at_s is None


def test_do_not_disrupt_true_protects_for_as_long_as_it_is_there() -> None:
    plan = _plan(_nodes(T0 + 1000 * HOUR), [_worker(**{DO_NOT_DISRUPT: "true"}), BUSY], T0 + 1000 * HOUR)
    assert [v.reasons[0].code for v in plan.blocked if v.node == "cpu-1"] == [ReasonCode.DO_NOT_DISRUPT]
    assert plan.next_at_s is None


def test_a_malformed_value_protects_and_is_reported_for_a_warning_event() -> None:
    plan = _plan(_nodes(T0 + 1000 * HOUR), [_worker(**{DO_NOT_DISRUPT: "4 hours"})], T0 + 1000 * HOUR)
    assert [v.reasons[0].code for v in plan.blocked if v.node == "cpu-1"] == [ReasonCode.BAD_ANNOTATION]
    assert [v.pod for v in plan.malformed] == ["default/w-0"]
    assert "karpenter.sh/do-not-disrupt: '4 hours'" in plan.malformed[0].reasons[0].message


def test_do_not_disrupt_on_a_node_true_and_duration_from_its_creation() -> None:
    for value, now, kept in (("true", T0, True), ("12h", T0, True), ("12h", T0 + 2 * HOUR, False)):
        nodes = [_marked(_idle(**{DO_NOT_DISRUPT: value}), now - 600), _idle("cpu-2")]
        plan = _plan(nodes, [], now)
        assert ("cpu-1" in [r.node for r in plan.scale_down]) is not kept, (value, now)
    bad = _plan([_marked(_idle(**{DO_NOT_DISRUPT: "soon"}), T0 - 600)], [], T0)
    assert [v.pod for v in bad.malformed] == ["node/cpu-1"]


def test_scale_down_disabled_on_a_node_keeps_it() -> None:
    plan = _plan([_marked(_idle(**{SCALE_DOWN_DISABLED: "true"}), T0 - 600)], [], T0)
    assert [v.reasons[0].code for v in plan.blocked] == [ReasonCode.SCALE_DOWN_DISABLED]


def test_safe_to_evict_local_volumes_lifts_local_storage_only_when_it_names_every_local_volume() -> None:
    def scratch(listed: str) -> Pod:
        return replace(_worker(**{SAFE_TO_EVICT_LOCAL_VOLUMES: listed}), local_storage=True,
                       local_volumes=("scratch", "cache"))
    assert [r.node for r in _plan(_nodes(T0), [scratch("scratch, cache"), BUSY], T0).scale_down] == ["cpu-1"]
    plan = _plan(_nodes(T0), [scratch("scratch"), BUSY], T0)
    assert [v.reasons[0].code for v in plan.blocked if v.node == "cpu-1"] == [ReasonCode.LOCAL_STORAGE]


def test_enable_ds_eviction_evicts_a_daemonset_pod_with_its_node() -> None:
    daemon = replace(owned_pod("agent", node="cpu-1", cpu=100), owner=OwnerRef(kind="DaemonSet", name="agent"))
    moved = _worker()
    plain = _plan(_nodes(T0), [daemon, moved, BUSY], T0)
    assert [r.evict for r in plain.scale_down] == [("default/w-0",)]
    evicted = replace(daemon, annotations={ENABLE_DS_EVICTION: "true"})
    assert [r.evict for r in _plan(_nodes(T0), [evicted, moved, BUSY], T0).scale_down] == [("default/agent",
                                                                                     "default/w-0")]


def test_pod_scale_up_delay_holds_a_pod_until_it_is_that_old() -> None:
    pending = replace(owned_pod("late", cpu=3000, created_s=T0 - 60), annotations={POD_SCALE_UP_DELAY: "5m"})
    plan = _plan([], [pending], T0)
    assert plan.scale_up == () and [r.code for v in plan.waiting for r in v.reasons] == [ReasonCode.WAITING_BATCH]
    assert POD_SCALE_UP_DELAY in plan.waiting[0].reasons[0].message
    assert [s.pool for s in _plan([], [pending], T0 + 240).scale_up] == ["cpu-general"]
    ignored = replace(pending, annotations={POD_SCALE_UP_DELAY: "five minutes"})
    assert [s.pool for s in _plan([], [ignored], T0).scale_up] == ["cpu-general"]


def test_a_deletion_candidate_taint_older_than_the_ttl_starts_the_clock_again() -> None:
    policy = replace(POLICY, node_deletion_candidate_ttl_s=HOUR)
    stale = [_marked(_idle(), T0 - 2 * HOUR)]
    plan = _plan(stale, [], T0, policy)
    assert plan.scale_down == () and plan.mark_unneeded == {"cpu-1": T0}
    assert [r.node for r in _plan(stale, [], T0).scale_down] == ["cpu-1"]  # no TTL: the old clock counts
    fresh = [_marked(_idle(), T0 - 600)]
    assert [r.node for r in _plan(fresh, [], T0, policy).scale_down] == ["cpu-1"]
