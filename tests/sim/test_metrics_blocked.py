"""The twin's metrics skip the walk over a tick's unplaceable verdicts when it would change nothing
(`Metrics.block_waiting`: the very verdict objects of the last walk, no track made since). Under random churn — pods
created, re-created under the same key, decided, finished, verdicts replaced, ticks that repeat the last verdicts —
every track must equal, field by field, the track of metrics that call `blocked` for each pod `blocked_pods` names at
every tick, as the loop did."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.plan import Plan, PodVerdict
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.loop.trace import blocked_pods
from gpuscale.sim.world import Metrics
from tests.builders import make_pod

PODS = 5
REASONS = (Reason(code=ReasonCode.POOL_BACKOFF, message="backed off"),
           Reason(code=ReasonCode.LIMIT_REACHED, message="at a limit"),
           Reason(code=ReasonCode.NO_POOL_FITS, message="nothing fits"))

step = st.one_of(
    st.tuples(st.just("create"), st.integers(0, PODS - 1)),
    st.tuples(st.just("decide"), st.integers(0, PODS - 1)),
    st.tuples(st.just("finish"), st.integers(0, PODS - 1)),
    st.tuples(st.just("verdict"), st.integers(0, PODS - 1), st.integers(0, len(REASONS) - 1)),
    st.tuples(st.just("tick"), st.lists(st.integers(0, PODS - 1), max_size=PODS, unique=True)),
    st.tuples(st.just("again")),
)


def state(metrics: Metrics) -> dict[str, tuple[object, ...]]:
    return {key: (t.pod, dict(t.times), t.blocked_since, t.blocked_s, t.blocked_reason)
            for key, t in metrics.tracks.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40))
@example([("create", 0), ("verdict", 0, 0), ("tick", [0]), ("finish", 0), ("create", 0), ("again",)])
@example([("create", 0), ("verdict", 0, 0), ("tick", [0]), ("decide", 0), ("again",), ("create", 0), ("again",)])
@example([("create", 0), ("create", 1), ("verdict", 1, 1), ("tick", [0]), ("tick", [1])])
@example([("create", 0), ("tick", [0]), ("verdict", 0, 0), ("tick", [0])])
def test_block_waiting_equals_calling_blocked_for_every_named_pod(steps: list[tuple[object, ...]]) -> None:
    carried, fresh = Metrics(), Metrics()
    verdicts = {i: PodVerdict(pod=f"default/p{i}", reasons=(REASONS[2],)) for i in range(PODS)}
    last: tuple[PodVerdict, ...] = ()
    now = 0.0
    for op, *args in steps:
        now += 10.0
        key = f"default/p{args[0]}" if args else ""
        for metrics in (carried, fresh):
            if op == "create":
                metrics.created(make_pod(f"p{args[0]}"), now)
            elif op == "decide":
                metrics.decided(key, now)
            elif op == "finish":
                metrics.tracks.pop(key, None)
        if op == "verdict":
            i, reason = args
            assert isinstance(i, int) and isinstance(reason, int)
            verdicts[i] = PodVerdict(pod=key, reasons=(REASONS[2], REASONS[reason]))
        elif op in ("tick", "again"):
            if op == "tick":
                chosen = args[0]
                assert isinstance(chosen, list)
                last = tuple(verdicts[i] for i in chosen)
            plan = Plan(unplaceable=tuple(last))  # a new tuple of the same verdicts on "again"
            carried.block_waiting(plan, now)
            for pod, reason in blocked_pods(plan):
                fresh.blocked(pod, now, reason)
        assert state(carried) == state(fresh)
