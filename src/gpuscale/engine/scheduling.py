"""Feasibility of a pod on a node with kube-scheduler's semantics, failures returned as data in its own wording.

Filters run in the default profile's order (Kubernetes v1.37) and stop at the first plugin that rejects the node, as
the scheduler's framework does: NodeName → NodeUnschedulable → TaintToleration → NodeAffinity → NodePorts →
NodeResourcesFit (every insufficient resource is reported) → InterPodAffinity. Constraints gpuscale does not model
surface as `UNSUPPORTED` failures on nodes that pass everything else, so an unmodelled constraint is never a silent
"fits".

`static_failures` depends only on the pod's constraints and the node's labels, taints and cordon state, so callers
cache it per (constraints, node group); host ports (`HostPorts`), resources and the affinity checks depend on what
already runs there (`engine.whatif.filters` runs them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pod import ANY_HOST_IP, HONOR, Pod, SchedulingConstraints, TopologySpreadConstraint
from gpuscale.model.selectors import LabelSelector, NodeAffinity, PodAffinityTerm
from gpuscale.model.taints import UNSCHEDULABLE_TAINT, Toleration, untolerated_taint


class FitCode(StrEnum):
    UNSCHEDULABLE = "NodeUnschedulable"
    NODE_NAME = "NodeName"
    TAINT = "TaintToleration"
    NODE_AFFINITY = "NodeAffinity"
    NODE_PORTS = "NodePorts"
    INSUFFICIENT = "Insufficient"
    TOO_MANY_PODS = "TooManyPods"
    POD_AFFINITY = "PodAffinity"
    POD_ANTI_AFFINITY = "PodAntiAffinity"
    EXISTING_ANTI_AFFINITY = "ExistingPodsAntiAffinity"
    SPREAD_LABEL = "PodTopologySpreadLabel"
    SPREAD = "PodTopologySpread"
    GPU_DEVICES = "GpuDevices"
    VOLUME_PREFILTER = "VolumePreFilter"
    RWOP_CONFLICT = "VolumeRestrictions"
    MAX_VOLUME_COUNT = "NodeVolumeLimits"
    VOLUME_NODE_CONFLICT = "VolumeNodeAffinityConflict"
    VOLUME_BIND_CONFLICT = "VolumeBindConflict"
    VOLUME_ZONE_CONFLICT = "VolumeZone"
    VOLUME_PV_MISSING = "VolumePVNotExist"
    DRA_PREFILTER = "DynamicResourcesPreFilter"
    DRA = "DynamicResources"
    DRA_ERROR = "DynamicResourcesError"
    UNSUPPORTED = "Unsupported"


@quick_init
@dataclass(frozen=True, slots=True)
class FitFailure:
    """Why one node cannot take one pod; `detail` is the resource, the taint or the unsupported constraint."""

    code: FitCode
    detail: str = ""

    @property
    def message(self) -> str:
        """The scheduler's own wording, as it appears in FailedScheduling events."""
        return _MESSAGES[self.code].format(detail=self.detail)


PLUGIN_ERROR = 'running "DynamicResources" filter plugin: '
"""How kube-scheduler's framework prefixes a Filter plugin's error (DynamicResources is the only one that errs here)."""

