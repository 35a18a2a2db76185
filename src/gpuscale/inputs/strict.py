"""Pydantic models that take a value only as what it is: an integer field takes a YAML/JSON integer (not `true`,
not `1e30`, not `"10"`), a boolean field `true` or `false` (not `yes`, `on` or `1`), a number field a finite number.
Pydantic's lax mode would convert all of those silently; the message names what was given and how to fix it.

Fields whose type carries its own parser (durations, quantities, `MIN:MAX` limits) are left to it.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterable
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo, field_validator

from gpuscale.inputs.files import excerpt
from gpuscale.model.errors import ConfigError

_INT32 = 2**31 - 1


def _plain(annotation: Any) -> Any:
    """`int`, `bool`, `float`, `dict[str, X]` for what the checks cover (Optional stripped), else None."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return _plain(args[0]) if len(args) == 1 else None
    if get_origin(annotation) is not None and any(isinstance(m, BeforeValidator)
                                                  for m in getattr(annotation, "__metadata__", ())):
        return None
    if get_origin(annotation) is not None and hasattr(annotation, "__metadata__"):
        return _plain(get_args(annotation)[0])
    if annotation in (int, bool, float) or get_origin(annotation) is dict:
        return annotation
    return None


def scalar_problem(annotation: Any, value: Any) -> str | None:
    """Why `value` is not a plain value of `annotation`, or None (also for types this does not check)."""
    kind = _plain(annotation)
    if kind is None and get_origin(annotation) in (Union, types.UnionType) and not any(
            isinstance(m, BeforeValidator) for arg in get_args(annotation) for m in getattr(arg, "__metadata__", ())):
        # `int | float | str`: a quantity or a limit, parsed later from what it is
        if isinstance(value, bool) and bool not in get_args(annotation):
            return f"expected a number or a string, got {value!r}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"expected a finite number, got {value!r}"
    if value is None or kind is None:
        return None
    if get_origin(kind) is dict:
        if not isinstance(value, dict):
            return None  # pydantic says what a mapping is
        inner = get_args(kind)[1] if len(get_args(kind)) == 2 else Any
        for key, item in value.items():
            problem = scalar_problem(inner, item)
            if problem is not None:
                return f"{key}: {problem}"
        return None
    if kind is bool:
        return None if isinstance(value, bool) else (f"expected true or false, got {excerpt(value)} (YAML 1.2: yes, "
                                                     "no, on and off are strings)")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            hint = " (a whole number, no fraction or exponent)" if isinstance(value, float) else ""
            return f"expected an integer, got {excerpt(value)}{hint}"
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        hint = " (YAML 1.2 reads 2:30 as a string, not base 60)" if isinstance(value, str) and ":" in value else ""
        return f"expected a number, got {excerpt(value)}{hint}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    return None


class StrictModel(BaseModel):
    """Frozen, unknown keys refused, scalars taken only as what they are (`scalar_problem`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _plain_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and not any(isinstance(m, BeforeValidator) for m in field.metadata):
            problem = scalar_problem(field.annotation, value)
            if problem is not None:
                raise ValueError(problem)
        return value


def unique_names(names: Iterable[str], field: Callable[[int], str], what: str = "name") -> None:
    """Raise `ConfigError` at `field(i)` for the first name that repeats an earlier one (list items named by `name`)."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ConfigError(field(i), f"duplicate {what} {excerpt(name)}")
        seen.add(name)
