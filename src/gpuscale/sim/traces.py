"""The generic job CSV: one row per training or batch job, read into and written from `JobSpec` values.

Columns and their meaning are in `docs/traces.md`. A row names a GPU *model*, not node labels; a `Placement` turns the
model into scheduling constraints (a nodeSelector plus tolerations) for the cluster being simulated, and turns them
back when writing. Reading checks every field and raises `InputError("<path> row N", column, problem)` at the first bad
one; columns the reader does not know are ignored. Side effects: `read_jobs` and `write_jobs` open files, nothing else.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuscale.inputs.files import CSV_BYTES, excerpt, one_line, read_text
from gpuscale.model.errors import InputError
from gpuscale.model.pod import SchedulingConstraints
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU, Resources
from gpuscale.model.selectors import NodeAffinity, parse_int64
from gpuscale.model.taints import TaintEffect, Toleration, TolerationOperator
from gpuscale.sim.workloads import JobSpec

MIB = 2**20
GB = 10**9
"""Image sizes are decimal gigabytes, as registries and the pull throughput (MB/s) count them."""

REQUIRED_COLUMNS = ("submit_s", "duration_s", "pods", "gpus_per_pod", "gpu_milli", "gpu_model", "cpu_milli",
                    "memory_mib", "priority", "kind")
OPTIONAL_COLUMNS = ("name", "team", "checkpoint_s", "image_gb", "queue")
COLUMNS = ("name", "kind", "team", "submit_s", "duration_s", "pods", "gpus_per_pod", "gpu_milli", "gpu_model",
           "cpu_milli", "memory_mib", "priority", "checkpoint_s", "image_gb")
"""The order `write_jobs` writes; readers find columns by name, in any order."""
JOB_KINDS = ("training", "batch")

GPU_TOLERATION = Toleration(key=NVIDIA_GPU, operator=TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE)
"""Tolerates the `nvidia.com/gpu` taint GKE, EKS and AKS put on GPU nodes (and the seed-pools example uses)."""
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementRule:
    """Where one kind of pod may go: `nodeSelector` labels and tolerations."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()

    def constraints(self) -> SchedulingConstraints:
        return SchedulingConstraints(affinity=NodeAffinity(node_selector=tuple(sorted(self.node_selector.items()))),
                                     tolerations=self.tolerations)


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """GPU model name → scheduling constraints.

    A GPU pod with a model uses `models[model]`; a model not listed there maps to `{model_label: model}` plus the `gpu`
    rule's tolerations when `model_label` is set, and is an error otherwise. A GPU pod without a model uses `gpu`
    (the GPU toleration only); a CPU-only pod uses `cpu` (nothing). Fractional-GPU pods count as GPU pods.
    """

    models: Mapping[str, PlacementRule] = field(default_factory=dict)
    model_label: str | None = None
    gpu: PlacementRule = PlacementRule(tolerations=(GPU_TOLERATION,))
    cpu: PlacementRule = PlacementRule()

    def rule(self, gpu_model: str, requests: Resources) -> PlacementRule | None:
        """The rule for a pod with these requests asking for `gpu_model` ("" = any); None if the model is unknown."""
        if not wants_gpu(requests):
            return self.cpu if not gpu_model else None
        if not gpu_model:
            return self.gpu
        if gpu_model in self.models:
            return self.models[gpu_model]
        if self.model_label is not None:
            return PlacementRule(node_selector={self.model_label: gpu_model}, tolerations=self.gpu.tolerations)
        return None

    def constraints(self, gpu_model: str, requests: Resources) -> SchedulingConstraints:
        """As `rule`, but raises `KeyError` for a model this placement cannot place."""
        rule = self.rule(gpu_model, requests)
        if rule is None:
            raise KeyError(gpu_model)
        return rule.constraints()

    def model_of(self, constraints: SchedulingConstraints, requests: Resources) -> str | None:
        """The inverse of `constraints`: the model name ("" = none) that yields `constraints`, or None if none does."""
        if not wants_gpu(requests):
            return "" if constraints == self.cpu.constraints() else None
        for name in sorted(self.models):
            if self.models[name].constraints() == constraints:
                return name
        if constraints == self.gpu.constraints():
            return ""
        selector = constraints.affinity.node_selector
        if self.model_label is not None and len(selector) == 1 and selector[0][0] == self.model_label:
            model = selector[0][1]
            if self.constraints(model, requests) == constraints:
                return model
        return None

    def known_models(self) -> str:
        return ", ".join(sorted(self.models)) or "none"


GKE_PLACEMENT = Placement(model_label=GKE_ACCELERATOR_LABEL)
"""Any model name is a `cloud.google.com/gke-accelerator` value (`nvidia-tesla-a100`, `nvidia-l4`, …)."""


def wants_gpu(requests: Resources) -> bool:
    return requests.gpu_count() > 0 or requests.get(GPU_MILLI) > 0


