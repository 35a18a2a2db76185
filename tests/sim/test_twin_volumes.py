"""The twin's workloads with topology spread and claims (`sim.scenario_volumes`, `sim.storage`): a service spread over
three zones keeps within its maxSkew at every bind and once all replicas run; batch jobs reading a zone-b dataset
run only on zone-b nodes, and the engine scales up zone-b nodes for them; a WaitForFirstConsumer claim binds in its
first pod's zone and the job's restarted pod returns there (the engine adds a node in that zone for it); bad
scenario input is one `ConfigError` naming the field."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.engine.decide import decide
from gpuscale.engine.plan import Plan, Removal, Snapshot
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState
from gpuscale.engine.whatif.store import IncrementalStore
from gpuscale.model.node import ZONE_LABEL, Node
from gpuscale.model.pod import Pod
from gpuscale.model.pool import NodePool
from gpuscale.model.volumes import Storage
from gpuscale.sim import world as world_module
from gpuscale.sim.run import simulate
from gpuscale.sim.scenario import parse_scenario, policy_named
from gpuscale.sim.traces import GKE_PLACEMENT, pod_requests
from gpuscale.sim.workloads import ClaimTemplate, JobSpec
from tests.sim.runs import assert_cli_one_line_exit_2, assert_one_line_error

ZONES = ["zone-a", "zone-b", "zone-c"]
T4 = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def scenario(**workload: Any) -> dict[str, Any]:
    return {
        "name": "zones-test", "duration": "3h", "seed": 1,
        "config": {"pools": [
            {"name": "cpu", "usd_per_hour": 0.8, "min_size": 1, "max_size": 12, "zones": ZONES,
             "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}},
            {"name": "t4", "usd_per_hour": 0.54, "max_size": 12, "zones": ZONES, "labels": T4, "taints": GPU_TAINT,
             "gpu": {"model": "nvidia-tesla-t4", "count": 1}, "allocatable": {"cpu": "4", "memory": "15Gi"}},
        ]},
        "storage": {
            "classes": [{"name": "zonal", "provisioner": "pd.csi.storage.gke.io",
                         "volumeBindingMode": "WaitForFirstConsumer", "allowedZones": ZONES}],
            "datasets": [{"name": "corpus", "zone": "zone-b", "accessModes": ["ReadOnlyMany"]}],
        },
        "workload": workload,
    }


SPREAD = {"maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule", "selectOwnPods": True,
          "minDomains": 3}
"""A zone spread as Kubernetes recommends it for autoscaled clusters: with fewer than 3 zones holding a node, the
global minimum counts as 0 (without `minDomains`, zones without nodes are no domains, and every replica may go to
the one zone that has nodes)."""


class Watch:
    """The engine as the twin calls it; keeps each snapshot's facts a test reads, and may add removals."""

    def __init__(self) -> None:
        self.store = IncrementalStore()
        self.snapshots: list[tuple[float, tuple[Node, ...], tuple[Pod, ...]]] = []
        self.plans: list[Plan] = []
        self.remove: Removal | None = None
        self.storage: list[Storage] = []

    def __call__(self, snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        cluster = snapshot.cluster
        self.snapshots.append((now, cluster.nodes, cluster.pods))
        self.storage.append(cluster.storage)
        plan = decide(snapshot, pools, state, policy, now, store=self.store)
        if self.remove is not None and any(p.node_name == self.remove.node for p in cluster.pods):
            plan = Plan(scale_up=plan.scale_up, scale_down=(*plan.scale_down, self.remove),
                        unplaceable=plan.unplaceable)
            self.remove = None
        self.plans.append(plan)
        return plan


Bind = tuple[Pod, Node, tuple[Node, ...], tuple[Pod, ...]]


@contextmanager
def recorded_binds() -> Iterator[list[Bind]]:
    """Every bind in the twin with the cluster's nodes and its other pods just before it (`World.bound` wrapped)."""
    seen: list[Bind] = []
    original = world_module.World.bound

    def bound(self: world_module.World, pod: Pod, node: Node) -> None:
        others = tuple(p for p in self.cluster.pods.values() if p.key != pod.key)
        seen.append((pod, node, tuple(self.cluster.nodes.values()), others))
        original(self, pod, node)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(world_module.World, "bound", bound)
        yield seen


def zone_counts(pods: tuple[Pod, ...], nodes: tuple[Node, ...], app: str) -> Counter[str]:
    """Bound pods of `app` per zone, over the zones of the T4 nodes (PodTopologySpread's domains: nodes the pods'
    node selector admits; a zone with none of them is no domain)."""
    zone_of = {n.name: n.zone for n in nodes}
    counts: Counter[str] = Counter({n.zone: 0 for n in nodes if n.labels.get(next(iter(T4))) and n.zone})
    for pod in pods:
        if pod.labels.get("app") == app and pod.node_name in zone_of:
            counts[zone_of[pod.node_name] or ""] += 1
    return counts


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_a_service_spread_over_three_zones_stays_within_max_skew(seed: int) -> None:
    raw = scenario(services=[{"name": "chat", "peak_rps": 1, "rps_per_replica": 6, "min_replicas": 6,
                              "max_replicas": 6, "topologySpreadConstraints": [SPREAD]}])
    raw["seed"] = seed
    setup, config = parse_scenario(raw, "test")
    watch = Watch()
    with recorded_binds() as binds:
        result = simulate(setup, policy_named("gpuscale", config), decide=watch)
    chat = [(pod, node, nodes, pods) for pod, node, nodes, pods in binds if pod.labels.get("app") == "chat"]
    assert len(chat) >= 6
    for pod, node, nodes, pods in chat:  # the filter at each bind: its zone's count + 1 − the global minimum ≤ 1
        counts = zone_counts(pods, nodes, "chat")
        global_min = min(counts.values()) if len(counts) >= 3 else 0  # minDomains
        assert counts[node.zone or ""] + 1 - global_min <= 1, (pod.key, node.zone, counts)
    settled = 0
    for _, nodes, pods in watch.snapshots:  # once every replica runs, they are spread within maxSkew
        replicas = [p for p in pods if p.labels.get("app") == "chat"]
        if len(replicas) == 6 and all(p.node_name for p in replicas):
            counts = zone_counts(pods, nodes, "chat")
            assert len(counts) == 3 and max(counts.values()) - min(counts.values()) <= 1, counts
            settled += 1
    assert settled > 0
    assert all(r.running_s is not None for r in result.pods if r.workload == "inference")
    zones_added = {u.zone for plan in watch.plans for u in plan.scale_up if u.pool == "t4"}
    assert zones_added == set(ZONES)  # one scale-up per zone at least: spread needs all three


def test_batch_jobs_on_a_zone_b_dataset_run_and_scale_up_only_in_zone_b() -> None:
    setup, config = parse_scenario(scenario(batch={"jobs_per_hour": 30, "volumes": [
        {"name": "data", "dataset": "corpus"}]}), "test")
    watch = Watch()
    with recorded_binds() as binds:
        result = simulate(setup, policy_named("gpuscale", config), decide=watch)
    batch = [(pod, node) for pod, node, _, _ in binds if pod.labels.get("gpuscale.io/workload") == "batch"]
    assert len(batch) > 20
    assert {node.zone for _, node in batch} == {"zone-b"}
    # the cpu pool's minimum node is in zone-a (its first zone): the jobs needed a zone-b node
    ups = [u for plan in watch.plans for u in plan.scale_up if any("batch-" in p for p in u.pods)]
    assert ups and {u.zone for u in ups} == {"zone-b"}
    assert all(r.running_s is not None for r in result.pods if r.workload == "batch" and r.created_s < 9000)


class RemoveFirstNode(Watch):
    """`Watch`, removing once the node the first attempt of job `ft` runs on (as a scale-down would)."""

    def __init__(self) -> None:
        super().__init__()
        self.removed = False

    def __call__(self, snapshot: Snapshot, pools: Sequence[NodePool], state: EngineState, policy: Policy,
                 now: float) -> Plan:
        running = [p for p in snapshot.cluster.pods if p.name == "ft-1-0" and p.started_s is not None]
        if running and not self.removed:
            self.remove = Removal(node=running[0].node_name or "", pool="t4", evict=(running[0].key,), reasons=())
            self.removed = True
        return super().__call__(snapshot, pools, state, policy, now)


def test_a_wffc_claim_binds_where_its_first_pod_lands_and_the_restarted_pod_returns() -> None:
    """A 6-hour 1-GPU job with a WaitForFirstConsumer claim; a T4 node in each zone from the start. The node it runs
    on is removed: the job restarts with its claim now bound to a PV in the first node's zone, so its pod waits for a
    new node there although the other zones' T4 nodes stand free."""
    raw = scenario(training={"jobs_per_hour": 2, "volumes": [
        {"name": "ckpt", "claim": "per-job", "storageClassName": "zonal", "size": "10Gi"}]})
    raw["initial_nodes"] = {"t4": 3}
    raw["duration"] = "2h"
    setup, config = parse_scenario(raw, "test")
    assert setup.jobs and all(j.claims == (ClaimTemplate(volume="ckpt", storage_class="zonal",
                                                         request_bytes=10 * 2**30),) for j in setup.jobs)
    requests = pod_requests(gpus_per_pod=1, gpu_milli=1000, cpu_milli=2000, memory_mib=8192)
    job = JobSpec(name="ft", team="vision", submit_s=60.0, requests=requests,
                  constraints=GKE_PLACEMENT.constraints("nvidia-tesla-t4", requests), duration_s=6 * 3600.0,
                  claims=setup.jobs[0].claims)
    watch = RemoveFirstNode()
    with recorded_binds() as binds:
        simulate(replace(setup, jobs=(job,)), policy_named("gpuscale", config), decide=watch)
    attempts = [(pod, node) for pod, node, _, _ in binds if pod.name.startswith("ft-")]
    assert [p.name for p, _ in attempts] == ["ft-1-0", "ft-2-0"]
    first_zone = attempts[0][1].zone
    assert attempts[1][1].zone == first_zone and attempts[1][1].name != attempts[0][1].name
    # the engine added that node in the claim's zone
    ups = [u for plan in watch.plans for u in plan.scale_up if "vision/ft-2-0" in u.pods]
    assert ups and {u.zone for u in ups} == {first_zone}
    # the claim was bound at the first bind to a PV pinned to that zone, and stayed bound through the restart
    storage = watch.storage[-1]
    claim = storage.claim("vision/ft-ckpt")
    assert claim is not None and claim.bound and claim.selected_node == attempts[0][1].name
    pv = storage.volume(claim.volume_name)
    assert pv is not None and pv.node_affinity is not None
    assert [r.values for t in pv.node_affinity for r in t.match_expressions] == [(first_zone,)]


def _service(**extra: Any) -> dict[str, Any]:
    return scenario(services=[{"name": "chat", "peak_rps": 10, "rps_per_replica": 6, **extra}])


def _spread(**change: Any) -> dict[str, Any]:
    return _service(topologySpreadConstraints=[{**SPREAD, **change}])


def _batch_volume(**volume: Any) -> dict[str, Any]:
    return scenario(batch={"jobs_per_hour": 1, "volumes": [{"name": "v", **volume}]})


def _storage(**change: Any) -> dict[str, Any]:
    raw = scenario()
    raw["storage"] = {**raw["storage"], **change}
    return raw


SPREAD_AT = "workload.services.0.topologySpreadConstraints.0"
BAD = [
    (_spread(maxSkew=0), f"{SPREAD_AT}.maxSkew", "greater than or equal to 1"),
    (_spread(whenUnsatisfiable="Sometimes"), f"{SPREAD_AT}.whenUnsatisfiable", "DoNotSchedule"),
    (_spread(whenUnsatisfiable="ScheduleAnyway"), SPREAD_AT, "minDomains: can only be set"),
    (_spread(labelSelector={"matchLabels": {"app": "chat"}}), SPREAD_AT, "selectOwnPods: give either"),
    (_spread(topologyKey="not a key!"), SPREAD_AT, "topologyKey:"),
    (_spread(maxskew=1), f"{SPREAD_AT}.maxskew", "unknown setting"),
    (_spread(selectOwnPods=False, labelSelector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
     f"{SPREAD_AT}.labelSelector.matchExpressions.0", "values: must be non-empty"),
    (_spread(selectOwnPods=False, labelSelector={"matchLabels": {"app": "x"}}, matchLabelKeys=["app"]), SPREAD_AT,
     "'app' is also in labelSelector"),
    (_service(topologySpreadConstraints=[SPREAD, SPREAD]), "workload.services.0.topologySpreadConstraints.1",
     "duplicate {topologyKey"),
    (_batch_volume(claim="per-job", storageClassName="fast"), "workload.batch.volumes.0.storageClassName",
     "no storage class 'fast'"),
    (_batch_volume(dataset="imagenet"), "workload.batch.volumes.0.dataset", "no dataset 'imagenet'"),
    (_batch_volume(dataset="corpus", claim="per-pod"), "workload.batch.volumes.0", "exactly one of claim"),
    (_batch_volume(claim="per-job"), "workload.batch.volumes.0", "storageClassName: required"),
    (_batch_volume(claim="per-job", storageClassName="zonal", size="10Gx"), "workload.batch.volumes.0.size", ""),
    (_batch_volume(claim="per-node", storageClassName="zonal"), "workload.batch.volumes.0.claim", "per-job"),
    (_service(volumes=[{"name": "v", "claim": "per-pod", "storageClassName": "zonal"}]),
     "workload.services.0.volumes.0.claim", "use a dataset"),
    (_storage(datasets=[{"name": "corpus", "zone": "zone-z"}]), "storage.datasets.0.zone", "zone 'zone-z' is no pool"),
    (_storage(classes=[{"name": "zonal", "provisioner": "p", "allowedZones": ["zone-z"]}]),
     "storage.classes.0.allowedZones", "zone 'zone-z'"),
    (_storage(classes=[{"name": "zonal", "provisioner": "p", "volumeBindingMode": "Later"}]),
     "storage.classes.0.volumeBindingMode", "WaitForFirstConsumer"),
    (_storage(classes=[{"name": "zonal", "provisioner": "p"}, {"name": "zonal", "provisioner": "q"}]),
     "storage.classes.1.name", "duplicate name 'zonal'"),
]


@pytest.mark.parametrize(("raw", "where", "words"), BAD)
def test_bad_spread_and_volume_input_is_one_error_naming_the_field(raw: dict[str, Any], where: str,
                                                                   words: str) -> None:
    assert_one_line_error(raw, where, words)


def test_bad_volume_input_from_the_cli_is_one_line_exit_2(tmp_path: Path) -> None:
    assert_cli_one_line_exit_2(_batch_volume(dataset="imagenet"), "workload.batch.volumes.0.dataset", tmp_path)
