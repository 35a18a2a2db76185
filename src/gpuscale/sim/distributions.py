"""The one lognormal the twin draws durations and rates from, given as the public figures give them: median and p90.

`sample(rng, n)` draws a vector (workload generators), `draw(rng)` one value, `at(z)` the value at a given standard
normal deviate (for `Keyed` streams); all clip to [`floor`, `cap`]. `p90 == median` is a constant. `Empirical` is the
same interface over measured samples (a start-up step given as what a real cluster took).

`Keyed` gives common random numbers: a draw is a function of the run's seed and a key naming what is drawn ("the
3rd A100 node's boot", "pod x's container start"), not of how many draws came before. Two policies compared on one
scenario then see the same luck for the same thing — the k-th A100 request of each run meets the same stockout
draw, pod x starts its container in the same time — so their difference is the policies', not the random stream's
(with one shared stream, the first different decision reshuffled every later draw, and p95 differences of ±100 s
between policies were noise).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

Z90 = 1.2815515655446004
"""Standard normal 90th percentile: LN(m, p90) has σ = ln(p90/m) / Z90."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogNormal:
    """Lognormal with `median` and `sigma` (of the log), clipped to [`floor`, `cap`]."""

    median: float
    sigma: float
    floor: float = 0.0
    cap: float = math.inf

    @staticmethod
    def from_p90(median: float, p90: float, *, floor: float = 0.0, cap: float = math.inf) -> LogNormal:
        sigma = math.log(p90 / median) / Z90 if p90 > median > 0 else 0.0
        return LogNormal(median=median, sigma=sigma, floor=floor, cap=cap)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.clip(rng.lognormal(math.log(self.median), self.sigma, n), self.floor, self.cap)

    def draw(self, rng: np.random.Generator) -> float:
        return self.at(0.0 if self.sigma == 0.0 else float(rng.standard_normal()))

    def at(self, z: float) -> float:
        """The value `z` standard deviations (of the log) from the median, clipped."""
        value = self.median * math.exp(self.sigma * z) if self.sigma else self.median
        return min(max(value, self.floor), self.cap)


_STANDARD = NormalDist()


@dataclass(frozen=True, slots=True)
class Empirical:
    """Measured samples (seconds) drawn as they came: the value at quantile u is the ⌈u·n⌉-th smallest sample (the
    inverse of the samples' distribution function), no fit. `at(z)` takes the quantile Φ(z), so a keyed draw
    (`Keyed.lognormal`) meets the same luck for the same key as a lognormal would. O(1) per draw."""

    values: tuple[float, ...]
    """Sorted ascending, at least one, each finite and ≥ 0 (`of` checks)."""

    @staticmethod
    def of(samples: Sequence[float]) -> Empirical:
        ordered = tuple(sorted(float(v) for v in samples))
        if not ordered or not all(math.isfinite(v) and v >= 0 for v in ordered):
            raise ValueError("expected at least one finite, non-negative number of seconds")
        return Empirical(ordered)

    @property
    def sigma(self) -> float:
        """Non-zero when the samples differ: `Keyed` then draws a deviate (a constant needs none)."""
        return 0.0 if self.values[0] == self.values[-1] else 1.0

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def cap(self) -> float:
        return self.values[-1]

    def quantile(self, u: float) -> float:
        n = len(self.values)
        return self.values[min(max(math.ceil(u * n) - 1, 0), n - 1)]

    def at(self, z: float) -> float:
        return self.quantile(_STANDARD.cdf(z))

    def draw(self, rng: np.random.Generator) -> float:
        return self.quantile(float(rng.random()))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.array([self.quantile(u) for u in rng.random(n)])


Duration = LogNormal | Empirical
"""A start-up step's duration: a lognormal from public figures or a fit, or measured samples."""


class Keyed:
    """Common random numbers: uniform and normal draws named by a key, seeded once from the run's generator."""

    __slots__ = ("_keyed",)

    def __init__(self, rng: np.random.Generator) -> None:
        self._keyed = hashlib.blake2b(digest_size=8, key=int(rng.integers(2**63)).to_bytes(8, "little"))
        """The keyed hash before any data: each draw copies it rather than keying a new one (the same digest)."""

    def uniform(self, *key: object) -> float:
        """In (0, 1), the same for the same key in every run with the same seed."""
        keyed = self._keyed.copy()
        keyed.update(repr(key).encode())
        digest = keyed.digest()
        return (int.from_bytes(digest, "little") + 0.5) / 2.0**64

    def normal(self, *key: object) -> float:
        return _STANDARD.inv_cdf(self.uniform(*key))

    def lognormal(self, distribution: Duration, *key: object) -> float:
        return distribution.at(self.normal(*key) if distribution.sigma else 0.0)
