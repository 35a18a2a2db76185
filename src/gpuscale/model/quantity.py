"""Kubernetes `resource.Quantity`, parsed exactly as the API server parses it.

Grammar (k8s.io/apimachinery/pkg/api/resource): a signed decimal number followed by an optional suffix — binary SI
(`Ki` … `Ei`), decimal SI (`m`, ``, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`). Values are kept
as exact `Fraction`s; conversion to integers rounds **up**, as `Quantity.MilliValue()` / `Value()` do, so `0.5m` CPU
is 1 millicore and `1.5` bytes is 2.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction] = {
    "m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
}
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_QUANTITY = re.compile(rf"^({_NUMBER})(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|m|k|M|G|T|P|E|)$")


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity; the message says why in the API server's terms."""


def parse_quantity(text: str | int | float) -> Fraction:
    """Exact value of a quantity. Raises `QuantityError` for anything the API server would reject."""
    if isinstance(text, bool):
        raise QuantityError(f"quantities must match the regular expression, got {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(repr(text)) if "e" not in repr(text) else Fraction(text)
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None or text.strip() != text:
        raise QuantityError(f"quantities must match the regular expression "
                            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {text!r}")
    number: str = match.group(1)
    suffix: str = match.group(2)
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        return value * Fraction(10**exponent) if exponent >= 0 else value / Fraction(10**-exponent)
    return value * _DECIMAL[suffix]


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def to_milli(text: str | int | float) -> int:
    """Thousandths of the quantity, rounded up (CPU millicores, milli-GPUs)."""
    return _ceil(parse_quantity(text) * 1000)


def to_units(text: str | int | float) -> int:
    """Whole units of the quantity, rounded up (bytes, counts of an extended resource)."""
    return _ceil(parse_quantity(text))


def format_milli(milli: int) -> str:
    """Canonical text for a value given in thousandths: `1500` → `1500m`, `2000` → `2`."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_units(units: int) -> str:
    """Canonical text for a whole-unit value, using binary suffixes when exact (`1073741824` → `1Gi`)."""
    if units == 0:
        return "0"
    for suffix, factor in reversed(_BINARY.items()):
        if units % factor == 0:
            return f"{units // factor}{suffix}"
    return str(units)
