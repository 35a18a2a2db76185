"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's `leaderelection` semantics.

Why these rules (each is client-go's):
- A candidate takes the lease only when it is free (no holder, or released) or **expired by the candidate's own
  clock**: it remembers the record it last saw and when (monotonic) it saw it change; the lease expires
  `leaseDurationSeconds` (the record's value) after that moment. No clock comparison across machines is ever made —
  `renewTime` is only compared for equality.
- Every write carries the `resourceVersion` read just before it (optimistic concurrency): two candidates racing for
  an expired lease both PUT, the API server accepts one and answers 409 to the other.
- The leader renews every `retry_period_s`. It counts as leader only while its last successful renewal started less
  than `renew_deadline_s` ago (`is_leader()` checks that on every call, so a leader whose renewals hang stops acting at
  once, not when the hung call returns). As `renew_deadline_s` < `lease_duration_s`, it stops before any other
  replica could see the lease expire.
- On a clean shutdown the leader releases: holder emptied, duration 1 s, so a standby takes over at its next retry.

Side effects: HTTP calls to the API server and one daemon thread (`start()`); the clock is injectable for tests.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.model.errors import ConfigError

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
"""client-go's `JitterFactor`: acquire retries wait retry_period × [1, 1.2); the renew deadline must exceed
retry_period × 1.2 so at least one retry fits."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    name: str = "gpuscale"
    namespace: str = "kube-system"
    lease_duration_s: int = 15
    """Written to the Lease as `leaseDurationSeconds` (whole seconds, as the API field is)."""
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_duration_s < 1:
            raise ConfigError("--lease-duration", f"must be at least 1 s, got {self.lease_duration_s}")
        if not self.lease_duration_s > self.renew_deadline_s:
            raise ConfigError("--renew-deadline", f"{self.renew_deadline_s:g} s must be below the lease duration "
                                                  f"{self.lease_duration_s} s")
        if not self.renew_deadline_s > JITTER_FACTOR * self.retry_period_s or self.retry_period_s <= 0:
            raise ConfigError("--retry-period", f"{self.retry_period_s:g} s must be positive and below the renew "
                                                f"deadline / {JITTER_FACTOR} ({self.renew_deadline_s:g} s)")


def default_identity() -> str:
    """`<pod name or hostname>_<random>`: unique even when two processes share a host (client-go's convention)."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


def _micro_time() -> str:
    """A `MicroTime` as the API server writes it (RFC 3339, microseconds, UTC)."""
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class _Observed:
    spec: dict[str, Any]
    """The Lease's spec as last read: compared whole, like client-go compares the raw record."""
    at_s: float
    """Our monotonic clock when we first saw this spec."""


class LeaderElector:
    """Acquires and renews one Lease in a background thread; `is_leader()` is the fence every action checks."""

    def __init__(self, api_client: client.ApiClient, settings: LeaseSettings, *, identity: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[bool], None] | None = None) -> None:
        api = client.CoordinationV1Api(api_client)
        # raw dict bodies are sent as they are (the typed stubs want V1Lease models)
        self._read_lease: Callable[..., Any] = api.read_namespaced_lease
        self._create_lease: Callable[..., Any] = api.create_namespaced_lease
        self._replace_lease: Callable[..., Any] = api.replace_namespaced_lease
        self.settings = settings
        self.identity = identity or default_identity()
        self._clock = clock
        self.on_change = on_change
        """Called with True when this replica starts leading and False when it stops (from the elector's thread)."""
        self._lock = threading.Lock()
        self._observed: _Observed | None = None
        self._leading = False
        self._renewed_at_s = float("-inf")
        self.last_attempt_s: float | None = None
        """Monotonic time of the last acquire/renew attempt that reached the API server (for /healthz)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the fence

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self._clock() - self._renewed_at_s < self.settings.renew_deadline_s

    def holder(self) -> str | None:
        """The holder as last observed (ourselves included)."""
        with self._lock:
            return (self._observed.spec.get("holderIdentity") or None) if self._observed else None

    # --- one attempt

    def try_acquire_or_renew(self) -> bool:
        """One client-go `tryAcquireOrRenew`: True if we hold the lease after this call."""
        started = self._clock()
        timeout = max(1.0, min(self.settings.renew_deadline_s / 2, 5.0))
        try:
            lease = self._read(timeout)
        except ApiException as err:
            if err.status != 404:
                raise
            lease = None
        self.last_attempt_s = self._clock()
        if lease is None:
            return self._create(started, timeout)
        spec = dict(lease.get("spec") or {})
        with self._lock:
            if self._observed is None or self._observed.spec != spec:
                self._observed = _Observed(spec, started)
            observed_at = self._observed.at_s
        holder = spec.get("holderIdentity") or ""
        duration = int(spec.get("leaseDurationSeconds") or self.settings.lease_duration_s)
        if holder and holder != self.identity and observed_at + duration > started:
            return False  # someone else holds a lease that has not expired by our clock
        now = _micro_time()
        new = dict(spec, holderIdentity=self.identity, leaseDurationSeconds=self.settings.lease_duration_s,
                   renewTime=now)
        if holder != self.identity:
            new |= {"acquireTime": now, "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace,
                             "resourceVersion": lease["metadata"]["resourceVersion"]},
                "spec": new}
        try:
            self._replace_lease(self.settings.name, self.settings.namespace, body,
                                               _request_timeout=timeout)
        except ApiException as err:
            if err.status == 409:
                return False  # another replica wrote first
            raise
        self._won(new, started)
        return True

    def _read(self, timeout: float) -> dict[str, Any]:
        resp = self._read_lease(self.settings.name, self.settings.namespace, _preload_content=False,
                                _request_timeout=timeout)
        try:
            return dict(json.loads(resp.data))
        finally:
            resp.release_conn()

    def _create(self, started: float, timeout: float) -> bool:
        now = _micro_time()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.settings.lease_duration_s,
                "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace}, "spec": spec}
        try:
            self._create_lease(self.settings.namespace, body, _request_timeout=timeout)
        except ApiException as err:
            if err.status == 409:
                return False  # created by another replica meanwhile
            raise
        self._won(spec, started)
        return True

    def _won(self, spec: dict[str, Any], started: float) -> None:
        # The renewal counts from before the request was sent: other replicas saw it no earlier than that.
        with self._lock:
            # leading "in effect": a renewal that comes back after the deadline passed (a hung call) starts a new term
            was = self._leading and started - self._renewed_at_s < self.settings.renew_deadline_s
            self._observed = _Observed(spec, started)
            self._renewed_at_s = started
            self._leading = True
        if not was:
            log.info(json.dumps({"msg": "became leader", "identity": self.identity,
                                 "lease": f"{self.settings.namespace}/{self.settings.name}"}))
            self._notify(True)

    def _notify(self, leading: bool) -> None:
        if self.on_change is not None:
            self.on_change(leading)

    # --- the background loop

    def step(self) -> bool:
        """One attempt, with the loss check: an API failure is a failed attempt, never an exception."""
        try:
            ok = self.try_acquire_or_renew()
        except Exception as err:  # outermost layer of the elector: any API trouble is a failed attempt
            log.warning(json.dumps({"msg": "lease attempt failed", "error": f"{type(err).__name__}: {err}"[:300]}))
            ok = False
        if not ok:
            with self._lock:
                lost = self._leading and self._clock() - self._renewed_at_s >= self.settings.renew_deadline_s
                if lost:
                    self._leading = False
            if lost:
                log.warning(json.dumps({"msg": "lost leadership", "identity": self.identity}))
                self._notify(False)
        return ok

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            wait = self.settings.retry_period_s
            if not self._leading:
                wait *= 1 + random.random() * (JITTER_FACTOR - 1)
            if self._leading:
                # wake in time to notice a missed deadline even while renewals fail fast
                wait = min(wait, max(0.05, self._renewed_at_s + self.settings.renew_deadline_s - self._clock()))
            self._stop.wait(wait)

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name="gpuscale-leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, release: bool = True) -> None:
        """Stop renewing; with `release`, give the lease up (only if we still hold it) so a standby takes over now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.settings.renew_deadline_s)
        with self._lock:
            was = self._leading
            self._leading = False
        if was:
            self._notify(False)
        if release and was:
            self._release()

    def _release(self) -> None:
        try:
            lease = self._read(5.0)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro_time()
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.settings.name, "namespace": self.settings.namespace,
                                 "resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": {"leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
                             "leaseTransitions": int(spec.get("leaseTransitions") or 0)}}
            self._replace_lease(self.settings.name, self.settings.namespace, body,
                                               _request_timeout=5.0)
            log.info(json.dumps({"msg": "released the lease", "identity": self.identity}))
        except Exception as err:  # best effort: the lease then simply expires
            log.warning(json.dumps({"msg": "lease release failed", "error": f"{type(err).__name__}: {err}"[:300]}))
