"""Node readiness as Cluster Autoscaler reads it: the Ready condition, unless a not-ready / network-unavailable taint
is still on the node (the node lifecycle controller lifts it after the condition turns True, sometimes seconds later).
Found by tests/e2e/test_restart.py: after an API server restart a Ready node still carried the not-ready taint, the
engine counted it usable and empty, and the pending pod ordered a second node."""

from __future__ import annotations

import pytest

from gpuscale.engine.nodes import NodePhase, phase
from gpuscale.kube.convert import node_from_k8s
from tests.builders import k8s_node


@pytest.mark.parametrize(("ready", "taint", "expected"), [
    ("True", None, True),
    ("True", "node.kubernetes.io/not-ready", False),
    ("True", "node.kubernetes.io/network-unavailable", False),
    ("True", "nvidia.com/gpu", True),
    ("False", None, False),
])
def test_ready_needs_the_condition_and_no_not_ready_taint(ready: str, taint: str | None, expected: bool) -> None:
    taints = [{"key": taint, "effect": "NoSchedule"}] if taint else []
    node = node_from_k8s(k8s_node(ready=ready, taints=taints))
    assert node.ready is expected
    assert (phase(node, None) is NodePhase.REGISTERED) is not expected