_MESSAGES = {
    FitCode.UNSCHEDULABLE: "node(s) were unschedulable",
    FitCode.NODE_NAME: "node(s) didn't match the requested node name",
    # Since kubernetes#134740 (v1.35, backported to v1.34) the event no longer names the taint; `detail` keeps it.
    FitCode.TAINT: "node(s) had untolerated taint(s)",
    FitCode.NODE_AFFINITY: "node(s) didn't match Pod's node affinity/selector",
    FitCode.NODE_PORTS: "node(s) didn't have free ports for the requested pod ports",
    FitCode.INSUFFICIENT: "Insufficient {detail}",
    FitCode.TOO_MANY_PODS: "Too many pods",
    FitCode.POD_AFFINITY: "node(s) didn't match pod affinity rules",
    FitCode.POD_ANTI_AFFINITY: "node(s) didn't match pod anti-affinity rules",
    FitCode.EXISTING_ANTI_AFFINITY: "node(s) didn't satisfy existing pods anti-affinity rules",
    FitCode.SPREAD_LABEL: "node(s) didn't match pod topology spread constraints (missing required label)",
    FitCode.SPREAD: "node(s) didn't match pod topology spread constraints",
    FitCode.GPU_DEVICES: "node(s) didn't have {detail}",
    # A volume PreFilter's rejection (VolumeRestrictions, VolumeBinding, VolumeZone) is its whole message, said once
    # for every node: `0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.`
    FitCode.VOLUME_PREFILTER: "{detail}",
    FitCode.RWOP_CONFLICT: ("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
                            "already in-use by another pod"),
    FitCode.MAX_VOLUME_COUNT: "node(s) exceed max volume count",
    FitCode.VOLUME_NODE_CONFLICT: "node(s) didn't match PersistentVolume's node affinity",
    FitCode.VOLUME_BIND_CONFLICT: "node(s) didn't find available persistent volumes to bind",
    FitCode.VOLUME_ZONE_CONFLICT: "node(s) had no available volume zone",
    FitCode.VOLUME_PV_MISSING: "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
    # DynamicResources: its PreFilter's rejection (a claim not created yet or missing, a class missing) is said once
    # for every node, as the volume PreFilters'; its Filter's message per node ("cannot allocate all claims",
    # "resourceclaim not available on the node"). An allocator error (a CEL selector failing at run time) is not a
    # node's verdict but the scheduling attempt's: the framework wraps it (`RunFilterPlugins`) and the pod's
    # PodScheduled condition (reason SchedulerError) and FailedScheduling event say it alone, without a node count.
    FitCode.DRA_PREFILTER: "{detail}",
    FitCode.DRA: "{detail}",
    FitCode.DRA_ERROR: PLUGIN_ERROR + "{detail}",
    FitCode.UNSUPPORTED: "unsupported constraint: {detail}",
}

UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
_PREFILTER_STARTS = ('persistentvolumeclaim "', 'persistentvolume "', 'storageclass.storage.k8s.io "',
                     UNBOUND_IMMEDIATE)
_DRA_PREFILTER_STARTS = ('pod "', 'could not find ResourceClaim "', 'resourceclaim "', "ResourceClaim ", "request ")


def is_dra_prefilter_message(message: str) -> bool:
    """Whether a failure message is DynamicResources' PreFilter rejection (`FitCode.DRA_PREFILTER`)."""
    return message.startswith(_DRA_PREFILTER_STARTS)


def is_plugin_error(message: str) -> bool:
    """Whether a failure message is a Filter plugin's error (`FitCode.DRA_ERROR`): the pod's whole verdict."""
    return message.startswith(PLUGIN_ERROR)


def is_prefilter_message(message: str) -> bool:
    """Whether a failure message is a PreFilter rejection (`FitCode.VOLUME_PREFILTER`, `FitCode.DRA_PREFILTER`): said
    once, without a count."""
    return message.startswith(_PREFILTER_STARTS) or is_dra_prefilter_message(message)


def static_failures(constraints: SchedulingConstraints, node: Node) -> tuple[FitFailure, ...]:
    """Failures of the filters that read only the node's own fields (name, cordon, taints, labels)."""
    if constraints.node_name is not None and constraints.node_name != node.name:
        return (FitFailure(FitCode.NODE_NAME),)
    if node.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in constraints.tolerations):
        return (FitFailure(FitCode.UNSCHEDULABLE),)
    taint = untolerated_taint(node.taints, constraints.tolerations)
    if taint is not None:
        return (FitFailure(FitCode.TAINT, str(taint)),)
    if not constraints.affinity.matches(node.name, node.labels):
        return (FitFailure(FitCode.NODE_AFFINITY),)
    return ()


def unsupported_failures(constraints: SchedulingConstraints) -> tuple[FitFailure, ...]:
    return tuple(FitFailure(FitCode.UNSUPPORTED, what) for what in constraints.unsupported)


