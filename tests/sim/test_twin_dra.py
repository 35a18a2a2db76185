"""The twin with Dynamic Resource Allocation (`sim.scenario_dra`, `sim.devices`): a pod asking for H100s by claim
scales the empty H100 pool (not the A100 one beside it) and runs only once the node published its slices, with no
second node ordered meanwhile; a selector no pool's devices meet keeps the pod pending in the scheduler's words; pods
sharing a claim land on one node; a pod moved off its node releases its claim and gets a fresh allocation; the same
scenario and seed give the same JSON; a scenario that does not opt in carries no DRA objects; bad input is one
`ConfigError` naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Removal, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif import filters
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.lifecycle.phases import Milestone, Phase
from gpuscale.model.dra import Dra, ResourceClaim
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.report.twin import result_json
from gpuscale.sim import scheduler as scheduler_module
from gpuscale.sim import world as world_module
from gpuscale.sim.cloud import NodeTimeline
from gpuscale.sim.run import TwinSetup, simulate
from gpuscale.sim.scenario import load_scenario, parse_scenario, policy_named
from gpuscale.sim.scenario_dra import ResourceClaimConfig, WorkloadDevices, job_by_claim
from gpuscale.sim.traces import GKE_PLACEMENT, pod_requests
from gpuscale.sim.workloads import JobSpec
from tests.sim.runs import assert_cli_one_line_exit_2, assert_one_line_error, short_run_json

H100 = "NVIDIA H100 80GB HBM3"
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def _slices(product: str, architecture: str) -> list[dict[str, Any]]:
    return [{"driver": "gpu.nvidia.com", "count": 8, "device": {"name": "gpu-{index}", "attributes": {
        "type": {"string": "gpu"}, "productName": {"string": product}, "architecture": {"string": architecture},
        "index": {"int": "{index}"}}, "capacity": {"memory": "80Gi"}}}]


def scenario(**workload: Any) -> dict[str, Any]:
    return {
        "name": "dra-test", "duration": "3h", "seed": 1,
        "config": {"pools": [
            {"name": "cpu", "usd_per_hour": 0.8, "min_size": 1, "max_size": 4,
             "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}},
            {"name": "h100", "usd_per_hour": 88.49, "max_size": 3, "taints": GPU_TAINT,
             "allocatable": {"cpu": "200", "memory": "1800Gi"}, "resource_slices": _slices(H100, "Hopper")},
            {"name": "a100", "usd_per_hour": 29.39, "max_size": 3, "taints": GPU_TAINT,
             "allocatable": {"cpu": "95", "memory": "630Gi"},
             "resource_slices": _slices("NVIDIA A100-SXM4-80GB", "Ampere")},
        ]},
        "stockout_probability": {"h100": 0.0, "a100": 0.0},
        "workload": workload,
    }


def _selector(product: str) -> str:
    return f'device.attributes["gpu.nvidia.com"].productName == "{product}"'


def job(name: str, *, gpus: int = 8, pods: int = 1, product: str = H100, shared: bool = False,
        submit_s: float = 60.0, duration_s: float = 3600.0) -> JobSpec:
    """A job whose pods would ask `gpus` nvidia.com/gpu each, asking for them by claim instead."""
    requests = pod_requests(gpus_per_pod=gpus, gpu_milli=1000, cpu_milli=8000, memory_mib=32_768)
    spec = JobSpec(name=name, team="llm", submit_s=submit_s, pods=pods, requests=requests,
                   constraints=GKE_PLACEMENT.constraints("nvidia-tesla-a100", requests), duration_s=duration_s,
                   image_bytes=10**9)
    claim = ResourceClaimConfig(name="gpu", claim="shared" if shared else "per-pod", selectors=(_selector(product),))
    return job_by_claim(spec, WorkloadDevices(resourceClaims=(claim,)))


class Watch:
    """The engine as the twin calls it; keeps each snapshot's DRA objects, nodes and the plans, and may add a
    removal once a named pod runs."""

    def __init__(self, remove_running: str | None = None) -> None:
        self.store = IncrementalStore()
        self.seen: list[tuple[float, tuple[Node, ...], Dra]] = []
        self.plans: list[Plan] = []
        self.remove_running = remove_running

    def __call__(self, snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        cluster = snapshot.cluster
        self.seen.append((now, cluster.nodes, cluster.dra))
        plan = decide(snapshot, pools, state, policy, now, store=self.store)
        running = [p for p in cluster.pods if p.name == self.remove_running and p.started_s is not None]
        if running:
            removal = Removal(node=running[0].node_name or "", pool="h100", evict=(running[0].key,), reasons=())
            plan = Plan(scale_up=plan.scale_up, scale_down=(*plan.scale_down, removal), unplaceable=plan.unplaceable)
            self.remove_running = None
        self.plans.append(plan)
        return plan


@dataclass(frozen=True, slots=True)
class Bind:
    pod: Pod
    node: Node
    at: float
    timeline: NodeTimeline | None
    claims: tuple[ResourceClaim, ...]
    """The DRA claims as the bind left them."""


@contextmanager
def recorded_binds() -> Iterator[list[Bind]]:
    """Every bind in the twin, with its node's start-up timeline and the claims just after it (`World.bound`)."""
    seen: list[Bind] = []
    original = world_module.World.bound

    def bound(self: world_module.World, pod: Pod, node: Node) -> None:
        timeline = self.cloud.timeline_of(node.name)
        seen.append(Bind(pod, node, self.now, None if timeline is None else replace(timeline),
                         tuple(self.cluster.dra.claims.values())))
        original(self, pod, node)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(world_module.World, "bound", bound)
        yield seen


