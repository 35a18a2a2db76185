"""Choosers made from the fragmentation tables a `RowCache` carries (`_Shared.make_chooser`) score every node as a
chooser made afresh from the same workload does, whatever workloads came before."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.placement.devices import FragChooser
from gpuscale.engine.placement.frag import TypicalTables
from gpuscale.engine.placement.shapes import PodShape
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.resources import GPU_MILLI, NVIDIA_GPU, Resources
from tests.builders import make_pod

SHAPES = [PodShape(cpu_milli=1000 * (1 + i % 3), memory_mib=1024, gpu_milli=250 * (1 + i % 4),
                   gpu_count=1, gpu_models=()) for i in range(6)]
CAPACITY = Resources.of({"cpu": 32_000, "memory": 128 * 2**30, "pods": 16, NVIDIA_GPU: 4, GPU_MILLI: 4000})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.integers(0, len(SHAPES) - 1), st.integers(0, 40)), min_size=1, max_size=6),
       st.sampled_from(["fgd", "gpuscale"]))
def test_a_chooser_from_carried_tables_scores_as_a_fresh_one(workloads: list[dict[int, int]], policy: str) -> None:
    nodes = [Node(name=f"n{i}", allocatable=CAPACITY, capacity=CAPACITY, ready=True) for i in range(4)]
    pods = [make_pod(f"p{i}", cpu="1", memory="1Gi", extra={GPU_MILLI: 250 * (1 + i % 3)}, node=f"n{i % 4}")
            for i in range(7)]
    table = whatif_of(nodes, [CAPACITY] * 4, pods, placement=policy)
    shared = table._s
    shared.tables = TypicalTables()
    rows = np.arange(len(nodes))
    cpu_free = table.free[:, table.columns.index("cpu")]
    assert table.devices is not None
    for counts in workloads:
        shared.workload = Counter({SHAPES[i]: n for i, n in counts.items() if n})
        carried, fresh = shared.make_chooser(policy), FragChooser(policy, shared.workload)
        for shape in SHAPES:
            a = carried.scores(shape, cpu_free, table.devices, rows)
            b = fresh.scores(shape, cpu_free, table.devices, rows)
            assert (a is None) == (b is None)
            assert a is None or b is None or a.tolist() == b.tolist()
