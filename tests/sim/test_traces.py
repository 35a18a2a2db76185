"""`gpuscale.sim.traces`: the generic job CSV (read, write, round trip, errors) and `Placement`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.model.errors import InputError
from gpuscale.model.pod import SchedulingConstraints
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU, Resources
from gpuscale.model.selectors import NodeAffinity
from gpuscale.sim.traces import (
    COLUMNS,
    GKE_ACCELERATOR_LABEL,
    GKE_PLACEMENT,
    GPU_TOLERATION,
    MIB,
    Placement,
    PlacementRule,
    pod_requests,
    read_jobs,
    write_jobs,
)
from gpuscale.sim.workloads import JobSpec

HEADER = "submit_s,duration_s,pods,gpus_per_pod,gpu_milli,gpu_model,cpu_milli,memory_mib,priority,kind"
GOOD = "0,600,1,1,1000,nvidia-tesla-t4,3000,10240,0,training"


def csv_file(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join((header, *rows)) + "\n", encoding="utf-8")
    return path


def make_job(*, name: str = "j", gpus: int = 1, milli: int = 1000, model: str = "", cpu: int = 1000,
             memory_mib: int = 1024, placement: Placement = GKE_PLACEMENT, **kw: Any) -> JobSpec:
    requests = pod_requests(gpus_per_pod=gpus, gpu_milli=milli, cpu_milli=cpu, memory_mib=memory_mib)
    job = JobSpec(name=name, submit_s=0.0, duration_s=60.0, requests=requests,
                  constraints=placement.constraints(model, requests))
    return replace(job, **kw)


# ------------------------------------------------------------------------------------------------------ round trip
MODELS = ("", "nvidia-tesla-a100", "nvidia-l4")


@st.composite
def jobs(draw: st.DrawFn) -> list[JobSpec]:
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=0, max_size=8,
                          unique=True))
    out = []
    for name in names:
        gpus = draw(st.integers(0, 16))
        milli = 0 if gpus == 0 else draw(st.integers(1, 1000)) if gpus == 1 else 1000
        out.append(make_job(
            name=name, gpus=gpus, milli=milli, model=draw(st.sampled_from(MODELS)) if gpus else "",
            cpu=draw(st.integers(0, 200_000)), memory_mib=draw(st.integers(0, 2_000_000)),
            kind=draw(st.sampled_from(("training", "batch"))),
            team=draw(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)),
            submit_s=draw(st.floats(0, 1e8, allow_nan=False)), duration_s=draw(st.floats(1e-3, 1e8)),
            pods=draw(st.integers(1, 64)), checkpoint_s=draw(st.floats(0, 1e6)),
            priority=draw(st.integers(-1000, 1_000_000)), image_bytes=draw(st.integers(0, 10**12))))
    return out


@settings(max_examples=60, deadline=None)
@given(jobs())
def test_write_then_read_gives_the_same_jobs(tmp_path_factory: pytest.TempPathFactory, written: list[JobSpec]) -> None:
    path = tmp_path_factory.mktemp("rt") / "jobs.csv"
    write_jobs(path, written)
    assert read_jobs(path, GKE_PLACEMENT) == written


def test_write_is_byte_deterministic_with_columns_in_order(tmp_path: Path) -> None:
    job = make_job(model="nvidia-tesla-a100", team="ml", checkpoint_s=1800.0, image_bytes=12 * 10**9)
    write_jobs(tmp_path / "a.csv", [job])
    write_jobs(tmp_path / "b.csv", [job])
    text = (tmp_path / "a.csv").read_bytes()
    assert text == (tmp_path / "b.csv").read_bytes()
    assert text.decode() == (",".join(COLUMNS) + "\n"
                             "j,training,ml,0.0,60.0,1,1,1000,nvidia-tesla-a100,1000,1024,0,1800.0,12.0\n")


def test_write_with_an_explicit_placement_round_trips(tmp_path: Path) -> None:
    placement = Placement(models={"a100": PlacementRule(node_selector={"pool": "big"}, tolerations=(GPU_TOLERATION,))})
    job = make_job(model="a100", placement=placement)
    write_jobs(tmp_path / "j.csv", [job], placement)
    assert read_jobs(tmp_path / "j.csv", placement) == [job]


# -------------------------------------------------------------------------------------------------------- reading
def test_fractional_and_whole_gpus_map_to_their_resources(tmp_path: Path) -> None:
    path = csv_file(tmp_path, "0,60,1,1,250,,1000,1024,0,batch", "0,60,2,8,1000,,1000,1024,0,training",
                    "0,60,1,1,,,1000,1024,0,training", "0,60,1,0,,,1000,1024,0,batch")
    frac, whole, default_milli, cpu = read_jobs(path, GKE_PLACEMENT)
    assert frac.requests == Resources.of({GPU_MILLI: 250, CPU: 1000, MEMORY: 1024 * MIB})
    assert frac.requests.get(NVIDIA_GPU) == 0
    assert frac.constraints.tolerations == (GPU_TOLERATION,)  # a shared GPU is still a GPU pod
    assert whole.requests.get(NVIDIA_GPU) == 8 and whole.pods == 2 and not whole.requests.get(GPU_MILLI)
    assert default_milli.requests.get(NVIDIA_GPU) == 1
    assert cpu.requests.gpu_count() == 0 and cpu.constraints == SchedulingConstraints()


def test_gpu_model_becomes_node_selector_and_toleration(tmp_path: Path) -> None:
    [job] = read_jobs(csv_file(tmp_path, GOOD), GKE_PLACEMENT)
    assert job.constraints.affinity == NodeAffinity(node_selector=((GKE_ACCELERATOR_LABEL, "nvidia-tesla-t4"),))
    assert job.constraints.tolerations == (GPU_TOLERATION,)


def test_optional_columns_default_and_unknown_columns_are_ignored(tmp_path: Path) -> None:
    header = "kind,note," + HEADER.replace(",kind", "")
    path = csv_file(tmp_path, "batch,hello,5.5,60,1,0,0,,500,512,-1", header=header)
    [job] = read_jobs(path, GKE_PLACEMENT)
    assert (job.name, job.team, job.checkpoint_s, job.image_bytes) == ("job-000001", "default", 0.0, 0)
    assert (job.kind, job.submit_s, job.priority) == ("batch", 5.5, -1)


def test_optional_columns_are_read(tmp_path: Path) -> None:
    path = csv_file(tmp_path, GOOD + ",ml,1800,6.5,train-a", header=HEADER + ",team,checkpoint_s,image_gb,name")
    [job] = read_jobs(path, GKE_PLACEMENT)
    assert (job.name, job.team, job.checkpoint_s, job.image_bytes) == ("train-a", "ml", 1800.0, 6_500_000_000)


@pytest.mark.parametrize(("row", "column", "problem"), [
    ("x,600,1,1,1000,,1,1,0,training", "submit_s", "expected a number"),
    ("-1,600,1,1,1000,,1,1,0,training", "submit_s", "≥ 0"),
    ("0,0,1,1,1000,,1,1,0,training", "duration_s", "> 0"),
    ("0,inf,1,1,1000,,1,1,0,training", "duration_s", "finite"),
    ("0,60,0,1,1000,,1,1,0,training", "pods", "≥ 1"),
    ("0,60,1,1.5,1000,,1,1,0,training", "gpus_per_pod", "integer"),
    ("0,60,1,-1,,,1,1,0,training", "gpus_per_pod", "≥ 0"),
    ("0,60,1,2,500,,1,1,0,training", "gpu_milli", "gpus_per_pod = 1"),
    ("0,60,1,1,0,,1,1,0,training", "gpu_milli", "1..1000"),
    ("0,60,1,1,1200,,1,1,0,training", "gpu_milli", "1..1000"),
    ("0,60,1,0,500,,1,1,0,batch", "gpu_milli", "gpus_per_pod is 0"),
    ("0,60,1,0,0,nvidia-tesla-t4,1,1,0,batch", "gpu_model", "CPU-only"),
    ("0,60,1,1,1000,,-5,1,0,training", "cpu_milli", "≥ 0"),
    ("0,60,1,1,1000,,1,1Gi,0,training", "memory_mib", "integer"),
    ("0,60,1,1,1000,,1,1,high,training", "priority", "integer"),
    ("0,60,1,1,1000,,1,1,0,serving", "kind", "training, batch"),
    ("0,60,1,1,1000,,1,1,0,inference", "kind", "inference_service"),
])
def test_a_bad_row_names_its_row_and_column(tmp_path: Path, row: str, column: str, problem: str) -> None:
    path = csv_file(tmp_path, GOOD, row)
    with pytest.raises(InputError) as err:
        read_jobs(path, GKE_PLACEMENT)
    assert (err.value.obj, err.value.field) == (f"{path} row 3", column)
    assert problem in err.value.problem
    assert "\n" not in str(err.value)


def test_bad_optional_column_and_duplicate_name(tmp_path: Path) -> None:
    header = HEADER + ",name,checkpoint_s"
    with pytest.raises(InputError, match=r"row 2: checkpoint_s: "):
        read_jobs(csv_file(tmp_path, GOOD + ",a,-3", header=header), GKE_PLACEMENT)
    with pytest.raises(InputError, match=r"row 3: name: 'a' already used on row 2"):
        read_jobs(csv_file(tmp_path, GOOD + ",a,0", GOOD + ",a,0", header=header), GKE_PLACEMENT)


def test_missing_required_columns_are_named(tmp_path: Path) -> None:
    path = csv_file(tmp_path, "0,60", header="submit_s,duration_s")
    with pytest.raises(InputError) as err:
        read_jobs(path, GKE_PLACEMENT)
    assert err.value.field == "header"
    assert "pods" in err.value.problem and "kind" in err.value.problem and "submit_s" not in err.value.problem


def test_an_unknown_model_is_an_error_without_a_model_label(tmp_path: Path) -> None:
    placement = Placement(models={"a100": PlacementRule(node_selector={"pool": "big"})})
    with pytest.raises(InputError, match=r"row 2: gpu_model: unknown GPU model 'nvidia-tesla-t4' .*a100"):
        read_jobs(csv_file(tmp_path, GOOD), placement)


# -------------------------------------------------------------------------------------------------------- writing
def test_write_rejects_jobs_the_format_cannot_express(tmp_path: Path) -> None:
    odd = JobSpec(name="mig", submit_s=0, duration_s=1, requests=Resources.of({"nvidia.com/mig-1g.10gb": 1}))
    with pytest.raises(InputError, match=r"job mig: requests: .*mig-1g"):
        write_jobs(tmp_path / "x.csv", [odd])
    bytes_ = JobSpec(name="m", submit_s=0, duration_s=1, requests=Resources.of({MEMORY: 1000}))
    with pytest.raises(InputError, match="job m: requests: memory"):
        write_jobs(tmp_path / "x.csv", [bytes_])
    pinned = JobSpec(name="p", submit_s=0, duration_s=1, requests=Resources.of({CPU: 1}),
                     constraints=SchedulingConstraints(node_name="n1"))
    with pytest.raises(InputError, match="job p: constraints"):
        write_jobs(tmp_path / "x.csv", [pinned])


def test_model_of_inverts_constraints() -> None:
    gpu = pod_requests(gpus_per_pod=1, gpu_milli=1000, cpu_milli=1, memory_mib=1)
    for model in ("", "nvidia-l4"):
        assert GKE_PLACEMENT.model_of(GKE_PLACEMENT.constraints(model, gpu), gpu) == model
    assert GKE_PLACEMENT.model_of(SchedulingConstraints(), gpu) is None  # a GPU pod without the GPU toleration
