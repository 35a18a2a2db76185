"""Reasons as data: every plan item says why, with a code to match on, words to show and the numbers behind them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuscale.model.frozen import quick_init


class ReasonCode(StrEnum):
    # scale-up
    SCALE_UP = "ScaleUp"
    FITS_EXISTING = "FitsExistingCapacity"
    FITS_UPCOMING = "FitsUpcomingCapacity"
    WAITING_BATCH = "WaitingForBatch"
    NO_POOL_FITS = "NoPoolFits"
    POOL_BACKOFF = "PoolInBackoff"
    LIMIT_REACHED = "LimitReached"
    GANG_INCOMPLETE = "GangIncomplete"
    GANG_DOES_NOT_FIT = "GangDoesNotFit"
    EXPENDABLE = "BelowExpendableCutoff"
    SCHEDULING_GATED = "SchedulingGated"
    BUFFER = "WarmCapacityBuffer"
    EXPANDER = "ExpanderChoice"
    PROVISION_TIMEOUT = "ProvisionTimeout"
    GPU_INIT_TIMEOUT = "GpuInitTimeout"
    DEGRADED = "NodeDegraded"
    """A node that has been usable lacks GPUs its template promises, or went NotReady under its pods."""
    REPAIR = "NodeRepair"
    """A degraded node is drained and replaced (the opt-in repair policy)."""
    # scale-down
    UNNEEDED = "Unneeded"
    EMPTY = "Empty"
    UNDERUTILIZED = "Underutilized"
    NOT_UNDERUTILIZED = "NotUnderutilized"
    UNNEEDED_TOO_SHORT = "NotUnneededLongEnough"
    POOL_AT_MIN = "PoolAtMinSize"
    PDB = "PodDisruptionBudget"
    NOT_SAFE_TO_EVICT = "NotSafeToEvict"
    ON_COMPLETION = "WaitingForCompletion"
    DO_NOT_DISRUPT = "DoNotDisrupt"
    BAD_ANNOTATION = "MalformedAnnotation"
    """A protection annotation whose value does not parse: the safe reading (protected) applies."""
    KUBE_SYSTEM = "KubeSystemPodWithoutPdb"
    NO_CONTROLLER = "PodWithoutController"
    LOCAL_STORAGE = "LocalStorage"
    TRAINING_JOB = "RunningGpuJob"
    CHECKPOINTED_MOVE = "CheckpointedJobMoved"
    """A removal moves checkpointed GPU jobs: the work lost, the idle GPU-hours saved (engine/checkpoint.py)."""
    LOST_WORK_BUDGET = "LostWorkBudget"
    """A removal would lose more work since checkpoints than its pool's lost-work budget has left this hour."""
    NO_PLACE_TO_MOVE = "NoPlaceToMovePods"
    RECENTLY_UNREMOVABLE = "RecentlyUnremovable"
    SCALE_DOWN_DISABLED = "ScaleDownDisabled"
    SCALE_DOWN_COOLDOWN = "ScaleDownCooldown"
    TOO_MANY_UNREADY = "TooManyUnreadyNodes"
    PARALLELISM = "ParallelismLimit"
    ATOMIC_SCALE_DOWN = "AtomicScaleDownFailed"
    """Some node of a zero-or-max pool is not removable, so none is (CA's reason)."""
    ZERO_OR_MAX = "ZeroOrMaxScaling"
    """A zero-or-max pool's node goes, or waits, with the rest of its pool."""
    NOT_READY = "NodeNotReady"
    UNKNOWN_POOL = "UnknownPool"


@quick_init
@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    numbers: Mapping[str, float] = field(default_factory=dict)
    about: str = ""
    """The object the reason is about when it is not the plan item's own (a pod's `namespace/name`, `node/NAME`)."""

    def __str__(self) -> str:
        return self.message
