"""Drainability: which pods of a node must find a new home, which are left alone, and which keep the node.

Decides, pod by pod and then for the node, with reasons as data. Pure: no I/O, no clock.

Rules, first match wins (Cluster Autoscaler's `simulator/drainability/rules` order where CA has one):
1. **Ignored** — no eviction, no new home: mirror (static) pods, pods already being deleted, pods in a terminal phase,
   DaemonSet pods (their controller owns them; they go with the node) unless annotated
   `cluster-autoscaler.kubernetes.io/enable-ds-eviction: "true"` (then evicted, needing no new home, like rule 3).
2. **Explicit protection** — `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`, `safe-to-evict:
   "on-completion"` (wait until the pod finishes) and `karpenter.sh/do-not-disrupt` (`"true"`, or a duration counted
   from the pod's start: `engine.protection`; a malformed value protects) block the node. These run
   before the expendable rule on purpose: a user's explicit annotation beats a priority heuristic (CA drops expendable
   pods from its snapshot first, then evicts them anyway — a surprise we do not copy).
3. **Expendable** — priority below `expendable_priority_cutoff`: evicted with the node, never given a new home.
4. `safe-to-evict: "true"` — must move; lifts rules 5–7 (not rule 8).
5. a kube-system pod no PDB covers (when `skip_nodes_with_system_pods`);
6. a pod without a controller;
7. a pod with node-local storage (when `skip_nodes_with_local_storage`), unless every such volume is named in its
   `cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes` (comma-separated);
8. a running pod of a Job that requests GPUs (when `protect_gpu_jobs`), unless `gpuscale.io/checkpoint-safe: "true"`:
   killing a training job loses its work. `safe-to-evict: "true"` does not lift this one — it is routinely set to get
   past rule 7 (scratch emptyDirs) and says nothing about losing a training run. A pod that says when it last
   checkpointed (engine/checkpoint.py: `gpuscale.io/last-checkpoint` or `gpuscale.io/checkpoint-interval`) and is
   no gang's member must move, listed in `NodeDrain.checkpointed`: scale-down charges the work it loses against its
   pool's lost-work budget when it picks the node (D38); a gang member keeps its node (moving it stops the gang).
Every other pod must move. Then for the node: `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` and
`karpenter.sh/do-not-disrupt` (`"true"`, or a duration from the node's creation) block it,
and every evicted pod (moved or expendable) spends one disruption of each PDB covering it — `PdbBudget` carries what is
left across all nodes removed in one decision, so two drains never spend the same disruption.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuscale.engine.checkpoint import checkpoint_problem
from gpuscale.engine.policy import Policy
from gpuscale.engine.protection import DO_NOT_DISRUPT, Protection, do_not_disrupt
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.model.frozen import quick_init
from gpuscale.model.node import Node
from gpuscale.model.pdb import PodDisruptionBudget
from gpuscale.model.pod import MIRROR_ANNOTATION, Pod, PodPhase
from gpuscale.model.resources import GPU_MILLI

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
MIRROR = MIRROR_ANNOTATION
CHECKPOINT_SAFE = "gpuscale.io/checkpoint-safe"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
ENABLE_DS_EVICTION = "cluster-autoscaler.kubernetes.io/enable-ds-eviction"
KUBE_SYSTEM = "kube-system"


class DrainAction(StrEnum):
    IGNORE = "ignore"
    """Left alone: goes with the node, no eviction, no new home (DaemonSet, mirror, terminal, being deleted)."""
    EXPENDABLE = "expendable"
    """Evicted, but needs no new home."""
    MOVE = "move"
    """Evicted and must fit on another node."""
    BLOCK = "block"
    """Keeps its node."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PodDrain:
    action: DrainAction
    reason: Reason | None = None
    """Why the pod blocks (set only for `BLOCK`)."""
    checkpointed: bool = False
    """A protected GPU job that moves at the cost of the work since its last checkpoint (rule 8)."""


def requests_gpus(pod: Pod) -> bool:
    """Any GPU resource, GPU slice or `gpuscale.io/gpu-milli` share."""
    return pod.requests.gpu_count() > 0 or pod.requests.get(GPU_MILLI) > 0


