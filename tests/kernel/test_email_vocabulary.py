"""`kernel.vocabulary.Email` is pydantic's `EmailStr` with its checks remembered (decision
0025): for any input, the first and the remembered answer are `EmailStr`'s own, value or
error alike."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import EmailStr, TypeAdapter, ValidationError

from multibank.kernel.vocabulary import EMAIL_RULES, Email

OURS, PYDANTIC = TypeAdapter(Email), TypeAdapter(EmailStr)


def answer(adapter: TypeAdapter[Any], value: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as e:
        return e.errors(include_url=False)


SAMPLES = [
    "Bench@Example.com",
    " spaced@example.com ",
    "John Smith <john@example.org>",
    "ü@exämple.de",
    "no-at-sign",
    "a@b",
    "two@@example.com",
    "x" * 300 + "@example.com",
    "",
]
addresses = st.one_of(
    st.sampled_from(SAMPLES),
    st.emails().map(str),
    st.text(max_size=40),
    st.builds(lambda a, b: f"{a}@{b}", st.text(max_size=12), st.text(max_size=12)),
)


@settings(max_examples=300, deadline=None)
@given(addresses)
def test_email_answers_as_emailstr_first_time_and_remembered(value: str) -> None:
    expected = answer(PYDANTIC, value)
    assert answer(OURS, value) == expected
    assert answer(OURS, value) == expected  # remembered (or refused again)


def test_the_json_schema_is_emailstrs_with_its_rules_said() -> None:
    """`EmailStr`'s schema, saying what it refuses beyond the syntax (issue 32): a description
    must not under-declare a rule the server enforces."""
    assert PYDANTIC.json_schema() == {"format": "email", "type": "string"}
    assert OURS.json_schema() == {**PYDANTIC.json_schema(), "description": EMAIL_RULES}
    assert "`.test`" in EMAIL_RULES and "`.localhost`" in EMAIL_RULES
