"""The 3.63 line's operations (v3.63.md, D34 to D46) that differ from 3.29.1's or are its own;
`api.versions.build_v3_63` serves them over the 3.29.1 operations (`api.routing.compose`)."""

from __future__ import annotations

from fastapi import APIRouter

from multibank.api.v3_63 import (
    beneficiaries,
    challenges,
    linked_accounts,
    outgoing_wire_transfers,
    sends,
    transfers,
)

OVERRIDES: list[APIRouter] = [
    transfers.router,
    sends.router,
    outgoing_wire_transfers.router,
    challenges.router,
    beneficiaries.router,
    linked_accounts.router,
]