class PdbBudget:
    """Disruptions left per PodDisruptionBudget within one decision. Immutable: `spend` returns a new budget.

    Cost: `covering` is O(PDBs of the pod's namespace) once per distinct (namespace, labels), then a dict lookup (the
    cache is shared by every budget spent from this one); `spend` copies one small dict.
    """

    __slots__ = ("_by_namespace", "_cache", "_left")

    def __init__(self, pdbs: Iterable[PodDisruptionBudget]) -> None:
        by_namespace: dict[str, list[PodDisruptionBudget]] = {}
        for pdb in sorted(pdbs, key=lambda p: p.key):
            by_namespace.setdefault(pdb.namespace, []).append(pdb)
        self._by_namespace = {ns: tuple(items) for ns, items in by_namespace.items()}
        self._left = {p.key: max(p.disruptions_allowed, 0) for items in self._by_namespace.values() for p in items}
        self._cache: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[PodDisruptionBudget, ...]] = {}

    def covering(self, pod: Pod) -> tuple[PodDisruptionBudget, ...]:
        candidates = self._by_namespace.get(pod.namespace)
        if not candidates:
            return ()
        key = (pod.namespace, tuple(pod.labels.items()))
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = tuple(p for p in candidates if p.covers(pod.namespace, pod.labels))
        return found

    def left(self, key: str) -> int:
        return self._left.get(key, 0)

    def _needed(self, pods: Iterable[Pod]) -> Counter[str]:
        return Counter(pdb.key for pod in pods for pdb in self.covering(pod))

    def shortfall(self, pods: Sequence[Pod]) -> Reason | None:
        """Why evicting all `pods` together would break a budget, or `None` if it would not (at once for none: most
        candidates evict nothing)."""
        if not pods:
            return None
        needed = self._needed(pods)
        for key in sorted(needed):
            if needed[key] > self._left[key]:
                first = min(p.key for p in pods if any(b.key == key for b in self.covering(p)))
                return Reason(ReasonCode.PDB,
                              f"evicting {needed[key]} pod(s) covered by PodDisruptionBudget {key} (first: {first}) "
                              f"needs {needed[key]} disruption(s), {self._left[key]} allowed",
                              {"needed": needed[key], "allowed": self._left[key]})
        return None

    def spend(self, pods: Sequence[Pod]) -> PdbBudget:
        """The budget left after evicting `pods`: this one itself when there are none (a budget is never changed)."""
        if not pods:
            return self
        other = PdbBudget(())
        other._by_namespace = self._by_namespace
        other._cache = self._cache
        other._left = dict(self._left)
        for key, count in self._needed(pods).items():
            other._left[key] -= count
        return other

    def remaining(self) -> Mapping[str, int]:
        return dict(self._left)


def _block(code: ReasonCode, pod: Pod, why: str) -> PodDrain:
    return PodDrain(action=DrainAction.BLOCK, reason=Reason(code, f"pod {pod.key} {why}"))


def _ignored(pod: Pod) -> bool:
    return (pod.is_mirror() or pod.deleting or pod.is_terminal()
            or (pod.of_daemonset() and pod.annotations.get(ENABLE_DS_EVICTION) != "true"))


def protection_reason(protection: Protection, what: str, about: str) -> Reason:
    """The reason a do-not-disrupt protection keeps a node: until when, or that its value is malformed (the code
    then says so, for the loop's Warning event on `about`)."""
    if protection.malformed is not None:
        return Reason(ReasonCode.BAD_ANNOTATION, f"{what} is protected: {protection.malformed}; the safe reading "
                                                 "applies", about=about)
    if protection.until_s is None:
        return Reason(ReasonCode.DO_NOT_DISRUPT, f"{what} is annotated {DO_NOT_DISRUPT}: {protection.value!r}",
                      about=about)
    return Reason(ReasonCode.DO_NOT_DISRUPT, f"{what} is annotated {DO_NOT_DISRUPT}: {protection.value!r}, protected "
                                             f"until {protection.until_s:.0f} (Unix s)",
                  {"protected_until_s": protection.until_s}, about=about)


def _protected(pod: Pod, now: float) -> PodDrain | None:
    safe = pod.annotations.get(SAFE_TO_EVICT)
    if safe == "false":
        return _block(ReasonCode.NOT_SAFE_TO_EVICT, pod, f'is annotated {SAFE_TO_EVICT}: "false"')
    if safe == "on-completion":
        return _block(ReasonCode.ON_COMPLETION, pod, f'is annotated {SAFE_TO_EVICT}: "on-completion" and still runs')
    if DO_NOT_DISRUPT in pod.annotations:
        start = pod.started_s if pod.started_s is not None else pod.created_s
        protection = do_not_disrupt(pod.annotations, start, now)
        if protection is not None:
            return PodDrain(action=DrainAction.BLOCK, reason=protection_reason(protection, f"pod {pod.key}", pod.key))
    return None


def _local_volumes_safe(pod: Pod) -> bool:
    """Every node-local volume of the pod is named in its `safe-to-evict-local-volumes` annotation."""
    listed = pod.annotations.get(SAFE_TO_EVICT_LOCAL_VOLUMES)
    if not listed or not pod.local_volumes:
        return False
    names = {n.strip() for n in listed.split(",")}
    return all(v in names for v in pod.local_volumes)


def _movable(pod: Pod, policy: Policy, budget: PdbBudget) -> PodDrain | None:
    """Rules 5–7, which `safe-to-evict: "true"` lifts."""
    if policy.skip_nodes_with_system_pods and pod.namespace == KUBE_SYSTEM and not budget.covering(pod):
        return _block(ReasonCode.KUBE_SYSTEM, pod, "is a kube-system pod without a PodDisruptionBudget")
    if pod.owner is None or not pod.owner.controller:
        return _block(ReasonCode.NO_CONTROLLER, pod, "has no controller to recreate it")
    if policy.skip_nodes_with_local_storage and pod.local_storage and not _local_volumes_safe(pod):
        return _block(ReasonCode.LOCAL_STORAGE, pod, "uses node-local storage")
    return None


