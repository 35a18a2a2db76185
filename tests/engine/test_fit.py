"""`gpuscale fit` on nodes that share GPUs by fraction: the per-GPU check the engine's what-if makes, not totals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpuscale.engine.fit import explain_fit
from gpuscale.engine.placement.devices import DEVICE_ANNOTATION
from gpuscale.model.cluster import Cluster
from gpuscale.model.pod import Pod
from gpuscale.model.resources import GPU_MILLI
from tests.builders import make_node, make_pod


def share(name: str, milli: int, node: str | None = None, device: int | None = None) -> Pod:
    pod = make_pod(name, cpu="1", memory="1Gi", extra={GPU_MILLI: milli}, node=node)
    return pod if device is None else replace(pod, annotations={DEVICE_ANNOTATION: str(device)})


def fits(cluster: Cluster) -> dict[str, tuple[tuple[str, ...], str, Mapping[str, int]]]:
    return {f.pod.name: (f.fits, f.message, f.reasons) for f in explain_fit(cluster)}


def test_a_share_fits_only_where_one_gpu_has_room() -> None:
    """Two GPUs with 600 of 1000 milli taken on each: 800 milli free in total, but no GPU has 600."""
    shared = make_node("a", gpus=2, extra={GPU_MILLI: 2000})
    plain = make_node("b", gpus=2)  # no per-GPU accounting: totals decide, as kube-scheduler's NodeResourcesFit
    bound = (share("x", 600, "a", 0), share("y", 600, "a", 1))
    cluster = Cluster(nodes=(shared, plain), pods=(*bound, share("want", 600), share("small", 400),
                                                   make_pod("whole", cpu="1", memory="1Gi", gpus=1)))
    result = fits(cluster)
    assert result["want"][0] == ()
    assert "1 node(s) didn't have 600 gpu-milli free on one GPU device" in result["want"][1]
    assert "1 Insufficient gpuscale.io/gpu-milli" in result["want"][1]
    assert result["small"][0] == ("a",)
    assert result["whole"][0] == ("b",)  # a has 2 GPUs by total, no device wholly free
    assert result["whole"][2] == {"node(s) didn't have 1 whole GPU device(s) free": 1}


def test_without_annotations_the_devices_are_reconstructed() -> None:
    """Bound pods without a device annotation are put back best-fit: 700 and 700 cannot share one GPU, so each GPU
    keeps 300 free (600 in total)."""
    node = make_node("a", gpus=2, extra={GPU_MILLI: 2000})
    cluster = Cluster(nodes=(node,), pods=(share("x", 700, "a"), share("y", 700, "a"), share("want", 300),
                                          share("big", 400)))
    result = fits(cluster)
    assert result["want"][0] == ("a",)
    assert result["big"][0] == ()
    assert result["big"][1] == "0/1 nodes are available: 1 node(s) didn't have 400 gpu-milli free on one GPU device."
