"""The SensitivePassword rules of the interface, for any string (Hypothesis)."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from multibank.access.passwords import complexity_error

ALPHABET = string.ascii_letters + string.digits + "!@#$%^&*()-_ éß漢"


def expected(value: str) -> str | None:
    if len(value) < 8:
        return "PASSWORD_TOO_SHORT"
    if len(value) > 30:
        return "PASSWORD_TOO_LONG"
    classes = (
        any(c.islower() and c.isascii() for c in value),
        any(c.isupper() and c.isascii() for c in value),
        any(c.isdigit() and c.isascii() for c in value),
        any(not (c.isascii() and c.isalnum()) for c in value),
    )
    return None if all(classes) else "PASSWORD_TOO_SIMPLE"


@given(st.text(alphabet=ALPHABET, max_size=40))
def test_rules_hold_for_any_password(value: str) -> None:
    assert complexity_error(value) == expected(value)


@given(
    st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=7),
    st.sampled_from("ABCXYZ"),
    st.sampled_from("0123456789"),
    st.sampled_from("!#%-_ "),
)
def test_a_password_with_every_class_and_8_to_30_characters_is_accepted(
    lower: str, upper: str, digit: str, special: str
) -> None:
    value = (lower + upper + digit + special).ljust(8, "a")
    assert complexity_error(value) is None
    assert complexity_error(value[:7]) == "PASSWORD_TOO_SHORT"
    assert complexity_error(value + "a" * 31) == "PASSWORD_TOO_LONG"
