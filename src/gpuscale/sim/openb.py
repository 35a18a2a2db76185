"""The openb trace (Alibaba GPU cluster, 2023): pod and node shapes as the FGD paper's artifact reads them.

Rows become `OpenbPod` / `OpenbNode` values; `to_model_pod` / `to_model_node` turn them into model objects. Per-GPU
milli is clipped as the artifact clips it: values above 1000 become 1000, values ≤ 0 become 0; a pod with
`num_gpu = 0` has no GPU fields at all. Fractional pods (one GPU, milli < 1000) request `gpuscale.io/gpu-milli`.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpuscale.inputs.files import CSV_BYTES, excerpt, one_line, read_text
from gpuscale.model.errors import InputError
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU, PODS, Resources
from gpuscale.model.selectors import parse_int64

MIB = 2**20
OPENB_MAX_PODS = 1001
"""The artifact lets every node hold at most 1001 pods."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    """Per-GPU milli after clipping to [0, 1000]; 0 when `num_gpu` is 0."""
    gpu_spec: tuple[str, ...] = ()
    creation_s: float | None = None
    deletion_s: float | None = None

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def requests(self) -> Resources:
        amounts = {CPU: self.cpu_milli, MEMORY: self.memory_mib * MIB}
        if self.num_gpu and self.gpu_milli < 1000:
            amounts[GPU_MILLI] = self.gpu_milli
        elif self.num_gpu:
            amounts[NVIDIA_GPU] = self.num_gpu
        return Resources.of(amounts)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def allocatable(self) -> Resources:
        amounts = {CPU: self.cpu_milli, MEMORY: self.memory_mib * MIB, PODS: OPENB_MAX_PODS}
        if self.gpus:
            amounts[NVIDIA_GPU] = self.gpus
            amounts[GPU_MILLI] = self.gpus * 1000
        return Resources.of(amounts)


def bundled(name: str) -> Path:
    """Path of a bundled openb file (`openb_pod_list_default.csv`, `openb_node_list_gpu_node.csv`, …)."""
    return Path(str(resources.files("gpuscale.data").joinpath("openb", name)))


MAX_AMOUNT = 10**12
"""Largest CPU millicores, MiB of memory or GPUs a row may give: far beyond any machine, and far from int64."""


MAX_GPUS = 64
"""GPUs of one node or one pod (as `config.MAX_GPUS_PER_NODE`)."""


def _int(row: dict[str, str], column: str, where: str, high: int = MAX_AMOUNT) -> int:
    text = (row.get(column) or "0").strip()
    value = parse_int64(text)
    if value is None or not 0 <= value <= high:
        raise InputError(where, column, f"expected an integer from 0 to {high}, got {excerpt(row.get(column))}")
    return value


def _float(row: dict[str, str], column: str, where: str) -> float | None:
    text = row.get(column)
    if text in (None, ""):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InputError(where, column, f"expected a finite number of seconds, got {excerpt(text)}")
    return value


def _rows(path: Path) -> list[tuple[str, dict[str, str]]]:
    """The CSV's rows as dicts, each with its `PATH row N` (at most `CSV_BYTES`; any problem an `InputError`)."""
    text = read_text(path, CSV_BYTES, "a CSV file")
    try:
        return [(f"{path} row {i + 2}", row) for i, row in enumerate(csv.DictReader(io.StringIO(text, newline="")))]
    except csv.Error as err:
        raise InputError(str(path), "(file)", f"bad CSV: {one_line(str(err), 200)}") from None


def read_pods(path: Path) -> list[OpenbPod]:
    pods = []
    for i, (where, row) in enumerate(_rows(path)):
        num_gpu = _int(row, "num_gpu", where, MAX_GPUS)
        milli = min(max(_int(row, "gpu_milli", where), 0), 1000) if num_gpu else 0
        pods.append(OpenbPod(
            name=row.get("name") or f"pod-{i}", cpu_milli=_int(row, "cpu_milli", where),
            memory_mib=_int(row, "memory_mib", where), num_gpu=num_gpu, gpu_milli=milli,
            gpu_spec=tuple(s for s in (row.get("gpu_spec") or "").split("|") if s) if num_gpu else (),
            creation_s=_float(row, "creation_time", where), deletion_s=_float(row, "deletion_time", where),
        ))
    return pods


def read_nodes(path: Path) -> list[OpenbNode]:
    nodes = []
    for i, (where, row) in enumerate(_rows(path)):
        nodes.append(OpenbNode(name=row.get("sn") or f"node-{i}", cpu_milli=_int(row, "cpu_milli", where),
                               memory_mib=_int(row, "memory_mib", where), gpus=_int(row, "gpu", where, MAX_GPUS),
                               model=row.get("model") or ""))
    return nodes


def to_model_node(node: OpenbNode, labels: dict[str, str] | None = None) -> Node:
    all_labels = {"kubernetes.io/hostname": node.name, **(labels or {})}
    if node.model:
        all_labels["nvidia.com/gpu.product"] = node.model
    return Node(name=node.name, allocatable=node.allocatable(), capacity=node.allocatable(), labels=all_labels)


def to_model_pod(pod: OpenbPod, namespace: str = "default", node_name: str | None = None) -> Pod:
    return Pod(namespace=namespace, name=pod.name, uid=pod.name, requests=pod.requests(), node_name=node_name,
               phase=PodPhase.RUNNING if node_name else PodPhase.PENDING, unschedulable=node_name is None)