def pod_requests(*, gpus_per_pod: int, gpu_milli: int, cpu_milli: int, memory_mib: int) -> Resources:
    """Requests of one pod. `gpu_milli` is per GPU: below 1000 (with one GPU) it is a fractional GPU
    (`gpuscale.io/gpu-milli`); 1000 means whole GPUs (`nvidia.com/gpu`). Raises ValueError naming the bad field."""
    problem = shape_problem(gpus_per_pod=gpus_per_pod, gpu_milli=gpu_milli, cpu_milli=cpu_milli,
                            memory_mib=memory_mib)
    if problem is not None:
        raise ValueError(f"{problem[0]}: {problem[1]}")
    amounts = {CPU: cpu_milli, MEMORY: memory_mib * MIB}
    if gpus_per_pod and gpu_milli < 1000:
        amounts[GPU_MILLI] = gpu_milli
    elif gpus_per_pod:
        amounts[NVIDIA_GPU] = gpus_per_pod
    return Resources.of(amounts)


def shape_problem(*, gpus_per_pod: int, gpu_milli: int, cpu_milli: int, memory_mib: int) -> tuple[str, str] | None:
    """(field, problem) for the first invalid field of a pod shape, or None if the shape is valid."""
    if gpus_per_pod < 0:
        return "gpus_per_pod", f"must be ≥ 0, got {gpus_per_pod}"
    if gpus_per_pod == 0 and gpu_milli != 0:
        return "gpu_milli", f"must be 0 (or empty) when gpus_per_pod is 0, got {gpu_milli}"
    if gpus_per_pod == 1 and not 0 < gpu_milli <= 1000:
        return "gpu_milli", f"must be in 1..1000 with one GPU, got {gpu_milli}"
    if gpus_per_pod > 1 and gpu_milli != 1000:
        return "gpu_milli", f"a fractional GPU needs gpus_per_pod = 1, got {gpu_milli} with {gpus_per_pod} GPUs"
    if cpu_milli < 0:
        return "cpu_milli", f"must be ≥ 0, got {cpu_milli}"
    if memory_mib < 0:
        return "memory_mib", f"must be ≥ 0, got {memory_mib}"
    return None


# ------------------------------------------------------------------------------------------------------------ reading
_INT32 = 2**31 - 1
MAX_SECONDS = 10 * 365 * 86_400.0
"""Submit times and durations of at most ten years."""
MAX_ROWS = 1_000_000
"""Jobs one CSV may hold (as a scenario's `MAX_JOBS`)."""


class _Row:
    """One CSV row with typed, checked accessors that raise `InputError` naming the row and the column."""

    def __init__(self, values: Mapping[str, str | None], where: str) -> None:
        self.values, self.where = values, where

    def text(self, column: str) -> str:
        return (self.values.get(column) or "").strip()

    def fail(self, column: str, problem: str) -> InputError:
        return InputError(self.where, column, problem)

    def integer(self, column: str, default: int | None = None, *, low: int = -_INT32 - 1, high: int = _INT32) -> int:
        text = self.text(column)
        if not text and default is not None:
            return default
        value = parse_int64(text)
        if value is None:
            raise self.fail(column, f"expected an integer, got {excerpt(text)}")
        if not low <= value <= high:
            raise self.fail(column, f"must be between {low} and {high}, got {excerpt(text)}")
        return value

    def number(self, column: str, *, minimum: float, positive: bool = False, default: float | None = None,
               maximum: float = MAX_SECONDS) -> float:
        text = self.text(column)
        if not text and default is not None:
            return default
        try:
            value = float(text)
        except ValueError:
            raise self.fail(column, f"expected a number, got {excerpt(text)}") from None
        if not math.isfinite(value) or value < minimum or (positive and value <= minimum):
            raise self.fail(column, f"must be a finite number {'>' if positive else '≥'} {minimum:g}, "
                                    f"got {excerpt(text)}")
        if value > maximum:
            raise self.fail(column, f"must be at most {maximum:g}, got {excerpt(text)}")
        return value


def read_jobs(path: Path, placement: Placement) -> list[JobSpec]:
    """Jobs of a generic job CSV, in file order. Raises `InputError` on a missing column or the first bad row."""
    text = read_text(path, CSV_BYTES, "a job CSV").removeprefix("\ufeff")  # a spreadsheet's byte-order mark
    try:
        return _read_rows(csv.DictReader(io.StringIO(text, newline="")), path, placement)
    except csv.Error as err:
        raise InputError(str(path), "(file)", f"bad CSV: {one_line(str(err), 200)}") from None


