"""`replaced` builds the same objects `dataclasses.replace` does, for the model types the twin updates per event."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model.pod import PodPhase
from gpuscale.model.taints import Taint, TaintEffect
from gpuscale.sim.core import replaced
from tests.builders import make_node, make_pod

pod_changes = st.fixed_dictionaries({}, optional={
    "node_name": st.one_of(st.none(), st.sampled_from(["a", "b"])), "unschedulable": st.booleans(),
    "phase": st.sampled_from(list(PodPhase)), "nominated_node": st.none(),
    "annotations": st.dictionaries(st.sampled_from(["x", "y"]), st.text(max_size=3))})
node_changes = st.fixed_dictionaries({}, optional={
    "unschedulable": st.booleans(), "ready": st.booleans(),
    "taints": st.lists(st.builds(Taint, key=st.sampled_from(["k", "j"]), value=st.text(max_size=2),
                                 effect=st.sampled_from(list(TaintEffect))), max_size=2).map(tuple)})


@given(pod_changes, st.booleans())
def test_a_pod_replaced_equals_dataclasses_replace(changes: dict[str, object], gpu: bool) -> None:
    pod = make_pod("p", cpu="2", gpus=1 if gpu else 0, priority=3)
    got, expected = replaced(pod, **changes), replace(pod, **changes)
    assert type(got) is type(expected) and got == expected
    assert all(getattr(got, name) is getattr(expected, name) for name in pod.__slots__)


@given(node_changes)
def test_a_node_replaced_equals_dataclasses_replace(changes: dict[str, object]) -> None:
    node = make_node("n", gpus=2)
    got = replaced(node, **changes)
    assert got == replace(node, **changes) and hash(got) == hash(replace(node, **changes))


@dataclass(frozen=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("value must not be negative")


def test_classes_that_validate_and_unknown_fields_go_through_dataclasses_replace() -> None:
    with pytest.raises(ValueError, match="negative"):
        replaced(_Checked(1), value=-1)
    with pytest.raises(TypeError):
        replaced(make_pod("p"), no_such_field=1)
