"""`gpuscale.model.pool`: the template node a scale-up would add."""

from __future__ import annotations

from gpuscale.model.node import HOSTNAME_LABEL, POOL_LABEL, ZONE_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.model.taints import Taint
from tests.builders import resources, taint


def _pool(*, labels: dict[str, str] | None = None, taints: tuple[Taint, ...] = (),
          zones: tuple[str, ...] = ()) -> NodePool:
    return NodePool(name="a100", allocatable=resources("96", "1Ti", 8, {"pods": 110}), labels=labels or {},
                    taints=taints, zones=zones)


def test_template_carries_labels_taints_and_allocatable() -> None:
    gpu_taint = taint("nvidia.com/gpu", "present")
    pool = _pool(labels={"tier": "gpu"}, taints=(gpu_taint,), zones=("z2", "z1"))
    node = pool.template()
    assert node.allocatable == pool.allocatable
    assert node.taints == (gpu_taint,)
    assert node.labels["tier"] == "gpu"
    assert node.labels[POOL_LABEL] == "a100"
    assert node.labels[HOSTNAME_LABEL] == node.name
    assert node.labels[ZONE_LABEL] == "z2"  # the first zone
    assert node.ready and not node.unschedulable
    assert node.pool == "a100"


def test_template_keeps_an_explicit_zone_label() -> None:
    assert _pool(labels={ZONE_LABEL: "fixed"}, zones=("z1",)).template().labels[ZONE_LABEL] == "fixed"


def test_is_gpu_pool() -> None:
    assert _pool().is_gpu_pool()
    assert not NodePool(name="cpu", allocatable=resources("8", "32Gi")).is_gpu_pool()
