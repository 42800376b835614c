"""What a form sent, in plain words when it cannot be used (decision 0071): whole numbers, amounts
typed as the portal writes them, a webhook URL in the ASCII form the API stores. A value none of
these can take is `Refused`, which `actions.act` says on the page the form came from."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

import idna

from multibank.kernel.money import minor_unit_exponent
from multibank.portal import overview


class Refused(Exception):
    """A form's value the action cannot take, said in plain words; nothing changed. `code`: the
    API's errorCode of the same refusal, if it has one."""

    def __init__(self, text: str, code: str | None = None) -> None:
        super().__init__(text)
        self.code = code


WHOLE = re.compile(r"-?[0-9]{1,30}")  # ASCII digits only: int() alone takes "1_0" and "١٢"


def whole(raw: str | None, what: str) -> int:
    """A whole number typed in a form, as the API's JSON integers are: ASCII digits, an optional
    minus; anything else is refused in plain words."""
    text = (raw or "").strip()
    if not WHOLE.fullmatch(text):
        raise Refused(f"{what} must be a whole number written with the digits 0-9.")
    return int(text)


# An amount as the portal shows it: ASCII digits, optional thousands commas, a point and decimals.
MAJOR = re.compile(r"(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,20})(?:\.([0-9]{1,20}))?")
# A bigger amount than any column holds: the bounds are clamped to it, so no input overflows SQL.
MOST_MINOR = 2**63 - 1


def major_amount(raw: str | None, currency: str, what: str) -> int:
    """An amount typed as the portal writes amounts (decision 0071): major units of `currency`
    with at most its own number of decimals (12.50 EUR, 1,250 JPY), returned in minor units;
    anything else is refused in plain words. An unknown currency counts two decimals (the
    service then refuses the currency itself)."""
    exponent = minor_unit_exponent(currency)
    # Written as the portal writes every amount (`common.money` is `overview.amount` too).
    example = overview.amount(1250 * 10**exponent // 100 if exponent else 1250, currency)
    text = (raw or "").strip().replace(" ", "")
    match = MAJOR.fullmatch(text)
    if match is None:
        raise Refused(
            f"{what} must be written in {currency} with the digits 0-9, such as "
            f"{example.removesuffix(' ' + currency)}."
        )
    sign, whole_part, decimals = match.groups()
    decimals = decimals or ""
    if len(decimals) > exponent:
        places = f"{exponent} decimals" if exponent else "no decimals"
        raise Refused(f"{what} has more decimals than {currency} has ({places}).")
    minor: int = int(whole_part.replace(",", "")) * 10**exponent
    minor += int(decimals.ljust(exponent, "0") or "0")
    if minor > MOST_MINOR:
        raise Refused(f"{what} is more than any account can hold.")
    return -minor if sign else minor


def field_amount(minor: int, currency: str) -> str:
    """An amount as a money field shows it: major units, the currency's decimals, no
    thousands separators or currency (what the operator edits)."""
    exponent = minor_unit_exponent(currency)
    sign = "-" if minor < 0 else ""
    whole_part, fraction = divmod(abs(minor), 10**exponent)
    return sign + str(whole_part) + (f".{fraction:0{exponent}d}" if exponent else "")


WEBHOOK_URL_LONGEST = 2000  # the API's limit (programmes/schemas.py WebhookUrl)


def webhook_url_ascii(raw: str) -> str | None:
    """The webhook URL as typed in the form, in the ASCII form the API stores (decision 0071):
    an international host name in its IDNA (punycode) form, other characters of the path and
    query percent-encoded; empty: no URL. A URL that cannot be one is refused with the reason."""
    text = raw.strip()
    if not text:
        return None
    if any(c.isspace() or not c.isprintable() for c in text):
        raise Refused("The webhook URL contains a space or an invisible character: remove it.")
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not text.lower().startswith(
        f"{parts.scheme.lower()}://"
    ):
        raise Refused(
            f"The webhook URL must start with http:// or https:// (it starts with “{text[:12]}”)."
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise Refused(f"The webhook URL's port is not a number from 0 to 65535 ({exc}).") from exc
    userinfo, _, host = parts.netloc.rpartition("@")
    host = host if port is None else host.rpartition(":")[0]
    if not host:
        raise Refused("The webhook URL has no host name after its “//”.")
    if not host.isascii():  # an ASCII host (an IP address, `localhost`) is kept as typed
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise Refused(
                f"The webhook URL's host name “{host}” is not a valid name: {exc}."
            ) from exc
    netloc = (f"{quote(userinfo, safe=':%')}@" if userinfo else "") + host
    if port is not None:
        netloc += f":{port}"
    safe = "/%:@!$&'()*+,;=-._~?#[]"
    path = quote(parts.path, safe=safe)
    query = quote(parts.query, safe=safe)
    fragment = quote(parts.fragment, safe=safe)
    url = urlunsplit((parts.scheme.lower(), netloc, path, query, fragment))
    if len(url) > WEBHOOK_URL_LONGEST:
        raise Refused(
            f"The webhook URL is {len(url):,} characters long in its ASCII form; "
            f"at most {WEBHOOK_URL_LONGEST:,} are allowed."
        )
    return url
