"""Reaching the API server from the CLI: a client from a kubeconfig or the in-cluster service account, and one
bounded check that the server answers before any work starts. Every failure is one line: what the user gave (a
missing or unusable kubeconfig, no service account outside a pod) is a `ConfigError` naming `--kubeconfig PATH`
(exit 2); a server that did not answer after `ATTEMPTS` tries is `ApiUnreachable` (exit 1).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuscale.inputs.files import CONFIG_BYTES, one_line, read_bytes
from gpuscale.model.errors import ConfigError, GpuscaleError, InputError

ATTEMPTS = 3
RETRY_DELAYS_S = (1.0, 2.0)
"""Waits between the attempts (tests set them to zero)."""
TIMEOUT_S = 5.0
"""Connect and read timeout of each attempt."""
POOL_CONNECTIONS = 32
"""Connections the client keeps to the API server: one held by each watch of the cache (up to 13 kinds with
ProvisioningRequests and Events) and room for the writers, leader election and status. The client's own default is
five per CPU core, so on a 2-core node the watches alone filled it and every other request opened and dropped a
connection ("Connection pool is full")."""


class ApiUnreachable(GpuscaleError):
    """The API server did not answer: the CLI prints the one line and exits 1 (try again, or check the address)."""


def api_client(kubeconfig: Path | None) -> Any:
    """A `kubernetes.client.ApiClient` for `kubeconfig`, or for the in-cluster service account when it is None."""
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.config.config_exception import ConfigException

    settings = client.Configuration()
    settings.connection_pool_maxsize = POOL_CONNECTIONS
    if kubeconfig is None:
        try:
            kube_config.load_incluster_config(client_configuration=settings)  # type: ignore[no-untyped-call]
        except ConfigException as err:
            why = one_line(str(err), 120)
            raise ConfigError("in-cluster config (no --kubeconfig)", f"not running in a pod, so no service account "
                                                                     f"({why}): give --kubeconfig") from None
        return client.ApiClient(settings)
    try:
        read_bytes(kubeconfig, CONFIG_BYTES, "a kubeconfig")  # missing, a directory, too large or binary
    except InputError as err:
        raise ConfigError(f"--kubeconfig {kubeconfig}", err.problem) from None
    try:
        return kube_config.new_client_from_config(config_file=str(kubeconfig),  # type: ignore[no-untyped-call]
                                                  client_configuration=settings)
    except Exception as err:  # ConfigException, yaml.YAMLError, and the TypeErrors and KeyErrors of odd shapes
        raise ConfigError(f"--kubeconfig {kubeconfig}", f"not a usable kubeconfig: {one_line(str(err), 200)}") \
            from None


@contextmanager
def api_errors(api: Any) -> Iterator[None]:
    """Errors of calls that follow `check_reachable`: the server refusing the credentials (401/403) is the user's to
    fix (`ConfigError`, exit 2); any other API error or a dropped connection is `ApiUnreachable` (exit 1)."""
    from kubernetes import client

    host = api.configuration.host
    try:
        yield
    except client.ApiException as err:
        if err.status in (401, 403):
            raise ConfigError(f"API server {host}", f"refused the credentials: HTTP {err.status} {err.reason} "
                                                    f"({one_line(str(err.body or ''), 160)})") from None
        raise ApiUnreachable(f"the API server at {host} failed: HTTP {err.status} {err.reason}") from None
    except OSError as err:
        raise ApiUnreachable(f"lost the API server at {host}: {one_line(str(err), 200)}") from None
    except Exception as err:
        if type(err).__module__.startswith("urllib3"):
            raise ApiUnreachable(f"lost the API server at {host}: {one_line(str(err), 200)}") from None
        raise


def check_reachable(api: Any) -> None:
    """GET /version up to `ATTEMPTS` times; raises `ApiUnreachable` naming the server and the last error."""
    from kubernetes import client

    host = api.configuration.host
    last = ""
    for attempt in range(ATTEMPTS):
        try:
            client.VersionApi(api).get_code(_request_timeout=TIMEOUT_S)
            return
        except client.ApiException as err:
            if err.status == 401:
                raise ConfigError(f"API server {host}", f"refused the credentials: HTTP 401 {err.reason}") from None
            if err.status == 403:
                return  # the server answers and knows who we are; what we may do is for the calls that follow
            last = f"HTTP {err.status} {err.reason}"
        except Exception as err:  # urllib3's connection, TLS and timeout errors
            last = one_line(str(getattr(err, "reason", None) or err), 200)
        if attempt < len(RETRY_DELAYS_S):
            time.sleep(RETRY_DELAYS_S[attempt])
    raise ApiUnreachable(f"cannot reach the API server at {host} (tried {ATTEMPTS} times): {last}")
