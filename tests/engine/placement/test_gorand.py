"""GoRand reproduces Go's math/rand: reference values printed by Go 1.26 (`rand.New(rand.NewSource(seed))`)."""

from __future__ import annotations

import pytest

from gpuscale.engine.placement.gorand import GoRand, cooked

# seed → first three Uint64, then Int63, Int31, Intn(8152), Intn(1000000007), Intn(1<<40), Int31n(7)
GO_REFERENCE = {
    42: ([12663951391086054483, 9832119173398632219, 5571782338101878760],
         [1926012586526624009, 94099423, 5857, 745640350, 585391986368, 4]),
    1: ([5577006791947779410, 8674665223082153551, 15352856648520921629],
        [4037200794235010051, 911902081, 8110, 140954425, 739317699220, 4]),
    0: ([8717895732742165505, 2259404117704393152, 6050128673802995827],
        [501233450539197794, 789387515, 7432, 413258767, 575025351032, 3]),
    -5: ([1811683815564572222, 4427849682616757295, 188166459856594692],
         [3720612653564574438, 1117524701, 4725, 140213786, 458107572090, 2]),
}


def _hash(values: list[int]) -> int:
    h = 0
    for i, v in enumerate(values):
        h = (h * 31 + v * (i + 7)) % 1_000_000_007
    return h


def test_cooked_table_is_gos() -> None:
    table = cooked()
    assert len(table) == 607
    # the first three of Go's rngCooked literals, as uint64 bit patterns
    assert table[:3] == (14264951931575795690, 13869761123581321051, 1395769623340756751)


@pytest.mark.parametrize("seed", sorted(GO_REFERENCE))
def test_stream_matches_go(seed: int) -> None:
    r = GoRand(seed)
    first, rest = GO_REFERENCE[seed]
    assert [r.uint64() for _ in range(3)] == first
    assert [r.int63(), r.int31(), r.intn(8152), r.intn(1_000_000_007), r.intn(1 << 40), r.int31n(7)] == rest


def test_shuffle_intn_and_perm_match_go() -> None:
    r = GoRand(42)
    r.int63()
    order = r.shuffle_order(8152)
    assert order[:8] == [255, 1685, 6784, 4463, 602, 1564, 3882, 7257]
    assert order[-8:] == [3119, 3131, 6622, 3122, 357, 1701, 4923, 538]
    assert _hash(order) == 325961296
    assert [r.intn(8152) for _ in range(5)] == [3888, 5689, 2936, 788, 5416]
    perm = r.perm(1213)
    assert perm[:8] == [583, 44, 1101, 311, 331, 774, 267, 685]
    assert _hash(perm) == 770327339


def test_float64_is_in_unit_interval_and_deterministic() -> None:
    a, b = GoRand(7), GoRand(7)
    draws = [a.float64() for _ in range(1000)]
    assert draws == [b.float64() for _ in range(1000)]
    assert all(0.0 <= d < 1.0 for d in draws)


def test_bad_bounds_raise() -> None:
    with pytest.raises(ValueError):
        GoRand(1).intn(0)
