"""A list+watch cache of Nodes, Pods, PodDisruptionBudgets, the storage objects the volume filters read
(PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes) and the DRA objects DynamicResources reads
(ResourceSlices, DeviceClasses, ResourceClaims, ResourceClaimTemplates): the controller's `ClusterReader`.

One background thread per kind lists the kind (paged), then watches from the list's resourceVersion with bookmarks.
The raw JSON dicts are kept as the API server sent them (less `managedFields`), each converted with `kube/convert.py`
once per resourceVersion: a list converts its objects in its own thread before the kind counts as synced (outside the
lock, so a relist of 100,000 pods does not stall the other threads or a snapshot, and the first tick does not pay for
it); objects from watch events are converted lazily by the next `snapshot()`.

The synced gate (`snapshot()` raises `NotSynced`):
- until every kind has listed once;
- while any kind is relisting — after `410 Gone` (the watch's resourceVersion expired) and after any broken watch
  (connection refused/reset, read timeout, a non-410 error): a relist both proves the API server answers again and
  replaces whatever the broken stream may have missed. A watch the server ends normally (`timeoutSeconds`) is
  resumed from the last resourceVersion without a relist or a gap in the gate;
- while any cached object fails to convert (`InputError`): the object is kept out of the view and named in the
  reason, because acting on a view with a missing node or pod is acting on a partial view.
Retries back off exponentially (0.2 s doubling to `max_backoff_s`), reset after a successful list.

Listeners (`add_listener`, e.g. the phase tracer in `kube/tracer.py`) get every object the cache lists or a watch
delivers, outside the lock. With `watch_events=True` a fourth thread lists+watches core/v1 Events the same way, only
to hand them to listeners: Events are not stored, not part of the synced gate, and their thread never holds up
`snapshot()`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from gpuscale.kube.convert import (
    csi_node_from_k8s,
    node_from_k8s,
    pdb_from_k8s,
    pod_from_k8s,
    pv_from_k8s,
    pvc_from_k8s,
    storage_class_from_k8s,
)
from gpuscale.kube.convert_dra import DRA_CONVERT
from gpuscale.loop.ports import NotSynced
from gpuscale.model.cluster import Cluster
from gpuscale.model.dra import Dra
from gpuscale.model.errors import InputError
from gpuscale.model.volumes import Storage

log = logging.getLogger(__name__)

NODE, POD, PDB, EVENT = "Node", "Pod", "PodDisruptionBudget", "Event"
PV, PVC, STORAGE_CLASS, CSI_NODE = "PersistentVolume", "PersistentVolumeClaim", "StorageClass", "CSINode"
SLICE, DEVICE_CLASS, CLAIM, CLAIM_TEMPLATE = "ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"
KINDS = (NODE, POD, PDB, PV, PVC, STORAGE_CLASS, CSI_NODE, SLICE, DEVICE_CLASS, CLAIM, CLAIM_TEMPLATE)
"""The kinds the synced gate and `snapshot()` cover."""
Listener = Callable[[str, str, Mapping[str, Any], bool], None]
"""`(kind, event type — ADDED/MODIFIED/DELETED, or LISTED for a (re)list item —, object, listed)`."""
_CONVERTERS: Mapping[str, Callable[[Mapping[str, Any]], Any]] = {
    NODE: node_from_k8s, POD: pod_from_k8s, PDB: pdb_from_k8s, PV: pv_from_k8s, PVC: pvc_from_k8s,
    STORAGE_CLASS: storage_class_from_k8s, CSI_NODE: csi_node_from_k8s, **DRA_CONVERT}

_DRA_LISTS = {SLICE: "list_resource_slice", DEVICE_CLASS: "list_device_class",
              CLAIM: "list_resource_claim_for_all_namespaces",
              CLAIM_TEMPLATE: "list_resource_claim_template_for_all_namespaces"}
"""`ResourceV1Api` list calls of the DRA kinds (resource.k8s.io/v1)."""


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _converted(kind: str, key: str, obj: Mapping[str, Any], cached: _Converted | None) -> _Converted:
    """`cached` if it is of the same resourceVersion, else a new conversion (or its `InputError` message)."""
    rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    if cached is not None and cached.resource_version == rv and rv:
        return cached
    try:
        return _Converted(rv, value=_CONVERTERS[kind](obj))
    except InputError as err:
        log.warning("cannot convert %s %s: %s", kind, key, err)
        return _Converted(rv, error=str(err))


def _slim(obj: dict[str, Any]) -> None:
    """Drop `metadata.managedFields` (server-side apply bookkeeping nothing here reads): about 45 % of a typical
    pod's memory as a decoded dict (bench/watch.py: 8.0 → 4.3 KiB per pod)."""
    meta = obj.get("metadata")
    if type(meta) is dict:
        meta.pop("managedFields", None)


@dataclass(slots=True)
class _Converted:
    resource_version: str
    value: Any = None
    error: str | None = None


@dataclass(slots=True)
class _Store:
    """One kind's objects and its watch state; guarded by the cache's lock."""

    kind: str
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    converted: dict[str, _Converted] = field(default_factory=dict)
    synced: bool = False
    relisting: bool = True
    resource_version: str | None = None
    last_error: str | None = None
    lists: int = 0


