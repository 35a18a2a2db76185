"""An independent, per-node oracle of kube-scheduler's filters for tests: one pod, one node, the pods already there,
first failing plugin only, in the default profile's order. Written plainly (no masks, no caches) so that tests can
hold the engine's vectorised filters (`engine.whatif.filters`) and its searches against it."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscale.engine.scheduling import FitCode, FitFailure, Topology, static_failures, unsupported_failures
from gpuscale.model.node import Node
from gpuscale.model.pod import HONOR, Pod, depends_on_placed
from gpuscale.model.resources import Resources
from gpuscale.model.taints import untolerated_taint


def resource_failures(requests: Resources, free: Resources, free_pods: int) -> tuple[FitFailure, ...]:
    """NodeResourcesFit: one failure per insufficient resource, `Too many pods` first as the scheduler lists it."""
    failures = [FitFailure(FitCode.TOO_MANY_PODS)] if free_pods < 1 else []
    failures.extend(FitFailure(FitCode.INSUFFICIENT, name) for name in requests.shortfalls(free))
    return tuple(failures)



def free_on(node: Node, used: Resources) -> Resources:
    """What is left on a node after the requests of the pods that hold capacity there."""
    return node.allocatable - used


def port_failures(pod: Pod, here: Sequence[Pod]) -> tuple[FitFailure, ...]:
    """NodePorts: some host port of the pod is bound by a pod already on the node, on the same protocol and port and
    the same host IP or either one 0.0.0.0."""
    for other in here:
        for theirs in other.constraints.host_ports:
            for mine in pod.constraints.host_ports:
                same_port = mine.port == theirs.port and mine.protocol == theirs.protocol
                if same_port and (mine.host_ip == theirs.host_ip or "0.0.0.0" in (mine.host_ip, theirs.host_ip)):
                    return (FitFailure(FitCode.NODE_PORTS),)
    return ()


def spread_failures(pod: Pod, node: Node, nodes: Sequence[Node], placed: Sequence[Pod]) -> tuple[FitFailure, ...]:
    """PodTopologySpread's Filter from scratch, as filtering.go computes it: per constraint, count matching pods (same
    namespace, not terminating, selected; none for an empty selector) on eligible nodes (every constraint's key, the
    inclusion policies) per domain; the node fails a missing key or `count + self − min > maxSkew`, where min is 0
    below `minDomains` domains."""
    constraints = pod.constraints.topology_spread
    keys = {c.topology_key for c in constraints}
    for c in constraints:
        value = node.labels.get(c.topology_key)
        if value is None:
            return (FitFailure(FitCode.SPREAD_LABEL),)
        counts: dict[str, int] = {}
        for n in nodes:
            if not keys <= n.labels.keys():
                continue
            if c.node_affinity_policy == HONOR and not pod.constraints.affinity.matches(n.name, n.labels):
                continue
            if c.node_taints_policy == HONOR and untolerated_taint(n.taints, pod.constraints.tolerations):
                continue
            empty = not c.selector.match_labels and not c.selector.match_expressions
            counts[n.labels[c.topology_key]] = counts.get(n.labels[c.topology_key], 0) + sum(
                1 for p in placed if p.node_name == n.name and p.namespace == pod.namespace and not p.deleting
                and not p.is_terminal() and not empty and c.selector.matches(p.labels))
        minimum = 0 if len(counts) < c.min_domains else min(counts.values(), default=2**31 - 1)
        if counts.get(value, 0) + int(c.selector.matches(pod.labels)) - minimum > c.max_skew:
            return (FitFailure(FitCode.SPREAD),)
    return ()


def node_failures(pod: Pod, node: Node, used: Resources, pod_count: int,
                  topology: Topology | None = None, here: Sequence[Pod] = (),
                  cluster: tuple[Sequence[Node], Sequence[Pod]] | None = None) -> tuple[FitFailure, ...]:
    """Every check for one pod on one node, first failing plugin only; empty means the pod fits. `here`: the pods on
    the node (their host ports); `cluster` (every node and placed pod) is what PodTopologySpread counts over."""
    failures = static_failures(pod.constraints, node)
    if failures:
        return failures
    failures = port_failures(pod, here)
    if failures:
        return failures
    failures = resource_failures(pod.requests, free_on(node, used), node.allocatable.get("pods") - pod_count)
    if failures:
        return failures
    if pod.constraints.topology_spread:
        assert cluster is not None, "PodTopologySpread counts over every node and placed pod"
        failures = spread_failures(pod, node, *cluster)
        if failures:
            return failures
    if topology is not None and (topology.relevant or depends_on_placed(pod)):
        failures = topology.failures(pod, node)
        if failures:
            return failures
    return unsupported_failures(pod.constraints)
