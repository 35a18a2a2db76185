"""kube-scheduler's filters (v1.37 default profile), each once, with its wording: what `WhatIf.feasible` and
`WhatIf.explain` run, and what `gpuscale fit`/`explain` count reasons with.

Order, as the framework runs them: NodeName → NodeUnschedulable → TaintToleration → NodeAffinity (the node-only
filters: they read the node's name, cordon, taints and labels, so their mask is cached per constraints and node group,
`Rows.static_mask`) → NodePorts (host ports in use, `Rows.ports`) → NodeResourcesFit (pod slots and every requested
resource) → GPU devices (per-device accounting, `engine.placement.devices`) → VolumeRestrictions → NodeVolumeLimits →
VolumeBinding → VolumeZone (`whatif.volumes`; their PreFilter rejections fail every row at once, `prefilter`) →
PodTopologySpread → InterPodAffinity → DynamicResources (ResourceClaims allocated per node, `whatif.dra`; its
PreFilter rejections fail every row at once too, after the volume ones) → Unsupported (constraints gpuscale does not
model: never a silent "fits").

Each filter has three operations:
- `mask(pod, rows, mask)`: narrow the boolean candidate mask over the rows in place, vectorised where it can be;
  filters after the node-only ones look only at the rows still candidates;
- `why(pod, rows, row)`: the failures of one row, in kube-scheduler's words (`engine.scheduling.FitFailure`); empty
  when the row passes;
- `count(pod, rows, rejected)`: the messages of `why` summed over rows the filter rejected, vectorised where it can
  be (what `gpuscale fit` counts; it must equal the sum of `why`).
Per row the scheduler stops at the first failing plugin, so `explain` returns the first non-empty `why`;
NodeResourcesFit reports every insufficient resource at once.

Adding a filter: write its class here (its operations, its wording as a `FitCode` in `engine.scheduling`), put it in
`FILTERS` at its place in the profile, and, if it reads placed pods, extend `depends_on_placed`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpuscale.engine.dra.allocate import AllocationFailure, FailureKind
from gpuscale.engine.placement.devices import GpuDevices, GpuNeed
from gpuscale.engine.scheduling import (
    FitCode,
    FitFailure,
    HostPorts,
    Topology,
    is_plugin_error,
    port_failures,
    static_failures,
    unsupported_failures,
)
from gpuscale.engine.whatif.dra import DraState
from gpuscale.engine.whatif.volumes import PodVolumes, VolumeState
from gpuscale.model.node import HOSTNAME_LABEL, Node
from gpuscale.model.pod import Pod, SchedulingConstraints, depends_on_placed
from gpuscale.model.resources import Resources

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

__all__ = ["FILTERS", "Filter", "Rows", "depends_on_placed", "explain", "feasible", "reasons"]


def names_nodes_individually(constraints: SchedulingConstraints) -> bool:
    """Whether node-only filters must run per node (the constraints name nodes or hostnames), not per node group."""
    if constraints.node_name is not None:
        return True
    terms = constraints.affinity.required_terms or ()
    if any(t.match_fields for t in terms):
        return True
    keys = {k for k, _ in constraints.affinity.node_selector}
    keys.update(r.key for t in terms for r in t.match_expressions)
    return HOSTNAME_LABEL in keys


class Rows(Protocol):
    """What the filters read of a set of rows (nodes). `WhatIf` implements it (and the twin's scheduler may).

    Attributes are read as they are (no copies); each operation's cost is stated.
    """

    @property
    def nodes(self) -> list[Node]:
        """The node of each row."""
        ...

    @property
    def free(self) -> IntArray:
        """Free amount per row and column (rows × columns)."""
        ...

    @property
    def free_pods(self) -> IntArray:
        """Free pod slots per row."""
        ...

    @property
    def columns(self) -> list[str]:
        """The resource name of each column of `free`."""
        ...

    @property
    def devices(self) -> GpuDevices | None:
        """Per-GPU free milli of the device-accounted rows; None when no row has any."""
        ...

    @property
    def topology(self) -> Topology | None:
        """The placed pods' topology for InterPodAffinity; None when no pod's placement depends on placed pods."""
        ...

    @property
    def ports(self) -> HostPorts | None:
        """The host ports in use per node name, for NodePorts; None: none in use."""
        ...

    def row_index(self) -> Mapping[str, int]:
        """Node name → row, for every row. O(1)."""
        ...

    @property
    def volumes(self) -> VolumeState | None:
        """The volume filters' state (claims in use, volumes attached per row, the storage objects); None when no pod
        uses claims."""
        ...

    @property
    def dra(self) -> DraState | None:
        """DynamicResources' state (devices in use, claims allocated in this what-if, the DRA objects); None when no
        pod uses ResourceClaims."""
        ...

    @property
    def group_of(self) -> list[int]:
        """Each row's node group: rows of one group pass or fail the node-only filters together unless the
        constraints name nodes (`names_nodes_individually`); a reader without groups gives each row its own."""
        ...

    def static_mask(self, constraints: SchedulingConstraints) -> BoolArray:
        """Rows passing the node-only filters; cached per constraints (O(node groups) once, then O(1))."""
        ...

    def asked(self, requests: Resources) -> list[tuple[int, int]] | None:
        """The columns the request asks something of with the amount; None if it asks a resource outside the columns.
        Cached per request: O(1) after the first."""
        ...

    def need(self, requests: Resources) -> GpuNeed | None:
        """The request's GPU need on device-accounted rows (None: it asks no GPU share). Cached: O(1)."""
        ...


class Filter(Protocol):
    name: str

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None: ...

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]: ...

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]: ...


