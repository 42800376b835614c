"""Business-rule checks on values that are well-formed but may still be refused (409)."""

from __future__ import annotations

import re

import pycountry

_COUNTRY_CODE = re.compile(r"^\+?[0-9]{1,4}$")


def is_country(code: str | None) -> bool:
    return code is not None and pycountry.countries.get(alpha_2=code) is not None


def is_mobile_country_code(code: str) -> bool:
    """An international dialling prefix such as `+44` (the `+` may be left out)."""
    return bool(_COUNTRY_CODE.match(code)) and code.lstrip("+")[0] != "0"


def parse_id(value: str) -> int | None:
    """A digits-only wire id as an int64, or None when it cannot name any row."""
    # `isdigit` admits other scripts' digits ("٣"), and int() of more than 4300 digits raises:
    # only ASCII digits, and at most 19 of them (an int64), can name a row.
    if not (value.isascii() and value.isdigit()) or len(value.lstrip("0")) > 19:
        return None
    number = int(value)
    return number if 0 < number < 2**63 else None
