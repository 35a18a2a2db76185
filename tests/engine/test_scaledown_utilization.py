"""Scale-down's utilization pass (`_utilizations`, NumPy over whole blocks, with a shortcut when every node has a table
row and the table one column per slot) equals the rule written out node by node in Python: used = allocatable − free
in the table (per slot; whole GPUs summed over every GPU resource; a slot the table has no column for counts as
nothing used), or the node's running pods' requests off the table, clamped at zero; ratios over cpu, memory and
milli-GPUs (whole GPUs if any, else GPU milli), 1 or 0 over a zero denominator; GPU nodes by the GPU ratio. Tables of
random columns and free amounts (free above allocatable too), nodes without a row, not-Ready nodes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.nodes import NodePhase
from gpuscale.engine.policy import Policy
from gpuscale.engine.scaledown import NodeSet, _amounts, _Record, _utilizations, allocatable_amounts
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU, Resources, is_gpu_resource
from tests.builders import make_pod
from tests.engine.test_store_property import POOLS

NAMES = ("cpu", "memory", NVIDIA_GPU, "amd.com/gpu", GPU_MILLI)
POLICY = Policy(scale_down_utilization_threshold=0.5, scale_down_gpu_utilization_threshold=0.3)

amounts = st.fixed_dictionaries({name: st.sampled_from([0, 0, 1, 2, 4, 1000, 4000]) for name in NAMES})
nodes_st = st.lists(st.tuples(amounts, amounts, st.sampled_from([0, 1, 2]), st.booleans(), st.integers(0, 2),
                              st.integers(0, 3)), min_size=0, max_size=8)


def _expected(alloc: tuple[int, int, int, int], free: dict[str, int] | None, columns: list[str],
              pods: list[Pod], gpu_pool: bool) -> tuple[float, float, tuple[float, float, float], bool]:
    if free is not None:
        used = [alloc[0] - free[CPU] if CPU in columns else 0, alloc[1] - free[MEMORY] if MEMORY in columns else 0,
                alloc[2] - sum(free[c] for c in columns if is_gpu_resource(c)) if any(map(is_gpu_resource, columns))
                else 0, alloc[3] - free[GPU_MILLI] if GPU_MILLI in columns else 0]
    else:
        used = list(_amounts(sum((p.requests for p in pods if not p.is_terminal()), Resources())))
    used = [max(u, 0) for u in used]
    share = (used[0], used[1], 1000 * used[2] + used[3])
    total = (alloc[0], alloc[1], 1000 * alloc[2] if alloc[2] > 0 else alloc[3])
    ratios = tuple(s / t if t > 0 else (1.0 if s > 0 else 0.0) for s, t in zip(share, total, strict=True))
    gpu_node = total[2] > 0 or gpu_pool
    utilization = ratios[2] if gpu_node else max(ratios[0], ratios[1])
    threshold = POLICY.scale_down_gpu_utilization_threshold if gpu_node else POLICY.scale_down_utilization_threshold
    return utilization, threshold, (ratios[0], ratios[1], ratios[2]), gpu_node


@settings(max_examples=300, deadline=None)
@given(nodes_st, st.sets(st.sampled_from(NAMES)))
def test_utilizations_equal_the_rule_node_by_node(specs: list[tuple[dict[str, int], dict[str, int], int, bool, int,
                                                                    int]], names: set[str]) -> None:
    records: list[_Record] = []
    in_table: list[Node] = []
    capacity: list[Resources] = []
    pods_by_node: dict[str, list[Pod]] = {}
    for i, (alloc, cap, kind, rowed, pool, pods) in enumerate(specs):
        node = Node(name=f"n{i}", allocatable=Resources.of(alloc), capacity=Resources.of(alloc),
                    ready=kind != 1)
        phase = (NodePhase.USABLE, NodePhase.REGISTERED, NodePhase.USABLE)[kind]
        pool_of = POOLS[pool] if pool < len(POOLS) else None
        records.append(_Record(node, pool_of.name if pool_of else None, pool_of, phase, allocatable_amounts(node)))
        pods_by_node[node.name] = [make_pod(f"p{i}-{k}", cpu="500m", memory="1Gi", extra={GPU_MILLI: 250 * k},
                                            node=node.name) for k in range(pods)]
        if rowed:
            in_table.append(node)
            capacity.append(Resources.of(cap))
    # Only the names in `names` (and those no node offers, added as columns all zero) are the table's columns.
    table = whatif_of(in_table, [Resources.of({n: a for n, a in c.items if n in names}) for c in capacity], [],
                            extra_names=names)
    columns = list(table.columns)
    nodes = NodeSet(records)
    rows = nodes.rows(table)
    registered = nodes.registered
    for at in (nodes.usable_positions, nodes.usable_positions[::2].copy(),
               np.array(sorted([*nodes.usable_positions.tolist(), *registered]), dtype=np.int64)):
        utilization, threshold, ratios, gpu_node = _utilizations(nodes, at, rows.take(at), table, pods_by_node, POLICY)
        for k, position in enumerate(at.tolist()):
            record, row = records[position], int(rows[position])
            free = ({n: table.free_of(row, n) for n in columns}
                    if row >= 0 and record.phase is NodePhase.USABLE else None)
            gpu_pool = record.pool is not None and record.pool.is_gpu_pool()
            expected = _expected(record.amounts, free, columns, pods_by_node[record.node.name], gpu_pool)
            got = (float(utilization[k]), float(threshold[k]), tuple(ratios[k].tolist()), bool(gpu_node[k]))
            assert got == expected, (record.node.name, columns)
