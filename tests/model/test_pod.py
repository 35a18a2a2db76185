"""`gpuscale.model.pod`: identity, binding and lifecycle helpers."""

from __future__ import annotations

import pytest

from gpuscale.model.pod import PodPhase
from tests.builders import make_pod


def test_key_and_binding() -> None:
    pod = make_pod("train-0", "ml")
    assert pod.key == "ml/train-0"
    assert not pod.is_bound()
    assert make_pod(node="n1").is_bound()


@pytest.mark.parametrize(("phase", "node", "terminal", "consumes"), [
    (PodPhase.PENDING, None, False, False),
    (PodPhase.PENDING, "n1", False, True),
    (PodPhase.RUNNING, "n1", False, True),
    (PodPhase.UNKNOWN, "n1", False, True),
    (PodPhase.SUCCEEDED, "n1", True, False),
    (PodPhase.FAILED, "n1", True, False),
])
def test_terminal_pods_hold_no_capacity(phase: PodPhase, node: str | None, terminal: bool, consumes: bool) -> None:
    pod = make_pod(node=node, phase=phase)
    assert pod.is_terminal() is terminal
    assert pod.consumes_capacity() is consumes


def test_pods_hash_by_identity_and_constraints_are_hashable() -> None:
    a, b = make_pod("a", gpus=1), make_pod("a", gpus=1)
    assert len({a, b}) == 1
    assert hash(a.constraints) == hash(b.constraints)