def _read_rows(reader: csv.DictReader[str], path: Path, placement: Placement) -> list[JobSpec]:
    header = [c.strip() for c in reader.fieldnames or ()]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(str(path), "header", f"missing required column(s): {', '.join(missing)}")
    reader.fieldnames = header
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for values in reader:
        row = _Row(values, f"{path} row {reader.line_num}")
        job = _job(row, placement, default_name=f"job-{len(jobs) + 1:06d}")
        if job.name in seen:
            raise row.fail("name", f"{excerpt(job.name)} already used on row {seen[job.name]}")
        seen[job.name] = reader.line_num
        jobs.append(job)
        if len(jobs) > MAX_ROWS:
            raise row.fail("(file)", f"more than {MAX_ROWS} jobs")
    return jobs


def _job(row: _Row, placement: Placement, default_name: str) -> JobSpec:
    kind = row.text("kind")
    if kind == "inference":
        raise row.fail("kind", "inference rows are services, not jobs: describe them with "
                               "gpuscale.sim.synthetic.inference_service")
    if kind not in JOB_KINDS:
        raise row.fail("kind", f"expected one of {', '.join(JOB_KINDS)}, got {excerpt(kind)}")
    gpus = row.integer("gpus_per_pod", high=64)
    shape = {"gpus_per_pod": gpus, "gpu_milli": row.integer("gpu_milli", default=1000 if gpus > 0 else 0),
             "cpu_milli": row.integer("cpu_milli", high=10**12), "memory_mib": row.integer("memory_mib", high=10**12)}
    problem = shape_problem(**shape)
    if problem is not None:
        raise row.fail(*problem)
    requests = pod_requests(**shape)
    model = row.text("gpu_model")
    rule = placement.rule(model, requests)
    if rule is None:
        why = "set on a CPU-only row" if not wants_gpu(requests) else \
            f"unknown GPU model {model!r} (placement knows: {placement.known_models()})"
        raise row.fail("gpu_model", why)
    pods = row.integer("pods", high=100_000)
    if pods < 1:
        raise row.fail("pods", f"must be ≥ 1, got {pods}")
    return JobSpec(
        name=row.text("name") or default_name, kind=kind, team=row.text("team") or "default",
        submit_s=row.number("submit_s", minimum=0.0), pods=pods, requests=requests, constraints=rule.constraints(),
        duration_s=row.number("duration_s", minimum=0.0, positive=True),
        checkpoint_s=row.number("checkpoint_s", minimum=0.0, default=0.0), priority=row.integer("priority"),
        image_bytes=round(row.number("image_gb", minimum=0.0, default=0.0, maximum=10_000.0) * GB),
        queue=row.text("queue"),
    )


# ------------------------------------------------------------------------------------------------------------ writing
def write_jobs(path: Path, jobs: Iterable[JobSpec], placement: Placement = GKE_PLACEMENT) -> None:
    """Write `jobs` as a generic job CSV (columns in `COLUMNS` order, `\\n` line ends, floats in shortest round-trip
    form), so that `read_jobs(path, placement)` returns equal `JobSpec`s. Raises `InputError` naming the job for one
    the format cannot express (other resources, memory not in whole MiB, constraints `placement` cannot produce)."""
    jobs = list(jobs)
    queued = any(job.queue for job in jobs)  # the `queue` column only when some job names a LocalQueue
    rows = [(*_row_of(job, placement), *((job.queue,) if queued else ())) for job in jobs]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow((*COLUMNS, "queue") if queued else COLUMNS)
        writer.writerows(rows)


def _row_of(job: JobSpec, placement: Placement) -> Sequence[str]:
    where = f"job {job.name}"
    amounts = job.requests.as_dict()
    extra = sorted(set(amounts) - {CPU, MEMORY, NVIDIA_GPU, GPU_MILLI})
    if extra:
        raise InputError(where, "requests", f"the job CSV has no column for {', '.join(extra)}")
    whole, milli, memory = amounts.get(NVIDIA_GPU, 0), amounts.get(GPU_MILLI, 0), amounts.get(MEMORY, 0)
    if milli and (whole or not 0 < milli < 1000):
        raise InputError(where, "requests", f"{GPU_MILLI} must be 1..999 and alone, got {milli} with {whole} GPUs")
    if memory % MIB:
        raise InputError(where, "requests", f"memory {memory} bytes is not a whole number of MiB")
    gpus, gpu_milli = (1, milli) if milli else (whole, 1000 if whole else 0)
    model = placement.model_of(job.constraints, job.requests)
    if model is None:
        raise InputError(where, "constraints", "no gpu_model of this placement yields them")
    if job.kind not in JOB_KINDS:
        raise InputError(where, "kind", f"expected one of {', '.join(JOB_KINDS)}, got {excerpt(job.kind)}")
    return (job.name, job.kind, job.team, repr(float(job.submit_s)), repr(float(job.duration_s)), str(job.pods),
            str(gpus), str(gpu_milli), model, str(amounts.get(CPU, 0)), str(memory // MIB), str(job.priority),
            repr(float(job.checkpoint_s)), repr(job.image_bytes / GB))
