"""The helm binary for the chart tests: GPUSCALE_HELM_BIN, else the cache scripts/helm-binary.sh builds into. Missing,
the tests FAIL (they are part of `make test`), telling you to run `make helm-binary`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpuscale"
HELM_VERSION = "v3.22.0"  # scripts/helm-binary.sh
DEFAULT_HELM = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpuscale" / f"helm-{HELM_VERSION}" / \
    "bin" / "helm"


@pytest.fixture(scope="session")
def helm() -> Path:
    path = Path(os.environ.get("GPUSCALE_HELM_BIN") or DEFAULT_HELM)
    if not path.is_file():
        pytest.fail(f"The chart tests need helm, but {path} is missing. Run `make helm-binary` (builds helm "
                    f"{HELM_VERSION} into {DEFAULT_HELM}) or point GPUSCALE_HELM_BIN at a helm binary.", pytrace=False)
    return path


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)
