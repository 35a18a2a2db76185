"""Start-up profiles and stockout rates grounded in public figures (sources: docs/twin.md, from TWIN-DEFAULTS).

Three classes of pool, as the figures come: `cpu` (16-vCPU compute), `gpu-small` (1× T4/L4), `gpu-large`
(8× A100/H100). Durations are lognormals given as (median, p90) seconds.
"""

from __future__ import annotations

from gpuscale.sim.cloud import LogNormal, StartupProfile

PROFILES: dict[str, StartupProfile] = {
    "cpu": StartupProfile(
        acquire_s=LogNormal(5, 15), boot_s=LogNormal(30, 60), register_s=LogNormal(30, 60),
        ready_s=LogNormal(15, 45), gpu_s=None, start_s=LogNormal(5, 20)),
    "gpu-small": StartupProfile(
        acquire_s=LogNormal(10, 40), boot_s=LogNormal(40, 90), register_s=LogNormal(30, 60),
        ready_s=LogNormal(15, 45), gpu_s=LogNormal(45, 120), start_s=LogNormal(60, 240)),
    "gpu-large": StartupProfile(
        acquire_s=LogNormal(20, 90), boot_s=LogNormal(60, 180), register_s=LogNormal(40, 90),
        ready_s=LogNormal(20, 60), gpu_s=LogNormal(60, 150), start_s=LogNormal(120, 600)),
}
"""Driver preinstalled (the GPU-registration row "driver preinstalled"); see docs/twin.md for the operator variant."""

STOCKOUT_PROBABILITY = {"cpu": 0.002, "gpu-small": 0.02, "gpu-large": 0.10}
"""Per on-demand request; an assumption (no public rate exists), TWIN-DEFAULTS §5."""

IMAGE_BYTES = {"cpu": 500_000_000, "gpu-small": 6_000_000_000, "gpu-large": 12_000_000_000}
