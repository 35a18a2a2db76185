"""The watch trigger of a reacting controller (D39): a pod turning Unschedulable wakes the loop once, and with
nominations on, an unbound pod whose `status.nominatedNodeName` is cleared (kube-scheduler after a failed attempt)."""

from __future__ import annotations

import threading
from typing import Any

from gpuscale.controller import unschedulable_trigger

UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def _pod(*, conditions: list[dict[str, str]] | None = None, nominated: str | None = None,
         node: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions or []}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"metadata": {"namespace": "ml", "name": "train-0"}, "spec": {"nodeName": node} if node else {},
            "status": status}


def _woke(wake: threading.Event) -> bool:
    woke = wake.is_set()
    wake.clear()
    return woke


def test_a_pod_turning_unschedulable_wakes_once_while_it_stays_so() -> None:
    wake = threading.Event()
    listen = unschedulable_trigger(wake)
    listen("Pod", "ADDED", _pod(), False)
    assert not _woke(wake)
    listen("Pod", "MODIFIED", _pod(conditions=UNSCHEDULABLE), False)
    assert _woke(wake)
    listen("Pod", "MODIFIED", _pod(conditions=UNSCHEDULABLE, nominated="n1"), False)
    listen("Pod", "MODIFIED", _pod(conditions=UNSCHEDULABLE), False)
    assert not _woke(wake)  # nominations off: a cleared nomination is not a reason to decide


def test_with_nominations_a_cleared_nomination_on_an_unbound_pod_wakes_the_loop() -> None:
    wake = threading.Event()
    listen = unschedulable_trigger(wake, nominations=True)
    listen("Pod", "ADDED", _pod(conditions=UNSCHEDULABLE, nominated="n1"), True)  # listed: no wake
    assert not _woke(wake)
    listen("Pod", "MODIFIED", _pod(conditions=UNSCHEDULABLE), False)
    assert _woke(wake)
    listen("Pod", "MODIFIED", _pod(conditions=UNSCHEDULABLE), False)
    assert not _woke(wake)
    listen("Pod", "MODIFIED", _pod(conditions=UNSCHEDULABLE, nominated="n1"), False)
    listen("Pod", "MODIFIED", _pod(node="n1"), False)  # bound: the scheduler clears it at bind, nothing to do
    assert not _woke(wake)
    again = unschedulable_trigger(wake, nominations=True)
    again("Pod", "ADDED", _pod(conditions=UNSCHEDULABLE, nominated="n2"), True)
    again("Pod", "DELETED", _pod(conditions=UNSCHEDULABLE, nominated="n2"), False)
    assert not _woke(wake)
