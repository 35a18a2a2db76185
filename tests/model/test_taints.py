"""`gpuscale.model.taints` against `k8s.io/api/core/v1` `Toleration.ToleratesTaint` and TaintToleration's Filter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model.taints import UNSCHEDULABLE_TAINT, Taint, TaintEffect, Toleration, untolerated_taint
from tests.builders import taint, toleration

GPU = taint("nvidia.com/gpu", "present", "NoSchedule")

TOLERATES = [
    # toleration, taint, tolerated?
    (toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), GPU, True),
    (toleration("nvidia.com/gpu", "Equal", "present"), GPU, True),  # empty effect matches every effect
    (toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), GPU, False),  # Equal compares values
    (toleration("nvidia.com/gpu", "Equal", "", "NoSchedule"), GPU, False),
    (toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), GPU, True),  # Exists ignores the value
    (toleration("nvidia.com/gpu", "Exists"), GPU, True),
    (toleration("nvidia.com/gpu", "Exists", "", "NoExecute"), GPU, False),  # effects must match
    (toleration("nvidia.com/gpu", "Exists", "", "PreferNoSchedule"), GPU, False),
    (toleration("amd.com/gpu", "Exists"), GPU, False),  # keys must match
    (toleration("nvidia.com/GPU", "Exists"), GPU, False),  # keys are case-sensitive
    (toleration("", "Exists"), GPU, True),  # empty key + Exists tolerates everything
    (toleration("", "Exists"), taint("x", "y", "NoExecute"), True),
    (toleration("", "Exists", "", "NoSchedule"), GPU, True),
    (toleration("", "Exists", "", "NoExecute"), GPU, False),  # ... but only for its effect, if it names one
    # Empty key with Equal (the API rejects it; upstream skips the key and compares values).
    (toleration("", "Equal", "present"), GPU, True),
    (toleration("", "Equal", ""), GPU, False),
    (toleration("dedicated", "Equal", "", "NoSchedule"), taint("dedicated", "", "NoSchedule"), True),
    (toleration("dedicated", "Equal", "ml", "NoExecute"), taint("dedicated", "ml", "NoExecute"), True),
]


@pytest.mark.parametrize(("tol", "tnt", "expected"), TOLERATES)
def test_tolerates(tol: Toleration, tnt: Taint, expected: bool) -> None:
    assert tol.tolerates(tnt) is expected


@pytest.mark.parametrize(("effect", "blocks"), [("NoSchedule", True), ("NoExecute", True),
                                                ("PreferNoSchedule", False)])
def test_only_no_schedule_and_no_execute_block(effect: str, blocks: bool) -> None:
    tnt = taint("k", "v", effect)
    assert tnt.blocks_scheduling() is blocks
    assert (untolerated_taint((tnt,), ()) is tnt) is blocks


def test_untolerated_taint_is_the_first_in_node_order() -> None:
    a, b, c = taint("a"), taint("b", effect="PreferNoSchedule"), taint("c", effect="NoExecute")
    assert untolerated_taint((a, b, c), ()) is a
    assert untolerated_taint((a, b, c), (toleration("a", "Exists"),)) is c
    assert untolerated_taint((a, b, c), (toleration("a", "Exists"), toleration("c", "Exists"))) is None
    assert untolerated_taint((), ()) is None


def test_unschedulable_taint() -> None:
    assert UNSCHEDULABLE_TAINT.key == "node.kubernetes.io/unschedulable"
    assert UNSCHEDULABLE_TAINT.effect is TaintEffect.NO_SCHEDULE
    assert toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule").tolerates(UNSCHEDULABLE_TAINT)
    assert not toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoExecute").tolerates(UNSCHEDULABLE_TAINT)


@pytest.mark.parametrize(("tnt", "text"), [(GPU, "{nvidia.com/gpu: present}"),
                                           (taint("node-role.kubernetes.io/control-plane"),
                                            "{node-role.kubernetes.io/control-plane: }")])
def test_taint_renders_as_the_scheduler_logs_it(tnt: Taint, text: str) -> None:
    assert str(tnt) == text


# ----------------------------------------------------------------------------------------------------- properties

_KEYS = st.sampled_from(["", "a", "b", "nvidia.com/gpu"])
_VALUES = st.sampled_from(["", "x", "y"])
_EFFECTS = st.sampled_from(list(TaintEffect))
taints = st.builds(Taint, key=st.sampled_from(["a", "b", "nvidia.com/gpu"]), value=_VALUES, effect=_EFFECTS)
tolerations = st.builds(toleration, key=_KEYS, operator=st.sampled_from(["Equal", "Exists"]), value=_VALUES,
                        effect=st.one_of(st.none(), _EFFECTS.map(str)))


@given(st.lists(taints, max_size=4).map(tuple), st.lists(tolerations, max_size=3).map(tuple), tolerations)
def test_adding_a_toleration_never_exposes_a_new_taint(node_taints: tuple[Taint, ...],
                                                       tols: tuple[Toleration, ...], extra: Toleration) -> None:
    before = untolerated_taint(node_taints, tols)
    after = untolerated_taint(node_taints, (*tols, extra))
    if before is None:
        assert after is None


@given(taints)
def test_exists_with_empty_key_and_effect_tolerates_every_taint(tnt: Taint) -> None:
    assert toleration("", "Exists").tolerates(tnt)
