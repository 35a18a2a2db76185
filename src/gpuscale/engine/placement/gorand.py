"""Go's `math/rand` stream (the `rngSource` behind `rand.Seed`), so a seed draws what the FGD artifact drew.

The artifact seeds Go's global generator and then shuffles pods, resamples them and permutes node ranks with it.
Reproducing that stream makes our per-seed workloads identical to the paper's, which turns the ±0.6-point mean check
into an exact per-seed check for every deterministic policy.

The generator is Go's additive lagged Fibonacci generator x[t] = x[t−607] + x[t−273] (mod 2⁶⁴), seeded by a
Park–Miller sequence XOR-ed with a fixed "cooked" table. Go ships that table as 607 literals: the state reached from
`srand(1)` after 7.8·10¹² steps (`math/rand/gen_cooked.go`). We derive it instead: the recurrence is linear, so
the state after N steps follows from x^N mod (x⁶⁰⁷ − x³³⁴ − 1) over Z/2⁶⁴, about 60 polynomial products (≈ 50 ms,
once per process). Pure: no I/O, no clock; every draw comes from the object the caller passes around.
"""

from __future__ import annotations

from functools import cache

import numpy as np

_LEN = 607
_TAP = 273
_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_COOK_STEPS = 7_800_000_000_000


def _seedrand(x: int) -> int:
    """Park–Miller step x·48271 mod (2³¹ − 1), in Go's int32 form (Schrage's method, no overflow)."""
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + _INT32_MAX if x < 0 else x


def _polymulmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a·b mod (x⁶⁰⁷ − x³³⁴ − 1) with uint64 coefficients; numpy's integer arithmetic wraps mod 2⁶⁴ as Go does."""
    c = np.convolve(a, b)
    while len(c) > _LEN:
        high = c[_LEN:]
        out = np.zeros(max(_LEN, 334 + len(high)), dtype=np.uint64)
        out[:_LEN] = c[:_LEN]
        out[: len(high)] += high  # x^(607+j) = x^j · (x^334 + 1)
        out[334: 334 + len(high)] += high
        c = out if out[_LEN:].any() else out[:_LEN]
    return c


@cache
def cooked() -> tuple[int, ...]:
    """Go's `rngCooked` table, derived: the generator state after 7.8·10¹² steps from `srand(1)`."""
    vec = [0] * _LEN
    x = 1
    for i in range(-20, _LEN):
        x = _seedrand(x)
        if i >= 0:
            u = x << 20
            x = _seedrand(x)
            u ^= x << 10
            x = _seedrand(x)
            vec[i] = (u ^ x) & _MASK64
    # Slot p holds x[t] for t ≡ 334 − p (mod 607); build x[−606 … 606], then x[N−606+j] = Σ c_i · x[i−606+j].
    seq = {(-273 - p if p < 334 else 334 - p): vec[p] for p in range(_LEN)}
    for t in range(1, _LEN):
        seq[t] = (seq[t - _LEN] + seq[t - _TAP]) & _MASK64
    xs = np.array([seq[t] for t in range(-606, _LEN)], dtype=np.uint64)
    power = np.zeros(_LEN, dtype=np.uint64)
    power[0] = 1
    base = np.zeros(_LEN, dtype=np.uint64)
    base[1] = 1
    n = _COOK_STEPS
    while n:
        if n & 1:
            power = _polymulmod(power, base)
        n >>= 1
        if n:
            base = _polymulmod(base, base)
    windows = np.lib.stride_tricks.sliding_window_view(xs, _LEN)
    values = windows @ power  # x[N−606+j], j = 0 … 606 (uint64 matmul wraps)
    first = _COOK_STEPS - 606
    return tuple(int(values[(334 - p - first) % _LEN]) for p in range(_LEN))


class GoRand:
    """A Go `rand.New(rand.NewSource(seed))`: the same numbers in the same order for every method below."""

    __slots__ = ("_feed", "_tap", "_vec")

    def __init__(self, seed: int) -> None:
        seed = -((-seed) % _INT32_MAX) if seed < 0 else seed % _INT32_MAX  # Go's truncating %
        if seed < 0:
            seed += _INT32_MAX
        if seed == 0:
            seed = 89482311
        table = cooked()
        self._vec = [0] * _LEN
        x = seed
        for i in range(-20, _LEN):
            x = _seedrand(x)
            if i >= 0:
                u = x << 40
                x = _seedrand(x)
                u ^= x << 20
                x = _seedrand(x)
                self._vec[i] = (u ^ x ^ table[i]) & _MASK64
        self._tap = 0
        self._feed = _LEN - _TAP

    def uint64(self) -> int:
        self._tap = self._tap - 1 if self._tap else _LEN - 1
        self._feed = self._feed - 1 if self._feed else _LEN - 1
        x = (self._vec[self._feed] + self._vec[self._tap]) & _MASK64
        self._vec[self._feed] = x
        return x

    def int63(self) -> int:
        """Go `Int63` (and `Int` on 64-bit platforms)."""
        return self.uint64() & _MASK63

    def int31(self) -> int:
        return self.int63() >> 32

    def float64(self) -> float:
        """Go `Float64`: uniform in [0, 1)."""
        while True:
            f = float(self.int63()) / (1 << 63)
            if f != 1.0:
                return f

    def int63n(self, n: int) -> int:
        if n <= 0:
            raise ValueError("int63n: n must be positive")
        if n & (n - 1) == 0:
            return self.int63() & (n - 1)
        limit = _MASK63 - (1 << 63) % n
        v = self.int63()
        while v > limit:
            v = self.int63()
        return v % n

    def int31n(self, n: int) -> int:
        if n <= 0 or n > _INT32_MAX:
            raise ValueError("int31n: n must be in [1, 2^31)")
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        limit = _INT32_MAX - (1 << 31) % n
        v = self.int31()
        while v > limit:
            v = self.int31()
        return v % n

    def intn(self, n: int) -> int:
        """Go `Intn`: uniform in [0, n)."""
        return self.int31n(n) if n <= _INT32_MAX else self.int63n(n)

    def _int31n_lemire(self, n: int) -> int:
        """Go's unexported `int31n` (Lemire's multiply-shift), used by `Shuffle`."""
        prod = (self.int63() >> 31) * n
        low = prod & 0xFFFFFFFF
        if low < n:
            thresh = ((1 << 32) - n) % n
            while low < thresh:
                prod = (self.int63() >> 31) * n
                low = prod & 0xFFFFFFFF
        return prod >> 32

    def shuffle_order(self, n: int) -> list[int]:
        """Go `Shuffle(n, swap)` applied to `range(n)`: position i of the result holds original index order[i]."""
        order = list(range(n))
        i = n - 1
        while i > _INT32_MAX - 1:
            j = self.int63n(i + 1)
            order[i], order[j] = order[j], order[i]
            i -= 1
        while i > 0:
            j = self._int31n_lemire(i + 1)
            order[i], order[j] = order[j], order[i]
            i -= 1
        return order

    def perm(self, n: int) -> list[int]:
        """Go `Perm(n)`: a permutation of range(n)."""
        m = [0] * n
        for i in range(n):
            j = self.intn(i + 1)
            m[i] = m[j]
            m[j] = i
        return m