def _count_each(f: Filter, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
    """`count` as the sum of `why` over the rejected rows (the definition every `count` must equal)."""
    counts: Counter[str] = Counter()
    for row in rejected:
        counts.update(failure.message for failure in f.why(pod, rows, row))
    return counts


class NodeOnly:
    """NodeName, NodeUnschedulable, TaintToleration, NodeAffinity: one cached mask per constraints and node group
    (`engine.scheduling.static_failures` holds their checks in the profile's order). Mask O(rows); why O(1)."""

    name = "NodeName, NodeUnschedulable, TaintToleration, NodeAffinity"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        mask &= rows.static_mask(pod.constraints)

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        if rows.static_mask(pod.constraints)[row]:
            return ()
        return static_failures(pod.constraints, rows.nodes[row])

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        """`why` once per node group (per row when the constraints name nodes): O(rejected + groups)."""
        if names_nodes_individually(pod.constraints):
            return _count_each(self, pod, rows, rejected)
        group_of = rows.group_of
        per_group = Counter(group_of[row] for row in rejected)
        first = {group_of[row]: row for row in reversed(rejected)}
        counts: Counter[str] = Counter()
        for group, n in per_group.items():
            for failure in static_failures(pod.constraints, rows.nodes[first[group]]):
                counts[failure.message] += n
        return counts


class NodePorts:
    """Host ports the pod asks that a node already uses (same port and protocol, same host IP or either 0.0.0.0).
    Only for pods with host ports: mask O(nodes using those ports); why O(the pod's ports)."""

    name = "NodePorts"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        if pod.constraints.host_ports and (ports := rows.ports):
            index = rows.row_index()
            for node in ports.conflicting_nodes(pod):
                if (row := index.get(node)) is not None:
                    mask[row] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        return port_failures(pod, rows.ports, rows.nodes[row].name)

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        """Every rejected row has the one reason: O(1)."""
        return Counter({FitFailure(FitCode.NODE_PORTS).message: len(rejected)} if rejected else {})


class NodeResourcesFit:
    """Pod slots and every requested resource. Mask O(rows × asked columns); why O(requested resources)."""

    name = "NodeResourcesFit"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        asked = rows.asked(pod.requests)
        if asked is None:
            mask[:] = False
            return
        mask &= rows.free_pods >= 1
        free = rows.free
        for column, amount in asked:  # a request asks few columns: one comparison on each column's view, no copy
            mask &= free[:, column] >= amount

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        failures = [FitFailure(FitCode.TOO_MANY_PODS)] if rows.free_pods[row] < 1 else []
        column_of = {name: i for i, name in enumerate(rows.columns)}
        free = rows.free[row]
        failures.extend(FitFailure(FitCode.INSUFFICIENT, name) for name, amount in pod.requests.items
                        if amount > 0 and ((c := column_of.get(name)) is None or free[c] < amount))
        return tuple(failures)

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        """Per resource, the rejected rows short of it: O(rejected × requested resources), vectorised."""
        at = np.array(rejected, dtype=np.int64)
        counts: Counter[str] = Counter()
        if (full := int((rows.free_pods[at] < 1).sum())):
            counts[FitFailure(FitCode.TOO_MANY_PODS).message] = full
        column_of = {name: i for i, name in enumerate(rows.columns)}
        for name, amount in pod.requests.items:
            if amount > 0:
                c = column_of.get(name)
                short = len(at) if c is None else int((rows.free[at, c] < amount).sum())
                if short:
                    counts[FitFailure(FitCode.INSUFFICIENT, name).message] += short
        return counts


class GpuDevicesFit:
    """Per-GPU accounting: a fraction needs one device with room, whole GPUs need free devices. Candidates only:
    O(candidates × devices)."""

    name = "GpuDevices"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        devices = rows.devices
        if devices is not None and (need := rows.need(pod.requests)) is not None:
            candidates = mask.nonzero()[0]
            if len(candidates):
                mask[candidates] = devices.fits(need, candidates)

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        devices = rows.devices
        if devices is None or (need := rows.need(pod.requests)) is None:
            return ()
        if devices.fits(need, np.array([row], dtype=np.int64))[0]:
            return ()
        detail = (f"{need.milli} gpu-milli free on one GPU device" if need.fractional
                  else f"{need.count} whole GPU device(s) free")
        return (FitFailure(FitCode.GPU_DEVICES, detail),)

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        """Every rejected row has the one reason: O(1) after the first."""
        one = _count_each(self, pod, rows, rejected[:1])
        return Counter({message: n * len(rejected) for message, n in one.items()})


def _topology_of(rows: Rows) -> Topology:
    """The rows' topology; rows keep none only when no pod's placement depends on placed pods, so an empty one of
    their nodes says the same."""
    topology = rows.topology
    return topology if topology is not None else Topology(rows.nodes, ())


class PodTopologySpread:
    """The pod's `DoNotSchedule` topology spread constraints (`Topology.spread`): a node fails if it lacks a
    constraint's topology key, or if the matching pods of its domain plus the pod itself exceed the global minimum
    over the eligible domains by more than `maxSkew`. Per candidate in Python: O(candidates × constraints), after
    the counts (kept by the topology)."""

    name = "PodTopologySpread"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        if pod.constraints.topology_spread:
            check = _topology_of(rows).spread(pod)
            assert check is not None
            failure, nodes = check.failure, rows.nodes
            for i in mask.nonzero()[0].tolist():
                if failure(nodes[i]) is not None:
                    mask[i] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        if not pod.constraints.topology_spread:
            return ()
        return _topology_of(rows).spread_failures(pod, rows.nodes[row])

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        """The counts once, then O(constraints) per rejected row."""
        check = _topology_of(rows).spread(pod)
        assert check is not None
        nodes = rows.nodes
        return Counter(f.message for row in rejected if (f := check.failure(nodes[row])) is not None)


class InterPodAffinity:
    """The pod's affinity, its anti-affinity, then existing pods' anti-affinity (`Topology.failures`). Runs only when
    the rows keep a topology and the pod or a placed pod has terms; per candidate in Python: O(candidates × terms)."""

    name = "InterPodAffinity"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        topology = rows.topology
        if topology is not None and (topology.relevant or depends_on_placed(pod)):
            nodes = rows.nodes
            for i in mask.nonzero()[0].tolist():
                if topology.failures(pod, nodes[i]):
                    mask[i] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        topology = rows.topology
        return topology.failures(pod, rows.nodes[row]) if topology is not None else ()

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return _count_each(self, pod, rows, rejected)


def _volumes(pod: Pod, rows: Rows) -> tuple[VolumeState, PodVolumes] | None:
    """The rows' volume state and the pod's resolved claims, when the pod uses claims and passes the PreFilters."""
    state = rows.volumes
    if state is None or not pod.constraints.claims:
        return None
    volumes = state.volumes_of(pod)
    return None if volumes.prefilter is not None else (state, volumes)


def prefilter(pod: Pod, rows: Rows) -> FitFailure | None:
    """A PreFilter's rejection of the pod: the volume ones (VolumeRestrictions, VolumeBinding, VolumeZone: a claim or
    PV that does not exist, an unbound immediate claim, …), then DynamicResources' (a ResourceClaim not created yet
    or missing, a DeviceClass missing): every row fails with it, whatever the other filters say. O(1) once the pod's
    claims are resolved."""
    state = rows.volumes
    if state is not None and pod.constraints.claims:
        message = state.volumes_of(pod).prefilter
        if message is not None:
            return FitFailure(FitCode.VOLUME_PREFILTER, message)
    dra = rows.dra
    if dra is not None and pod.constraints.resource_claims:
        message = dra.devices_of(pod).prefilter
        if message is not None:
            return FitFailure(FitCode.DRA_PREFILTER, message)
    return None


def _by_group(rows: Rows, mask: BoolArray, passes: Callable[[int], bool], per_row: bool) -> None:
    """Narrow `mask` to the candidates where `passes(row)` holds, asked once per node group among them (the verdict
    reads only the node's labels but its hostname) unless `per_row`. O(candidates) vectorised + O(groups) checks."""
    candidates = mask.nonzero()[0]
    if not len(candidates):
        return
    if per_row:
        for i in candidates.tolist():
            if not passes(i):
                mask[i] = False
        return
    groups = np.asarray(rows.group_of, dtype=np.int64)[candidates]
    distinct, first = np.unique(groups, return_index=True)
    failing = [g for g, i in zip(distinct.tolist(), candidates[first].tolist(), strict=True) if not passes(i)]
    if failing:
        mask[candidates[np.isin(groups, failing)]] = False


class VolumeRestrictions:
    """A ReadWriteOncePod claim already in use by a placed pod fails every row (the PreFilter's count, checked per
    node). O(claims) per pod."""

    name = "VolumeRestrictions"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        if (found := _volumes(pod, rows)) is not None and not found[0].restrictions(found[1]):
            mask[:] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        if (found := _volumes(pod, rows)) is not None and not found[0].restrictions(found[1]):
            return (FitFailure(FitCode.RWOP_CONFLICT),)
        return ()

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return Counter({FitFailure(FitCode.RWOP_CONFLICT).message: len(rejected)} if rejected else {})


class NodeVolumeLimits:
    """CSINode attach limits per driver: the row's attached volumes plus the pod's new ones. Rows with a limit only:
    O(candidates with limits × claims)."""

    name = "NodeVolumeLimits"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        found = _volumes(pod, rows)
        if found is None or not found[1].attach:
            return
        state, volumes = found
        limits = state.limits
        for i in mask.nonzero()[0].tolist():
            if i < len(limits) and limits[i] is not None and not state.within_limits(volumes, i):
                mask[i] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        found = _volumes(pod, rows)
        if found is None or found[0].within_limits(found[1], row):
            return ()
        return (FitFailure(FitCode.MAX_VOLUME_COUNT),)

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return _count_each(self, pod, rows, rejected)


class VolumeBinding:
    """Bound PVs' node affinity; unbound WaitForFirstConsumer claims bound to an available PV there or provisioned
    (`VolumeState.binding`). Once per node group among the candidates unless a volume names hostnames (local PVs) or
    a claim was assumed onto a row in this what-if: O(groups × claims × PVs of the class)."""

    name = "VolumeBinding"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        found = _volumes(pod, rows)
        if found is None or not (found[1].bound or found[1].delayed or found[1].missing_pv):
            return
        state, volumes = found
        nodes = rows.nodes
        _by_group(rows, mask, lambda i: not state.binding(volumes, i, nodes[i]), state.per_row(volumes))

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        found = _volumes(pod, rows)
        return () if found is None else found[0].binding(found[1], row, rows.nodes[row])

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return _count_each(self, pod, rows, rejected)


class VolumeZone:
    """Bound PVs' zone and region labels against the node's. Once per node group among the candidates:
    O(groups × zone labels)."""

    name = "VolumeZone"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        found = _volumes(pod, rows)
        if found is None or not found[1].zones:
            return
        volumes, nodes = found[1], rows.nodes
        _by_group(rows, mask, lambda i: VolumeState.zone(volumes, nodes[i]), False)

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        found = _volumes(pod, rows)
        if found is None or VolumeState.zone(found[1], rows.nodes[row]):
            return ()
        return (FitFailure(FitCode.VOLUME_ZONE_CONFLICT),)

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return _count_each(self, pod, rows, rejected)


class DynamicResources:
    """The pod's ResourceClaims on each candidate: claims allocated (in the snapshot or in this what-if) must allow
    the node, the others are allocated there beside the devices in use (`DraState.verdict`, `engine.dra.allocate`).
    An allocator error (a CEL selector that fails, a search past its budget) is kube-scheduler's Error: the pod's
    attempt ends, so every row fails, and `reasons` gives that error alone (`dra_failure`, `FitCode.DRA_ERROR`). Per
    candidate: one allocator call, kept per node, claim specs and devices in use."""

    name = "DynamicResources"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        dra = rows.dra
        if dra is None or not pod.constraints.resource_claims:
            return
        devices = dra.devices_of(pod)
        nodes = rows.nodes
        for i in mask.nonzero()[0].tolist():
            outcome = dra.verdict(devices, nodes[i])
            if isinstance(outcome, AllocationFailure):
                mask[i] = False
                if outcome.kind is FailureKind.ERROR:
                    mask[:] = False
                    return

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        dra = rows.dra
        if dra is None or not pod.constraints.resource_claims:
            return ()
        outcome = dra.verdict(dra.devices_of(pod), rows.nodes[row])
        return (dra_failure(outcome),) if isinstance(outcome, AllocationFailure) else ()

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return _count_each(self, pod, rows, rejected)


def dra_failure(failure: AllocationFailure) -> FitFailure:
    """DynamicResources' Filter failure in kube-scheduler's words: the node's status, or the allocator's error as the
    framework wraps it (`FitCode.DRA_ERROR`)."""
    return FitFailure(FitCode.DRA_ERROR if failure.kind is FailureKind.ERROR else FitCode.DRA, failure.message)


class Unsupported:
    """Constraints gpuscale does not model: they fail every row that passes the rest. O(1) / O(rows)."""

    name = "Unsupported"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        if pod.constraints.unsupported:
            mask[:] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        return unsupported_failures(pod.constraints)

    def count(self, pod: Pod, rows: Rows, rejected: list[int]) -> Counter[str]:
        return Counter({f.message: len(rejected) for f in unsupported_failures(pod.constraints)} if rejected else {})


FILTERS: tuple[Filter, ...] = (NodeOnly(), NodePorts(), NodeResourcesFit(), GpuDevicesFit(), VolumeRestrictions(),
                               NodeVolumeLimits(), VolumeBinding(), VolumeZone(), PodTopologySpread(),
                               InterPodAffinity(), DynamicResources(), Unsupported())
"""The filters in the default profile's order."""


_NARROW = tuple(f.mask for f in FILTERS[1:])
"""The masks after the node-only filters', bound once (`feasible` is the engine's hot path)."""


def feasible(pod: Pod, rows: Rows, enabled: BoolArray) -> BoolArray:
    """The `enabled` rows where the pod passes every filter (a new mask): the node-only filters' cached mask starts
    it (`FILTERS[0]`), the others narrow it in order. Cost: the filters' masks, O(rows × asked columns) vectorised
    plus devices and inter-pod affinity on the candidates."""
    if (pod.constraints.claims or pod.constraints.resource_claims) and prefilter(pod, rows) is not None:
        return np.zeros(len(enabled), dtype=bool)
    mask = enabled & rows.static_mask(pod.constraints)
    for narrow in _NARROW:
        narrow(pod, rows, mask)
    return mask


def reasons(pod: Pod, rows: Rows, among: BoolArray | None = None) -> tuple[BoolArray, Counter[str]]:
    """Every row's verdict at once (what `gpuscale fit` reports): the rows that pass every filter, and over the
    others, each message of their first failing filter counted (`explain` row by row, summed, without the loop:
    each filter's `count` over the rows it rejects). `among`: only these rows (all by default). Cost: `feasible`
    plus each filter's `count`."""
    mask = np.ones(len(rows.nodes), dtype=bool) if among is None else among.copy()
    counts: Counter[str] = Counter()
    if (rejected_all := prefilter(pod, rows)) is not None:
        mask[:] = False
        counts[rejected_all.message] = len(mask)
        return mask, counts
    for f in FILTERS:
        before = mask.copy()
        f.mask(pod, rows, mask)
        rejected = (before & ~mask).nonzero()[0].tolist()
        if rejected:
            found = f.count(pod, rows, rejected)
            error = next((message for message in found if is_plugin_error(message)), None)
            if error is not None:  # the attempt ends with the first row's error (a plugin's Error status): said alone
                return mask, Counter({error: len(mask)})
            counts.update(found)
    return mask, counts


def explain(pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
    """Why `row` cannot take the pod, in kube-scheduler's words (first failing filter); empty: it can. Whether the row
    is enabled is not a filter and is not asked. Cost: the filters' `why` up to the first failing one."""
    if (rejected_all := prefilter(pod, rows)) is not None:
        return (rejected_all,)
    for f in FILTERS:
        failures = f.why(pod, rows, row)
        if failures:
            return failures
    return ()
