"""An independent, per-node oracle of kube-scheduler's filters for tests: one pod, one node, the pods already there,
first failing plugin only, in the default profile's order. Written plainly (no masks, no caches) so that tests can
hold the engine's vectorised filters (`engine.whatif.filters`) and its searches against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuscale.engine.scheduling import FitCode, FitFailure, Topology, static_failures, unsupported_failures
from gpuscale.model.node import Node
from gpuscale.model.pod import HONOR, Pod, depends_on_placed
from gpuscale.model.resources import Resources
from gpuscale.model.taints import untolerated_taint
from gpuscale.model.volumes import PersistentVolumeClaim, PodClaim, Storage


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


ZONE_KEYS = ("failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
             "topology.kubernetes.io/zone", "topology.kubernetes.io/region")


def _claim(c: PodClaim, storage: Storage) -> PersistentVolumeClaim | None:
    pvc = storage.claim(c.key)
    if pvc is None and c.template is not None:
        pvc = c.template if c.template.storage_class else replace(c.template, storage_class=storage.default_class())
    return pvc


def volume_prefilter(pod: Pod, storage: Storage) -> str | None:
    """The volume PreFilters, plainly: a named claim missing; Lost or deleting claims; an unbound claim not of a
    WaitForFirstConsumer class; a bound named claim's PV missing."""
    claims = pod.constraints.claims
    for c in claims:
        if c.template is None and storage.claim(c.key) is None:
            return f'persistentvolumeclaim "{c.name}" not found'
    pvcs = [(c, _claim(c, storage)) for c in claims]
    for _, pvc in pvcs:
        assert pvc is not None
        if pvc.phase == "Lost":
            return f'persistentvolumeclaim "{pvc.name}" bound to non-existent persistentvolume "{pvc.volume_name}"'
        if pvc.deleting:
            return f'persistentvolumeclaim "{pvc.name}" is being deleted'
    for _, pvc in pvcs:
        assert pvc is not None
        if not (pvc.volume_name and pvc.bind_completed):
            cls = storage.storage_class(pvc.storage_class)
            if cls is None or not cls.wait_for_first_consumer or pvc.volume_name:
                return "pod has unbound immediate PersistentVolumeClaims"
    for c, pvc in pvcs:
        assert pvc is not None
        if c.template is None and pvc.volume_name and storage.volume(pvc.volume_name) is None:
            return f'persistentvolume "{pvc.volume_name}" not found'
    return None


