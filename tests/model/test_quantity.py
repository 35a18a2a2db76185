"""`gpuscale.model.quantity` against k8s.io/apimachinery `resource.ParseQuantity` (v0.37.2).

Expected values were checked against the real parser (`MilliValue()`/`Value()`); the odd-looking cases (`+`, `Gi`,
`e3` parse as zero; `Pi` does not) are upstream quirks we keep on purpose.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuscale.model.quantity import (
    QuantityError,
    format_milli,
    format_units,
    parse_quantity,
    to_milli,
    to_units,
)

VALID = [
    # text, MilliValue, Value
    ("0", 0, 0),
    ("1", 1000, 1),
    ("+1", 1000, 1),
    ("-1", -1000, -1),
    ("1.", 1000, 1),
    (".5", 500, 1),
    ("+.5", 500, 1),
    ("-.5", -500, -1),
    ("1.5", 1500, 2),
    ("0.0001", 1, 1),
    ("100m", 100, 1),
    ("0.1m", 1, 1),
    ("0.5m", 1, 1),
    ("1500m", 1500, 2),
    ("1n", 1, 1),
    ("100n", 1, 1),
    ("1u", 1, 1),
    ("250000u", 250, 1),
    ("1k", 1_000_000, 1000),
    ("2.5k", 2_500_000, 2500),
    ("1M", 10**9, 10**6),
    ("1G", 10**12, 10**9),
    ("1T", 10**15, 10**12),
    ("1P", 10**18, 10**15),
    ("1.G", 10**12, 10**9),
    ("1Ki", 1024_000, 1024),
    ("1Mi", 2**20 * 1000, 2**20),
    ("128Mi", 128 * 2**20 * 1000, 128 * 2**20),
    ("1.5Gi", 1536 * 2**20 * 1000, 1536 * 2**20),
    ("1Ti", 2**40 * 1000, 2**40),
    ("1Pi", 2**50 * 1000, 2**50),
    ("1e3", 1_000_000, 1000),
    ("1E3", 1_000_000, 1000),
    ("1e+3", 1_000_000, 1000),
    ("1e-3", 1, 1),
    ("1E-2", 10, 1),
    ("12e-1", 1200, 2),
    ("1e-20", 1, 1),
    ("-0.1m", -1, -1),
    ("-1.5", -1500, -2),
    (" 1Gi", 2**30 * 1000, 2**30),
    ("1Gi\n", 2**30 * 1000, 2**30),
    ("\t2 ", 2000, 2),
    # Upstream quirks: an empty mantissa is zero on the int64 fast path.
    ("+", 0, 0),
    ("-", 0, 0),
    (".", 0, 0),
    ("Gi", 0, 0),
    ("m", 0, 0),
    ("e3", 0, 0),
    ("0Pi", 0, 0),
]


@pytest.mark.parametrize(("text", "milli", "units"), VALID)
def test_valid_quantities_round_away_from_zero(text: str, milli: int, units: int) -> None:
    assert to_milli(text) == milli
    assert to_units(text) == units


@pytest.mark.parametrize(("text", "exact"), [
    ("1E", Fraction(10**18)), ("1Ei", Fraction(2**60)), ("5E", Fraction(5 * 10**18)), ("10E", Fraction(10**19)),
    # Binary-SI values are capped at the largest int64 when parsed, decimal ones are not.
    ("10Ei", Fraction(2**63 - 1)), ("-10Ei", Fraction(-(2**63 - 1))), ("1e400", Fraction(10**400)),
    ("9223372036854776", Fraction(9223372036854776)), (1e21, Fraction(10**21)), (10**30, Fraction(10**30)),
])
def test_values_beyond_int64_milli_units_parse_but_are_refused_as_amounts(text: str | float, exact: Fraction) -> None:
    """The API server stores no quantity whose thousandths leave int64; neither do we (NumPy int64 in the engine)."""
    assert parse_quantity(text) == exact
    for convert in (to_milli, to_units):
        with pytest.raises(QuantityError, match=r"out of range: more than 9223372036854775 \(int64 milli-units\)"):
            convert(text)


def test_the_largest_amounts_still_fit() -> None:
    assert to_milli("9223372036854775") == 9223372036854775000
    assert to_units("9223372036854775807m") == 9223372036854776  # rounded up, still within int64 milli-units
    assert to_units("8191Ti") == 8191 * 2**40


def test_messages_cut_long_values() -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity("1" * 2000)
    assert len(str(err.value)) < 100


INVALID = [
    ("", "regular expression"),
    ("   ", "regular expression"),
    ("1 Gi", "regular expression"),
    ("1.1.M", "regular expression"),
    ("0x10", "regular expression"),
    ("1_0", "regular expression"),
    ("1e1.5", "regular expression"),
    ("1e3m", "regular expression"),
    ("1.0e3m", "regular expression"),
    ("٣", "regular expression"),  # non-ASCII digits
    ("abc", "regular expression"),
    ("1e", "suffix"),
    ("1.5e", "suffix"),
    ("1ki", "suffix"),
    ("1K", "suffix"),
    ("1i", "suffix"),
    ("0.1mi", "suffix"),
    ("1m3", "suffix"),
    ("1ee3", "suffix"),
    ("1ke3", "suffix"),
    ("Pi", "numeric"),
    ("+.Ei", "numeric"),
    ("e-10", "numeric"),
    ("1e999999999", "out of range"),
    ("1" * 2000, "out of range"),
]


@pytest.mark.parametrize(("text", "why"), INVALID)
def test_invalid_quantities_raise_quantity_error(text: str, why: str) -> None:
    with pytest.raises(QuantityError, match=why):
        parse_quantity(text)


@pytest.mark.parametrize("value", [None, True, False, [1], {"a": 1}, float("nan"), float("inf"), float("-inf")])
def test_non_quantity_values_raise_quantity_error(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "milli", "units"), [
    (0, 0, 0),
    (3, 3000, 3),
    (0.1, 100, 1),
    (0.5, 500, 1),
    (1e-05, 1, 1),  # repr is "1e-05": an exponent form
    (2.5, 2500, 3),
    (-0.5, -500, -1),
])
def test_json_numbers_parse_as_their_decimal_text(value: float, milli: int, units: int) -> None:
    assert to_milli(value) == milli
    assert to_units(value) == units


def test_values_are_exact_fractions() -> None:
    assert parse_quantity("0.1") == Fraction(1, 10)
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert parse_quantity("1n") == Fraction(1, 10**9)


@pytest.mark.parametrize(("milli", "text"), [
    (0, "0"), (1, "1m"), (999, "999m"), (1000, "1"), (1500, "1500m"), (2000, "2"), (-1500, "-1500m"), (-2000, "-2"),
])
def test_format_milli(milli: int, text: str) -> None:
    assert format_milli(milli) == text


@pytest.mark.parametrize(("units", "text"), [
    (0, "0"), (1, "1"), (1000, "1000"), (1024, "1Ki"), (1536, "1536"), (3 * 2**29, "1536Mi"), (2**30, "1Gi"),
    (2**40, "1Ti"), (2**60, "1Ei"), (2**61, "2Ei"), (-1024, "-1Ki"),
])
def test_format_units(units: int, text: str) -> None:
    assert format_units(units) == text


# ----------------------------------------------------------------------------------------------------- properties

_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantity_texts(draw: st.DrawFn) -> str:
    """Well-formed, non-negative quantity strings in every suffix family (values below the binary-SI cap)."""
    whole = draw(st.integers(min_value=0, max_value=10**6))
    fraction = draw(st.one_of(st.just(""), st.from_regex(r"\.[0-9]{0,4}", fullmatch=True)))
    if draw(st.booleans()):
        suffix = draw(st.sampled_from(_SUFFIXES))
    else:
        suffix = f"{draw(st.sampled_from('eE'))}{draw(st.integers(min_value=-12, max_value=12))}"
    return f"{whole}{fraction}{suffix}"


@given(quantity_texts())
def test_milli_round_trip_is_stable(text: str) -> None:
    """parse → to_milli → format_milli → parse gives back the same millis (the first rounding is the only one)."""
    assume(parse_quantity(text) * 1000 <= 2**63 - 1)
    milli = to_milli(text)
    assert to_milli(format_milli(milli)) == milli
    assert milli >= parse_quantity(text) * 1000  # rounding never loses demand


@given(quantity_texts())
def test_units_round_trip_is_stable(text: str) -> None:
    assume(parse_quantity(text) * 1000 <= 2**63 - 1)
    units = to_units(text)
    assert to_units(format_units(units)) == units
    assert units >= parse_quantity(text)


@given(st.integers(min_value=-(2**63 - 1), max_value=2**63 - 1))
def test_format_parse_is_identity_on_integers(n: int) -> None:
    assert to_milli(format_milli(n)) == n
    if abs(n) <= (2**63 - 1) // 1000:
        assert to_units(format_units(n)) == n


@given(quantity_texts())
def test_negation_mirrors_rounding(text: str) -> None:
    """MilliValue/Value round away from zero, so `-q` is exactly the negation of `q`."""
    assume(parse_quantity(text) * 1000 <= 2**63 - 1)
    assert to_milli(f"-{text}") == -to_milli(text)
    assert to_units(f"-{text}") == -to_units(text)
