"""Benchmark: the DRA allocator (`engine/dra/allocate.py`) at the scale of issue #29's item 8.

5,000 GPU nodes, each publishing one ResourceSlice of 8 GPUs (half the nodes H100 80 GB, half A100 40 GB; per GPU
`productName`, `index`, a unique `uuid` as NVIDIA's driver publishes, `driverVersion`, `pcieRoot` (two per node) and
`memory`), half the GPUs already allocated (seeded). Pods ask through one of four claim templates: 1 H100 by product
name; 2 GPUs with ≥ 64 Gi by quantity; 4 GPUs on one PCIe root (`matchAttribute`); `firstAvailable` 8 H100 or else
4 A100. Figures, in process CPU time:
- **cold**: each template allocated on every node once with a fresh `Allocator` (gathers every node's pools and
  evaluates every selector on every GPU: 40,000 devices, every shape distinct because of `uuid`);
- **next snapshot**: the same again with a new `Dra` of the same objects (a decision after one that saw no DRA
  change: selector answers are kept per device object, pools and outcomes per snapshot);
- **per pod**: `--pods` pods (templates round-robin) each asked on every node, as a filter asking each row would, on
  the warm allocator (outcomes kept per node, claim specs and devices in use) — µs per (pod, node);
- **uncached**: one (claim, node) allocation without the kept outcome, for a node that fits and one that does not.
- `--whole-shapes`: the cold figure again, in the same process, with selector answers cached per whole device (every
  attribute) instead of per the attributes each expression reads, and the ratio.
Run: `PYTHONPATH=src:. .venv/bin/python bench/dra.py [--nodes 5000] [--pods 400] [--whole-shapes]`.
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from gpuscale.engine.dra import allocate as allocate_module
from gpuscale.engine.dra import cel
from gpuscale.engine.dra.allocate import Allocated, Allocator, InUse
from gpuscale.model.dra import (
    ClaimSpec,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    Dra,
    ExactDeviceRequest,
    PoolRef,
    ResourceClaim,
    ResourceSlice,
    Version,
)
from gpuscale.model.quantity import to_milli

D = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
PRODUCT = f'device.attributes["{D}"].productName == "%s"'


def cluster(nodes: int, seed: int) -> tuple[Dra, list[tuple[str, dict[str, str]]], InUse]:
    rng = random.Random(seed)
    slices, where, used = [], [], set()
    for n in range(nodes):
        name, h100 = f"gpu-{n}", n % 2 == 0
        devices = []
        for i in range(8):
            devices.append(Device(name=f"gpu-{i}", attributes={
                f"{D}/productName": H100 if h100 else A100, f"{D}/index": i, f"{D}/uuid": f"GPU-{n:05d}-{i}",
                f"{D}/driverVersion": Version("570.124.6"), "resource.kubernetes.io/pcieRoot": f"pci{i // 4}"},
                capacity={f"{D}/memory": DeviceCapacity(value_milli=to_milli("80Gi" if h100 else "40Gi"))}))
            if rng.random() < 0.5:
                used.add((D, name, f"gpu-{i}"))
        slices.append(ResourceSlice(name=f"{name}-{D}", driver=D, pool=PoolRef(name=name), node_name=name,
                                    devices=tuple(devices)))
        where.append((name, {"kubernetes.io/hostname": name}))
    gpu = DeviceClass(name="gpu.nvidia.com", selectors=(f'device.driver == "{D}"',))
    return Dra(slices=tuple(slices), classes=(gpu,)), where, InUse(devices=frozenset(used))


def templates() -> list[ClaimSpec]:
    def exact(name: str, count: int, *selectors: str) -> DeviceRequest:
        return DeviceRequest(name=name, exactly=ExactDeviceRequest(device_class_name="gpu.nvidia.com", count=count,
                                                                   selectors=selectors))
    memory = f'device.capacity["{D}"].memory.compareTo(quantity("64Gi")) >= 0'
    fallback = DeviceRequest(name="gpus", first_available=(
        DeviceSubRequest(name="h100", device_class_name="gpu.nvidia.com", count=8, selectors=(PRODUCT % H100,)),
        DeviceSubRequest(name="a100", device_class_name="gpu.nvidia.com", count=4, selectors=(PRODUCT % A100,))))
    return [ClaimSpec(requests=(exact("gpu", 1, PRODUCT % H100),)),
            ClaimSpec(requests=(exact("gpus", 2, memory),)),
            ClaimSpec(requests=(exact("gpus", 4),),
                      constraints=(DeviceConstraint(match_attribute="resource.kubernetes.io/pcieRoot"),)),
            ClaimSpec(requests=(fallback,))]


def cold_run(dra: Dra, where: list[tuple[str, dict[str, str]]], used: InUse,
             specs: list[ClaimSpec]) -> tuple[Allocator, float, list[int]]:
    allocator = Allocator(dra)
    t0 = time.process_time()
    fits = [sum(isinstance(allocator.allocate(n, labels, [ResourceClaim(namespace="bench", name="t", spec=spec)],
                                              used), Allocated) for n, labels in where) for spec in specs]
    return allocator, time.process_time() - t0, fits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--whole-shapes", action="store_true")
    args = parser.parse_args()
    print(f"{platform.python_implementation()} {platform.python_version()} on {platform.machine()}")
    dra, where, used = cluster(args.nodes, 1)
    specs = templates()
    claims = [ResourceClaim(namespace="bench", name=f"pod-{p}-gpu", spec=specs[p % len(specs)])
              for p in range(args.pods)]

    allocator, cold, fits = cold_run(dra, where, used, specs)
    print(f"cold: {len(specs)} templates × {len(where):,} nodes in {cold:.2f} s "
          f"({cold / (len(specs) * len(where)) * 1e6:.0f} µs per (claim, node)); nodes that fit: {fits}")
    _, again, _ = cold_run(Dra(slices=dra.slices, classes=dra.classes), where, used, specs)
    print(f"next snapshot: {again:.2f} s ({again / (len(specs) * len(where)) * 1e6:.0f} µs per (claim, node))")
    if args.whole_shapes:
        reads_of = cel.reads_of
        cel.reads_of = lambda expression: None  # type: ignore[assignment]
        cel.compile.cache_clear()
        allocate_module._SELECTABLE.clear()
        _, whole, whole_fits = cold_run(dra, where, used, specs)
        cel.reads_of = reads_of
        cel.compile.cache_clear()
        assert whole_fits == fits
        print(f"cold, answers per whole device: {whole:.2f} s (per the attributes read: {cold:.2f} s, "
              f"ratio {whole / cold:.2f})")

    t0 = time.process_time()
    for claim in claims:
        for n, labels in where:
            allocator.allocate(n, labels, [claim], used)
    warm = time.process_time() - t0
    asks = len(claims) * len(where)
    print(f"per pod: {len(claims)} pods × {len(where):,} nodes = {asks:,} asks in {warm:.2f} s "
          f"({warm / asks * 1e6:.2f} µs per ask)")

    fitting = next(n for n in where if isinstance(allocator.allocate(*n, [claims[0]], used), Allocated))
    failing = next(n for n in where if not isinstance(allocator.allocate(*n, [claims[0]], used), Allocated))
    for label, (n, labels) in (("fits", fitting), ("does not fit", failing)):
        node = allocator.node(n, labels)
        t0 = time.process_time()
        for _ in range(2000):
            allocator._allocate(node, n, [claims[0]], used)
        print(f"uncached, a node that {label}: {(time.process_time() - t0) / 2000 * 1e6:.1f} µs per allocation")


if __name__ == "__main__":
    main()
