"""The Containerfile's properties, read from the file (the image itself is built and smoke-run by `make image`,
scripts/image.sh, which is not part of `make test`: cold it takes longer than a test should): a base pinned by
digest, a numeric non-root USER, `gpuscale` as the exec-form ENTRYPOINT, nothing written at run time outside /tmp.
When a built image is present in buildah's storage (and this user may read it), its OCI config is checked too."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib

import pytest

from .conftest import ROOT

CONTAINERFILE = ROOT / "Containerfile"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


def test_the_base_is_pinned_by_digest() -> None:
    steps = instructions()
    (base,) = [rest for k, rest in steps if k == "ARG" and rest.startswith("BASE=")]
    assert DIGEST.search(base), base
    assert steps[0] == ("ARG", base)  # before the first FROM, so FROM ${BASE} sees it
    stages = [rest for k, rest in steps if k == "FROM"]
    assert stages[0].startswith("${BASE}")
    assert all(s.startswith("${BASE}") or s.split()[0] in ("python", "build") for s in stages), stages


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [rest for k, rest in final_stage() if k == "USER"]
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0, users[-1]
    assert users[-1] == "65532:65532"  # the uid charts/gpuscale and deploy/kustomize run as


def test_gpuscale_is_the_exec_form_entrypoint() -> None:
    (entrypoint,) = [rest for k, rest in final_stage() if k == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["/opt/gpuscale/bin/gpuscale"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "gpuscale" in pyproject["project"]["scripts"]  # the console script pip puts in /opt/gpuscale/bin


def test_nothing_is_written_outside_tmp_at_run_time() -> None:
    env = " ".join(rest for k, rest in final_stage() if k == "ENV")
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "XDG_CACHE_HOME=/tmp/", "XDG_CONFIG_HOME=/tmp/"):
        assert setting in env, setting
    assert ("WORKDIR", "/tmp") in final_stage()
    run_steps = " ".join(rest for k, rest in instructions() if k == "RUN")
    assert "--no-cache-dir" in run_steps and "--no-index" in run_steps  # the wheelhouse, offline


def built_image_config() -> dict[str, object] | None:
    if shutil.which("buildah") is None:
        return None
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    result = subprocess.run(["buildah", "--storage-driver", "vfs", "inspect", "--type", "image",
                             f"localhost/gpuscale:{version}"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return None
    config: dict[str, object] = json.loads(result.stdout)["OCIv1"]["config"]
    return config


def test_a_built_image_has_the_containerfiles_user_and_entrypoint() -> None:
    config = built_image_config()
    if config is None:
        pytest.skip("no image built here (`make image` builds localhost/gpuscale:VERSION)")
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/opt/gpuscale/bin/gpuscale"]
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]  # type: ignore[operator]

