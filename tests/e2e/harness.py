"""A real Kubernetes control plane for the end-to-end tests, on 127.0.0.1 only.

etcd, kube-apiserver, kube-scheduler, kube-controller-manager (v1.37.2, built by scripts/k8s-binaries.sh) and kwok
standing in for the kubelets of fake nodes (stages in deploy/kwok/stages.yaml). Every port is picked free at run
time and bound to loopback; every process runs in its own process group, logs to a file in a run directory, and is
killed on stop(), at interpreter exit, and (Linux) by the kernel if the Python process dies.

    with ControlPlane(bin_dir) as cp:
        api = kubernetes.config.new_client_from_config(config_file=str(cp.kubeconfig_path))
        ...
        cp.restart_apiserver()
        cp.stop_kwok(); cp.start_kwok()

See docs/harness.md.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STAGES = REPO_ROOT / "deploy" / "kwok" / "stages.yaml"
K8S_VERSION = "v1.37.2"


def _default_bin_dir() -> Path:
    """Where scripts/k8s-binaries.sh builds (same defaulting as the script)."""
    cache = os.environ.get("GPUSCALE_K8S_CACHE")
    if cache:
        return Path(cache) / "bin"
    xdg_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return xdg_cache / "gpuscale" / f"k8s-{K8S_VERSION}" / "bin"


DEFAULT_BIN_DIR = _default_bin_dir()
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
HOST = "127.0.0.1"

# kube-controller-manager node lifecycle: kwok renews leases every node-lease-duration/4 = 10 s, so a node is marked
# Ready=Unknown (and tainted unreachable) 25 s after its last renewal, i.e. only after two missed renewals; the
# node-monitor pass runs every second. (Defaults: 5 s period, 50 s grace.)
NODE_LEASE_DURATION_S = 40
NODE_MONITOR_PERIOD = "1s"
NODE_MONITOR_GRACE_PERIOD = "25s"

T = TypeVar("T")


class HarnessError(RuntimeError):
    """The control plane could not be started or a component died."""


def wait_for(
    predicate: Callable[[], T],
    timeout_s: float,
    interval_s: float = 0.2,
    desc: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value (returned) or ``timeout_s`` elapses (AssertionError)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.1f}s waiting for {desc} (last value: {value!r})")
        time.sleep(interval_s)


def ignore_status(status: int, call: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """`call(*args, **kwargs)`, with an API error of `status` (404 when cleaning up what may be gone) as None."""
    try:
        return call(*args, **kwargs)
    except ApiException as err:
        if err.status != status:
            raise
        return None


def kwok_node_body(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[client.V1Taint] | None = None,
    registered: bool = True,
) -> client.V1Node:
    """A Node for ``POST /api/v1/nodes`` that kwok manages (annotation kwok.x-k8s.io/node=fake).

    With ``registered`` (the default) it carries status Ready=False/KubeletNotReady, as a kubelet registers its node:
    the apiserver keeps the status given at create, so kube-controller-manager keeps the not-ready taint on it until
    kwok's node-initialize stage makes it Ready. Without a Ready condition kube-controller-manager would lift that
    taint at once and kube-scheduler could bind pods to the node before it is Ready (kwok's node-register stage then
    adds Ready=False, but only after that window has opened).
    """
    status = None
    if registered:
        now = datetime.now(tz=UTC).replace(microsecond=0)
        status = client.V1NodeStatus(
            conditions=[
                client.V1NodeCondition(
                    type="Ready",
                    status="False",
                    reason="KubeletNotReady",
                    message="container runtime status check may not have completed yet",
                    last_heartbeat_time=now,
                    last_transition_time=now,
                )
            ]
        )
    return client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
            annotations={KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE, **(annotations or {})},
        ),
        spec=client.V1NodeSpec(taints=taints),
        status=status,
    )


def find_bin_dir() -> Path:
    """GPUSCALE_K8S_BIN, else KUBEBUILDER_ASSETS, else the default cache directory of scripts/k8s-binaries.sh."""
    for var in ("GPUSCALE_K8S_BIN", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(var)
        if value:
            return Path(value).expanduser()
    return DEFAULT_BIN_DIR


def missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (sockets held open together so they cannot collide)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent, even if it is SIGKILLed


_LIVE: set[Component] = set()


@atexit.register
def _kill_leftovers() -> None:
    for comp in list(_LIVE):
        comp.stop(timeout_s=2)


@dataclass(eq=False)
class Component:
    """One control-plane process, in its own process group, logging to ``log_path``."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    starts: int = 0

    def start(self) -> None:
        if self.running:
            raise HarnessError(f"{self.name} is already running")
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: no terminal SIGINT, killpg() reaches all of it
                preexec_fn=_set_pdeathsig if sys.platform.startswith("linux") else None,
            )
        _LIVE.add(self)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise HarnessError(f"{self.name} exited with code {self.proc.returncode}; log tail:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 10) -> None:
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Reap stragglers of the group (none expected: every component is a single Go binary).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"


class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager + kwok on 127.0.0.1.

    Attributes available after start(): ``kubeconfig_path``, ``api_url``, ``token``, ``ca_path``, ``run_dir``.
    """

    def __init__(
        self,
        bin_dir: Path | str | None = None,
        stages_path: Path | str = DEFAULT_STAGES,
        run_dir: Path | str | None = None,
        start_timeout_s: float = 90,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir is not None else find_bin_dir()
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise HarnessError(
                f"control-plane binaries missing from {self.bin_dir}: {', '.join(missing)}. "
                "Run `make k8s-binaries` (or point GPUSCALE_K8S_BIN / KUBEBUILDER_ASSETS at a directory holding "
                f"{', '.join(BINARIES)})."
            )
        if shutil.which("openssl") is None:
            raise HarnessError("openssl is required to create the control plane's certificates and keys")
        self.stages_path = Path(stages_path).resolve()
        self.start_timeout_s = start_timeout_s
        self.run_dir = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="gpuscale-k8s-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.run_dir / "logs"
        self.cert_dir = self.run_dir / "pki"
        self.kubeconfig_path = self.run_dir / "kubeconfig"
        self.token = secrets.token_hex(24)
        (
            self.etcd_port,
            self.etcd_peer_port,
            self.api_port,
            self.scheduler_port,
            self.kcm_port,
            self.kwok_port,
        ) = _free_ports(6)
        self.api_url = f"https://{HOST}:{self.api_port}"
        self.ca_path = self.cert_dir / "ca.crt"
        self.components: dict[str, Component] = {}
        self.started = False

    # ----------------------------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.stop(keep_run_dir=exc_type is not None)

    def start(self) -> None:
        try:
            self._prepare_files()
            self._define_components()
            self._start_and_wait("etcd", self._etcd_ready)
            self._start_and_wait("kube-apiserver", self._apiserver_ready)
            self._start_and_wait("kube-controller-manager", lambda: self._component_healthy(self.kcm_port))
            self._start_and_wait("kube-scheduler", lambda: self._component_healthy(self.scheduler_port))
            self._start_and_wait("kwok", self._kwok_ready)
            # kube-controller-manager's service-account controller must have run before pods can be created.
            self._wait("default ServiceAccount",
                       lambda: self._get_ok("/api/v1/namespaces/default/serviceaccounts/default"))
            self.started = True
        except BaseException:
            self.stop(keep_run_dir=True)
            raise

    def stop(self, keep_run_dir: bool = False) -> None:
        """Stop everything (reverse start order). The run directory is deleted unless ``keep_run_dir`` or
        GPUSCALE_KEEP_LOGS=1; when kept, its path is printed to stderr."""
        for name in reversed(list(self.components)):
            self.components[name].stop()
        self.started = False
        keep = keep_run_dir or os.environ.get("GPUSCALE_KEEP_LOGS") == "1"
        if keep:
            print(f"\n[gpuscale e2e] control-plane run directory (logs, kubeconfig) kept: {self.run_dir}",
                  file=sys.stderr)
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def restart_apiserver(self, down_s: float = 0.0) -> None:
        """Stop kube-apiserver alone, optionally leave it down ``down_s`` seconds, start it again and wait for
        /readyz. etcd keeps all state; the other components reconnect by themselves."""
        self.stop_apiserver()
        down_until = time.monotonic() + down_s
        while time.monotonic() < down_until:
            time.sleep(0.1)
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        self.components["kube-apiserver"].stop()

    def start_apiserver(self) -> None:
        self._start_and_wait("kube-apiserver", self._apiserver_ready)

    def stop_kwok(self) -> None:
        """Stop kwok: nodes stop renewing their leases and go NotReady after the node-monitor grace period."""
        self.components["kwok"].stop()

    def start_kwok(self) -> None:
        """Start kwok again. It takes a new lease-holder identity, so it only takes over a node once that node's old
        lease has expired (node-lease-duration-seconds after its last renewal)."""
        self._start_and_wait("kwok", self._kwok_ready)

    def check_alive(self) -> None:
        """Raise HarnessError (with the log tail) if a component that should be running has exited."""
        for comp in self.components.values():
            comp.check_alive()

    def log_path(self, component: str) -> Path:
        return self.components[component].log_path

    @contextlib.contextmanager
    def kwok_stopped(self) -> Iterator[None]:
        self.stop_kwok()
        try:
            yield
        finally:
            self.start_kwok()

    # ----------------------------------------------------------------------------------------------------- set-up
    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=self.cert_dir)

    def _prepare_files(self) -> None:
        self.log_dir.mkdir(exist_ok=True)
        self.cert_dir.mkdir(exist_ok=True)
        (self.run_dir / "etcd").mkdir(exist_ok=True, mode=0o700)
        # A throwaway CA and a serving certificate for 127.0.0.1/localhost, so clients can verify the apiserver.
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gpuscale-e2e-ca",
                      "-keyout", "ca.key", "-out", "ca.crt")
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
                      "-keyout", "apiserver.key", "-out", "apiserver.csr")
        (self.cert_dir / "san.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
        )
        self._openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                      "-days", "2", "-extfile", "san.ext", "-out", "apiserver.crt")
        # One RSA key signs (apiserver, kube-controller-manager) and verifies service-account tokens.
        self._openssl("genrsa", "-out", "sa.key", "2048")
        token_file = self.cert_dir / "tokens.csv"
        token_file.write_text(f'{self.token},gpuscale-e2e-admin,gpuscale-e2e-admin,"system:masters"\n')
        token_file.chmod(0o600)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "e2e", "cluster": {"server": self.api_url, "certificate-authority": str(self.ca_path)}}
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }
        self.kubeconfig_path.write_text(json.dumps(kubeconfig, indent=2))  # JSON is valid kubeconfig YAML
        self.kubeconfig_path.chmod(0o600)

    def _define_components(self) -> None:
        b, pki, kc = self.bin_dir, self.cert_dir, str(self.kubeconfig_path)
        etcd_url = f"http://{HOST}:{self.etcd_port}"
        peer_url = f"http://{HOST}:{self.etcd_peer_port}"
        argvs = {
            "etcd": [
                str(b / "etcd"), "--name=node0", f"--data-dir={self.run_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=node0={peer_url}", "--initial-cluster-state=new",
                "--unsafe-no-fsync", "--log-level=warn",
                # metrics stay on the client URL (no --listen-metrics-urls); pprof is off by default.
            ],
            "kube-apiserver": [
                str(b / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={HOST}", f"--advertise-address={HOST}", f"--secure-port={self.api_port}",
                f"--cert-dir={pki}", f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                # On SIGTERM close open watches within 2 s; otherwise the HTTP server waits 60 s for them to drain.
                "--shutdown-watch-termination-grace-period=2s",
            ],
            "kube-controller-manager": [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                f"--bind-address={HOST}", f"--secure-port={self.kcm_port}", f"--cert-dir={pki / 'kcm'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--node-monitor-period={NODE_MONITOR_PERIOD}",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}",
                "--profiling=false",
            ],
            "kube-scheduler": [
                str(b / "kube-scheduler"),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                f"--bind-address={HOST}", f"--secure-port={self.scheduler_port}", f"--cert-dir={pki / 'scheduler'}",
                "--profiling=false",
            ],
            "kwok": [
                str(b / "kwok"),
                f"--kubeconfig={kc}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
                f"--node-ip={HOST}",
                f"--node-lease-duration-seconds={NODE_LEASE_DURATION_S}",
                f"--config={self.stages_path}",
                # kwok's own server (healthz, used for readiness) on loopback; no --node-port, so no kubelet port.
                f"--server-address={HOST}:{self.kwok_port}",
                "--cidr=10.244.0.0/16",  # fake pod IPs, never contacted; kept apart from the service range
            ],
        }
        for name, argv in argvs.items():
            self.components[name] = Component(name, argv, self.log_dir / f"{name}.log")

    # ------------------------------------------------------------------------------------------------- readiness
    def _wait(self, what: str, probe: Callable[[], bool], component: Component | None = None) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if component is not None:
                component.check_alive()
            if probe():
                return
            if time.monotonic() >= deadline:
                tail = f"; log tail:\n{component.log_tail()}" if component else ""
                raise HarnessError(f"{what} not ready after {self.start_timeout_s:.0f}s (run dir {self.run_dir}){tail}")
            time.sleep(0.1)

    def _start_and_wait(self, name: str, probe: Callable[[], bool]) -> None:
        comp = self.components[name]
        comp.start()
        self._wait(name, probe, comp)

    def _ssl_context(self, verify: bool = True) -> ssl.SSLContext:
        if verify:
            return ssl.create_default_context(cafile=str(self.ca_path))
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    @staticmethod
    def _http_ok(url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None) -> bool:
        try:
            request = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(request, timeout=2, context=context) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _get_ok(self, path: str) -> bool:
        return self._http_ok(self.api_url + path, self._ssl_context(), {"Authorization": f"Bearer {self.token}"})

    def _etcd_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.etcd_port}/health", timeout=2) as r:
                return bool(json.load(r).get("health") == "true")
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _apiserver_ready(self) -> bool:
        return self._get_ok("/readyz")

    def _component_healthy(self, port: int) -> bool:
        # kube-scheduler / kube-controller-manager serve a self-signed cert. Without --authentication-kubeconfig and
        # --authorization-kubeconfig they treat every request as anonymous and forbid all but the always-allowed
        # /healthz, /readyz and /livez, which is all the harness needs (and their /metrics stay closed).
        return self._http_ok(f"https://{HOST}:{port}/healthz", self._ssl_context(verify=False))

    def _kwok_ready(self) -> bool:
        return self._http_ok(f"http://{HOST}:{self.kwok_port}/healthz")
