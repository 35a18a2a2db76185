"""Builders for placement tests: nodes and pods with defaults, so each test states only what it is about."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscale.engine.placement import NodeSpec, NodeState, PodShape


class FixedDraws:
    """A RandomSource that replays given `Intn` results (and records the bounds it was asked for)."""

    def __init__(self, draws: Sequence[int]) -> None:
        self.draws = list(draws)
        self.bounds: list[int] = []

    def intn(self, n: int) -> int:
        self.bounds.append(n)
        value = self.draws.pop(0)
        assert 0 <= value < n
        return value


NO_DRAWS = FixedDraws([])


def spec(gpus: int = 8, cpu: int = 96_000, memory: int = 393_216, model: str = "G2", name: str = "n",
         max_pods: int = 1001) -> NodeSpec:
    return NodeSpec(name=name, cpu_milli=cpu, memory_mib=memory, gpu_count=gpus, gpu_model=model, max_pods=max_pods)


def node(free: Sequence[int] | None = None, cpu_free: int | None = None, gpus: int = 8, cpu: int = 96_000,
         memory: int = 393_216, memory_free: int | None = None, model: str = "G2",
         tags: Sequence[int] = (0,) * 9, pods_free: int = 1001) -> NodeState:
    """A node with `free` milli per device (default: all free) and `cpu_free` milli CPU left (default: all)."""
    s = spec(gpus=len(free) if free is not None else gpus, cpu=cpu, memory=memory, model=model)
    return NodeState(spec=s, cpu_free_milli=cpu if cpu_free is None else cpu_free,
                     memory_free_mib=memory if memory_free is None else memory_free, pods_free=pods_free,
                     gpu_free_milli=tuple(free) if free is not None else (1000,) * gpus, gpu_tags=tuple(tags))


def pod(cpu: int = 4000, milli: int = 0, gpus: int | None = None, memory: int = 1024,
        models: tuple[str, ...] = ()) -> PodShape:
    """A pod: `milli` per device on `gpus` devices (default 1 when milli > 0)."""
    count = (1 if milli else 0) if gpus is None else gpus
    return PodShape(cpu_milli=cpu, memory_mib=memory, gpu_milli=milli, gpu_count=count, gpu_models=models)