def classify_pod(pod: Pod, *, policy: Policy, budget: PdbBudget, now: float = 0.0) -> PodDrain:
    """What draining the pod's node does to this pod (rules 1–8 of the module docstring), at `now` (Unix s: when a
    do-not-disrupt duration ends)."""
    if _ignored(pod):
        return PodDrain(action=DrainAction.IGNORE)
    protected = _protected(pod, now)
    if protected is not None:
        return protected
    if pod.priority < policy.expendable_priority_cutoff or pod.of_daemonset():  # rule 1's evictable DaemonSet pods
        return PodDrain(action=DrainAction.EXPENDABLE)
    if pod.annotations.get(SAFE_TO_EVICT) != "true":
        blocked = _movable(pod, policy, budget)
        if blocked is not None:
            return blocked
    if protected_gpu_job(pod, policy):
        if pod.group is not None and pod.group.min_member != 1:
            return _block(ReasonCode.TRAINING_JOB, pod,
                          f"is a running GPU Job pod of gang {pod.group.key}: moving one member stops the whole gang")
        problem = checkpoint_problem(pod)
        if problem is not None:
            return _block(ReasonCode.TRAINING_JOB, pod,
                          f'is a running GPU Job pod: killing a training job loses its work; it {problem} '
                          f'(opt in with {CHECKPOINT_SAFE}: "true", or say when it checkpoints)')
        return _CHECKPOINTED
    return _MOVE


_MOVE = PodDrain(action=DrainAction.MOVE)
_CHECKPOINTED = PodDrain(action=DrainAction.MOVE, checkpointed=True)


def protected_gpu_job(pod: Pod, policy: Policy) -> bool:
    """Rule 8 applies: a running GPU Job pod under `protect_gpu_jobs`, not opted out with `checkpoint-safe`."""
    return (policy.protect_gpu_jobs and pod.phase is PodPhase.RUNNING and pod.owner is not None
            and pod.owner.kind == "Job" and requests_gpus(pod) and pod.annotations.get(CHECKPOINT_SAFE) != "true")


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDrain:
    """What removing one node takes: pods to re-place (`move`, sorted by key), pods to evict (`evict`: `move` plus
    expendable pods, sorted by key), or why it cannot be removed (`blocked`, the first blocker in pod-key order);
    `checkpointed`: the moved pods whose work since their last checkpoint is lost."""

    node: str
    move: tuple[Pod, ...] = ()
    evict: tuple[Pod, ...] = ()
    blocked: Reason | None = None
    checkpointed: tuple[Pod, ...] = ()
    """The pods of `move` that lose the work since their last checkpoint (rule 8): their loss is charged against the
    pool's lost-work budget when the node is picked."""

    @property
    def empty(self) -> bool:
        """No pod needs a new home (expendable pods may still be evicted)."""
        return not self.move

    @property
    def evict_keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.evict)


def scale_down_disabled(node: Node) -> bool:
    return node.annotations.get(SCALE_DOWN_DISABLED) == "true"


def drain_node(node: Node, pods: Iterable[Pod], *, policy: Policy, budget: PdbBudget,
               now: float = 0.0) -> NodeDrain:
    """Drainability of a node holding `pods`, against what is left of the PDBs in `budget` (not spent here), at
    `now` (Unix s)."""
    if scale_down_disabled(node):
        return NodeDrain(node=node.name, blocked=Reason(
            ReasonCode.SCALE_DOWN_DISABLED, f'node {node.name} is annotated {SCALE_DOWN_DISABLED}: "true"'))
    if node.annotations and DO_NOT_DISRUPT in node.annotations:
        protection = do_not_disrupt(node.annotations, node.created_s, now)
        if protection is not None:
            return NodeDrain(node=node.name, blocked=protection_reason(protection, f"node {node.name}",
                                                                       f"node/{node.name}"))
    if not pods:  # an empty node (a sequence; an iterator takes the walk): nothing to evict, so no PDB shortfall
        return NodeDrain(node=node.name)
    move: list[Pod] = []
    evict: list[Pod] = []
    checkpointed: list[Pod] = []
    for pod in sorted(pods, key=lambda p: (p.key, p.uid)):
        verdict = classify_pod(pod, policy=policy, budget=budget, now=now)
        if verdict.action is DrainAction.BLOCK:
            return NodeDrain(node=node.name, blocked=verdict.reason)
        if verdict.action is DrainAction.MOVE:
            move.append(pod)
            if verdict.checkpointed:
                checkpointed.append(pod)
        if verdict.action is not DrainAction.IGNORE:
            evict.append(pod)
    shortfall = budget.shortfall(evict)
    if shortfall is not None:
        return NodeDrain(node=node.name, blocked=shortfall)
    return NodeDrain(node=node.name, move=tuple(move), evict=tuple(evict), checkpointed=tuple(checkpointed))
