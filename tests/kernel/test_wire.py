"""Request bodies (`kernel.wire.StrictBody`): integral numbers are integers however written, and
text that could not be stored is refused, however deep in the body it is (decision 0029: each
nested body checks its own text once, and a body without floats is not rebuilt)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from multibank.kernel.wire import StrictBody


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
