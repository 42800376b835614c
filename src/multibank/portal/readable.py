"""What the portal says when it refuses something, in plain words (issue 35 §5, decision 0058).

One mapping from the API's `errorCode` to a sentence that says what happened and what to do
next (`sentence`), one from a model's validation errors to the same kind of sentence
(`validation_sentence`); the page shows the sentence, and the code in small print after it for
whoever reads the API's documentation or logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from multibank.kernel.errors import DomainError

# errorCode → what it means for the operator and what to do next.
SENTENCES: dict[str, str] = {
    "PROGRAMME_NAME_NOT_UNIQUE": (
        "A programme of that name exists already: choose another name, or open the existing "
        "programme from the list."
    ),
    "WEBHOOK_URL_NOT_ALLOWED": (
        "That webhook URL is not allowed: a live programme's events may not go to a loopback, "
        "link-local or private address. Give a public URL (or start the server with "
        "MULTIBANK_WEBHOOKS_ALLOW_PRIVATE=true while testing)."
    ),
    "WEBHOOK_SECRET_IS_API_KEY": (
        "A sandbox programme signs its webhook events with its API key, so it has no separate "
        "secret to replace: create or revoke API keys instead."
    ),
    "PROFILE_HAS_NO_FEES": (
        "Only payment profiles (transfers, sends, outgoing wire transfers) have fees: choose "
        "one of those."
    ),
    "CURRENCY_NOT_SUPPORTED_BY_PROFILE": (
        "That currency is not one of the profile's: add it to the profile's currencies first "
        "(Profiles, above), then set its fee."
    ),
    "PROFILE_HAS_NO_RETURN_FEE": (
        "Only the outgoing wire transfer profile can give a returned transfer's fee back."
    ),
    "PROFILE_HAS_NO_SPEND_RULES": "Only card profiles have spend rules.",
    "PROFILE_NOT_FOUND": "The programme has no such profile: reload the page and try again.",
    "PROFILE_INACTIVE": "That profile is switched off: set it active first (Profiles).",
    "FEE_TYPE_ALREADY_EXISTS": (
        "A fee type of that name exists already: change its amounts with the form instead."
    ),
    "FEE_GROUP_INVALID": (
        "No fee type defines that fee group: use DEFAULT, or add the group to a fee type first."
    ),
    "CLOCK_LIMIT_REACHED": (
        "The sandbox clock cannot run more than 100 years ahead of real time: advance it by "
        "fewer seconds."
    ),
    "IBAN_NOT_PENDING": (
        "This account is not waiting for an IBAN (it never asked for one, or has one "
        "already): there is nothing to allocate. Reload the page to see its IBAN state."
    ),
    "INSTRUMENT_ALREADY_BLOCKED": (
        "It is blocked already: unblock it first if the block should change."
    ),
    "INSTRUMENT_NOT_BLOCKED": "It is not blocked: there is nothing to unblock.",
    "INSTRUMENT_DESTROYED": "It has been destroyed: it can no longer be blocked or unblocked.",
    "INSTRUMENT_INACTIVE": (
        "It is not active (not yet activated, or closed): it cannot be changed this way."
    ),
    "INSTRUMENT_MARKED_LOST_STOLEN": "The card is reported lost or stolen: it stays blocked.",
    "DENIED_AMOUNT_NOT_POSITIVE": (
        "The amount must be more than zero: type a positive number of minor units."
    ),
    "DENIED_ACCOUNT_INACTIVE": (
        "The account is not active (blocked or closed): unblock it before depositing."
    ),
    "DENIED_CURRENCY_NOT_ACCOUNT_CURRENCY": "A deposit must be in the account's own currency.",
    "DENIED_ACCOUNT_NOT_UPGRADED_TO_IBAN": (
        "The account has no IBAN yet, and money from a bank needs one: allocate its IBAN first."
    ),
    "DENIED_ACCOUNT_NOT_FOUND": "The account was not found: reload the customer's page.",
    "DENIED_OTHER": (
        "The deposit was refused (the account's balance would pass the largest amount it can "
        "hold): deposit less."
    ),
    "DENIED_WIRE_TRANSFER_ALREADY_COMPLETED": (
        "The wire transfer has completed already: it can no longer be settled or rejected."
    ),
    "DENIED": (
        "The wire transfer is no longer waiting for the bank: reload the payments page to see "
        "its state."
    ),
    "KYB_PERMANENTLY_REJECTED": "This company's KYB was rejected for good: it cannot be approved.",
    "KYC_REJECTED": "This person's KYC was rejected: it cannot be approved now.",
    "EMAIL_UNVERIFIED": (
        "The customer's root user has not verified their e-mail address yet: due diligence "
        "starts after that."
    ),
    "ALREADY_VERIFIED": "It is verified already: nothing to do.",
    "NOT_FOUND": "It was not found (removed, or the link is wrong): reload the page and try again.",
}
DEFAULT_SENTENCE = (
    "The action was refused and nothing changed: check the values, reload the page and try "
    "again. The code after this message says why."
)


def sentence(code: str | None, message: str | None = None) -> str:
    """The plain-words sentence for an API errorCode; the default for a code it does not know.
    A `NOT_FOUND` with a message says what was not found; a refused webhook URL says why."""
    if code == "NOT_FOUND" and message:
        return f"Not found: {message}. Reload the page and try again."
    if code == "WEBHOOK_URL_NOT_ALLOWED" and message:
        # The check's own reason (it does not resolve, or resolves to a private address).
        return (
            f"That webhook URL is not allowed: {message}. A live programme's events go only to "
            "public addresses (start the server with MULTIBANK_WEBHOOKS_ALLOW_PRIVATE=true "
            "while testing)."
        )
    return SENTENCES.get(code or "", DEFAULT_SENTENCE)


def refusal(exc: DomainError) -> tuple[str, str]:
    """A service's refusal as (sentence, errorCode)."""
    body = exc.body() or {}
    code = str(body.get("errorCode") or body.get("code") or type(exc).__name__)
    message = body.get("message")
    return sentence(code, str(message) if message else None), code


