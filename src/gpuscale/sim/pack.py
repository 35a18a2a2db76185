"""The FGD paper's packing experiment (ATC'23, Fig. 7/9) on an openb trace: build the workload for a seed, pack it
with one policy, and sample allocation and fragmentation at each percent of arrived GPU demand.

Workload, as the artifact builds it (see docs/fgd.md): pods sorted by name, shuffled with Go's `math/rand` seeded
by `seed` (one draw is burnt first, as the artifact logs `rand.Int()`), then pods drawn with replacement from the
name-sorted originals are appended until the next draw's per-GPU milli would push the total GPU request above
`tune` × cluster GPUs (or random pods are removed while above it). Node ranks, the tie-break, are a `Perm` of the
name-sorted nodes, drawn after 10 draws the artifact's Kubernetes informers make (`INFORMER_DRAWS`). Same seed →
same pods and ranks for every policy, and the same as the artifact's: its published curves come out to the digit.

Side effects: reads the two CSV files. Everything else is computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuscale.engine.placement import (
    POLICIES,
    FragTable,
    GoRand,
    NodeSpec,
    PackTrace,
    PodShape,
    make_scorer,
    pack,
    policy_name,
    typical_classes,
)
from gpuscale.engine.placement.state import ClusterState
from gpuscale.model.errors import ConfigError, InputError
from gpuscale.sim.openb import OPENB_MAX_PODS, OpenbNode, OpenbPod, read_nodes, read_pods

MAX_ARRIVED_PCT = 130
INFORMER_DRAWS = 10
"""Draws other code takes from Go's global generator between the resampling and the node `Perm`: the artifact
starts the scheduler's informers there, and each of their 10 client-go reflectors draws `rand.Float64()` for its
watch timeout. Found by matching the artifact's published per-seed curves, which it then reproduces exactly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PackPoint:
    arrived_pct: int
    """Arrived GPU request as % of cluster GPUs (a bucket: samples whose rounded arrived % equals it)."""
    allocated_pct: float
    frag_pct: float
    """Fragmented GPU milli as % of all cluster GPUs."""
    frag_ratio_pct: float
    """Fragmented as % of idle GPU milli."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PackResult:
    policy: str
    seed: int
    trace: str
    total_gpus: int
    pods: int
    failed_pods: int
    points: tuple[PackPoint, ...]

    def point(self, arrived_pct: int) -> PackPoint | None:
        return next((p for p in self.points if p.arrived_pct == arrived_pct), None)

    @property
    def unallocated_pct(self) -> float:
        """100 − allocated % at 100 % arrived: the paper's headline number."""
        p = self.point(100)
        return round(100.0 - p.allocated_pct, 2) if p else float("nan")


def pod_shape(pod: OpenbPod) -> PodShape:
    """A pod row as a shape. Rows with GPUs but zero milli pass the GPU filter like CPU-only pods; none exist."""
    gpu = pod.num_gpu if pod.gpu_milli > 0 else 0
    return PodShape(cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpu_milli=pod.gpu_milli if gpu else 0,
                    gpu_count=gpu, gpu_models=pod.gpu_spec if gpu else ())


