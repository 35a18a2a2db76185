"""`gpuscale.kube.cache.WatchCache` without an API server: the synced gate, lazy conversion cached by
resourceVersion, objects the converter rejects, watch events, and the relist after 410 Gone / a broken watch.
The threads are not started; each test drives `_relist`, `_apply` and `_run` directly with fake list calls.
(The same cache against the real control plane: tests/e2e/test_controller.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.kube.cache import (
    CLAIM,
    CLAIM_TEMPLATE,
    CSI_NODE,
    DEVICE_CLASS,
    EVENT,
    KINDS,
    NODE,
    PDB,
    POD,
    PV,
    PVC,
    SLICE,
    STORAGE_CLASS,
    WatchCache,
    _RawWatch,
)
from gpuscale.loop.ports import NotSynced


def node(name: str, rv: str = "1", cpu: str = "8") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, rv: str = "1", cpu: str = "1", ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}


class FakeResponse:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.released = False

    def release_conn(self) -> None:
        self.released = True


def lister(pages: dict[str, list[list[dict[str, Any]]]], calls: list[dict[str, Any]]) -> Callable[[str], Any]:
    """`_list_call` replacement: per kind, pages of items; continue tokens are the page index."""

    def list_call(kind: str) -> Callable[..., FakeResponse]:
        def call(**kwargs: Any) -> FakeResponse:
            calls.append({"kind": kind, **kwargs})
            index = int(kwargs.get("_continue") or 0)
            kind_pages = pages.get(kind) or [[]]
            more = index + 1 < len(kind_pages)
            return FakeResponse({"items": kind_pages[index],
                                 "metadata": {"resourceVersion": f"{kind}-rv", **({"continue": str(index + 1)}
                                                                                  if more else {})}})
        return call

    return list_call


@pytest.fixture
def cache() -> WatchCache:
    return WatchCache(client.ApiClient())


def list_all(cache: WatchCache, pages: dict[str, list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    cache._list_call = lister(pages, calls)  # type: ignore[method-assign]
    for kind in KINDS:
        cache._relist(kind)
    return calls


def test_not_synced_until_every_kind_has_listed(cache: WatchCache) -> None:
    with pytest.raises(NotSynced, match="not listed yet"):
        cache.snapshot()
    calls: list[dict[str, Any]] = []
    cache._list_call = lister({NODE: [[node("a")]]}, calls)  # type: ignore[method-assign]
    cache._relist(NODE)
    cache._relist(POD)
    with pytest.raises(NotSynced, match="PodDisruptionBudget"):
        cache.snapshot()
    cache._relist(PDB)
    with pytest.raises(NotSynced, match="PersistentVolume"):
        cache.snapshot()
    for kind in (PV, PVC, STORAGE_CLASS, CSI_NODE):
        cache._relist(kind)
    with pytest.raises(NotSynced, match="ResourceSlice"):
        cache.snapshot()
    for kind in (SLICE, DEVICE_CLASS, CLAIM, CLAIM_TEMPLATE):
        cache._relist(kind)
    assert [n.name for n in cache.snapshot().nodes] == ["a"]
    assert cache.synced()


def test_dra_objects_reach_the_snapshot_from_resource_v1(cache: WatchCache) -> None:
    calls = {kind: cache._list_call(kind).__name__ for kind in (SLICE, DEVICE_CLASS, CLAIM, CLAIM_TEMPLATE)}
    assert calls == {SLICE: "list_resource_slice", DEVICE_CLASS: "list_device_class",
                     CLAIM: "list_resource_claim_for_all_namespaces",
                     CLAIM_TEMPLATE: "list_resource_claim_template_for_all_namespaces"}
    gpu_slice = {"metadata": {"name": "n1-gpus", "resourceVersion": "1"},
                 "spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                          "nodeName": "n1", "devices": [{"name": "gpu-0"}]}}
    claim = {"metadata": {"name": "c", "namespace": "ns", "resourceVersion": "1"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}
    list_all(cache, {SLICE: [[gpu_slice]], CLAIM: [[claim]],
                     DEVICE_CLASS: [[{"metadata": {"name": "gpu", "resourceVersion": "1"}}]],
                     CLAIM_TEMPLATE: [[{"metadata": {"name": "t", "namespace": "ns", "resourceVersion": "1"}}]]})
    dra = cache.snapshot().dra
    assert [s.name for s in dra.node_slices("n1")] == ["n1-gpus"] and dra.claim("ns/c") is not None
    assert dra.device_class("gpu") is not None and dra.template("ns/t") is not None


def test_list_follows_continue_tokens_and_sets_kind(cache: WatchCache) -> None:
    calls = list_all(cache, {POD: [[pod("p1")], [pod("p2")]]})
    assert [c["_continue"] for c in calls if c["kind"] == POD and "_continue" in c] == ["1"]
    assert sorted(p.name for p in cache.snapshot().pods) == ["p1", "p2"]
    assert cache._stores[POD].resource_version == f"{POD}-rv"
    assert cache._stores[POD].objects["default/p1"]["kind"] == "Pod"


def test_conversion_is_cached_by_resource_version(cache: WatchCache) -> None:
    list_all(cache, {NODE: [[node("a", rv="1")]]})
    first = cache.snapshot().nodes[0]
    assert cache.snapshot().nodes[0] is first
    cache._apply(NODE, {"type": "MODIFIED", "object": node("a", rv="2", cpu="16")})
    second = cache.snapshot().nodes[0]
    assert second is not first and second.allocatable.get("cpu") == 16_000


def test_watch_events_add_modify_delete_and_bookmarks_move_the_resource_version(cache: WatchCache) -> None:
    list_all(cache, {})
    cache._apply(POD, {"type": "ADDED", "object": pod("p", rv="5")})
    assert [p.name for p in cache.snapshot().pods] == ["p"]
    cache._apply(POD, {"type": "DELETED", "object": pod("p", rv="6")})
    assert cache.snapshot().pods == ()
    cache._apply(POD, {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}})
    assert cache._stores[POD].resource_version == "9"
    assert cache.snapshot().pods == ()


def test_an_object_the_converter_rejects_makes_the_view_partial(cache: WatchCache) -> None:
    bad = pod("bad", cpu="lots")
    list_all(cache, {POD: [[pod("good"), bad]]})
    with pytest.raises(NotSynced, match=r"1 object\(s\) could not be read: Pod default/bad"):
        cache.snapshot()
    assert list(cache.rejected()) == ["Pod default/bad"]
    cache._apply(POD, {"type": "MODIFIED", "object": pod("bad", rv="2", cpu="2")})  # fixed by its owner
    assert sorted(p.name for p in cache.snapshot().pods) == ["bad", "good"]
    assert cache.rejected() == {}


def test_relisting_closes_the_gate_until_the_list_is_done(cache: WatchCache) -> None:
    list_all(cache, {NODE: [[node("a")]]})
    cache._mark_relisting(NODE, "410 Gone")
    with pytest.raises(NotSynced, match="Node \\(relisting; 410 Gone\\)"):
        cache.snapshot()
    calls: list[dict[str, Any]] = []
    cache._list_call = lister({NODE: [[node("b")]]}, calls)  # type: ignore[method-assign]
    cache._relist(NODE)
    assert [n.name for n in cache.snapshot().nodes] == ["b"]  # the relist replaces the store: "a" is gone


@pytest.mark.parametrize("failure", [ApiException(status=410, reason="Gone"), ConnectionResetError("reset")])
def test_a_gone_or_broken_watch_relists(cache: WatchCache, failure: Exception) -> None:
    relists: list[str] = []
    watches: list[str] = []

    def relist(kind: str) -> None:
        relists.append(kind)

    def watch(kind: str) -> None:
        watches.append(kind)
        if len(watches) == 1:
            assert cache._stores[kind].relisting is True  # never listed yet
            raise failure
        cache._stop.set()  # second watch: end the loop

    cache._relist = relist  # type: ignore[method-assign]
    cache._watch = watch  # type: ignore[method-assign]
    cache._run(NODE)
    assert relists == [NODE, NODE]
    assert watches == [NODE, NODE]


def test_a_watch_the_server_ends_normally_resumes_without_a_relist(cache: WatchCache) -> None:
    relists: list[str] = []
    watches: list[str] = []
    cache._relist = relists.append  # type: ignore[method-assign]

    def watch(kind: str) -> None:
        watches.append(kind)
        if len(watches) == 3:
            cache._stop.set()

    cache._watch = watch  # type: ignore[method-assign]
    cache._run(POD)
    assert relists == [POD] and len(watches) == 3


def test_raw_watch_keeps_raw_objects_and_turns_410_into_an_exception() -> None:
    w = _RawWatch()
    event = w.unmarshal_event(json.dumps({"type": "ADDED", "object": pod("p")}), w.get_return_type(None))
    assert event["object"] == pod("p")
    body = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                   "message": "too old resource version"}}) + "\n"

    class Resp:
        status = 200

        def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
            yield body.encode()

        def close(self) -> None: ...

        def release_conn(self) -> None: ...

    def list_call(**kwargs: Any) -> Resp:
        return Resp()

    with pytest.raises(ApiException) as info:
        list(w.stream(list_call, resource_version="1", timeout_seconds=5))
    assert info.value.status == 410


def test_listeners_hear_lists_and_watch_events_and_events_stay_out_of_the_gate() -> None:
    """The tracer's feed: every listed object (listed=True) and watch event, outside the lock; the Event kind is
    listed and watched only for listeners — not stored, not needed for `synced`."""
    cache = WatchCache(client.ApiClient(), watch_events=True)
    heard: list[tuple[str, str, str, bool]] = []
    cache.add_listener(lambda kind, kind_of_event, obj, listed: heard.append(
        (kind, kind_of_event, obj["metadata"]["name"], listed)))
    cache.add_listener(lambda *_: 1 / 0)  # a failing listener is logged, not fatal
    event = {"metadata": {"name": "p.1", "namespace": "default", "resourceVersion": "3"}, "reason": "Pulled"}
    list_all(cache, {POD: [[pod("p")]]})
    assert cache.synced()  # Events have not been listed, and need not be
    cache._relist(EVENT)
    cache._apply(EVENT, {"type": "ADDED", "object": {**event, "metadata": {**event["metadata"], "name": "p.2"}}})
    cache._apply(POD, {"type": "MODIFIED", "object": pod("p", rv="7")})
    cache._apply(POD, {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}})
    assert heard == [("Pod", "LISTED", "p", True), ("Event", "ADDED", "p.2", False), ("Pod", "MODIFIED", "p", False)]
    assert cache._events.objects == {} and cache._events.resource_version == "3"
    assert [p.name for p in cache.snapshot().pods] == ["p"]