@dataclass(frozen=True, slots=True)
class _Placed:
    key: str
    namespace: str
    labels: Mapping[str, str]
    node: str
    anti_affinity: tuple[PodAffinityTerm, ...]
    deleting: bool = False


_NO_DOMAIN_MIN = 2**31 - 1
"""PodTopologySpread's global minimum when no node is eligible (upstream's critical paths start at MaxInt32)."""

_SpreadKey = tuple[str, LabelSelector, str, tuple[str, ...], NodeAffinity | None, tuple[Toleration, ...] | None]
"""A spread count's key: namespace, selector, topology key, every topology key of the pod's constraints, and the
node affinity and tolerations eligibility honours (None: ignored)."""


class _SpreadCount:
    """PodTopologySpread's PreFilter state for one constraint of one kind of pod: the eligible nodes' domains and the
    matching pods per domain (every eligible domain present, 0 included). `domain_of` (the eligible nodes when the
    count was made) is shared with copies and never changed: nodes that came or went since are in `changed` (None:
    not eligible); `nodes_in` and `counts` are each copy's own."""

    __slots__ = ("_minimum", "changed", "counting", "counts", "domain_of", "key", "nodes_in")

    def __init__(self, key: _SpreadKey, counting: bool, domain_of: dict[str, str], nodes_in: dict[str, int],
                 counts: dict[str, int], changed: dict[str, str | None] | None = None) -> None:
        self.key, self.counting = key, counting
        self.domain_of, self.nodes_in, self.counts = domain_of, nodes_in, counts
        self.changed: dict[str, str | None] = {} if changed is None else changed
        self._minimum: int | None = None

    def eligible(self, node: Node) -> bool:
        """The node has every topology key of the pod's constraints and passes the inclusion policies."""
        labels = node.labels
        _, _, _, keys, affinity, tolerations = self.key
        if any(k not in labels for k in keys):
            return False
        if affinity is not None and not affinity.matches(node.name, labels):
            return False
        return tolerations is None or untolerated_taint(node.taints, tolerations) is None

    def matches(self, placed: _Placed) -> bool:
        """Whether the placed pod counts (same namespace, not terminating, selected)."""
        return (self.counting and not placed.deleting and placed.namespace == self.key[0]
                and self.key[1].matches(placed.labels))

    def domain(self, node: str) -> str | None:
        """The eligible node's domain; None: not eligible (or gone)."""
        changed = self.changed
        return changed[node] if changed and node in changed else self.domain_of.get(node)

    def minimum(self) -> int:
        if self._minimum is None:
            self._minimum = min(self.counts.values(), default=_NO_DOMAIN_MIN)
        return self._minimum

    def count(self, node: str, delta: int) -> None:
        domain = self.domain(node)
        if domain is not None:
            self.counts[domain] += delta
            self._minimum = None

    def add_node(self, node: Node) -> None:
        if not self.eligible(node):
            self.changed[node.name] = None
            return
        domain = self.changed[node.name] = node.labels[self.key[2]]
        self.nodes_in[domain] = self.nodes_in.get(domain, 0) + 1
        if domain not in self.counts:
            self.counts[domain] = 0
            self._minimum = None

    def remove_node(self, name: str, pods: Iterable[_Placed]) -> None:
        domain = self.domain(name)
        if domain is None:
            return
        self.changed[name] = None
        self.counts[domain] -= sum(1 for p in pods if self.matches(p))
        self.nodes_in[domain] -= 1
        if not self.nodes_in[domain]:
            del self.nodes_in[domain]
            del self.counts[domain]
        self._minimum = None

    def copy(self) -> _SpreadCount:
        other = _SpreadCount(self.key, self.counting, self.domain_of, dict(self.nodes_in), dict(self.counts),
                             dict(self.changed))
        other._minimum = self._minimum
        return other


