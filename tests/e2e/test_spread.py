"""Topology spread against the real control plane, the controller composed as `gpuscale run` does and ticked
in-process (test_controller.Driver): a Deployment of 3 replicas spread over zones (`DoNotSchedule`,
`topology.kubernetes.io/zone`, maxSkew 1, minDomains 3) with three pools of one zone each. One decision orders one
node in each zone — the replicas placed on the first zone's template count against the second replica there, as the
scheduler will count them — and every replica runs, one per zone.

`minDomains: 3` is what makes a spread ask for zones that have no node yet: kube-scheduler counts only the domains
of existing nodes, so without it (and with no node in the other zones) it would put all three replicas on the first
zone's node, and an autoscaler that simulates it faithfully orders one node.
"""

from __future__ import annotations

from collections.abc import Callable

from harness import ignore_status, wait_for
from kubernetes import client
from test_controller import Driver, make_driver, seed_config  # noqa: F401 (fixtures)

from gpuscale.config import Config
from gpuscale.model.node import ZONE_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import Resources

SPREAD_LABEL = "e2e.gpuscale.io/spread"
ZONES = ("spread-zone-a", "spread-zone-b", "spread-zone-c")
POOLS = tuple(NodePool(name=f"spread-{zone[-1]}", allocatable=Resources.of(cpu=4000, memory=16 * 2**30, pods=110),
                       labels={SPREAD_LABEL: "yes"}, zones=(zone,), max_size=3, usd_per_hour=0.2)
              for zone in ZONES)
APP = "spread-web"


def _deployment() -> client.V1Deployment:
    labels = {"app": APP}
    spread = client.V1TopologySpreadConstraint(
        max_skew=1, topology_key=ZONE_LABEL, when_unsatisfiable="DoNotSchedule", min_domains=3,
        label_selector=client.V1LabelSelector(match_labels=labels), match_label_keys=["pod-template-hash"])
    pod = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            node_selector={SPREAD_LABEL: "yes"}, topology_spread_constraints=[spread],
            termination_grace_period_seconds=0,
            containers=[client.V1Container(name="web", image="registry.example/web:1",
                                           resources=client.V1ResourceRequirements(
                                               requests={"cpu": "500m", "memory": "1Gi"}))]))
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=APP),
        spec=client.V1DeploymentSpec(replicas=3, selector=client.V1LabelSelector(match_labels=labels), template=pod))


def test_a_deployment_spread_over_three_zones_gets_one_node_in_each(
        make_driver: Callable[[Config], Driver], api_client: client.ApiClient,  # noqa: F811
        core_v1: client.CoreV1Api, namespace: str) -> None:
    driver = make_driver(seed_config(extra_pools=POOLS))
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment())
    try:
        def replicas() -> list[client.V1Pod]:
            return core_v1.list_namespaced_pod(namespace, label_selector=f"app={APP}").items

        wait_for(lambda: len(replicas()) == 3 and all(
            any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or [])
            for p in replicas()), 30, desc="three replicas Unschedulable")
        driver.tick_until(driver.scale_ups, 30, "a scale-up")
        assert sorted(driver.scale_ups()) == [(p.name, 1) for p in POOLS], driver.reports[-1]
        assert sum(1 for r in driver.reports if r.scaled_up) == 1  # one decision ordered all three

        def all_running() -> bool:
            pods = replicas()
            return len(pods) == 3 and all(p.status.phase == "Running" for p in pods)

        driver.tick_until(all_running, 90, "every replica Running")
        zone_of = {n.metadata.name: n.metadata.labels.get(ZONE_LABEL) for ns in driver.pool_nodes().values()
                   for n in ns}
        assert sorted(zone_of[p.spec.node_name] for p in replicas()) == list(ZONES)
        assert sorted(driver.scale_ups()) == [(p.name, 1) for p in POOLS], driver.scale_ups()  # nothing more
        nodes = driver.pool_nodes()
        assert {name: len(ns) for name, ns in nodes.items()} == {p.name: 1 for p in POOLS}, nodes
        assert not [e for r in driver.reports for e in r.errors], [str(e) for r in driver.reports for e in r.errors]
    finally:
        ignore_status(404, apps.delete_namespaced_deployment, APP, namespace)
        core_v1.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, label_selector=f"app={APP}")
