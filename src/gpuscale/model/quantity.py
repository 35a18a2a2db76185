"""Kubernetes `resource.Quantity`, parsed exactly as the API server decodes it.

Grammar (k8s.io/apimachinery/pkg/api/resource `ParseQuantity`): an optional sign, decimal digits with an optional
fraction, then an optional suffix — binary SI (`Ki` … `Ei`), decimal SI (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`,
`E`) or a decimal exponent (`e3`, `E-2`). Surrounding whitespace is ignored, as `Quantity.UnmarshalJSON` trims it.
Upstream quirks are kept: `1.` and `.5` are valid; the digits may be empty, so `.`, `+`, `Gi` and `e3` are zero (but
`Pi`, `Ei` and `e-10` are errors); binary-SI values are capped at 2^63-1. Values are kept as exact `Fraction`s;
conversion to integers rounds **away from zero**, as `Quantity.MilliValue()` / `Value()` do, so `0.5m` CPU is
1 millicore, `1.5` bytes is 2 and `-0.1m` is -1.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {suffix: Fraction(10) ** power for suffix, power in
            (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18))}
_SHAPE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
"""What `parseQuantityString` scans: sign, digits, fraction, then the suffix characters (checked separately)."""
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
_REGEX_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_SUFFIX_MESSAGE = "unable to parse quantity's suffix"
_NUMERIC_MESSAGE = "unable to parse numeric part of quantity"
_INT64_MAX = 2**63 - 1
_MAX_DIGITS = 1000
_MAX_EXPONENT = 1000
"""Longer mantissas and larger exponents are refused rather than computed (a deliberate limit; the API server would
accept them): they mean nothing as resources, and `1e999999999` would take minutes and gigabytes to evaluate."""


def _shown(text: object) -> str:
    """The text for a message, cut to 40 characters: a 1000-digit mantissa is not repeated whole."""
    shown = repr(text) if not isinstance(text, str) or len(text) <= 40 else repr(text[:40])
    return shown if len(shown) <= 40 else shown[:39] + "…"


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity; the message says why in the API server's terms."""


def parse_quantity(text: str | int | float) -> Fraction:
    """Exact value of a quantity. Raises `QuantityError` for anything the API server would reject."""
    if isinstance(text, bool):
        raise QuantityError(f"{_REGEX_MESSAGE}, got {_shown(text)}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        # A JSON/YAML number: its shortest repr is the text the API server would have parsed.
        if not math.isfinite(text):
            raise QuantityError(f"{_REGEX_MESSAGE}, got {_shown(text)}")
        return parse_quantity(repr(text))
    shape = _SHAPE.fullmatch(text.strip()) if isinstance(text, str) and text.strip() else None
    if shape is None:
        raise QuantityError(f"{_REGEX_MESSAGE}, got {_shown(text)}")
    sign, digits, fraction, suffix = shape.groups()
    fraction = fraction or ""
    exponent = _EXPONENT.fullmatch(suffix) if suffix not in _DECIMAL and suffix not in _BINARY else None
    if suffix not in _DECIMAL and suffix not in _BINARY and exponent is None:
        raise QuantityError(f"{_SUFFIX_MESSAGE}, got {_shown(text)}")
    whole = digits.lstrip("0")
    power = exponent.group(1).lstrip("+-").lstrip("0") if exponent else ""
    if len(whole) + len(fraction) > _MAX_DIGITS or len(power) > len(str(_MAX_EXPONENT)) \
            or int(power or "0") > _MAX_EXPONENT:
        raise QuantityError(f"quantity out of range, got {_shown(text)}")
    if not digits and not fraction and (suffix in ("Pi", "Ei") or (exponent and int(exponent.group(1)) < -9)):
        # Upstream quirk: a mantissa without digits is zero on the int64 fast path but rejected on the slow path.
        raise QuantityError(f"{_NUMERIC_MESSAGE}, got {_shown(text)}")
    value = Fraction(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction))
    if suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    elif suffix in _BINARY:
        # Binary-SI quantities are capped at the largest int64, as ParseQuantity caps them.
        value = min(value * _BINARY[suffix], Fraction(_INT64_MAX))
    elif exponent:
        value *= Fraction(10) ** int(exponent.group(1))
    return -value if sign == "-" else value


def _ceil(value: Fraction) -> int:
    """Round away from zero, as apimachinery's `ScaledValue` does for both signs."""
    magnitude = -((-abs(value.numerator)) // value.denominator)
    return magnitude if value >= 0 else -magnitude


def _in_range(text: str | int | float, value: Fraction) -> Fraction:
    """`value` if its thousandths fit in an int64, as every quantity the API server stores must (`MilliValue`)."""
    if abs(value) * 1000 > _INT64_MAX:
        raise QuantityError(f"quantity out of range: more than {_INT64_MAX // 1000} (int64 milli-units), "
                            f"got {_shown(text)}")
    return value


def to_milli(text: str | int | float) -> int:
    """Thousandths of the quantity, rounded away from zero (CPU millicores, milli-GPUs); beyond int64 milli-units is
    a `QuantityError`."""
    return _ceil(_in_range(text, parse_quantity(text)) * 1000)


def to_units(text: str | int | float) -> int:
    """Whole units of the quantity, rounded away from zero (bytes, counts of an extended resource); a value whose
    thousandths are beyond int64 is a `QuantityError`."""
    return _ceil(_in_range(text, parse_quantity(text)))


def format_milli(milli: int) -> str:
    """Canonical text for a value given in thousandths: `1500` → `1500m`, `2000` → `2`."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_units(units: int) -> str:
    """Canonical text for a whole-unit value, using binary suffixes when exact (`1073741824` → `1Gi`).

    Beyond int64 the text stays decimal: a binary-SI quantity that large would be capped when parsed."""
    if units == 0 or abs(units) > _INT64_MAX:
        return str(units)
    for suffix, factor in reversed(_BINARY.items()):
        if units % factor == 0:
            return f"{units // factor}{suffix}"
    return str(units)
