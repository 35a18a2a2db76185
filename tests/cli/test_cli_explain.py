"""`gpuscale explain` on a dump with Kueue Workloads, ProvisioningRequests and PodTemplates: text, JSON, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gpuscale.cli import app

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "seed-pools" / "gpuscale.yaml"
NOW = "1800000000"
CREATED = "2027-01-15T07:00:00Z"
runner = CliRunner()
GPU_SPEC = {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "8"}}}]}


def pod(name: str, *, owner: str | None = None, gated: bool = False, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "creationTimestamp": CREATED, **extra}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "u",
                                    "controller": True}]
    spec = {**GPU_SPEC, **({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]} if gated else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Pending", "conditions": [] if gated else [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}


def dump(tmp_path: Path) -> Path:
    objects = [
        pod("queued-0", owner="queued", gated=True),
        pod("plain-0"),
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
         "metadata": {"name": "job-queued-1a2b3", "namespace": "team-a",
                      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "queued", "uid": "u"}]},
         "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 1, "template": {"spec": GPU_SPEC}}]},
         "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                    "message": "couldn't assign flavors to pod set main: insufficient unused quota "
                                               "for nvidia.com/gpu in flavor a100, 8 more needed",
                                    "lastTransitionTime": CREATED}]}},
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "ppt-big-main", "namespace": "team-a"},
         "template": {"spec": GPU_SPEC}},
        {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
         "metadata": {"name": "big", "namespace": "team-a", "creationTimestamp": CREATED},
         "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                  "podSets": [{"podTemplateRef": {"name": "ppt-big-main"}, "count": 9}]}},
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["explain", *args, "--config", str(CONFIG), "--now", NOW])
    return result.exit_code, result.stdout, result.stderr


def test_quota_hold_from_the_workload(tmp_path: Path) -> None:
    code, out, err = run("team-a/queued-0", "--cluster", str(dump(tmp_path)), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["hold"] == "quota" and "8 more needed" in doc["reason"]
    assert doc["target"] == "Pod team-a/queued-0" and doc["release"]


def test_capacity_for_a_plain_pod_in_text(tmp_path: Path) -> None:
    code, out, err = run("team-a/plain-0", "--cluster", str(dump(tmp_path)))
    assert code == 0, err
    assert "held by:  capacity" in out and "gpu-training-a100" in out and "released:" in out


def test_request_beyond_pool_max_is_held_by_limits(tmp_path: Path) -> None:
    code, out, err = run("team-a/big", "--cluster", str(dump(tmp_path)), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["hold"] == "limits" and "max_size 8" in doc["reason"], doc


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    path = dump(tmp_path)
    for args, words in ((("a/b/c", "--cluster", str(path)), "expected namespace/name or a node name"),
                        (("nope", "--cluster", str(path)), "no such pod, ProvisioningRequest or node"),
                        (("team-a/ghost", "--cluster", str(path)), "no such pod, ProvisioningRequest or node"),
                        (("team-a/x",), "give exactly one"),
                        (("team-a/x", "--cluster", str(tmp_path / "missing.yaml")), "missing.yaml")):
        code, _, err = run(*args)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_explain_a_degraded_node_of_the_seed_cluster(tmp_path: Path) -> None:
    """The issue's XID 79 case: gpu-training-a100-h4m2 advertises 7 of its 8 GPUs."""
    text = (CONFIG.parent / "cluster.yaml").read_text(encoding="utf-8")
    at = text.index("name: gpu-training-a100-h4m2")
    head, tail = text[:at], text[at:]
    tail = tail.replace("allocatable: *id001", "allocatable:\n    cpu: 95690m\n    memory: 630Gi\n    pods: '110'\n"
                                                "    nvidia.com/gpu: '7'", 1)
    path = tmp_path / "cluster.yaml"
    path.write_text(head + tail, encoding="utf-8")
    code, out, err = run("gpu-training-a100-h4m2", "--cluster", str(path))
    assert code == 0, err
    assert "degraded" in out and "nvidia.com/gpu 7 of 8" in out
