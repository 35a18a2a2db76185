"""Scale-up placement (`place_units`) with claims against the plain rule it shortcuts: every pod, in order, goes where
`WhatIf.feasible` puts it on the table as it stands. Pods each with its own claim of one kind share an equivalence
class (`VolumeState.placement_key`) and, when placements elsewhere cannot change their volume verdicts, a kept mask
(`VolumeState.reads_placed`); the placements, leftovers and final volume state must be those of the plain rule for any
mix of claims: bound to zonal PVs, WaitForFirstConsumer claims provisioned or bound to a class's PVs, ReadWriteOncePod,
shared between pending pods or with a placed pod, generic ephemeral, missing, and CSINode attach limits on some rows."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuscale.engine.scaleup import Unit, place_units
from gpuscale.engine.whatif.model import WhatIf
from gpuscale.engine.whatif.rows import whatif_of
from gpuscale.model.node import Node
from gpuscale.model.pod import Pod, PodPhase
from gpuscale.model.selectors import NodeSelectorTerm, Requirement, SelectorOperator
from gpuscale.model.volumes import CSINode, PersistentVolume, PersistentVolumeClaim, PodClaim, Storage, StorageClass
from tests.builders import make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
RWO = frozenset({"ReadWriteOnce"})
KINDS = ("none", "bound-z0", "bound-z1", "provisioned", "static", "shared", "rwop", "shared-wait", "held",
         "ephemeral", "missing")
"""What a pending pod's claim is (see `_claim`)."""
POD_CPU = ("500m", "1", "2")


def _zonal(zone: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_expressions=(Requirement(key=ZONE, operator=SelectorOperator.IN,
                                                            values=(zone,)),)),)


def _bound(name: str, zone: str | None, modes: frozenset[str] = RWO) -> tuple[PersistentVolume, PersistentVolumeClaim]:
    pv = PersistentVolume(name=f"pv-{name}", capacity=2**30, access_modes=modes, storage_class="fast",
                          node_affinity=_zonal(zone) if zone else None, labels={ZONE: zone} if zone else {},
                          claim=f"default/{name}", phase="Bound", csi_driver="d", csi_handle=name)
    return pv, PersistentVolumeClaim(namespace="default", name=name, storage_class="fast", volume_name=pv.name,
                                     bind_completed=True, access_modes=modes, request=2**30, phase="Bound")


def _claim(kind: str, k: int) -> tuple[PodClaim | None, list[PersistentVolume], list[PersistentVolumeClaim]]:
    """Pending pod `k`'s claim of `kind`, with the PVs and PVCs it brings."""
    name = f"c{k}"
    if kind in ("bound-z0", "bound-z1", "rwop"):
        pv, pvc = _bound(name, "z1" if kind == "rwop" else kind[-2:],
                         frozenset({"ReadWriteOncePod"}) if kind == "rwop" else RWO)
        return PodClaim("default", name), [pv], [pvc]
    if kind in ("provisioned", "static"):
        pvc = PersistentVolumeClaim(namespace="default", name=name, storage_class="dyn" if kind == "provisioned"
                                    else "static", access_modes=RWO, request=2**30)
        return PodClaim("default", name), [], [pvc]
    if kind == "ephemeral":
        template = PersistentVolumeClaim(namespace="default", name=f"p{k}-scratch", storage_class="dyn",
                                         access_modes=RWO, request=2**30)
        return PodClaim("default", f"p{k}-scratch", template), [], []
    named = {"shared": "shared", "shared-wait": "shared-wait", "held": "held", "missing": "gone"}
    return (PodClaim("default", named[kind]) if kind in named else None), [], []


