"""Start-up profiles and stockout rates grounded in public figures (sources: docs/twin.md, from TWIN-DEFAULTS).

Three classes of pool, as the figures come: `cpu` (16-vCPU compute), `gpu-small` (1× T4/L4), `gpu-large`
(8× A100/H100). Durations are lognormals given as (median, p90) seconds.
"""

from __future__ import annotations

from gpuscale.sim.cloud import StartupProfile
from gpuscale.sim.distributions import LogNormal

LN = LogNormal.from_p90

PROFILES: dict[str, StartupProfile] = {
    "cpu": StartupProfile(
        acquire_s=LN(5, 15), boot_s=LN(30, 60), register_s=LN(30, 60),
        ready_s=LN(15, 45), gpu_s=None, start_s=LN(5, 20)),
    "gpu-small": StartupProfile(
        acquire_s=LN(10, 40), boot_s=LN(40, 90), register_s=LN(30, 60),
        ready_s=LN(15, 45), gpu_s=LN(45, 120), start_s=LN(60, 240)),
    "gpu-large": StartupProfile(
        acquire_s=LN(20, 90), boot_s=LN(60, 180), register_s=LN(40, 90),
        ready_s=LN(20, 60), gpu_s=LN(60, 150), start_s=LN(120, 600)),
}
"""Driver preinstalled (the GPU-registration row "driver preinstalled"); see docs/twin.md for the operator variant."""

STOCKOUT_PROBABILITY = {"cpu": 0.002, "gpu-small": 0.02, "gpu-large": 0.10}
"""Per on-demand request; an assumption (no public rate exists), TWIN-DEFAULTS §5."""

IMAGE_BYTES = {"cpu": 500_000_000, "gpu-small": 6_000_000_000, "gpu-large": 12_000_000_000}