def _run(raw: dict[str, Any], jobs: Sequence[JobSpec], watch: Watch | None = None,
         initial: dict[str, int] | None = None) -> tuple[TwinSetup, Any, list[Bind]]:
    if initial:
        raw = {**raw, "initial_nodes": initial}
    setup, config = parse_scenario(raw, "test")
    setup = replace(setup, jobs=tuple(jobs))
    with recorded_binds() as binds:
        result = simulate(setup, policy_named("gpuscale", config), decide=watch)
    return setup, result, binds


def test_an_h100_claim_scales_the_empty_h100_pool_and_runs_only_once_the_slices_appear() -> None:
    watch = Watch()
    _, result, binds = _run(scenario(), [job("pretrain")], watch)
    assert result.scale_ups_by_pool == {"h100": 1}  # not the A100 pool, and no second H100 node meanwhile
    (bind,) = [b for b in binds if b.pod.name.startswith("pretrain-")]
    timeline = bind.timeline
    assert timeline is not None and timeline.pool == "h100"
    assert timeline.ready_s is not None and timeline.slices_s is not None
    assert timeline.ready_s < timeline.slices_s <= bind.at
    # the engine saw the node Ready without its slices, and ordered nothing more then
    waiting = [now for now, nodes, dra in watch.seen
               if any(n.name == bind.node.name and n.ready for n in nodes) and not dra.node_slices(bind.node.name)]
    assert waiting, "the node was never seen Ready before its slices"
    asked = [u for plan in watch.plans for u in plan.scale_up]
    assert len(asked) == 1 and asked[0].pool == "h100"
    # the claim the ResourceClaim controller made for the pod holds eight of that node's devices, reserved for it
    (claim,) = [c for c in bind.claims if c.owner_pod_uid == bind.pod.uid]
    assert claim.allocation is not None and len(claim.allocation.devices) == 8
    assert {d.pool for d in claim.allocation.devices} == {bind.node.name}
    assert claim.reserved_for_pod(bind.pod.uid)
    # its record names the slices step as a phase, and the phases sum to its wait
    (record,) = [p for p in result.pods if p.key == bind.pod.key]
    assert record.new_node and record.phases[Phase.SLICE_PUBLICATION.value] > 0
    assert abs(sum(record.phases.values()) - (record.running_s - record.created_s)) < 1e-6
    assert Milestone.SLICES_PUBLISHED.value in record.trace.milestones
    # once the job finished, its claim and its template are gone
    assert not watch.seen[-1][2].claims and not watch.seen[-1][2].templates


