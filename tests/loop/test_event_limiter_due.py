"""`EventLimiter.due` returns at once when the same keys come again before any is due (the loop's NotTriggerScaleUp
events, late in the week: ≈ 26 pods wait at every tick and each may have one event per five minutes). It must allow
exactly what the straightforward walk allows — `forget_except(keys)`, then `allow` per key in order — and leave the
limiter remembering the same times, under any sequence of key lists, times (ties and tiny steps included, where
`now - last < interval` and `now < last + interval` part in floating point) and direct `allow` calls."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.loop.events import EventLimiter

KEYS = ["a", "b", "c", "d", "e"]


def walk(limiter: EventLimiter, keys: list[str], now: float) -> list[int]:
    """The straightforward computation `due` replaces (through the public methods only)."""
    limiter.forget_except(keys)
    return [i for i, key in enumerate(keys) if limiter.allow(key, now)]


key_lists = st.lists(st.sampled_from(KEYS), max_size=6)
steps = st.lists(st.tuples(
    st.sampled_from(["due", "due", "due", "same", "same", "allow"]),
    key_lists,
    st.sampled_from([0.0, 0.1, 1e-9, 10.0, 10.0, 90.0, 100.0 - 1e-12, 0.30000000000000004, 55.5])), max_size=50)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([100.0, 0.3, 300.0]), st.floats(0, 1e9, allow_nan=False), steps)
def test_due_allows_what_walking_every_key_allows(interval: float, start: float,
                                                  program: list[tuple[str, list[str], float]]) -> None:
    fast, slow = EventLimiter(interval), EventLimiter(interval)
    now = start
    last_keys: list[str] = []
    for op, keys, step in program:
        now += step
        if op == "allow":  # a caller outside the loop (or a test) may allow a key `due` was not given
            key = keys[0] if keys else "z"
            assert fast.allow(key, now) == slow.allow(key, now)
            continue
        if op == "same":
            keys = list(last_keys)  # a new list equal to the last one: the loop builds one per tick
        assert fast.due(keys, now) == walk(slow, keys, now)
        assert fast._last == slow._last
        last_keys = keys


def test_due_skips_the_walk_until_the_oldest_is_due() -> None:
    limiter = EventLimiter(300)
    assert limiter.due(["a", "b"], 0.0) == [0, 1]
    assert limiter.due(["a", "b", "c"], 100.0) == [2]
    assert limiter.due(["a", "b", "c"], 299.0) == []
    assert limiter.due(["a", "b", "c"], 300.0) == [0, 1]
    assert limiter.due(["c"], 350.0) == [] and len(limiter) == 1
    assert limiter.due(["c", "a"], 350.0) == [1]
