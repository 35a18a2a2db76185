"""`KwokProvider`: a `NodeProvider` whose "cloud" is kwok — a scale-up POSTs fake Node objects that kwok then plays
through the start-up chain of `deploy/kwok/stages.yaml` (docs/harness.md):

registered (Ready=False, as a kubelet registers) → Ready after `gpuscale.io/ready-after` → GPUs in allocatable after
`gpuscale.io/gpu-register-after` (the fake device plugin, from label `gpuscale.io/gpu-count`).

Nodes are created already registered, but the loop's view comes from a watch cache that sees a new Node some
milliseconds later: a tick in between would find the pod pending, no node and nothing upcoming, and order a second
node. So a node this provider created stays *upcoming* until `registered(name)` says the view has it (the composition
passes the cache's `in_last_snapshot`, which the tick's snapshot — taken just before `upcoming()` — set). Without
`registered`, `upcoming()` is empty. `cancel()` deletes the node of a request (request id = node name).

The node's capacity/allocatable is the pool template's minus its GPU resources, which the kwok GPU stage
adds later — so the engine sees a Ready node still waiting for its GPUs, as on a real cloud. The node carries status
Ready=False at create: without a Ready condition the controller-manager lifts the not-ready taint at once and the
scheduler can bind to a node that is not Ready (docs/harness.md, "Creating nodes").

A pool that declares DRA ResourceSlices (`resource_slices`) gets no slices from kwok: kwok runs no kubelet, so no DRA
driver. Whoever stands in for the driver's kubelet plugin (the e2e tests, tests/e2e/test_dra.py) publishes
`resource_slice_bodies(pool, node)` once the node is Ready, as NVIDIA's plugin does after its driver starts.

The Kubernetes API client is passed in by the composition (`gpuscale run`, tests); this module does not import
`gpuscale.kube` (a sibling layer).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscale.engine.plan import UpcomingNode
from gpuscale.engine.state import FailureKind
from gpuscale.loop.ports import ProviderError
from gpuscale.model.dra import ResourceSlice, attribute_json
from gpuscale.model.node import HOSTNAME_LABEL, POOL_LABEL, ZONE_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.model.quantity import format_milli, format_units
from gpuscale.model.resources import CPU, NVIDIA_GPU, is_gpu_resource
from gpuscale.model.selectors import is_label_value

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
READY_AFTER_ANNOTATION = "gpuscale.io/ready-after"
GPU_REGISTER_AFTER_ANNOTATION = "gpuscale.io/gpu-register-after"
GPU_COUNT_LABEL = "gpuscale.io/gpu-count"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpuscale-kwok"


def label_value(value: str) -> str:
    """A template label value as the API server accepts it (≤ 63 of `[-A-Za-z0-9_.]`, alphanumeric at both ends):
    the seed's `n1-standard-4+nvidia-tesla-t4` instance type becomes `n1-standard-4-nvidia-tesla-t4` instead of a 422
    on every scale-up of that pool."""
    if is_label_value(value):
        return value
    return re.sub(r"[^-A-Za-z0-9_.]", "-", value)[:63].strip("-_.")


def go_duration(seconds: float) -> str:
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class KwokProfile:
    """How a pool's fake nodes start: seconds from registration to Ready, and from Ready to GPUs registered."""

    ready_after_s: float = 2.0
    gpu_register_after_s: float = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class KwokSettings:
    profiles: Mapping[str, KwokProfile] = field(default_factory=dict)
    """Per pool; pools not named here use `default`."""
    default: KwokProfile = KwokProfile()

    def profile(self, pool: str) -> KwokProfile:
        return self.profiles.get(pool, self.default)



def _milli_quantity(milli: int) -> str:
    return format_units(milli // 1000) if milli % 1000 == 0 else format_milli(milli)


def slice_body(one: ResourceSlice) -> dict[str, Any]:
    """A node-local ResourceSlice (`resource.k8s.io/v1`) as the API takes it: attributes and capacities under their
    fully qualified names (a driver's own domain may be left out; the API keeps both spellings apart, the allocator
    reads them alike)."""
    devices = [{"name": d.name,
                **({"attributes": {k: attribute_json(v) for k, v in d.attributes.items()}} if d.attributes else {}),
                **({"capacity": {k: {"value": _milli_quantity(c.value_milli)} for k, c in d.capacity.items()}}
                   if d.capacity else {})}
               for d in one.devices]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": one.name},
            "spec": {"driver": one.driver, "nodeName": one.node_name,
                     "pool": {"name": one.pool.name, "generation": one.pool.generation,
                              "resourceSliceCount": one.pool.resource_slice_count},
                     "devices": devices}}


