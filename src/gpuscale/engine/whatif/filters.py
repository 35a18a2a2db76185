"""kube-scheduler's filters (v1.37 default profile), each once, with its wording: what `WhatIf.feasible` and
`WhatIf.explain` run, and what `gpuscale fit`/`explain` count reasons with.

Order, as the framework runs them: NodeName → NodeUnschedulable → TaintToleration → NodeAffinity (the node-only
filters: they read the node's name, cordon, taints and labels, so their mask is cached per constraints and node group,
`Rows.static_mask`) → NodeResourcesFit (pod slots and every requested resource) → GPU devices (per-device accounting,
`engine.placement.devices`) → InterPodAffinity → Unsupported (constraints gpuscale does not model: never a silent
"fits").

Each filter has two operations:
- `mask(pod, rows, mask)`: narrow the boolean candidate mask over the rows in place, vectorised where it can be;
  filters after the node-only ones look only at the rows still candidates;
- `why(pod, rows, row)`: the failures of one row, in kube-scheduler's words (`engine.scheduling.FitFailure`); empty
  when the row passes. Per row the scheduler stops at the first failing plugin, so `explain` returns the first
  non-empty `why`; NodeResourcesFit reports every insufficient resource at once.

Adding a filter: write its class here (both operations, its wording as a `FitCode` in `engine.scheduling`), put it in
`FILTERS` at its place in the profile, and, if it reads placed pods, extend `depends_on_placed`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpuscale.engine.placement.devices import GpuDevices, GpuNeed
from gpuscale.engine.scheduling import (
    FitCode,
    FitFailure,
    Topology,
    static_failures,
    unsupported_failures,
)
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, SchedulingConstraints, depends_on_placed
from gpuscale.model.resources import Resources

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

__all__ = ["FILTERS", "Filter", "Rows", "depends_on_placed", "explain", "feasible"]


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


class Unsupported:
    """Constraints gpuscale does not model: they fail every row that passes the rest. O(1) / O(rows)."""

    name = "Unsupported"

    def mask(self, pod: Pod, rows: Rows, mask: BoolArray) -> None:
        if pod.constraints.unsupported:
            mask[:] = False

    def why(self, pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
        return unsupported_failures(pod.constraints)


FILTERS: tuple[Filter, ...] = (NodeOnly(), NodeResourcesFit(), GpuDevicesFit(), InterPodAffinity(), Unsupported())
"""The filters in the default profile's order."""


_NARROW = tuple(f.mask for f in FILTERS[1:])
"""The masks after the node-only filters', bound once (`feasible` is the engine's hot path)."""


def feasible(pod: Pod, rows: Rows, enabled: BoolArray) -> BoolArray:
    """The `enabled` rows where the pod passes every filter (a new mask): the node-only filters' cached mask starts
    it (`FILTERS[0]`), the others narrow it in order. Cost: the filters' masks, O(rows × asked columns) vectorised
    plus devices and inter-pod affinity on the candidates."""
    mask = enabled & rows.static_mask(pod.constraints)
    for narrow in _NARROW:
        narrow(pod, rows, mask)
    return mask


def explain(pod: Pod, rows: Rows, row: int) -> tuple[FitFailure, ...]:
    """Why `row` cannot take the pod, in kube-scheduler's words (first failing filter); empty: it can. Whether the row
    is enabled is not a filter and is not asked. Cost: the filters' `why` up to the first failing one."""
    for f in FILTERS:
        failures = f.why(pod, rows, row)
        if failures:
            return failures
    return ()