# Names of form fields as the forms' labels say them.
FIELD_NAMES: dict[str, str] = {
    "name": "The name",
    "mode": "The mode",
    "currencies": "Currencies",
    "label": "The label",
    "stepUpRequired": "Step-up required",
    "failedLoginLimit": "Wrong passwords before lock-out",
    "ibanAllocationDelaySeconds": "IBAN allocation delay",
    "passwordExpiryDays": "Password expiry",
    "sendsScaRequired": "SCA for sends",
    "owtScaRequired": "SCA for wire transfers",
    "scaChallengeLimit": "Wrong codes per challenge",
    "lowValueExemptionMaxAmount": "Exempt amount per payment",
    "lowValueExemptionMaxCount": "Exempt payments in a row",
    "lowValueExemptionMaxTotal": "Exempt total since the last SCA",
    "owtProcessingDelaySeconds": "Wire transfer processing delay",
    "webhookUrl": "The webhook URL",
    "seconds": "The number of seconds",
    "purchase": "The purchase fee",
    "refund": "The refund fee",
    "atmWithdrawal": "The ATM withdrawal fee",
    "active": "Active",
    "fees": "The fee",
}
# Pattern-checked fields: what the pattern asks for, in words (never the pattern itself).
PATTERN_WORDS: dict[str, str] = {
    "name": "may hold only letters, digits, '.', '_' and '-' (1 to 100 of them, no spaces)",
    "webhookUrl": "must start with http:// or https:// and hold no spaces",
    "currencies": "must be three capital letters of an ISO 4217 currency, such as EUR",
}


def _field(loc: Sequence[int | str]) -> tuple[str, str]:
    """(the field's wire name, its name in words) for an error's location."""
    names = [str(p) for p in loc if isinstance(p, str)]
    for name in names:
        if name in FIELD_NAMES:
            return name, FIELD_NAMES[name]
    wire = names[0] if names else "value"
    return wire, f"The value {wire}"


def _phrase(error: Mapping[str, Any], wire: str) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        return PATTERN_WORDS.get(wire, "is not written as this form expects")
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return f"must be at least {bound:,}" if isinstance(bound, int) else "is too small"
    if kind in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        return f"must be at most {bound:,}" if isinstance(bound, int) else "is too large"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be a whole number written with the digits 0-9"
    if kind in ("bool_type", "bool_parsing"):
        return "must be yes or no"
    if kind == "literal_error":
        return f"must be one of: {ctx.get('expected', 'the listed values')}"
    if kind in ("too_short", "missing"):
        return "must not be empty"
    if kind == "string_too_long":
        return f"may be at most {ctx.get('max_length', 'a few'):,} characters long"
    if kind == "extra_forbidden":
        return "is not one of this form's choices: choose one from its list"
    if kind == "value_error":
        return str(error.get("msg", "")).removeprefix("Value error, ") or "is not valid"
    return "is not valid"


def validation_sentence(exc: ValidationError) -> tuple[str, str]:
    """A model's refusal as (sentence, the fields' wire names for the small print)."""
    said: list[str] = []
    wires: list[str] = []
    for error in exc.errors():
        wire, words = _field(error["loc"])
        line = f"{words} {_phrase(error, wire)}"
        if line not in said:
            said.append(line)
        wires.append(".".join(str(part) for part in error["loc"]) or wire)
    text = "; ".join(said)
    return f"{text[0].upper()}{text[1:]}. Correct it and send the form again."[:600], (
        "invalid: " + ", ".join(dict.fromkeys(wires))
    )
