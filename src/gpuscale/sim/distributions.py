"""The one lognormal the twin draws durations and rates from, given as the public figures give them: median and p90.

`sample(rng, n)` draws a vector (workload generators), `draw(rng)` one value (the cloud's start-up steps); both clip
to [`floor`, `cap`]. `p90 == median` is a constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        if self.sigma == 0.0:
            return min(max(self.median, self.floor), self.cap)
        value = self.median * math.exp(self.sigma * rng.standard_normal())
        return min(max(value, self.floor), self.cap)
