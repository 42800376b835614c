"""Version 3.29.1 (also served as the latest at /multi): one router per interface tag."""

from __future__ import annotations

from fastapi import APIRouter

from multibank.api.v3_29 import (
    access,
    card_assign,
    card_statements,
    consumers,
    corporates,
    factors,
    fees,
    managed_accounts,
    managed_cards,
    outgoing_wire_transfers,
    passwords,
    physical_cards,
    sends,
    statements,
    stepup,
    transfers,
    users,
)

ROUTERS: list[APIRouter] = [
    access.router,
    stepup.router,
    passwords.router,
    factors.router,
    corporates.router,
    consumers.router,
    users.router,
    managed_accounts.router,
    card_assign.router,  # before managed_cards: /managed_cards/assign is not a card id
    managed_cards.router,
    card_statements.router,
    physical_cards.router,
    statements.router,
    fees.router,
    transfers.router,
    sends.router,
    outgoing_wire_transfers.router,
]
