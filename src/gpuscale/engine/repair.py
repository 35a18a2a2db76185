"""The opt-in repair policy for degraded nodes (Karpenter's node repair is the model): a degraded node of a pool with
`node_repair` is drained and removed like any scale-down — PDBs, protections and `protect_gpu_jobs` through
`engine.drain`, the loop's drain path (taint, cordon, evict, delete when empty) — and its pods, pending again, scale
up a replacement in the next decision. At most `max_nodes_under_repair` nodes of a pool are under repair at once (nodes
of the pool being deleted that lack GPUs or are not Ready count). Pure: no I/O, no clock (the time is a parameter).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscale.engine.drain import PdbBudget, drain_node
from gpuscale.engine.nodes import NodePhase, degraded_gpus
from gpuscale.engine.plan import NodeVerdict, Removal
from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.whatif.facts import NodeFacts
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import Pod


@dataclass(frozen=True, slots=True, kw_only=True)
class Repairs:
    removals: tuple[Removal, ...] = ()
    """Degraded nodes to drain and remove now."""
    waiting: tuple[NodeVerdict, ...] = ()
    """Degraded nodes of repairing pools that wait (the pool's cap, or what keeps the node), with why."""
    next_at_s: float | None = None
    """When the first do-not-disrupt protection that keeps a waiting node ends (None: none does): the repair may go
    ahead then with no change to the cluster. The cap waits on nodes leaving, which is a change."""


def _under_repair(facts: Mapping[str, NodeFacts]) -> Counter[str]:
    """Per pool, its nodes being deleted that lack GPUs of its template or are not Ready."""
    return Counter(f.pool.name for f in facts.values() if f.phase is NodePhase.DELETING and f.pool is not None
                   and f.pool.node_repair and (not f.node.ready or degraded_gpus(f.node, f.pool)))


def plan_repairs(degraded: Sequence[NodeVerdict], facts: Mapping[str, NodeFacts],
                 pods_by_node: Mapping[str, Sequence[Pod]], pdbs: Sequence[PodDisruptionBudget],
                 removals: Sequence[Removal], policy: Policy, now: float) -> Repairs:
    """Repairs for the `degraded` nodes, after this decision's scale-down `removals` (their evictions spend the PDBs
    first; a node they remove already is not repaired)."""
    candidates = [(v, facts[v.node]) for v in degraded if v.node in facts
                  and (pool := facts[v.node].pool) is not None and pool.node_repair]
    if not candidates:
        return Repairs()
    going = {r.node for r in removals}
    budget = PdbBudget(pdbs)
    for removal in removals:
        keys = set(removal.evict)
        budget = budget.spend([p for p in pods_by_node.get(removal.node, ()) if p.key in keys])
    busy = _under_repair(facts)
    out: list[Removal] = []
    waiting: list[NodeVerdict] = []
    ends: list[float] = []
    for verdict, fact in candidates:
        pool = fact.pool
        assert pool is not None
        if verdict.node in going:
            continue
        if busy[pool.name] >= pool.max_nodes_under_repair:
            waiting.append(NodeVerdict(node=verdict.node, reasons=(Reason(
                ReasonCode.REPAIR, f"repair waits: {busy[pool.name]} node(s) of {pool.name} under repair (max "
                                   f"{pool.max_nodes_under_repair})"), *verdict.reasons)))
            continue
        drain = drain_node(fact.node, pods_by_node.get(verdict.node, ()), policy=policy, budget=budget, now=now)
        if drain.blocked is not None:
            if drain.blocked.code is ReasonCode.DO_NOT_DISRUPT and "protected_until_s" in drain.blocked.numbers:
                ends.append(drain.blocked.numbers["protected_until_s"])
            waiting.append(NodeVerdict(node=verdict.node, reasons=(Reason(
                ReasonCode.REPAIR, f"repair waits: {drain.blocked.message}"), drain.blocked, *verdict.reasons)))
            continue
        budget = budget.spend(drain.evict)
        busy[pool.name] += 1
        out.append(Removal(node=verdict.node, pool=pool.name, evict=drain.evict_keys, reasons=(Reason(
            ReasonCode.REPAIR, f"repairing degraded node {verdict.node}: drained and replaced "
                               f"({'; '.join(r.message for r in verdict.reasons)})"),)))
    return Repairs(removals=tuple(out), waiting=tuple(waiting), next_at_s=min(ends, default=None))
