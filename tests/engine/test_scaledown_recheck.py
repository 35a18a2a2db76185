"""CA's `--unremovable-node-recheck-timeout` (engine/scaledown.py, `Policy.unremovable_node_recheck_timeout_s`): a node
whose removal simulation failed is left alone until the timeout runs out, then judged again."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.config import preset_policy
from gpuscale.engine.drain import SAFE_TO_EVICT
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.state import EngineState, Unremovable
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from tests.engine.test_scaledown import NOW, busy, codes, node, pod, pools_for, removed, run

CA = Policy(unremovable_node_recheck_timeout_s=300.0)


def _stuck() -> tuple[list[Node], list[Pod]]:
    """Node a holds a pod that fits nowhere else (b is busy)."""
    return [node("a"), node("b")], [pod("big", "a", cpu="1500m"), busy("z", "b")]


def test_a_failed_simulation_is_remembered_for_the_timeout() -> None:
    nodes, pods = _stuck()
    first = run(nodes, pods, policy=CA)
    assert codes(first.blocked, "a")[0] is ReasonCode.NO_PLACE_TO_MOVE
    entry = first.unremovable["a"]
    assert (entry.failed_s, entry.until_s, entry.reason.code) == (NOW, NOW + 300, ReasonCode.NO_PLACE_TO_MOVE)


def test_a_remembered_node_is_not_judged_until_its_recheck() -> None:
    nodes, _ = _stuck()
    freed = [busy("z", "b")]  # a's pod finished: a is empty now
    state = EngineState(unremovable={"a": Unremovable(failed_s=NOW, until_s=NOW + 300, reason=Reason(
        ReasonCode.NO_PLACE_TO_MOVE, "node a: pod default/big fits on no other node"))})
    during = run(nodes, freed, policy=CA, state=state, now=NOW + 299)
    assert removed(during) == []
    assert codes(during.blocked, "a") == [ReasonCode.RECENTLY_UNREMOVABLE, ReasonCode.NO_PLACE_TO_MOVE]
    assert during.blocked[0].reasons[0].numbers["recheck_in_s"] == 1.0
    assert during.unremovable == state.unremovable  # still running: kept as it was
    after = run(nodes, freed, policy=CA, state=state, now=NOW + 300)
    assert removed(after) == ["a"] and after.unremovable == {}


def test_gpuscale_looks_again_at_every_decision() -> None:
    nodes, pods = _stuck()
    assert preset_policy("gpuscale").unremovable_node_recheck_timeout_s == 0
    assert preset_policy("ca-defaults").unremovable_node_recheck_timeout_s == 300
    assert run(nodes, pods).unremovable == {}
    remembered = EngineState(unremovable=run(nodes, pods, policy=CA).unremovable)
    # an entry left from a policy with a timeout is not honoured once the timeout is 0
    assert removed(run(nodes, [busy("z", "b")], state=remembered, now=NOW + 10)) == ["a"]


def test_a_pod_that_may_not_be_evicted_is_a_failed_simulation_too() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("pinned", "a", annotations={SAFE_TO_EVICT: "false"}), busy("z", "b")]
    result = run(nodes, pods, policy=CA)
    assert result.unremovable["a"].reason.code is ReasonCode.NOT_SAFE_TO_EVICT


def test_on_completion_and_no_pool_are_judged_again_every_decision() -> None:
    nodes = [node("a"), node("b"), node("c", pool="nowhere")]
    pods = [pod("batch", "a", annotations={SAFE_TO_EVICT: "on-completion"}), busy("z", "b")]
    result = run(nodes, pods, policy=CA, pools=pools_for(nodes[:2]))
    assert codes(result.blocked, "a")[0] is ReasonCode.ON_COMPLETION
    assert codes(result.blocked, "c")[0] is ReasonCode.UNKNOWN_POOL
    assert result.unremovable == {}


def test_a_node_gone_is_forgotten() -> None:
    nodes, pods = _stuck()
    remembered = run(nodes, pods, policy=CA).unremovable
    later = run([node("b"), node("c")], [busy("z", "b")], policy=CA, state=EngineState(unremovable=remembered),
                now=NOW + 10)
    assert "a" not in later.unremovable


@settings(max_examples=60, deadline=None)
@given(timeout=st.sampled_from([0.0, 60.0, 300.0]), steps=st.lists(st.integers(0, 400), min_size=1, max_size=6),
       frees=st.integers(0, 6))
def test_a_remembered_node_is_judged_exactly_when_a_fresh_engine_would_after_its_timeout(
        timeout: float, steps: list[int], frees: int) -> None:
    """Decisions threaded through the state: at any time, a node is RecentlyUnremovable iff a failure was recorded
    less than `timeout` ago; otherwise the verdict is the one a fresh engine (no memory) gives."""
    policy = replace(CA, unremovable_node_recheck_timeout_s=timeout)
    nodes, stuck = _stuck()
    state, now, failed_at = EngineState(), NOW, None
    for k, step in enumerate(steps):
        now += step
        pods = stuck if k < frees else [busy("z", "b")]
        result = run(nodes, pods, policy=policy, state=state, now=now)
        fresh = run(nodes, pods, policy=policy, now=now)
        resting = failed_at is not None and now < failed_at + timeout
        if resting:
            assert codes(result.blocked, "a")[0] is ReasonCode.RECENTLY_UNREMOVABLE
            assert removed(result) == []
        else:
            assert result.removals == fresh.removals and result.blocked == fresh.blocked
            if timeout > 0 and "a" in fresh.unremovable:
                failed_at = now
        state = replace(state, unremovable=result.unremovable)