def test_a_selector_no_pool_meets_keeps_the_pod_pending_in_the_schedulers_words() -> None:
    watch = Watch()
    words: list[str] = []
    original = scheduler_module.SimScheduler._mark_unschedulable

    def marked(self: scheduler_module.SimScheduler, pod: Pod) -> None:
        _, counts = filters.reasons(pod, self._view())
        words.extend(counts)
        original(self, pod)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scheduler_module.SimScheduler, "_mark_unschedulable", marked)
        _, result, binds = _run(scenario(), [job("b200", product="NVIDIA B200")], watch)
    assert not binds and result.scale_ups_by_pool == {}
    assert any(p.key == "llm/b200-1-0" and p.running_s is None for p in result.pods)
    assert "cannot allocate all claims" in words  # the twin's scheduler, on the CPU node (no devices there)
    # the engine orders nothing for it, decision after decision
    assert any(v.pod == "llm/b200-1-0" for plan in watch.plans for v in plan.unplaceable)
    assert not any(plan.scale_up for plan in watch.plans)


def test_pods_sharing_a_claim_land_on_one_node_and_share_its_allocation() -> None:
    """A gang of two pods sharing one claim of 8 devices, and two single pods sharing a 1-device claim: each claim is
    allocated once, both pods reserve it and run on its node."""
    _, result, binds = _run(scenario(), [job("gang", pods=2, shared=True),
                                         job("pair-a", gpus=1, shared=True, submit_s=30.0)], Watch())
    gang = [b for b in binds if b.pod.name.startswith("gang-")]
    assert len(gang) == 2 and len({b.node.name for b in gang}) == 1
    claim = next(c for c in gang[-1].claims if c.key == "llm/gang-gpu")
    assert claim.allocation is not None and len(claim.allocation.devices) == 8
    assert {c.uid for c in claim.reserved_for} == {b.pod.uid for b in gang}
    assert result.scale_ups_by_pool.get("h100") == 2  # the 1-device pair-a job and the 8-device gang


def test_a_dra_pools_gpu_hours_count_its_published_gpus_and_its_pods_claims() -> None:
    """GPUs published as slices count as the pool's GPUs (provisioned: 8 per H100 node-hour, as its cost says), and a
    pod's GPUs are the whole GPUs allocated to its claims: a per-pod claim of 2 holds 2; a claim of 8 shared by a
    gang's two pods counts once; so allocated GPU-hours are the devices' hours, never above what was provisioned."""
    _, result, binds = _run(scenario(), [job("solo", gpus=2), job("gang", pods=2, shared=True, submit_s=90.0)],
                            Watch())
    h100 = result.gpu_hours_by_pool["h100"]
    node_hours = result.cost_by_pool["h100"] / 88.49
    assert node_hours > 0 and h100["provisioned"] == pytest.approx(8 * node_hours, rel=1e-3)
    by_name = {r.key.split("/")[1]: r for r in result.pods if r.running_s is not None}
    solo = [r for name, r in by_name.items() if name.startswith("solo-")]
    gang = [r for name, r in by_name.items() if name.startswith("gang-")]
    assert [r.gpus for r in solo] == [2] and sorted(r.gpus for r in gang) == [0, 8]
    bound = {b.pod.name: b.at for b in binds}
    ends = {name: max(r.running_s or 0 for r in rs) + 3600.0 for name, rs in (("solo", solo), ("gang", gang))}
    expected = sum(r.gpus * (ends[name] - bound[r.key.split("/")[1]])
                   for name, rs in (("solo", solo), ("gang", gang)) for r in rs) / 3600
    assert h100["allocated"] == pytest.approx(expected, rel=0.02)
    assert 0 < h100["useful"] <= h100["allocated"] <= h100["provisioned"]
    assert "a100" not in result.gpu_hours_by_pool and "a100" not in result.cost_by_pool  # no A100 node was made