def resource_slice_bodies(pool: NodePool, node: str) -> list[dict[str, Any]]:
    """The ResourceSlices a node of `pool` publishes once its DRA drivers run (`NodePool.template_slices`), as API
    objects: what a stand-in for the drivers' kubelet plugins creates."""
    return [slice_body(s) for s in pool.template_slices(node)]


def _quantity(name: str, amount: int) -> str:
    return f"{amount}m" if name == CPU else str(amount)


class KwokProvider:
    def __init__(self, api_client: client.ApiClient, pools: Sequence[NodePool],
                 settings: KwokSettings | None = None, *, stockout_pools: Iterable[str] = (),
                 registered: Callable[[str], bool] | None = None) -> None:
        self._core = client.CoreV1Api(api_client)
        self.pools = {p.name: p for p in pools}
        self.settings = settings or KwokSettings()
        self.stockout_pools: set[str] = set(stockout_pools)
        """Pools whose scale-ups fail with a stockout (tests; a real cloud's ZONE_RESOURCE_POOL_EXHAUSTED)."""
        self.registered = registered
        self._requested: dict[str, UpcomingNode] = {}

    def node_body(self, pool: NodePool, name: str, zone: str | None = None) -> dict[str, Any]:
        """The Node a scale-up of `pool` POSTs: the template without its GPUs, Ready=False, kwok-managed, in `zone`
        (default: the pool's first)."""
        profile = self.settings.profile(pool.name)
        labels = {**{k: label_value(v) for k, v in pool.labels.items()}, POOL_LABEL: pool.name,
                  HOSTNAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY}
        if zone or pool.zones:
            labels.setdefault(ZONE_LABEL, zone or pool.zones[0])
        gpus = pool.allocatable.get(NVIDIA_GPU)
        if gpus:
            labels[GPU_COUNT_LABEL] = str(gpus)
        resources = {n: _quantity(n, a) for n, a in pool.allocatable.items if not is_gpu_resource(n)}
        now = datetime.now(tz=UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name, "labels": labels,
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE,
                                READY_AFTER_ANNOTATION: go_duration(profile.ready_after_s),
                                GPU_REGISTER_AFTER_ANNOTATION: go_duration(profile.gpu_register_after_s)},
            },
            "spec": {"providerID": f"kwok://{name}",
                     "taints": [{"key": t.key, "value": t.value, "effect": str(t.effect)} for t in pool.taints]},
            "status": {
                "capacity": resources, "allocatable": dict(resources),
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                "message": "container runtime status check may not have completed yet",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            },
        }

    def increase(self, pool: str, count: int, zone: str | None = None) -> tuple[str, ...]:
        template = self.pools.get(pool)
        if template is None:
            raise ProviderError(FailureKind.OTHER, f"unknown pool {pool!r}")
        if zone is not None and zone not in template.zones:
            raise ProviderError(FailureKind.OTHER, f"pool {pool!r} has no zone {zone!r}")
        if pool in self.stockout_pools:
            raise ProviderError(FailureKind.STOCKOUT, f"ZONE_RESOURCE_POOL_EXHAUSTED: no capacity for {pool}")
        created = []
        for _ in range(count):
            name = f"{pool}-{uuid.uuid4().hex[:6]}"
            create: Callable[..., Any] = self._core.create_node  # a raw dict body is sent as is
            create(self.node_body(template, name, zone))
            created.append(name)
            if self.registered is not None:
                self._requested[name] = UpcomingNode(pool=pool, request_id=name, requested_s=time.time(), zone=zone)
        return tuple(created)

    def delete(self, nodes: Sequence[str]) -> None:
        for name in nodes:
            self._requested.pop(name, None)
            try:
                self._core.delete_node(name)
            except ApiException as err:
                if err.status != 404:
                    raise

    def cancel(self, request_ids: Sequence[str]) -> None:
        """Nothing is ever upcoming (nodes register at creation); a request id is a node name, deleted if present."""
        self.delete(request_ids)

    def upcoming(self) -> tuple[UpcomingNode, ...]:
        if self.registered is None:
            return ()
        for name in [n for n in self._requested if self.registered(n)]:
            del self._requested[name]
        return tuple(self._requested.values())

    def node_pools(self) -> Mapping[str, str]:
        list_raw: Callable[..., Any] = self._core.list_node
        resp = list_raw(label_selector=POOL_LABEL, _preload_content=False)
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        result = {}
        for obj in body.get("items") or []:
            meta = obj.get("metadata") or {}
            pool = (meta.get("labels") or {}).get(POOL_LABEL)
            if pool in self.pools:
                result[meta["name"]] = pool
        return result
