"""Why a pod a scale-down candidate would have to move fits on no other node, in words that name what keeps it there.

Scale-down's removal simulation (`engine.scaledown`) finds the first pod of a candidate that no other row takes; the
kept node's verdict says which pod, and — when the pod carries a constraint that reads more than free capacity — which
one, with kube-scheduler's own failure words over the other rows (`WhatIf.reasons`): its claims and the volume
filters' messages, its ResourceClaims and DynamicResources' messages, its host
ports (NodePorts), its topology spread constraints (PodTopologySpread's topology keys). A
pod that fits nowhere only once the node's pods moved before it took the room says so, so the verdict never reads as
"fits nowhere" for a pod `gpuscale explain` would place.

Cost: O(1) for a pod without such constraints, else one `reasons` pass over the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscale.engine.dra.allocate import CANNOT_ALLOCATE, INVALID_POOLS
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.engine.scheduling import (
    FitCode,
    FitFailure,
    is_dra_prefilter_message,
    is_plugin_error,
    is_prefilter_message,
)
from gpuscale.engine.whatif.dra import NOT_AVAILABLE
from gpuscale.engine.whatif.model import BoolArray, WhatIf
from gpuscale.model.pod import ANY_HOST_IP, HostPort, Pod

_VOLUME_REASONS = frozenset(FitFailure(code).message for code in (
    FitCode.RWOP_CONFLICT, FitCode.MAX_VOLUME_COUNT, FitCode.VOLUME_NODE_CONFLICT, FitCode.VOLUME_BIND_CONFLICT,
    FitCode.VOLUME_ZONE_CONFLICT, FitCode.VOLUME_PV_MISSING))
_DEVICE_REASONS = frozenset((CANNOT_ALLOCATE, INVALID_POOLS, NOT_AVAILABLE))
"""DynamicResources' Filter messages; its allocator errors (`is_plugin_error`) are the whole verdict."""
_PORTS = FitFailure(FitCode.NODE_PORTS).message
_SPREAD = frozenset(FitFailure(code).message for code in (FitCode.SPREAD, FitCode.SPREAD_LABEL))


def is_volume_reason(message: str) -> bool:
    """Whether a failure message is a volume filter's (or a volume PreFilter's rejection)."""
    return message in _VOLUME_REASONS or is_prefilter_message(message)


def port_text(port: HostPort) -> str:
    """`TCP 8080`, or `TCP 10.0.0.1:8080` for a port bound to one host IP."""
    where = str(port.port) if port.host_ip == ANY_HOST_IP else f"{port.host_ip}:{port.port}"
    return f"{port.protocol} {where}"


def _device_details(pod: Pod, table: WhatIf, failed: set[str]) -> list[str]:
    """The pod's ResourceClaims and DynamicResources' messages among the failures, if any."""
    devices = sorted(m for m in failed if m in _DEVICE_REASONS or is_dra_prefilter_message(m) or is_plugin_error(m))
    if not devices or not pod.constraints.resource_claims or table.dra is None:
        return []
    names = [c.key for c in table.dra.devices_of(pod).claims] or [r.name for r in pod.constraints.resource_claims]
    return [f"its resource claim(s) {', '.join(names)}: {'; '.join(devices)}"]


def _details(pod: Pod, table: WhatIf, among: BoolArray) -> list[str]:
    """The constraints of the pod that the rows of `among` reject it for, each with kube-scheduler's words."""
    c = pod.constraints
    if not ((c.claims and table.volumes is not None) or c.host_ports or (c.topology_spread and table.topology)
            or (c.resource_claims and table.dra is not None)):
        return []
    _, counts = table.reasons(pod, among)
    failed = {m for m, n in counts.items() if n}
    details = []
    volume = sorted(m for m in failed if is_volume_reason(m))
    if volume and c.claims:
        details.append(f"its volume claim(s) {', '.join(claim.key for claim in c.claims)}: {'; '.join(volume)}")
    details.extend(_device_details(pod, table, failed))
    if _PORTS in failed:
        details.append(f"{_PORTS} ({', '.join(port_text(p) for p in c.host_ports)})")
    spread = sorted(failed & _SPREAD)
    if spread:
        keys = ", ".join(f"topology key {s.topology_key}, maxSkew {s.max_skew}" for s in c.topology_spread)
        details.append(f"{'; '.join(spread)} ({keys})")
    return details


def nowhere(node: str, pod: Pod, pods: int, before: int, table: WhatIf, among: BoolArray,
            unneeded: Sequence[str] = ()) -> Reason:
    """Why `pod`, one of the `pods` to move off `node`, fits on none of the rows `among` of `table` (the nodes it
    could move to) after the `before` pods tried ahead of it were placed there; `unneeded`: the nodes this decision
    already found unneeded, which are no destination (as in Cluster Autoscaler's simulation, even one a pool's
    minimum size keeps later)."""
    message = f"node {node}: pod {pod.key} fits on no other node"
    if unneeded:
        names = ", ".join(unneeded[:3]) + (f" and {len(unneeded) - 3} more" if len(unneeded) > 3 else "")
        message += f" but the {len(unneeded)} found unneeded before it ({names})"
    if before:
        message += f" once the {before} pod(s) moved before it took their places"
    details = _details(pod, table, among)
    if details:
        message += ": " + "; ".join(details)
    return Reason(ReasonCode.NO_PLACE_TO_MOVE, message, {"pods_to_move": pods, "moved_before": before})
