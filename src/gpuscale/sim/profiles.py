"""Start-up profiles and stockout rates grounded in public figures (sources: docs/twin.md, from TWIN-DEFAULTS).

Three classes of pool, as the figures come: `cpu` (16-vCPU compute), `gpu-small` (1× T4/L4), `gpu-large`
(8× A100/H100). Durations are lognormals given as (median, p90) seconds.

Container start → Ready, the step that follows the image pull, is capped at what the sources report and has a warm
variant for a pod whose image was already on the node (docs/twin.md, "Container start"):
- cold, gpu-small (model download + load): LN(60 s, 240 s) capped at 265 s, Anyscale's 4 min 25 s for Llama-2-70B
  on p4de, the slowest model start the sources report; gpu-large (checkpoint restore + NCCL, an assumption):
  LN(120 s, 600 s) capped at its p90, 600 s; cpu: LN(5 s, 20 s) capped at 60 s (assumption).
- warm, GPU pools (the files local, the model loaded to the GPUs from the node's disk): LN(34 s, 84 s), ServerlessLLM's
  stock-loader times from local storage (OPT-30B 34 s, LLaMA-2-70B 84 s), capped at 265 s as cold; cpu: as cold.
"""

from __future__ import annotations

from gpuscale.sim.cloud import StartupProfile
from gpuscale.sim.distributions import LogNormal

LN = LogNormal.from_p90
MODEL_START_CAP_S = 265.0
"""Anyscale: Llama-2-70B download + init on p4de in 4 min 25 s, the slowest model start in TWIN-DEFAULTS §2."""
WARM_GPU_START = LN(34, 84, cap=MODEL_START_CAP_S)
"""ServerlessLLM (OSDI'24): stock loaders take 34 s (OPT-30B) to 84 s (LLaMA-2-70B) from local storage."""

PROFILES: dict[str, StartupProfile] = {
    "cpu": StartupProfile(
        acquire_s=LN(5, 15), boot_s=LN(30, 60), register_s=LN(30, 60),
        ready_s=LN(15, 45), gpu_s=None, start_s=LN(5, 20, cap=60.0)),
    "gpu-small": StartupProfile(
        acquire_s=LN(10, 40), boot_s=LN(40, 90), register_s=LN(30, 60),
        ready_s=LN(15, 45), gpu_s=LN(45, 120), start_s=LN(60, 240, cap=MODEL_START_CAP_S),
        warm_start_s=WARM_GPU_START),
    "gpu-large": StartupProfile(
        acquire_s=LN(20, 90), boot_s=LN(60, 180), register_s=LN(40, 90),
        ready_s=LN(20, 60), gpu_s=LN(60, 150), start_s=LN(120, 600, cap=600.0),
        warm_start_s=WARM_GPU_START),
}
"""Driver preinstalled (the GPU-registration row "driver preinstalled"); see docs/twin.md for the operator variant."""

STOCKOUT_PROBABILITY = {"cpu": 0.002, "gpu-small": 0.02, "gpu-large": 0.10}
"""Per on-demand request; an assumption (no public rate exists), TWIN-DEFAULTS §5."""

IMAGE_BYTES = {"cpu": 500_000_000, "gpu-small": 6_000_000_000, "gpu-large": 12_000_000_000}