def _storage(pvs: list[PersistentVolume], pvcs: list[PersistentVolumeClaim], limited: list[str],
             limit: int, static_pvs: int) -> Storage:
    shared_pv, shared = _bound("shared", None, frozenset({"ReadWriteMany"}))
    held_pv, held = _bound("held", "z0")
    wait = PersistentVolumeClaim(namespace="default", name="shared-wait", storage_class="dyn", access_modes=RWO,
                                 request=2**30)
    static = [PersistentVolume(name=f"static-{i}", capacity=2**31, access_modes=RWO, storage_class="static",
                               node_affinity=_zonal(f"z{i % 2}"), phase="Available", csi_driver="d",
                               csi_handle=f"static-{i}") for i in range(static_pvs)]
    return Storage(volumes=(*pvs, shared_pv, held_pv, *static), claims=(*pvcs, shared, held, wait),
                   classes=(StorageClass(name="fast", provisioner="d"),
                            StorageClass(name="dyn", provisioner="d", wait_for_first_consumer=True,
                                         allowed_topologies=(((ZONE, frozenset({"z0"})),),)),
                            StorageClass(name="static", provisioner="d", wait_for_first_consumer=True)),
                   csi_nodes=tuple(CSINode(name=n, limits={"d": limit}) for n in limited))


def _node(i: int, pods: int) -> Node:
    base = make_node(f"n{i}", cpu="4", memory="16Gi", pods=pods)
    return replace(base, labels={**base.labels, ZONE: f"z{i % 2}"})


def _pod(name: str, cpu: str, claim: PodClaim | None, node: str | None = None) -> Pod:
    p = make_pod(name, node=node, phase=PodPhase.RUNNING if node else PodPhase.PENDING, cpu=cpu, memory="1Gi")
    claims = (claim,) if claim is not None else ()
    return replace(p, unschedulable=node is None, constraints=replace(p.constraints, claims=claims))


def _plain(table: WhatIf, units: list[Unit]) -> tuple[list[str], dict[str, int]]:
    placed: list[str] = []
    rows: dict[str, int] = {}
    for unit in units:
        p = unit.pods[0]
        mask = table.feasible(p)
        if not mask.any():
            continue
        row, gpus = table.choose(p, mask)
        table.place(row, p, gpus)
        rows[p.key] = row
        placed.append(unit.key)
    return placed, rows


_specs = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(POD_CPU)), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(specs=_specs, nodes=st.integers(1, 6), slots=st.sampled_from((2, 4, 110)),
       limited=st.sets(st.integers(0, 5)), limit=st.integers(0, 3), static_pvs=st.integers(0, 3),
       held_on=st.integers(0, 5))
# Pods each with its own zone-z0 claim on a row with one attach slot: the second goes to the next z0 row.
@example(specs=[("bound-z0", "500m")] * 3, nodes=3, slots=110, limited={0}, limit=1, static_pvs=0, held_on=1)
# A class's second pod whose shared WaitForFirstConsumer claim the first took to its row.
@example(specs=[("shared-wait", "500m"), ("shared-wait", "1")] * 2, nodes=4, slots=110, limited=set(), limit=1,
         static_pvs=0, held_on=1)
def test_place_units_with_claims_places_each_pod_where_a_fresh_pass_would(
        specs: list[tuple[str, str]], nodes: int, slots: int, limited: set[int], limit: int, static_pvs: int,
        held_on: int) -> None:
    rows = [_node(i, slots) for i in range(nodes)]
    pvs: list[PersistentVolume] = []
    pvcs: list[PersistentVolumeClaim] = []
    pending: list[Pod] = []
    for k, (kind, cpu) in enumerate(specs):
        claim, more_pvs, more_pvcs = _claim(kind, k)
        pvs += more_pvs
        pvcs += more_pvcs
        pending.append(_pod(f"p{k}", cpu, claim))
    bound = [_pod("holder", "500m", PodClaim("default", "held"), node=rows[held_on % nodes].name)]
    storage = _storage(pvs, pvcs, [rows[i].name for i in sorted(limited) if i < nodes], limit, static_pvs)
    units = [Unit((p,)) for p in pending]

    def build() -> WhatIf:
        return whatif_of(rows, [n.allocatable for n in rows], bound, workload=pending, storage=storage)

    result = place_units(build(), units)
    fresh = build()
    placed, where = _plain(fresh, units)
    assert [u.key for u in result.placed] == placed
    assert result.rows == where
    assert (result.table.free == fresh.free).all()
    volumes, expected = result.table.volumes, fresh.volumes
    assert volumes is not None and expected is not None
    assert (volumes.users, volumes.attached, volumes.taken, volumes.selected) == (
        expected.users, expected.attached, expected.taken, expected.selected)
