"""Fixtures for the end-to-end tests: one real control plane per session (see harness.py, docs/harness.md).

Every test under tests/e2e is marked ``e2e``. The binaries come from GPUSCALE_K8S_BIN, else KUBEBUILDER_ASSETS, else
the cache directory scripts/k8s-binaries.sh builds into; if they are missing the tests FAIL (they are part of
`make test`), telling you to run `make k8s-binaries`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import (
    BINARIES,
    DEFAULT_BIN_DIR,
    ControlPlane,
    find_bin_dir,
    ignore_status,
    kwok_node_body,
    missing_binaries,
    wait_for,
)
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuscale.kube import connect

E2E_DIR = Path(__file__).resolve().parent
_FAILED = pytest.StashKey[bool]()
_KEPT_RUN_DIR = pytest.StashKey[Path]()


def _in_e2e(item: pytest.Item) -> bool:
    return E2E_DIR in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _in_e2e(item):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    if report.failed and _in_e2e(item):
        item.config.stash[_FAILED] = True
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    kept = config.stash.get(_KEPT_RUN_DIR, None)
    if kept is not None:
        terminalreporter.write_line(f"[gpuscale e2e] control-plane logs and kubeconfig kept in {kept}")


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    bin_dir = find_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        pytest.fail(
            f"The e2e tests need a real control plane, but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing from {bin_dir}.\n"
            f"Run `make k8s-binaries` (builds {', '.join(BINARIES)} into {DEFAULT_BIN_DIR}, the default when "
            "GPUSCALE_K8S_BIN and KUBEBUILDER_ASSETS are unset), or point GPUSCALE_K8S_BIN / KUBEBUILDER_ASSETS at "
            "a directory holding them.",
            pytrace=False,
        )
    cp = ControlPlane(bin_dir)
    try:
        cp.start()
    except Exception:
        request.config.stash[_KEPT_RUN_DIR] = cp.run_dir
        raise
    yield cp
    keep = request.config.stash.get(_FAILED, False)
    cp.stop(keep_run_dir=keep)
    if keep or cp.run_dir.exists():
        request.config.stash[_KEPT_RUN_DIR] = cp.run_dir


@pytest.fixture(autouse=True)
def _control_plane_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail fast, with the component's log tail, if a control-plane process died before or during a test."""
    cp: ControlPlane | None = None
    if "control_plane" in request.fixturenames:
        cp = request.getfixturevalue("control_plane")
        cp.check_alive()
    yield
    if cp is not None:
        cp.check_alive()


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api = connect.api_client(control_plane.kubeconfig_path)  # as the controller makes it (its pool size)
    yield api
    api.close()


@pytest.fixture(scope="session")
def core_v1(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core_v1: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount, so pods can be created); deleted afterwards, its pods at
    once."""
    ns = core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(generate_name="e2e-")))
    name: str = ns.metadata.name

    def has_default_sa() -> bool:
        try:
            core_v1.read_namespaced_service_account("default", name)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    wait_for(has_default_sa, 30, desc=f"ServiceAccount {name}/default")
    yield name
    ignore_status(404, core_v1.delete_namespace, name)
    # The namespace goes in the background, for seconds (longer while CRDs are being installed); its pods go now, so
    # no pending pod of this test is still there for the next test's controller to scale up for.
    ignore_status(404, core_v1.delete_collection_namespaced_pod, name, grace_period_seconds=0)


@pytest.fixture
def make_node(core_v1: client.CoreV1Api) -> Iterator[Callable[..., client.V1Node]]:
    """Factory: ``make_node(prefix, labels=..., annotations=..., taints=..., registered=True)`` POSTs a kwok node
    (see harness.kwok_node_body) with a unique name and deletes it after the test."""
    created: list[str] = []

    def make(prefix: str = "kwok", **kwargs: Any) -> client.V1Node:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        node = core_v1.create_node(kwok_node_body(name, **kwargs))
        created.append(name)
        return node

    yield make
    for name in created:
        ignore_status(404, core_v1.delete_node, name)