class _RawWatch(watch.Watch):
    """A `Watch` that yields the events' objects as the raw dicts (no model deserialisation) and still turns ERROR
    events into `ApiException` (410 Gone included); `deserialize=False` would skip that handling."""

    def get_return_type(self, func: Any) -> Any:
        return ""


class WatchCache:
    """`ClusterReader` over list+watch of nodes, pods and PDBs. `start()` launches the threads; `close()` stops them.

    A subclass may watch other kinds by overriding `kinds` and `_list_call` (see `kube/provreq.py`)."""

    kinds: tuple[str, ...] = KINDS

    def __init__(self, api_client: client.ApiClient, *, watch_timeout_s: int = 60, max_backoff_s: float = 10.0,
                 page_size: int = 500, watch_events: bool = False) -> None:
        self._core = client.CoreV1Api(api_client)
        self._policy = client.PolicyV1Api(api_client)
        self._watch_timeout_s = watch_timeout_s
        self._max_backoff_s = max_backoff_s
        self._page_size = page_size
        self._lock = threading.Lock()
        self._stores = {kind: _Store(kind) for kind in self.kinds}
        self._kinds = (*self.kinds, EVENT) if watch_events else self.kinds
        self._events = _Store(EVENT)
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: dict[str, _RawWatch] = {}
        self._last_nodes: frozenset[str] = frozenset()

    # --- lifecycle

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` for every listed or watched object (before `start()`); it must be quick and not raise."""
        self._listeners.append(listener)

    def _notify(self, kind: str, event_type: str, obj: Mapping[str, Any], listed: bool) -> None:
        for listener in self._listeners:
            try:
                listener(kind, event_type, obj, listed)
            except Exception:  # a listener's bug must not break the watch
                log.exception("cache listener failed on %s %s", kind, object_key(obj))

    def _store(self, kind: str) -> _Store:
        return self._events if kind == EVENT else self._stores[kind]

    def start(self) -> WatchCache:
        for kind in self._kinds:
            thread = threading.Thread(target=self._run, args=(kind,), name=f"gpuscale-watch-{kind}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            watches = list(self._watches.values())
        for w in watches:
            w.stop()  # type: ignore[no-untyped-call]
        for thread in self._threads:
            thread.join(timeout_s)

    def __enter__(self) -> WatchCache:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading

    def synced(self) -> bool:
        with self._lock:
            return all(s.synced and not s.relisting for s in self._stores.values())

    def wait_synced(self, timeout_s: float) -> bool:
        """Block until every kind has listed (for start-up and tests); False on timeout."""
        deadline = timeout_s
        step = 0.05
        while deadline > 0:
            if self.synced():
                return True
            if self._stop.wait(step):
                return False
            deadline -= step
        return self.synced()

    def status(self) -> dict[str, dict[str, Any]]:
        """Per kind: synced, relisting, objects, lists so far, last error (for logs)."""
        with self._lock:
            return {k: {"synced": s.synced, "relisting": s.relisting, "objects": len(s.objects), "lists": s.lists,
                        "last_error": s.last_error} for k, s in self._stores.items()}

    def in_last_snapshot(self, node: str) -> bool:
        """Whether the last `snapshot()` returned showed this Node (what a provider's `upcoming()` must agree with)."""
        return node in self._last_nodes

    def rejected(self) -> dict[str, str]:
        """Objects the converter refused, `Kind key` → the converter's message (as of the last snapshot)."""
        with self._lock:
            return {f"{s.kind} {key}": c.error for s in self._stores.values() for key, c in s.converted.items()
                    if c.error is not None}

    def snapshot(self) -> Cluster:
        with self._lock:
            waiting = [f"{s.kind} ({'relisting' if s.synced else 'not listed yet'}"
                       f"{'; ' + s.last_error if s.last_error else ''})"
                       for s in self._stores.values() if not s.synced or s.relisting]
            if waiting:
                raise NotSynced("cache not synced: " + ", ".join(waiting))
            values: dict[str, list[Any]] = {}
            errors: list[str] = []
            for store in self._stores.values():
                values[store.kind] = out = []
                for key, obj in store.objects.items():
                    converted = self._convert(store, key, obj)
                    if converted.error is not None:
                        errors.append(converted.error)
                    else:
                        out.append(converted.value)
        if errors:
            more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
            raise NotSynced(f"{len(errors)} object(s) could not be read: {'; '.join(sorted(errors)[:3])}{more}")
        self._last_nodes = frozenset(n.name for n in values[NODE])
        storage = Storage(volumes=tuple(values.get(PV, ())), claims=tuple(values.get(PVC, ())),
                          classes=tuple(values.get(STORAGE_CLASS, ())), csi_nodes=tuple(values.get(CSI_NODE, ())))
        dra = Dra(slices=tuple(values.get(SLICE, ())), classes=tuple(values.get(DEVICE_CLASS, ())),
                  claims=tuple(values.get(CLAIM, ())), templates=tuple(values.get(CLAIM_TEMPLATE, ())))
        return Cluster(nodes=tuple(values[NODE]), pods=tuple(values[POD]), pdbs=tuple(values[PDB]), storage=storage,
                       dra=dra)

    def _convert(self, store: _Store, key: str, obj: Mapping[str, Any]) -> _Converted:
        cached = _converted(store.kind, key, obj, store.converted.get(key))
        store.converted[key] = cached
        return cached

    # --- the per-kind thread

    def _list_call(self, kind: str) -> Callable[..., Any]:
        if kind == NODE:
            return self._core.list_node
        if kind == POD:
            return self._core.list_pod_for_all_namespaces
        if kind == EVENT:
            return self._core.list_event_for_all_namespaces
        if kind == PV:
            return self._core.list_persistent_volume
        if kind == PVC:
            return self._core.list_persistent_volume_claim_for_all_namespaces
        if kind == STORAGE_CLASS:
            return client.StorageV1Api(self._core.api_client).list_storage_class
        if kind == CSI_NODE:
            return client.StorageV1Api(self._core.api_client).list_csi_node
        if kind in _DRA_LISTS:
            return getattr(client.ResourceV1Api(self._core.api_client), _DRA_LISTS[kind])  # type: ignore[no-any-return]
        return self._policy.list_pod_disruption_budget_for_all_namespaces

    def _run(self, kind: str) -> None:
        backoff = 0.2
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist(kind)
                    need_list = False
                    backoff = 0.2
                self._watch(kind)  # returns when the server ends the watch normally
            except ApiException as err:
                need_list = True
                self._mark_relisting(kind, f"{'410 Gone' if err.status == 410 else f'HTTP {err.status}'}")
                if err.status == 410:
                    continue  # relist at once: nothing is wrong with the server
            except Exception as err:  # any broken stream (connection, timeout, bad data) → relist
                need_list = True
                self._mark_relisting(kind, f"{type(err).__name__}: {err}")
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, self._max_backoff_s)

    def _mark_relisting(self, kind: str, why: str) -> None:
        if self._stop.is_set():
            return
        log.info("watch of %s broke (%s); relisting", kind, why)
        with self._lock:
            store = self._store(kind)
            store.relisting = True
            store.last_error = why

    def _relist(self, kind: str) -> None:
        items: dict[str, dict[str, Any]] = {}
        cont: str | None = None
        rv = ""
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size, "_preload_content": False,
                                      "_request_timeout": (10, 60)}
            if cont:
                kwargs["_continue"] = cont
            resp = self._list_call(kind)(**kwargs)
            try:
                body = json.loads(resp.data)
            finally:
                resp.release_conn()
            for obj in body.get("items") or []:
                obj.setdefault("kind", kind)
                _slim(obj)
                items[object_key(obj)] = obj
            meta = body.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            cont = meta.get("continue")
            if not cont:
                break
        with self._lock:
            previous = self._store(kind).converted
        # Outside the lock: `previous` is only read (.get), and snapshot() may add to it meanwhile — harmless.
        # Events are only handed to listeners: neither kept nor converted; kinds a subclass reads raw (requests,
        # PodTemplates) are kept, not converted.
        converted = {} if kind not in _CONVERTERS else {
            key: _converted(kind, key, obj, previous.get(key)) for key, obj in items.items()}
        with self._lock:
            store = self._store(kind)
            store.objects = items if kind != EVENT else {}
            store.converted = converted
            store.resource_version = rv
            store.synced = True
            store.relisting = False
            store.last_error = None
            store.lists += 1
        log.info("listed %d %s object(s) at resourceVersion %s", len(items), kind, rv)
        for obj in items.values():
            self._notify(kind, "LISTED", obj, True)

    def _watch(self, kind: str) -> None:
        w = _RawWatch()  # type: ignore[no-untyped-call]
        with self._lock:
            self._watches[kind] = w
            rv = self._store(kind).resource_version
        try:
            # `timeout_seconds` makes the server end the watch; Watch then does not retry by itself, and a 410 comes
            # out as an ApiException. The client-side read timeout catches a silently dead connection.
            stream = w.stream(  # type: ignore[no-untyped-call]
                self._list_call(kind), resource_version=rv, allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout_s, _request_timeout=(10, self._watch_timeout_s + 15))
            for event in stream:
                if self._stop.is_set():
                    break
                self._apply(kind, event)
        finally:
            w.stop()  # type: ignore[no-untyped-call]
            with self._lock:
                self._watches.pop(kind, None)

    def _apply(self, kind: str, event: Mapping[str, Any]) -> None:
        kind_of_event = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        new_rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            store = self._store(kind)
            if kind == EVENT:
                pass  # handed to listeners only
            elif kind_of_event in ("ADDED", "MODIFIED"):
                obj.setdefault("kind", kind)
                _slim(obj)
                store.objects[object_key(obj)] = obj
            elif kind_of_event == "DELETED":
                key = object_key(obj)
                store.objects.pop(key, None)
                store.converted.pop(key, None)
            if new_rv:
                store.resource_version = str(new_rv)
        if kind_of_event in ("ADDED", "MODIFIED", "DELETED"):
            self._notify(kind, str(kind_of_event), obj, False)
