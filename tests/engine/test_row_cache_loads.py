"""`RowCache._load`: a row's devices rebuilt from its GPU pods are kept per distinct load (device count, width, the
pods' needs and device annotations in order) and written again for an equal row instead of reconstructed. Tables built
through a memo that has seen many loads equal fresh tables (reconstructed by `GpuDevices.load`) under any mix of
annotated, unannotated, fractional and whole-GPU pods."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import DEVICE_ANNOTATION
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import RowCache
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU
from tests.builders import make_pod
from tests.engine.test_row_cache import SHAPES, node, snapshot

# a GPU pod: milli on one device (0: a whole GPU), whole GPUs, and its device annotation (None: none)
POD = st.tuples(st.sampled_from([300, 500, 700, 0]), st.integers(1, 2), st.sampled_from([None, "0", "1", "0,1", ""]))
ROW = st.tuples(st.integers(0, len(SHAPES) - 1), st.lists(POD, max_size=4))


def gpu_pod(serial: int, milli: int, whole: int, annotation: str | None, on: str) -> Pod:
    extra = {GPU_MILLI: milli} if milli else {}
    p = make_pod(f"p{serial}", cpu="100m", memory="1Gi", gpus=0 if milli else whole, extra=extra, node=on)
    return p if annotation is None else replace(p, annotations={DEVICE_ANNOTATION: annotation})


def table(nodes: list[Node], pods: list[Pod], memo: RowCache | None) -> WhatIf:
    cache = memo if memo is not None else RowCache()
    return cache.table(nodes, [n.allocatable for n in nodes], pods, {GPU_MILLI, NVIDIA_GPU}, placement="gpuscale")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(ROW, min_size=1, max_size=8), min_size=1, max_size=8))
def test_kept_device_loads_equal_loads_reconstructed(builds: list[list[tuple[int, list[tuple[int, int, str | None]]]]],
                                                     ) -> None:
    memo = RowCache()
    serial = 0
    for rows in builds:
        nodes = [node(f"n{i}", shape) for i, (shape, _) in enumerate(rows)]
        pods: list[Pod] = []
        for i, (_, held) in enumerate(rows):
            for milli, whole, annotation in held:  # new pod objects every build: each row is computed again
                serial += 1
                pods.append(gpu_pod(serial, milli, whole, annotation, f"n{i}"))
        assert snapshot(table(nodes, pods, memo)) == snapshot(table(nodes, pods, None))


def test_an_equal_row_is_written_from_the_kept_load() -> None:
    """The second build's row holds other pods asking the same, annotated the same: its load is the kept one (the
    annotated half on device 1, then the 300 on the tightest device that fits: device 1 again)."""
    nodes = [node("n0", 1)]
    pods = [gpu_pod(1, 500, 1, "1", "n0"), gpu_pod(2, 300, 1, None, "n0")]
    memo = RowCache()
    first = table(nodes, pods, memo)
    assert len(memo._loads) == 1
    kept = next(iter(memo._loads.values()))
    second = table(nodes, [replace(p, name=f"q{i}", uid=f"q{i}") for i, p in enumerate(pods)], memo)
    assert len(memo._loads) == 1 and second.devices is not None and first.devices is not None
    assert second.devices.free.tolist() == first.devices.free.tolist() == [kept] == [[1000, 200]]