def test_a_pod_moved_off_its_node_releases_its_claim_and_is_allocated_afresh() -> None:
    """Two H100 nodes from the start (their slices published at once); the node the job's pod runs on is removed as a
    scale-down would: the pod's claim goes with it, and the requeued pod's new claim is allocated on the other node."""
    watch = Watch(remove_running="move-1-0")
    _, result, binds = _run(scenario(), [job("move")], watch, initial={"h100": 2})
    first, second = [b for b in binds if b.pod.name.startswith("move-")][:2]
    moved_after_s = second.at - first.at
    assert 0 < result.lost_gpu_hours <= 8 * moved_after_s / 3600  # its 8 GPUs' work since it started (no checkpoint)
    assert first.pod.name == "move-1-0" and second.pod.name == "move-2-0" and first.node.name != second.node.name
    keys = {c.key for c in second.claims}
    assert "llm/move-1-0-gpu" not in keys and "llm/move-2-0-gpu" in keys
    allocated = [c for c in second.claims if c.allocation is not None]
    assert [c.key for c in allocated] == ["llm/move-2-0-gpu"]
    assert allocated[0].allocation is not None
    assert {d.pool for d in allocated[0].allocation.devices} == {second.node.name}


def test_the_bundled_dra_scenario_publishes_slices() -> None:
    assert '"slice_publication"' in short_run_json("dra", hours=3, seed=3)


def test_a_scenario_without_dra_carries_no_dra_objects_and_no_slices_phase() -> None:
    setup, config = load_scenario("zones", seed=1)
    short = replace(setup, duration_s=2 * 3600, jobs=tuple(j for j in setup.jobs if j.submit_s < 2 * 3600))
    assert not setup.device_classes
    watch = Watch()
    built: list[int] = []
    original = scheduler_module.SimScheduler._dra_state

    def state(self: scheduler_module.SimScheduler) -> Any:
        found = original(self)
        built.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scheduler_module.SimScheduler, "_dra_state", state)
        result = simulate(short, policy_named("gpuscale", config), decide=watch)
    assert watch.seen and not any(dra for _, _, dra in watch.seen)
    assert built and not any(built)
    assert all(Phase.SLICE_PUBLICATION.value not in p.phases for p in result.pods)
    assert "slice_publication" not in json.dumps(result_json(result, include_wall=False))


def _claims(**claim: Any) -> dict[str, Any]:
    return scenario(training={"jobs_per_hour": 1, "resourceClaims": [{"name": "gpu", **claim}]})


@pytest.mark.parametrize(("raw", "where", "words"), [
    (_claims(deviceClassName="nvidia.com"), "workload.training.resourceClaims.0.deviceClassName",
     "no device class 'nvidia.com' (declared: gpu.nvidia.com)"),
    (_claims(selectors=["device.attributes[\"gpu.nvidia.com\"].productName =="]),
     "workload.training.resourceClaims.0.selectors.0", "compilation failed"),
    (_claims(claim="per-job"), "workload.training.resourceClaims.0.claim", "per-pod"),
    (_claims(count=0), "workload.training.resourceClaims.0.count", "greater than or equal to 1"),
    (_claims(name="GPU"), "workload.training.resourceClaims.0.name", "should match pattern"),
    ({**scenario(training={"jobs_per_hour": 1, "resourceClaims": [{"name": "gpu"}, {"name": "gpu"}]})},
     "workload.training.resourceClaims.1.name", "duplicate claim name 'gpu'"),
    ({**_claims(deviceClassName="gpu.nvidia.com"), "deviceClasses": [{"name": "example.com"}]},
     "workload.training.resourceClaims.0.deviceClassName", "(declared: example.com)"),
    ({**_claims(deviceClassName="a.example.com"),
      "deviceClasses": [{"name": "a.example.com", "selectors": ["device.driver == "]}]},
     "deviceClasses.0.selectors.0", "compilation failed"),
])
def test_bad_claim_input_is_one_error_naming_the_field(raw: dict[str, Any], where: str, words: str) -> None:
    assert_one_line_error(raw, where, words)


def test_bad_claim_input_from_the_cli_is_one_line_exit_2(tmp_path: Path) -> None:
    assert_cli_one_line_exit_2(_claims(deviceClassName="nosuch"), "workload.training.resourceClaims.0.deviceClassName",
                               tmp_path)