def node_spec(node: OpenbNode) -> NodeSpec:
    return NodeSpec(name=node.name, cpu_milli=node.cpu_milli, memory_mib=node.memory_mib, gpu_count=node.gpus,
                    gpu_model=node.model, max_pods=OPENB_MAX_PODS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    nodes: tuple[NodeSpec, ...]
    """Sorted by name."""
    ranks: tuple[int, ...]
    pods: tuple[PodShape, ...]
    """In submission order."""
    originals: tuple[PodShape, ...]
    """The trace's pods sorted by name: the source of the typical pods."""


def build_workload(nodes: list[OpenbNode], pods: list[OpenbPod], rng: GoRand, tune: float) -> Workload:
    """Shuffle, resample and rank exactly as the artifact does, drawing from `rng` in its order."""
    specs = tuple(node_spec(n) for n in sorted(nodes, key=lambda n: n.name))
    originals = tuple(pod_shape(p) for p in sorted(pods, key=lambda p: p.name))
    rng.int63()  # the artifact logs one rand.Int() right after seeding
    workload = [originals[i] for i in rng.shuffle_order(len(originals))]
    requested = sum(p.total_gpu_milli for p in workload)
    target = tune * float(sum(s.gpu_count for s in specs) * 1000)
    if tune > 0 and float(requested) > target:
        while float(requested) > target and workload:
            requested -= workload.pop(rng.intn(len(workload))).total_gpu_milli
    elif tune > 0 and float(requested) < target:
        while True:
            drawn = originals[rng.intn(len(originals))]
            if float(requested + drawn.gpu_milli) > target:  # the artifact compares the per-GPU milli here
                break
            requested += drawn.total_gpu_milli
            workload.append(drawn)
    for _ in range(INFORMER_DRAWS):
        rng.float64()
    ranks = tuple(rng.perm(len(specs)))
    return Workload(nodes=specs, ranks=ranks, pods=tuple(workload), originals=originals)


def _mean_2dp(values: np.ndarray) -> float:
    """The artifact's `round(series.mean(), 2)`: numpy's pairwise mean, rounded by numpy (the mean is a numpy
    float, so `round` scales by 100 and rounds half to even). Bucket means often sit exactly on a tie (87.945);
    a different sum order or Python's decimal rounding would land some of them 0.01 apart."""
    return float(np.round(values.mean(), 2))


def sample_points(trace: PackTrace, total_gpus: int) -> tuple[PackPoint, ...]:
    """Bucket the per-pod samples like the artifact's merge scripts (see docs/fgd.md, "How a point is sampled")."""
    arrive = np.array([round(a / total_gpus / 10, 0) for a in trace.arrived_milli.tolist()])
    alloc = np.array([round(u / total_gpus / 10, 2) for u in trace.allocated_milli.tolist()])
    frag = np.array([round(f, 2) for f in trace.frag_milli.tolist()])  # the log prints %.2f
    ratios = [100 * f / i if i > 0 else 0.0 for f, i in zip(trace.frag_milli.tolist(), trace.idle_milli.tolist(),
                                                             strict=True)]
    ratio = np.array([round(r, 2) for r in ratios])
    points = []
    for k in range(MAX_ARRIVED_PCT + 1):
        mask = arrive == k
        if not mask.any():
            mask = (arrive >= k - 1) & (arrive <= k + 1)
            if not mask.any():
                continue
        points.append(PackPoint(arrived_pct=k, allocated_pct=_mean_2dp(alloc[mask]),
                                frag_pct=float(np.round(100 * frag[mask].mean() / 1000 / total_gpus, 2)),
                                frag_ratio_pct=_mean_2dp(ratio[mask])))
    return tuple(points)


MAX_TUNE = 10.0
"""`--tune` at most 10 × the cluster's GPUs of demand (the paper uses 1.3): beyond, the run only adds failures."""


def run_pack(nodes_csv: Path, pods_csv: Path, policy: str, seed: int, tune: float = 1.3) -> PackResult:
    """One run of the experiment: `policy` (random, dotprod, clustering, packing, bestfit, fgd, gpuscale) on one
    seed. Raises ConfigError for an unknown policy, InputError for a malformed CSV row."""
    try:
        name = policy_name(policy)
    except KeyError:
        raise ConfigError("policy", f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}") from None
    if not (0 <= tune <= MAX_TUNE):
        raise ConfigError("--tune", f"must be between 0 (no resampling) and {MAX_TUNE:g}, got {tune!r}")
    if not -(2**63) <= seed < 2**63:
        raise ConfigError("--seed", f"must fit in int64 (Go's rand.Seed), got {seed}")
    nodes, pods = read_nodes(nodes_csv), read_pods(pods_csv)
    if not any(n.gpus for n in nodes):
        raise InputError(str(nodes_csv), "gpu", "no node with GPUs: nothing to pack onto")
    if not any(p.num_gpu for p in pods):
        raise InputError(str(pods_csv), "num_gpu", "no pod asking for GPUs: nothing to pack")
    workload = build_workload(nodes, pods, rng := GoRand(seed), tune)
    models = ClusterState.of(workload.nodes).models
    table = FragTable(typical_classes(workload.originals), models)
    trace = pack(workload.nodes, workload.ranks, workload.pods, make_scorer(name, table), table, rng)
    total_gpus = trace.total_gpu_milli // 1000
    return PackResult(policy=name, seed=seed, trace=pods_csv.stem, total_gpus=total_gpus, pods=len(workload.pods),
                      failed_pods=trace.failed, points=sample_points(trace, total_gpus))