class SpreadCheck:
    """PodTopologySpread's Filter for one pod, its counts worked out once (`Topology.spread`); `failure(node)` per
    node: O(constraints)."""

    __slots__ = ("_checks", "_dormant")

    def __init__(self, checks: list[tuple[TopologySpreadConstraint, _SpreadCount, int]],
                 dormant: set[str]) -> None:
        self._checks = checks
        self._dormant = dormant

    def failure(self, node: Node) -> FitFailure | None:
        """The node's failure (a missing topology label, or a skew above `maxSkew`), or None. A dormant node (a
        template not yet holding a pod) is judged as the scheduler would once it joined: its domain counts then."""
        labels = node.labels
        dormant = node.name in self._dormant
        for c, spread, self_match in self._checks:
            value = labels.get(c.topology_key)
            if value is None:
                return FitFailure(FitCode.SPREAD_LABEL)
            counts = spread.counts
            matching = counts.get(value, 0)
            domains, minimum = len(counts), spread.minimum()
            if dormant and value not in counts and spread.eligible(node):
                domains, minimum = domains + 1, 0
            if domains < c.min_domains:
                minimum = 0
            if matching + self_match - minimum > c.max_skew:
                return FitFailure(FitCode.SPREAD)
        return None


class Topology:
    """Which pods run in which topology domain, for InterPodAffinity. Built once per snapshot; cost O(pods).

    Domains are the values of the term's `topology_key` label on nodes; a node without that label is in no domain.
    Kept in step with a changing cluster (the twin's scheduler) by `add`, `remove`, `add_node`, `relabel` and
    `remove_node`; each change drops the per-term domain caches, so the next check of a term costs O(pods) again.
    """

    def __init__(self, nodes: Iterable[Node], placed: Iterable[Pod]) -> None:
        self._nodes = {n.name: n for n in nodes}
        self._labels = {name: n.labels for name, n in self._nodes.items()}
        self._on: dict[str, list[_Placed]] = {}
        """The placements per node, in order. Copies share the lists: a list this copy changes is its own first
        (`_mine`)."""
        labels = self._labels
        for p in placed:
            if p.node_name is not None and p.node_name in labels:
                self._on.setdefault(p.node_name, []).append(
                    _Placed(p.key, p.namespace, p.labels, p.node_name, p.constraints.pod_anti_affinity, p.deleting))
        self._mine: set[str] = set(self._on)
        self._with_anti = [p for p in self._placements() if p.anti_affinity]
        self._eligible: dict[tuple[str, tuple[str, ...], NodeAffinity | None, tuple[Toleration, ...] | None],
                             tuple[dict[str, str], dict[str, int]]] = {}
        """Per topology key and eligibility (every key, the affinity and tolerations honoured), the eligible nodes'
        domains and the eligible nodes per domain: shared by the spread counts of every selector (replaced, never
        changed in place; dropped when a node changes)."""
        self._index: dict[tuple[str, str, str], list[_Placed]] | None = None
        """The placements by (namespace, label, value) when it was made (at the first spread count worked out; copies
        share it: never changed), with those placed since in `_since` and those removed since in `_unplaced`."""
        self._since: list[_Placed] = []
        self._unplaced: set[int] = set()
        """The ids of indexed placements removed since (a removed node's placements need none: it is no domain)."""
        self._domain_cache: dict[tuple[str, PodAffinityTerm, str], frozenset[str]] = {}
        self._affinity_cache: dict[tuple[str, tuple[PodAffinityTerm, ...]], tuple[frozenset[str], ...]] = {}
        self._spread: dict[_SpreadKey, _SpreadCount] = {}
        """PodTopologySpread's counts per constraint kind met so far, kept in step with every change."""
        self._dormant: set[str] = set()
        """Hypothetical nodes (`add_node`) no pod was placed on yet: no domain of theirs counts until one is, as a node
        Cluster Autoscaler's estimator adds joins its snapshot only when a pod needs it."""

    def add(self, pod: Pod, node: Node) -> None:
        """Record a placement (scale-up packing onto template nodes, a bind in the twin). Cost O(1), plus O(spread
        counts kept) and, on a dormant node's first pod, its domains."""
        if node.name not in self._labels:
            self._nodes[node.name], self._labels[node.name] = node, node.labels
            self._spread_add_node(node)
        elif node.name in self._dormant:
            self._dormant.discard(node.name)
            self._spread_add_node(self._nodes[node.name])
        placed = _Placed(pod.key, pod.namespace, pod.labels, node.name, pod.constraints.pod_anti_affinity,
                         pod.deleting)
        self._own(node.name).append(placed)
        if self._index is not None:
            self._since.append(placed)
        if placed.anti_affinity:
            self._with_anti.append(placed)
        self._spread_count(placed, 1)
        self._forget()

    def _own(self, name: str) -> list[_Placed]:
        """This copy's own list of the placements on node `name` (copied on the first change after a `copy`)."""
        if name not in self._mine:
            self._on[name] = list(self._on.get(name, ()))
            self._mine.add(name)
        return self._on[name]

    def _placements(self) -> Iterator[_Placed]:
        for placed in self._on.values():
            yield from placed

    @property
    def _placed(self) -> list[_Placed]:
        """Every placement, node by node (what tests compare)."""
        return list(self._placements())

    def _spread_add_node(self, node: Node) -> None:
        for spread in self._spread.values():
            spread.add_node(node)

    def _spread_count(self, placed: _Placed, delta: int) -> None:
        for spread in self._spread.values():
            if spread.matches(placed):
                spread.count(placed.node, delta)

    def remove(self, pod: Pod) -> None:
        """Forget the placement of `pod` (by key) on its `node_name` (it completed, was deleted or preempted); nothing
        if none is recorded. Cost O(pods on its node): a scan from the newest placement."""
        placed = self._on.get(pod.node_name or "", ())
        for i in range(len(placed) - 1, -1, -1):
            entry = placed[i]
            if entry.key == pod.key:
                del self._own(entry.node)[i]
                if self._index is not None:
                    self._unplaced.add(id(entry))
                self._spread_count(entry, -1)
                if entry.anti_affinity:
                    self._with_anti = [p for p in self._with_anti if p is not entry]
                self._forget()
                return

    def add_node(self, node: Node) -> None:
        """Make a hypothetical node (a pool's template) known so placements on it resolve its topology labels; it is
        dormant (its domains do not count for PodTopologySpread) until a pod is placed on it. Cost O(1)."""
        if node.name not in self._labels:
            self._nodes[node.name], self._labels[node.name] = node, node.labels
            self._dormant.add(node.name)
            self._eligible = {}

    def relabel(self, node: Node) -> None:
        """A known node's labels or taints changed (or a node came): its pods now count in the domains of its new
        labels. Cost O(1); O(1) plus dropping the caches when the labels differ (the spread counts also when the
        taints do), O(spread counts kept) for a node that came."""
        before = self._nodes.get(node.name)
        self._nodes[node.name] = node
        if before is None:
            self._labels[node.name] = node.labels
            self._eligible = {}
            self._spread_add_node(node)
            self._forget()
        elif before.labels is not node.labels and before.labels != node.labels:
            self._labels[node.name] = node.labels
            self._dormant.discard(node.name)
            self._spread.clear()
            self._eligible = {}
            self._forget()
        elif before.taints != node.taints:
            self._spread.clear()
            self._eligible = {}

    def remove_node(self, name: str) -> None:
        """The node is gone, and with it every placement recorded on it. Cost O(pods on it × spread counts kept), and
        O(pods with anti-affinity)."""
        if self._labels.pop(name, None) is None:
            return
        del self._nodes[name]
        self._dormant.discard(name)
        self._eligible = {}
        gone = self._on.pop(name, [])
        self._mine.discard(name)
        if gone and self._with_anti:
            self._with_anti = [p for p in self._with_anti if p.node != name]
        for spread in self._spread.values():
            spread.remove_node(name, gone)
        self._forget()

    def _forget(self) -> None:
        if self._domain_cache:
            self._domain_cache.clear()
        if self._affinity_cache:
            self._affinity_cache.clear()

    def copy(self) -> Topology:
        """An independent copy for a what-if (O(pods with labels))."""
        other = Topology((), ())
        other._nodes = dict(self._nodes)
        other._labels = dict(self._labels)
        other._on = dict(self._on)
        self._mine, other._mine = set(), set()
        other._with_anti = list(self._with_anti)
        other._eligible, other._index = dict(self._eligible), self._index
        other._since, other._unplaced = list(self._since), set(self._unplaced)
        other._spread = {key: spread.copy() for key, spread in self._spread.items()}
        other._dormant = set(self._dormant)
        return other

    def spread(self, pod: Pod) -> SpreadCheck | None:
        """PodTopologySpread's PreFilter for the pod (None: no `DoNotSchedule` constraint): per constraint, the
        matching pods per eligible domain, kept from one call to the next and in step with every change. The first
        call for a kind of constraint costs O(nodes + placed pods); later ones O(constraints)."""
        constraints = pod.constraints.topology_spread
        if not constraints:
            return None
        keys = tuple(sorted({c.topology_key for c in constraints}))
        checks = []
        for c in constraints:
            key: _SpreadKey = (pod.namespace, c.selector, c.topology_key, keys,
                               pod.constraints.affinity if c.node_affinity_policy == HONOR else None,
                               pod.constraints.tolerations if c.node_taints_policy == HONOR else None)
            spread = self._spread.get(key)
            if spread is None:
                spread = self._spread[key] = self._spread_count_of(key, c.counts_pods())
            checks.append((c, spread, 1 if c.selector.matches(pod.labels) else 0))
        return SpreadCheck(checks, self._dormant)

    def _spread_count_of(self, key: _SpreadKey, counting: bool) -> _SpreadCount:
        """A spread count worked out: the eligible domains (O(nodes), shared by every selector with the same
        eligibility), then the placements the selector may match (through the label index when it names a label:
        O(pods with that label); else O(placed pods))."""
        spread = _SpreadCount(key, counting, {}, {}, {})
        where = (key[2], key[3], key[4], key[5])
        known = self._eligible.get(where)
        if known is None:
            domain_of: dict[str, str] = {}
            nodes_in: dict[str, int] = {}
            for name, node in self._nodes.items():
                if name not in self._dormant and spread.eligible(node):
                    domain = domain_of[name] = node.labels[key[2]]
                    nodes_in[domain] = nodes_in.get(domain, 0) + 1
            known = self._eligible[where] = (domain_of, nodes_in)
        spread.domain_of, spread.nodes_in = known[0], dict(known[1])
        counts = spread.counts = dict.fromkeys(known[1], 0)
        if counting:
            domain_of = known[0]
            namespace, selector = key[0], key[1]
            for p in self._candidates(namespace, selector):
                if (p.namespace == namespace and (at := domain_of.get(p.node)) is not None and not p.deleting
                        and selector.matches(p.labels)):
                    counts[at] += 1
        return spread

    def _candidates(self, namespace: str, selector: LabelSelector) -> Iterable[_Placed]:
        """The placements a selector may match: those with its first `matchLabels` pair, by the label index (made
        once, O(placed pods × labels)); every placement when it names none."""
        if not selector.match_labels:
            return self._placements()
        if self._index is None:
            index: dict[tuple[str, str, str], list[_Placed]] = {}
            for p in self._placements():
                for label, value in p.labels.items():
                    index.setdefault((p.namespace, label, value), []).append(p)
            self._index, self._since, self._unplaced = index, [], set()
        label, value = selector.match_labels[0]
        indexed = self._index.get((namespace, label, value), ())
        unplaced = self._unplaced
        found = [p for p in indexed if id(p) not in unplaced] if unplaced else list(indexed)
        found.extend(p for p in self._since if p.labels.get(label) == value)
        return found

    def spread_failures(self, pod: Pod, node: Node) -> tuple[FitFailure, ...]:
        """PodTopologySpread's Filter on one node. Cost: `spread`, then O(constraints)."""
        check = self.spread(pod)
        failure = check.failure(node) if check is not None else None
        return (failure,) if failure is not None else ()

    def _domains(self, namespace: str, term: PodAffinityTerm) -> frozenset[str]:
        """Domains (values of the topology key) holding a pod the term selects."""
        key = (namespace, term, term.topology_key)
        cached = self._domain_cache.get(key)
        if cached is None:
            found = set()
            for p in self._placements():
                if term.selects(namespace, p.namespace, p.labels):
                    value = self._labels[p.node].get(term.topology_key)
                    if value is not None:
                        found.add(value)
            cached = self._domain_cache[key] = frozenset(found)
        return cached

    def _affinity_domains(self, namespace: str, terms: tuple[PodAffinityTerm, ...]) -> tuple[frozenset[str], ...]:
        """Per term, the domains holding a pod that matches *all* the terms (upstream's `updateWithAffinityTerms`)."""
        key = (namespace, terms)
        cached = self._affinity_cache.get(key)
        if cached is None:
            matching = [p for p in self._placements()
                        if all(t.selects(namespace, p.namespace, p.labels) for t in terms)]
            cached = self._affinity_cache[key] = tuple(
                frozenset(v for p in matching if (v := self._labels[p.node].get(t.topology_key)) is not None)
                for t in terms
            )
        return cached

    def failures(self, pod: Pod, node: Node) -> tuple[FitFailure, ...]:
        """InterPodAffinity's Filter: the pod's affinity, then its anti-affinity, then existing pods' anti-affinity."""
        affinity = pod.constraints.pod_affinity
        if affinity and not self._affinity_holds(pod, node, affinity):
            return (FitFailure(FitCode.POD_AFFINITY),)
        for term in pod.constraints.pod_anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None and value in self._domains(pod.namespace, term):
                return (FitFailure(FitCode.POD_ANTI_AFFINITY),)
        for other in self._with_anti:
            for term in other.anti_affinity:
                value = node.labels.get(term.topology_key)
                if (value is not None and term.selects(other.namespace, pod.namespace, pod.labels)
                        and self._labels[other.node].get(term.topology_key) == value):
                    return (FitFailure(FitCode.EXISTING_ANTI_AFFINITY),)
        return ()

    def _affinity_holds(self, pod: Pod, node: Node, terms: tuple[PodAffinityTerm, ...]) -> bool:
        values = [node.labels.get(t.topology_key) for t in terms]
        if any(v is None for v in values):
            return False  # every topology key must be on the node, even for the first pod of a group
        domains = self._affinity_domains(pod.namespace, terms)
        if all(v in d for v, d in zip(values, domains, strict=True)):
            return True
        # The first pod of a group whose terms select the pod itself may go to any node with the topology keys.
        return not any(domains) and all(t.selects(pod.namespace, pod.namespace, pod.labels) for t in terms)

    @property
    def relevant(self) -> bool:
        """False when no pod carries anti-affinity, so only pods with affinity terms of their own need checks."""
        return bool(self._with_anti)


