"""Which pages of accounts are the unfiltered page (its prepared statement) and which are not."""

from __future__ import annotations

import dataclasses

import pytest

from multibank.accounts.repository import Filters

SET = {
    "profile_id": 1,
    "friendly_name": "x",
    "states": ("ACTIVE",),
    "blocked_reasons": ["USER"],
    "destroyed_reasons": ("LOST",),
    "currency": "EUR",
    "created_from": 0,
    "created_to": 0,
    "tag": "t",
}


def test_every_field_is_covered() -> None:
    assert set(SET) == {f.name for f in dataclasses.fields(Filters)}


@pytest.mark.parametrize("name", sorted(SET))
def test_any_one_filter_set_is_not_the_unfiltered_page(name: str) -> None:
    assert not Filters(**{name: SET[name]}).empty()


def test_no_filter_is_the_unfiltered_page_whether_sequences_are_tuples_or_lists() -> None:
    assert Filters().empty()
    assert Filters(states=[], blocked_reasons=[], destroyed_reasons=()).empty()
