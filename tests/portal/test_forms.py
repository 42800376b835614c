"""The portal's form readers (issue 41 §3, decision 0071), without a server: a money field's
major units and minor units agree for every currency and amount, and a webhook URL is stored in
its ASCII form or refused with its reason."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multibank.kernel.money import ISO_4217, minor_unit_exponent
from multibank.portal.overview import amount, nice_ceiling
from multibank.portal.web import (
    MOST_MINOR,
    Refused,
    field_amount,
    major_amount,
    webhook_url_ascii,
)

CURRENCIES = sorted(ISO_4217)


@given(st.sampled_from(CURRENCIES), st.integers(min_value=-MOST_MINOR, max_value=MOST_MINOR))
def test_what_a_field_shows_reads_back_as_the_same_minor_units(currency: str, minor: int) -> None:
    assert major_amount(field_amount(minor, currency), currency, "It") == minor
    # As the pages write it too (thousands separated), less the currency.
    written = amount(minor, currency).removesuffix(f" {currency}")
    assert major_amount(written, currency, "It") == minor


@pytest.mark.parametrize(
    ("typed", "currency", "minor"),
    [
        ("12.5", "EUR", 1250),
        ("12.50", "EUR", 1250),
        ("1,234.56", "EUR", 123456),
        ("1250", "JPY", 1250),
        ("0.125", "BHD", 125),
        (" 7 ", "EUR", 700),
    ],
)
def test_major_units_are_read_in_the_currencys_decimals(
    typed: str, currency: str, minor: int
) -> None:
    assert major_amount(typed, currency, "The amount") == minor


@pytest.mark.parametrize(
    ("typed", "currency", "said"),
    [
        ("1.005", "EUR", "more decimals than EUR has (2 decimals)"),
        ("1.5", "JPY", "more decimals than JPY has (no decimals)"),
        ("1e3", "EUR", "written in EUR with the digits 0-9"),
        ("1,00", "EUR", "written in EUR"),
        ("\u0661\u0662", "EUR", "written in EUR"),
        ("", "EUR", "written in EUR"),
        ("99999999999999999999", "EUR", "more than any account can hold"),
    ],
)
def test_what_is_not_an_amount_is_refused_in_words(typed: str, currency: str, said: str) -> None:
    with pytest.raises(Refused) as refused:
        major_amount(typed, currency, "The amount")
    assert said in str(refused.value)


def test_every_currency_has_an_exponent_the_script_knows() -> None:
    # portal.js counts two decimals unless the page's list says otherwise.
    assert {minor_unit_exponent(c) for c in CURRENCIES} <= {0, 2, 3}


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("https://bücher.example/hooks", "https://xn--bcher-kva.example/hooks"),
        ("http://münchen.de:8080/a?x=ü", "http://xn--mnchen-3ya.de:8080/a?x=%C3%BC"),
        ("HTTPS://Example.COM/X", "https://Example.COM/X"),
        ("http://127.0.0.1:9/hooks", "http://127.0.0.1:9/hooks"),
        ("https://[::1]:9/x", "https://[::1]:9/x"),
        ("https://user:pw@hooks.example/", "https://user:pw@hooks.example/"),
        ("", None),
    ],
)
def test_a_webhook_url_is_stored_in_its_ascii_form(typed: str, stored: str | None) -> None:
    assert webhook_url_ascii(typed) == stored


@given(st.integers(min_value=1, max_value=10**15))
def test_a_charts_top_is_a_round_number_at_or_above_its_largest_bar(value: int) -> None:
    top = nice_ceiling(value)
    assert value <= top < value * 5 + 1
    assert str(top).rstrip("0") in ("1", "2", "5")
