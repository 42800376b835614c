"""Request bodies (`kernel.wire.StrictBody`): integral numbers are integers however written, and
text that could not be stored is refused, however deep in the body it is (decision 0029: each
nested body checks its own text once, and a body without floats is not rebuilt)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from multibank.kernel.wire import PLAIN_BODY, StrictBody, plain_json, storable


class Leaf(StrictBody):
    note: str
    amount: int = 0


class Plain(BaseModel):
    text: str


class Body(StrictBody):
    name: str
    leaf: Leaf
    leaves: list[Leaf] = Field(default_factory=list)
    plain: Plain | None = None
    extra: dict[str, str] = Field(default_factory=dict)


def body(**over: Any) -> dict[str, Any]:
    return {"name": "n", "leaf": {"note": "x", "amount": 1}, **over}


@pytest.mark.parametrize(
    "bad",
    [
        body(name="a\u0000b"),
        body(leaf={"note": "a\u0000b"}),
        body(leaves=[{"note": "ok"}, {"note": "\ud800"}]),
        body(plain={"text": "a\u0000"}),  # a model that is not a StrictBody: walked into
        body(extra={"k": "a\u0000"}),
        body(extra={"k\u0000": "v"}),
    ],
)
def test_text_that_could_not_be_stored_is_refused_at_any_depth(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="NUL or unpaired surrogate"):
        Body.model_validate(bad)


def test_integral_numbers_are_integers_at_any_depth_and_other_floats_are_refused() -> None:
    parsed = Body.model_validate(
        json.loads(
            '{"name": "n", "leaf": {"note": "x", "amount": 5.0}, '
            '"leaves": [{"note": "y", "amount": 2e2}]}'
        )
    )
    assert (parsed.leaf.amount, parsed.leaves[0].amount) == (5, 200)
    assert type(parsed.leaf.amount) is int
    with pytest.raises(ValidationError):
        Body.model_validate(body(leaf={"note": "x", "amount": 5.5}))
    with pytest.raises(ValidationError):
        Body.model_validate(body(leaf={"note": "x", "amount": "5"}))  # strict: not a string


def test_a_body_without_floats_is_validated_as_sent() -> None:
    sent = body(leaves=[{"note": "y"}], extra={"a": "b"})
    parsed = Body.model_validate(sent)
    assert parsed.model_dump(exclude={"plain"}) == {
        "name": "n",
        "leaf": {"note": "x", "amount": 1},
        "leaves": [{"note": "y", "amount": 0}],
        "extra": {"a": "b"},
    }


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _floats_and_texts(value: Any) -> tuple[list[float], list[str]]:
    floats: list[float] = []
    texts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, float):
            floats.append(v)
        elif isinstance(v, str):
            texts.append(v)
        elif isinstance(v, dict):
            for k, w in v.items():
                texts.append(k)
                walk(w)
        elif isinstance(v, list):
            for w in v:
                walk(w)

    walk(value)
    return floats, texts


@given(JSON_VALUES, st.booleans())
def test_plain_json_text_holds_no_float_and_no_text_that_could_not_be_stored(
    value: Any, ascii_only: bool
) -> None:
    """What lets a request body skip `StrictBody`'s walks (decision 0033): the JSON text itself
    says the walks would find nothing."""
    text = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if plain_json(text):
        floats, texts = _floats_and_texts(json.loads(text))
        assert floats == [] and all(storable(t) for t in texts)


@pytest.mark.parametrize(
    "text",
    [
        b'{"name": "a\\u0000b"}',  # NUL, written as JSON must write it
        b'{"name": "\\ud800"}',  # a lone surrogate
        b'{"name": "\xed\xa0\x80"}',  # one encoded in the bytes (`surrogatepass` reads it)
        b'{"amount": 5.0}',
        b'{"amount": 2e2}',
        b'{"amount": 2E2}',
        '{"amount": 5.0}'.encode("utf-16-le"),  # JSON in UTF-16 (json.loads reads it too)
    ],
)
def test_text_that_may_hold_a_float_or_unstorable_text_is_not_plain(text: bytes) -> None:
    assert not plain_json(text)


def test_a_plain_body_is_validated_as_sent() -> None:
    """Under `PLAIN_BODY` (set only for text that passed `plain_json`) a body is what it would
    have been without: the walks it skips change nothing in such a body."""
    sent = body(leaves=[{"note": "y", "amount": 3}], extra={"a": "b"})
    text = json.dumps(sent).encode()
    assert plain_json(text)
    checked = PLAIN_BODY.set(True)
    try:
        fast = Body.model_validate(json.loads(text))
    finally:
        PLAIN_BODY.reset(checked)
    assert fast == Body.model_validate(sent)
