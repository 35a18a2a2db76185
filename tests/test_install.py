"""The wheel as a user gets it: built with `python -m build`, installed into a clean venv with the runtime
dependencies only (no dev extra; the versions of constraints.txt), and every command run from outside the source tree.

One venv per session (a module fixture). pip reaches the package index for the runtime wheels, reusing its cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.install

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "examples" / "seed-pools"
SCENARIO = {
    "name": "install-check", "duration": "1h", "seed": 5,
    "config": {"pools": [
        {"name": "cpu", "usd_per_hour": 0.8, "min_size": 1, "max_size": 4,
         "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}},
        {"name": "t4", "usd_per_hour": 0.54, "max_size": 4,
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
         "gpu": {"model": "nvidia-tesla-t4", "count": 1}, "allocatable": {"cpu": "4", "memory": "15Gi"}},
    ]},
    "workload": {"batch": {"jobs_per_hour": 20}},
}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the clean venv's bin directory, an environment without this checkout on any path)."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"  # a copy, so the build leaves nothing (build/, egg-info) in the checkout
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    built = _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(root / "dist"), str(source)], root, env)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next((root / "dist").glob("gpuscale-*.whl"))
    _run_ok([sys.executable, "-m", "venv", str(root / "venv")], root, env)
    bin_dir = root / "venv" / "bin"
    _run_ok([str(bin_dir / "pip"), "install", "--quiet", "-c", str(REPO / "constraints.txt"), str(wheel)], root, env)
    return bin_dir, env


def _run_ok(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = _run(args, cwd, env)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_wheel_has_the_licence_and_only_runtime_dependencies(installed: tuple[Path, dict[str, str]],
                                                              tmp_path: Path) -> None:
    bin_dir, env = installed
    probe = ("import importlib.metadata as m, importlib.util as u, gpuscale; d = m.distribution('gpuscale'); "
             "print(gpuscale.__file__); print(d.metadata['License-Expression']); "
             "print(sorted(str(f) for f in d.files if 'licenses' in str(f))); "
             "print([n for n in ('pytest', 'mypy', 'hypothesis') if u.find_spec(n)])")
    lines = _run_ok([str(bin_dir / "python"), "-c", probe], tmp_path, env).splitlines()
    assert "site-packages" in lines[0] and str(REPO) not in lines[0]
    assert lines[1] == "Apache-2.0"
    assert "LICENSE" in lines[2]
    assert lines[3] == "[]"  # no dev tool came along


def test_version_is_the_package_metadata(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    expected = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert _run_ok([str(bin_dir / "gpuscale"), "--version"], tmp_path, env).strip() == f"gpuscale {expected}"


def test_fit_and_plan_on_the_examples(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    gpuscale = str(bin_dir / "gpuscale")
    fit = json.loads(_run_ok([gpuscale, "fit", "--cluster", str(SEED / "cluster.yaml"), "--pools",
                              str(SEED / "pools.yaml"), "--format", "json"], tmp_path, env))
    assert fit and all("pod" in item for item in fit)
    plan = json.loads(_run_ok([gpuscale, "plan", "--cluster", str(SEED / "cluster.yaml"), "--config",
                               str(SEED / "gpuscale.yaml"), "--format", "json", "--now", "1800000000"],
                              tmp_path, env))
    assert plan["scale_up"], plan  # the seed cluster has pending pods that need a new node


def test_simulate_a_short_scenario(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO), encoding="utf-8")
    _run_ok([str(bin_dir / "gpuscale"), "simulate", str(scenario), "--quiet", "--json", "r.json"], tmp_path, env)
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result["scenario"] == "install-check" and result["pending_to_running_s"]["count"] > 0


def test_run_and_config_commands(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    gpuscale = str(bin_dir / "gpuscale")
    assert "--kubeconfig" in _run_ok([gpuscale, "run", "--help"], tmp_path, env)
    # `run` imports the Kubernetes client and the metrics server: with a kubeconfig that is not there it must get
    # as far as reading it, and fail in one line, exit 2.
    done = _run([gpuscale, "run", "--config", str(SEED / "gpuscale.yaml"), "--kubeconfig", "missing.yaml",
                 "--once"], tmp_path, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "missing.yaml" in done.stderr
