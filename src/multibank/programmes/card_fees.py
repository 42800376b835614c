"""Card fees per programme and currency (D19): what a purchase, a refund and an ATM withdrawal
cost the cardholder, in minor units, charged at settlement and never below a zero balance (D23).

A programme setting, with its defaults: the card slice reads it (`card_fee`) and the programme
slice shows and sets it, without knowing cards (issue 42 §1)."""

from __future__ import annotations

from typing import Any

from multibank.programmes.models import Programme

PURCHASE, REFUND, ATM_WITHDRAWAL = "purchase", "refund", "atmWithdrawal"
KINDS = (PURCHASE, REFUND, ATM_WITHDRAWAL)
DEFAULTS = {PURCHASE: 10, REFUND: 0, ATM_WITHDRAWAL: 0}


def card_fee(programme: Programme, kind: str, currency: str) -> int:
    """The fee of `kind` in `currency`: the operator's if set, else the default."""
    stored = (programme.card_fees or {}).get(kind, {})
    return int(stored.get(currency, DEFAULTS[kind]))


def card_fees(programme: Programme, currencies: list[str]) -> dict[str, dict[str, int]]:
    """Every fee in every currency, as `programme create --json` prints them (D19, D33)."""
    return {kind: {c: card_fee(programme, kind, c) for c in currencies} for kind in KINDS}


def with_fee(programme: Programme, kind: str, currency: str, amount: int) -> dict[str, Any]:
    """The programme's card fees with one changed: assign the result to `card_fees` (a new
    object, so the ORM sees the JSON column change)."""
    if kind not in KINDS:
        raise ValueError(f"unknown card fee {kind!r}")
    if amount < 0:
        raise ValueError("a card fee is at least 0")
    fees = {k: dict(v) for k, v in (programme.card_fees or {}).items()}
    fees.setdefault(kind, {})[currency] = amount
    return fees
