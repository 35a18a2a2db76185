"""A zero-or-max pool in the twin (`zero_or_max_scaling: true` in a scenario's pool, CA's ZeroOrMaxNodeScaling): on the
default day with the A100 training pool made one 4-node slice, every scale-up of it orders the nodes still missing
to its max, every scale-down takes all of its nodes, and the day's price of that shows in the report."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.pool import NodePool
from gpuscale.report.twin import result_json
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named

A100 = "gpu-training-a100"


def _default(**a100_options: Any) -> dict[str, Any]:
    raw = yaml.safe_load(resources.files("gpuscale.data").joinpath("scenarios", "default.yaml").read_text())
    raw["config"]["pools"] = [{**p, **a100_options} if p["name"] == A100 else p for p in raw["config"]["pools"]]
    return dict(raw)


class _Watch:
    """The engine as the twin calls it, checking each plan against the snapshot it was made from."""

    def __init__(self) -> None:
        self.memo = IncrementalStore()
        self.ordered: list[int] = []
        self.removed: list[int] = []

    def __call__(self, snapshot: Snapshot, pools: tuple[NodePool, ...], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        plan = decide(snapshot, pools, state, policy, now, store=self.memo)
        timed_out = {t.node or t.request_id for t in plan.timed_out}
        nodes = [n.name for n in snapshot.cluster.nodes
                 if snapshot.node_pools.get(n.name) == A100 and not n.deleting and n.name not in timed_out]
        upcoming = [u for u in snapshot.upcoming if u.pool == A100 and u.request_id not in timed_out]
        for item in plan.scale_up:
            if item.pool == A100:
                assert len(nodes) + len(upcoming) + item.nodes == 4, (now, item, nodes, upcoming)
                self.ordered.append(item.nodes)
        gone = [r.node for r in plan.scale_down if r.pool == A100]
        if gone:
            assert sorted(gone) == sorted(nodes) and not upcoming, (now, gone, nodes, upcoming)
            self.removed.append(len(gone))
        return plan


def test_a_zero_or_max_pool_in_the_twin_grows_and_goes_whole() -> None:
    setup, config = parse_scenario(_default(max_size=4, zero_or_max_scaling=True), "default.yaml")
    watch = _Watch()
    result = result_json(simulate(setup, policy_named("gpuscale", config), decide=watch), include_wall=False)
    assert watch.ordered and watch.removed, (watch.ordered, watch.removed)
    setup, config = parse_scenario(_default(max_size=4), "default.yaml")
    ordinary = result_json(simulate(setup, policy_named("gpuscale", config)), include_wall=False)
    # whole slices keep GPUs no job asked for: more idle A100 GPU-hours than the same pool scaled node by node
    assert result["gpu_hours"]["by_pool"][A100]["idle"] > ordinary["gpu_hours"]["by_pool"][A100]["idle"]
