"""A cheaper `__init__` for the frozen, slotted dataclasses every decision makes by the thousand.

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__(self, name, value)`, a generic
attribute write that looks the slot up by name every time: ≈ 40 % of building a `Reason` or a `Pod`. `quick_init`
gives the class an `__init__` with the very same signature (parameters, order, defaults, keyword-only marks) that
writes each slot through its own descriptor instead. Objects are the same field for field; the class stays frozen
(assignment still raises `FrozenInstanceError`), hashing and equality are untouched. The twin and a decision make
tens of thousands of verdicts, reasons and pods an hour of simulated time (docs/decisions.md, D19).
"""

from __future__ import annotations

import dataclasses
import inspect
from types import MemberDescriptorType
from typing import Any, TypeVar

_T = TypeVar("_T")


def quick_init(cls: type[_T]) -> type[_T]:
    """`cls` (a frozen dataclass with slots and no `__post_init__`, applied after `@dataclass`) with the cheaper
    `__init__`; refused at import time for any other class. Fields outside `__init__` get their defaults."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init: {cls.__qualname__} is not a frozen dataclass without __post_init__")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]  # in the generated order, after self
    scope: dict[str, Any] = {}
    head: list[str] = []
    body: list[str] = []
    keyword_only = False
    for i, parameter in enumerate(parameters):
        f = fields.get(parameter.name)
        slot = cls.__dict__.get(parameter.name)
        if f is None or not isinstance(slot, MemberDescriptorType) or not f.name.isidentifier():
            raise TypeError(f"quick_init: {cls.__qualname__}.{parameter.name} is not a slotted field")
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            head.append("*")
            keyword_only = True
        scope[f"set{i}"] = slot.__set__
        value = f.name
        if f.default_factory is not dataclasses.MISSING:
            scope[f"factory{i}"], scope[f"unset{i}"] = f.default_factory, parameter.default
            head.append(f"{f.name}=unset{i}")
            value = f"factory{i}() if {f.name} is unset{i} else {f.name}"
        elif parameter.default is not inspect.Parameter.empty:
            scope[f"default{i}"] = parameter.default
            head.append(f"{f.name}=default{i}")
        else:
            head.append(f.name)
        body.append(f"    set{i}(self, {value})")
    for j, f in enumerate(f for f in fields.values() if not f.init):  # set to their defaults, as dataclasses do
        slot = cls.__dict__.get(f.name)
        if f.default is dataclasses.MISSING or not isinstance(slot, MemberDescriptorType):
            raise TypeError(f"quick_init: {cls.__qualname__}.{f.name} is outside __init__ without a default")
        scope[f"put{j}"], scope[f"fixed{j}"] = slot.__set__, f.default
        body.append(f"    put{j}(self, fixed{j})")
    if len(parameters) + sum(not f.init for f in fields.values()) != len(fields):
        raise TypeError(f"quick_init: {cls.__qualname__}'s __init__ does not match its fields")
    source = f"def __init__(self, {', '.join(head)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, scope)  # built from the class's own field names only
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
