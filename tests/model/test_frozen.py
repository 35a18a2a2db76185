"""`quick_init`: the same objects as the dataclass's own `__init__`, the same signature, still frozen."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model.frozen import quick_init
from gpuscale.model.pod import Pod
from gpuscale.model.resources import Resources


def _shape(cls: type) -> type:
    """A frozen slotted dataclass of every kind of field `quick_init` takes: positional, default, factory default,
    keyword-only (declared between positional ones), and a field outside `__init__` with a default."""

    @dataclass(frozen=True, slots=True)
    class Shape:
        a: int
        k: int = field(kw_only=True)
        b: str = "b"
        c: list[int] = field(default_factory=list)
        d: tuple[int, ...] = field(default=(), kw_only=True)
        hidden: int = field(default=-1, init=False, compare=False)

    Shape.__qualname__ = Shape.__name__ = cls.__name__
    return Shape


Plain = _shape(type("Plain", (), {}))
Quick = quick_init(_shape(type("Quick", (), {})))


def _parameters(cls: type) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(cls.__init__).parameters.values()]


def _fields(obj: Any) -> tuple[object, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


@given(a=st.integers(), k=st.integers(), b=st.none() | st.text(max_size=3),
       c=st.none() | st.lists(st.integers(), max_size=3), d=st.none() | st.tuples(st.integers()))
def test_objects_and_signature_are_those_of_the_generated_init(a: int, k: int, b: str | None, c: list[int] | None,
                                                               d: tuple[int, ...] | None) -> None:
    optional = {name: value for name, value in (("b", b), ("c", c), ("d", d)) if value is not None}
    plain, quick = Plain(a, k=k, **optional), Quick(a, k=k, **optional)
    assert _fields(quick) == _fields(plain)
    assert quick.hidden == -1
    assert _parameters(Quick) == _parameters(Plain)
    if c is not None:
        assert quick.c is c  # passed through, not copied
    # positional where the generated init takes them positionally, keyword-only where it does not
    assert _fields(Quick(a, "x", k=k)) == _fields(Plain(a, "x", k=k))
    with pytest.raises(TypeError):
        Quick(a, "x", [], k=k, d=(1,), extra=1)
    with pytest.raises(TypeError):
        Quick(a, k)


def test_factory_defaults_are_fresh_per_object() -> None:
    one, two = Quick(1, k=0), Quick(1, k=0)
    assert one.c == [] and one.c is not two.c


def test_objects_stay_frozen_hashable_and_equal_by_value() -> None:
    pod = Pod(namespace="ns", name="p", requests=Resources.of({"cpu": 1000}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        pod.name = "q"  # type: ignore[misc]
    assert pod == Pod(namespace="ns", name="p", requests=Resources.of({"cpu": 1000}))
    assert hash(pod) == hash(Pod(namespace="ns", name="p", requests=Resources.of({"cpu": 1000})))
    assert Resources.of({"cpu": 1000})._hash in (-1, hash(Resources.of({"cpu": 1000})))


def test_refuses_classes_it_cannot_serve() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    for cls in (Mutable, Checked, NoSlots):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)