def volume_failures(pod: Pod, node: Node, storage: Storage, placed: Sequence[Pod],
                    here: Sequence[Pod]) -> tuple[FitFailure, ...]:
    """VolumeRestrictions, NodeVolumeLimits, VolumeBinding and VolumeZone on one node, plainly (no assumed claims:
    the pods in `placed` are bound ones)."""
    pvcs = [(c, p) for c in pod.constraints.claims if (p := _claim(c, storage)) is not None]
    in_use = {c.key for other in placed for c in other.constraints.claims}
    if any(c.template is None and "ReadWriteOncePod" in p.access_modes and c.key in in_use for c, p in pvcs):
        return (FitFailure(FitCode.RWOP_CONFLICT),)
    csi = storage.csi_node(node.name)

    def counted(p: PersistentVolumeClaim) -> tuple[str, str] | None:
        pv = storage.volume(p.volume_name) if p.volume_name else None
        if pv is not None:
            return (f"{pv.csi_driver}/{pv.csi_handle}", pv.csi_driver) if pv.csi_driver and pv.csi_handle else None
        cls = storage.storage_class(p.storage_class) if p.storage_class else None
        return (f"{cls.provisioner}/claim:{p.key}", cls.provisioner) if cls is not None and cls.provisioner else None

    if csi is not None and csi.limits:
        attached = {a for other in here for c in other.constraints.claims
                    if (p := _claim(c, storage)) is not None and (a := counted(p)) is not None}
        new = {a for _, p in pvcs if (a := counted(p)) is not None} - attached
        for driver, limit in csi.limits.items():
            if sum(1 for _, d in attached if d == driver) + sum(1 for _, d in new if d == driver) > limit and any(
                    d == driver for _, d in new):
                return (FitFailure(FitCode.MAX_VOLUME_COUNT),)
    failures = []
    bound = [storage.volume(p.volume_name) for _, p in pvcs if p.volume_name and p.bind_completed]
    if any(pv is not None and not pv.affinity_matches(node.labels) for pv in bound):
        failures.append(FitFailure(FitCode.VOLUME_NODE_CONFLICT))
    delayed = sorted((p for _, p in pvcs if not (p.volume_name and p.bind_completed)), key=lambda p: p.request)
    chosen: set[str] = set()
    for p in delayed:
        if p.selected_node is not None and p.selected_node != node.name:
            failures.append(FitFailure(FitCode.VOLUME_BIND_CONFLICT))
            break
        options = [pv for pv in storage.volumes if pv.storage_class == p.storage_class and pv.name not in chosen
                   and pv.capacity >= p.request and pv.volume_mode == p.volume_mode and not pv.deleting
                   and pv.affinity_matches(node.labels)
                   and (pv.claim == p.key or (pv.claim is None and pv.phase == "Available"
                                              and p.access_modes <= pv.access_modes
                                              and (p.selector is None or p.selector.matches(pv.labels))))]
        if options and p.selected_node is None:
            best = next((pv for pv in options if pv.claim == p.key), min(options, key=lambda pv: pv.capacity))
            chosen.add(best.name)
            continue
        cls = storage.storage_class(p.storage_class)
        if (cls is None or cls.provisioner in ("", "kubernetes.io/no-provisioner")
                or not cls.topology_allows(node.labels)):
            failures.append(FitFailure(FitCode.VOLUME_BIND_CONFLICT))
            break
    if any(pv is None for pv in bound):
        failures.append(FitFailure(FitCode.VOLUME_PV_MISSING))
    if failures:
        return tuple(failures)
    if any(k in node.labels for k in ZONE_KEYS):
        for c, p in pvcs:
            pv = storage.volume(p.volume_name) if c.template is None and p.volume_name else None
            for key in ZONE_KEYS:
                if pv is not None and key in pv.labels:
                    ga = key.replace("failure-domain.beta.kubernetes.io", "topology.kubernetes.io")
                    value = node.labels.get(key, node.labels.get(ga))
                    if value is None or value not in pv.labels[key].split("__"):
                        return (FitFailure(FitCode.VOLUME_ZONE_CONFLICT),)
    return ()


def node_failures(pod: Pod, node: Node, used: Resources, pod_count: int,
                  topology: Topology | None = None, here: Sequence[Pod] = (),
                  cluster: tuple[Sequence[Node], Sequence[Pod]] | None = None,
                  storage: Storage | None = None) -> tuple[FitFailure, ...]:
    """Every check for one pod on one node, first failing plugin only; empty means the pod fits. `here`: the pods on
    the node (their host ports); `cluster` (every node and placed pod) is what PodTopologySpread counts over;
    `storage`: the snapshot's storage objects, for the volume filters (their PreFilter first)."""
    if storage is not None and pod.constraints.claims and (message := volume_prefilter(pod, storage)) is not None:
        return (FitFailure(FitCode.VOLUME_PREFILTER, message),)
    failures = static_failures(pod.constraints, node)
    if failures:
        return failures
    failures = port_failures(pod, here)
    if failures:
        return failures
    failures = resource_failures(pod.requests, free_on(node, used), node.allocatable.get("pods") - pod_count)
    if failures:
        return failures
    if storage is not None and pod.constraints.claims:
        assert cluster is not None, "VolumeRestrictions reads every placed pod"
        failures = volume_failures(pod, node, storage, cluster[1], here)
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
