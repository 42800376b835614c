"""The spend rules every level has (cards.md §4.1, D22), and the card profile's level, which
the operator sets on a programme's card profile: a programme setting, so here, below the card
slice, whose card level adds to these rules (`cards.schemas.CardLevelSpendRules`) and which
applies them all (`cards.spend_rules`). Lists hold at most 50 items; null items are ignored."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints

from multibank.kernel.vocabulary import Country, Wire

MerchantValue = Annotated[str, StringConstraints(min_length=1, max_length=100)]
MerchantList = Annotated[list[MerchantValue | None], Field(max_length=50)]
CountryList = Annotated[list[Country | None], Field(max_length=50)]


class CommonLevelSpendRules(Wire):
    """`CommonLevelSpendRules` (cards.md §4.1): what every level has, the card profile's level
    (set by the operator, D22) being only these."""

    allowedMerchantCategories: MerchantList | None = None
    blockedMerchantCategories: MerchantList | None = None
    allowedMerchantIds: MerchantList | None = None
    blockedMerchantIds: MerchantList | None = None
    allowedMerchantCountries: CountryList | None = None
    blockedMerchantCountries: CountryList | None = None
    allowContactless: bool | None = None
    allowAtm: bool | None = None
    allowECommerce: bool | None = None
    allowCashback: bool | None = None
    allowCreditAuthorisations: bool | None = None

    def stored(self) -> dict[str, Any]:
        """The rules as stored: null values and null list items dropped, and a list left
        empty by that dropped too (no rule)."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump(exclude_none=True).items():
            if isinstance(value, list):
                value = [item for item in value if item is not None]
                if not value:
                    continue
            out[name] = value
        return out


class ProfileSpendRules(CommonLevelSpendRules):
    """The card profile's level as the operator sets it (D22): the common rules, validated as a
    card's are; an unknown field is a 400 (an operator request), never silently dropped."""

    model_config = ConfigDict(extra="forbid", strict=True)
