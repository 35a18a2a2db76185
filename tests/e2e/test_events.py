"""The warning events as they land in the real API server: ScaleUpFailed (a stockout) on the status ConfigMap of the
controller's namespace, ScaleUpTimedOut on a node that never became Ready (deleted, pool backed off, and the status
ConfigMap says so). TriggeredScaleUp, NotTriggerScaleUp and ScaleDown are asserted in test_controller.py and
test_scaledown.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
import yaml
from harness import wait_for
from kubernetes import client
from test_controller import (
    A100,
    create_pod,  # noqa: F401 (a fixture)
    seed_config,
    training_pod,
)

from gpuscale.config import Config
from gpuscale.controller import Controller, RunOptions, build_controller
from gpuscale.engine.state import FailureKind
from gpuscale.loop.tick import LoopSettings
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProfile, KwokProvider, KwokSettings


@pytest.fixture
def controllers(core_v1: client.CoreV1Api) -> Iterator[list[Controller]]:
    made: list[Controller] = []
    yield made
    for c in made:
        c.close()
    for node in core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
        core_v1.delete_node(node.metadata.name)


def _controller(api_client: client.ApiClient, config: Config, namespace: str, kwok: KwokSettings | None = None
                ) -> Controller:
    controller = build_controller(api_client, config, kwok=kwok,
                                  settings=replace(LoopSettings.from_config(config), scan_interval_s=0.2),
                                  options=RunOptions(namespace=namespace, status_name="gpuscale-status"))
    assert controller.cache.wait_synced(30)
    return controller


def _events(core: client.CoreV1Api, namespace: str, reason: str) -> list[client.CoreV1Event]:
    return core.list_namespaced_event(namespace, field_selector=f"reason={reason}").items


def test_stockout_emits_scale_up_failed_on_the_status_configmap(
        api_client: client.ApiClient, core_v1: client.CoreV1Api, namespace: str,
        controllers: list[Controller], create_pod: Callable[[client.V1Pod], None]) -> None:  # noqa: F811
    controller = _controller(api_client, seed_config(), namespace)
    controllers.append(controller)
    assert isinstance(controller.provider, KwokProvider)
    controller.provider.stockout_pools.add(A100)
    create_pod(training_pod("train"))
    events = wait_for(lambda: controller.tick() and _events(core_v1, namespace, "ScaleUpFailed"), 30,
                      desc="ScaleUpFailed")
    event = events[0]
    assert (event.type, event.involved_object.kind, event.involved_object.name) == (
        "Warning", "ConfigMap", "gpuscale-status")
    assert A100 in event.message and str(FailureKind.STOCKOUT) in event.message

    def backoff_in_status() -> dict[str, object] | None:
        controller.tick()
        cm = core_v1.list_namespaced_config_map(namespace, field_selector="metadata.name=gpuscale-status").items
        if not cm:
            return None
        groups = {g["name"]: g for g in yaml.safe_load(cm[0].data["status"])["nodeGroups"]}
        return groups[A100] if groups[A100]["scaleUp"]["status"] == "Backoff" else None

    group = wait_for(backoff_in_status, 10, desc="the pool's backoff in the status ConfigMap")
    assert group["scaleUp"]["backoff"]["reason"] == str(FailureKind.STOCKOUT)  # type: ignore[index]


def test_node_that_never_becomes_ready_times_out(api_client: client.ApiClient, core_v1: client.CoreV1Api,
                                                 namespace: str, controllers: list[Controller],
                                                 create_pod: Callable[[client.V1Pod], None]) -> None:  # noqa: F811
    config = seed_config()
    config = replace(config, pools=tuple(replace(p, max_node_provision_time_s=3.0) if p.name == A100 else p
                                         for p in config.pools))
    slow = KwokSettings(default=KwokProfile(ready_after_s=600, gpu_register_after_s=0))
    controller = _controller(api_client, config, namespace, slow)
    controllers.append(controller)
    create_pod(training_pod("train"))
    wait_for(lambda: controller.tick().scaled_up, 30, desc="a scale-up")
    (node,) = [n.metadata.name for n in core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items]
    report = wait_for(lambda: (r := controller.tick()).timed_out and r, 30, desc="the node times out")
    assert report.timed_out == (node,)
    assert A100 in controller.autoscaler.state.backoff
    assert controller.autoscaler.state.backoff[A100].kind is FailureKind.PROVISION_TIMEOUT
    events = wait_for(lambda: [e for e in _events(core_v1, "default", "ScaleUpTimedOut")
                               if e.involved_object.name == node], 10, desc="ScaleUpTimedOut on the node")
    assert events[0].type == "Warning" and A100 in events[0].message
    wait_for(lambda: not [n for n in core_v1.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items
                          if n.metadata.name == node], 10, desc="the node deleted")