class HostPorts:
    """The host ports in use on each node (kube-scheduler's `NodeInfo.UsedPorts`), for NodePorts: per (protocol,
    port), the nodes using it and the host IPs they bind it on (one entry per pod and port: two pods may bind one port
    on two IPs). Kept by node name, so rows may come, go and move. A node is in conflict with a pod asking a port if
    the node uses that port and protocol on the same IP, or either IP is 0.0.0.0 (`HostPortInfo.CheckConflict`).

    `copy` is O(distinct ports in use): the per-port maps are shared and copied on first write (`_owned`)."""

    __slots__ = ("_by_port", "_owned")

    def __init__(self, placed: Iterable[Pod] = ()) -> None:
        self._by_port: dict[tuple[str, int], dict[str, tuple[str, ...]]] = {}
        self._owned: set[tuple[str, int]] = set()
        """The per-port maps this object made or copied (the others may be shared with a copy)."""
        for pod in placed:
            if pod.constraints.host_ports and pod.node_name is not None:
                self.add(pod, pod.node_name)

    def __bool__(self) -> bool:
        return bool(self._by_port)

    def _writable(self, key: tuple[str, int]) -> dict[str, tuple[str, ...]]:
        on = self._by_port.get(key)
        if on is None:
            on = self._by_port[key] = {}
            self._owned.add(key)
        elif key not in self._owned:
            on = self._by_port[key] = dict(on)
            self._owned.add(key)
        return on

    def add(self, pod: Pod, node: str) -> None:
        """The pod's host ports are in use on `node`. Cost O(the pod's ports)."""
        for port in pod.constraints.host_ports:
            on = self._writable((port.protocol, port.port))
            on[node] = (*on.get(node, ()), port.host_ip)

    def remove(self, pod: Pod, node: str) -> None:
        """The pod's host ports are free again on `node` (each of its entries once). Cost O(the pod's ports)."""
        for port in pod.constraints.host_ports:
            key = (port.protocol, port.port)
            if node not in self._by_port.get(key, {}):
                continue
            on = self._writable(key)
            ips = list(on[node])
            if port.host_ip in ips:
                ips.remove(port.host_ip)
            if ips:
                on[node] = tuple(ips)
            else:
                del on[node]
                if not on:
                    del self._by_port[key]
                    self._owned.discard(key)

    def remove_node(self, node: str) -> None:
        """The node is gone with every port on it. Cost O(distinct ports in use)."""
        for key in [k for k, on in self._by_port.items() if node in on]:
            on = self._writable(key)
            del on[node]
            if not on:
                del self._by_port[key]
                self._owned.discard(key)

    def conflicting_nodes(self, pod: Pod) -> set[str]:
        """The nodes where some host port of the pod is taken. Cost O(nodes using the pod's ports)."""
        found: set[str] = set()
        for port in pod.constraints.host_ports:
            on = self._by_port.get((port.protocol, port.port))
            if on:
                ip = port.host_ip
                if ip == ANY_HOST_IP:
                    found.update(on)
                else:
                    found.update(node for node, ips in on.items() if ip in ips or ANY_HOST_IP in ips)
        return found

    def conflicts(self, pod: Pod, node: str) -> bool:
        """Whether some host port of the pod is taken on `node`. Cost O(the pod's ports)."""
        for port in pod.constraints.host_ports:
            ips = self._by_port.get((port.protocol, port.port), {}).get(node)
            if ips and (port.host_ip == ANY_HOST_IP or port.host_ip in ips or ANY_HOST_IP in ips):
                return True
        return False

    def used(self) -> dict[str, list[tuple[str, int, str]]]:
        """Per node, its ports in use as (protocol, port, host IP), sorted (for tests and views). O(entries)."""
        out: dict[str, list[tuple[str, int, str]]] = {}
        for (protocol, port), on in self._by_port.items():
            for node, ips in on.items():
                out.setdefault(node, []).extend((protocol, port, ip) for ip in ips)
        return {node: sorted(entries) for node, entries in sorted(out.items())}

    def copy(self) -> HostPorts:
        """An independent copy (O(distinct ports in use); the per-port maps are copied on first write)."""
        other = HostPorts()
        other._by_port = dict(self._by_port)
        self._owned = set()
        return other


def port_failures(pod: Pod, ports: HostPorts | None, node: str) -> tuple[FitFailure, ...]:
    """NodePorts' Filter: the pod asks a host port taken on the node. O(the pod's ports)."""
    if pod.constraints.host_ports and ports is not None and ports.conflicts(pod, node):
        return (FitFailure(FitCode.NODE_PORTS),)
    return ()


def summarize(total_nodes: int, counts: Mapping[str, int]) -> str:
    """The FailedScheduling message: `0/N nodes are available: <count reason>, … .`, sorted as the scheduler sorts;
    a plugin's error (`is_plugin_error`) instead, alone, as the scheduler reports an attempt that erred."""
    error = next((reason for reason in counts if is_plugin_error(reason)), None)
    if error is not None:
        return error
    parts = sorted(reason if is_prefilter_message(reason) else f"{count} {reason}"
                   for reason, count in counts.items())
    head = f"0/{total_nodes} nodes are available:"
    return f"{head} {', '.join(parts)}." if parts else head
