"""Money: integer minor units of an ISO-4217 currency, never floats."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multibank.kernel.money import (
    ISO_4217,
    CurrencyMismatch,
    Money,
    is_currency,
    minor_unit_exponent,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
int64 = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
currencies = st.sampled_from(sorted(ISO_4217))


def test_add_sub_neg() -> None:
    a, b = Money(1_050, "EUR"), Money(-275, "EUR")
    assert a + b == Money(775, "EUR")
    assert a - b == Money(1_325, "EUR")
    assert -a == Money(-1_050, "EUR")
    assert -Money(0, "EUR") == Money(0, "EUR")
    assert (a + b).currency == "EUR"


def test_money_is_an_immutable_value() -> None:
    m = Money(100, "GBP")
    assert m == Money(100, "GBP")
    assert m != Money(100, "EUR")
    assert m != Money(101, "GBP")
    assert hash(m) == hash(Money(100, "GBP"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.amount = 5  # type: ignore[misc]


def test_is_zero_and_wire_form() -> None:
    assert Money(0, "USD").is_zero()
    assert not Money(1, "USD").is_zero()
    assert not Money(-1, "USD").is_zero()
    assert Money(-12, "JPY").to_wire() == {"currency": "JPY", "amount": -12}


@pytest.mark.parametrize("op", ["add", "sub"])
def test_currency_mismatch(op: str) -> None:
    eur, gbp = Money(100, "EUR"), Money(100, "GBP")
    with pytest.raises(CurrencyMismatch) as info:
        _ = eur + gbp if op == "add" else eur - gbp
    assert "EUR" in str(info.value) and "GBP" in str(info.value)
    assert isinstance(info.value, ValueError)  # callers catching ValueError still see it


@pytest.mark.parametrize("amount", [1.0, 0.0, 10.5, Decimal("1"), "100", None])
def test_non_integer_amounts_are_refused(amount: object) -> None:
    with pytest.raises(TypeError):
        Money(amount, "EUR")  # type: ignore[arg-type]


@pytest.mark.parametrize("amount", [True, False])
def test_bool_amounts_are_refused(amount: bool) -> None:
    with pytest.raises(TypeError):
        Money(amount, "EUR")


@pytest.mark.parametrize("code", ["XXX", "eur", "EURO", "", "EU", " EUR", "BTC"])
def test_unknown_currencies_are_refused(code: str) -> None:
    assert not is_currency(code)
    with pytest.raises(ValueError):
        Money(1, code)


@pytest.mark.parametrize("code", ["EUR", "GBP", "USD", "JPY", "BHD", "KWD", "CHF"])
def test_known_currencies(code: str) -> None:
    assert is_currency(code)
    assert Money(1, code).currency == code


def test_int64_bounds() -> None:
    assert Money(INT64_MAX, "EUR").amount == INT64_MAX
    assert Money(INT64_MIN, "EUR").amount == INT64_MIN
    with pytest.raises(OverflowError):
        Money(INT64_MAX + 1, "EUR")
    with pytest.raises(OverflowError):
        Money(INT64_MIN - 1, "EUR")


def test_arithmetic_overflowing_int64_is_refused() -> None:
    with pytest.raises(OverflowError):
        _ = Money(INT64_MAX, "EUR") + Money(1, "EUR")
    with pytest.raises(OverflowError):
        _ = Money(INT64_MIN, "EUR") - Money(1, "EUR")
    with pytest.raises(OverflowError):
        _ = -Money(INT64_MIN, "EUR")


def test_minor_unit_exponents() -> None:
    assert minor_unit_exponent("EUR") == 2
    assert minor_unit_exponent("USD") == 2
    assert minor_unit_exponent("JPY") == 0
    assert minor_unit_exponent("KRW") == 0
    assert minor_unit_exponent("BHD") == 3
    assert minor_unit_exponent("TND") == 3


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        (1_234, "EUR", "12.34 EUR"),
        (5, "EUR", "0.05 EUR"),
        (50, "EUR", "0.50 EUR"),
        (0, "EUR", "0.00 EUR"),
        (100, "GBP", "1.00 GBP"),
        (-1_234, "EUR", "-12.34 EUR"),
        (-5, "EUR", "-0.05 EUR"),
        (123_456_789, "USD", "1234567.89 USD"),
        (1_234, "JPY", "1234 JPY"),
        (0, "JPY", "0 JPY"),
        (-7, "JPY", "-7 JPY"),
        (1_234, "BHD", "1.234 BHD"),
        (5, "KWD", "0.005 KWD"),
        (-5, "KWD", "-0.005 KWD"),
        (-1_000, "OMR", "-1.000 OMR"),
        (INT64_MIN, "EUR", "-92233720368547758.08 EUR"),
    ],
)
def test_format(amount: int, currency: str, text: str) -> None:
    assert Money(amount, currency).format() == text


def _parse(text: str) -> Money:
    number, currency = text.split(" ")
    value = Decimal(number).scaleb(minor_unit_exponent(currency))
    assert value == value.to_integral_value()
    return Money(int(value), currency)


@given(a=int64, b=int64, currency=currencies)
def test_add_sub_round_trip(a: int, b: int, currency: str) -> None:
    x, y = Money(a, currency), Money(b, currency)
    try:
        total = x + y
    except OverflowError:
        assert not INT64_MIN <= a + b <= INT64_MAX
        return
    assert total.amount == a + b
    assert total - y == x
    assert total - x == y


@given(a=int64, currency=currencies)
def test_negation_is_subtraction_from_zero(a: int, currency: str) -> None:
    if a == INT64_MIN:
        return
    assert -Money(a, currency) == Money(0, currency) - Money(a, currency)


@given(a=int64, currency=currencies)
def test_format_parses_back(a: int, currency: str) -> None:
    text = Money(a, currency).format()
    exp = minor_unit_exponent(currency)
    number, code = text.split(" ")
    assert code == currency
    assert ("." in number) == (exp > 0)
    if exp:
        assert len(number.split(".")[1]) == exp
    assert "e" not in number.lower()
    assert _parse(text) == Money(a, currency)
