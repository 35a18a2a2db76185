"""After a test restarts the API server: wait until the controller-manager serves again (a new namespace gets its
default ServiceAccount), so the next test's `namespace` fixture does not inherit the reconnect delay."""

from __future__ import annotations

from harness import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def wait_control_plane_recovered(core: client.CoreV1Api, timeout_s: float = 120) -> None:
    ns = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(generate_name="recovery-")))
    name = ns.metadata.name

    def has_sa() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    try:
        wait_for(has_sa, timeout_s, desc="the controller-manager back after the API server restart")
    finally:
        core.delete_namespace(name)
