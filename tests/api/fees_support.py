"""Helpers shared by the fee-charge and ledger-concurrency tests: charge a fee, read balances,
and read the ledger rows (postings, revenue) that the public API does not show."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import func, select

from multibank.kernel.db import Database
from multibank.ledger.models import LedgerTransaction, Posting
from multibank.ledger.service import revenue_balance
from tests.conftest import Prog
from tests.factories import Identity

FEE = "ADMIN_FEE"
PORTAL = "/portal/api/programmes"


def fee_body(
    account_id: str, fee_type: str = FEE, kind: str = "managed_accounts"
) -> dict[str, Any]:
    return {"feeType": fee_type, "source": {"type": kind, "id": account_id}}


async def charge(
    client: httpx.AsyncClient,
    ident: Identity,
    account_id: str,
    base: str = "/multi",
    *,
    fee_type: str = FEE,
    ref: str | None = None,
    token: str | None = None,
    kind: str | None = None,
    body: dict[str, Any] | None = None,
) -> httpx.Response:
    """POST {base}/{corporates|consumers}/fees/charge as `ident` (or another of its sessions)."""
    headers = dict(ident.headers)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if ref is not None:
        headers["idempotency-ref"] = ref
    return await client.post(
        f"{base}/{kind or ident.kind}/fees/charge",
        headers=headers,
        json=fee_body(account_id, fee_type) if body is None else body,
    )


async def balances(client: httpx.AsyncClient, ident: Identity, account_id: str) -> dict[str, int]:
    r = await client.get(f"/multi/managed_accounts/{account_id}", headers=ident.headers)
    assert r.status_code == 200, r.text
    result: dict[str, int] = r.json()["balances"]
    return result


async def available(client: httpx.AsyncClient, ident: Identity, account_id: str) -> int:
    b = await balances(client, ident, account_id)
    assert b["availableBalance"] == b["actualBalance"], b
    return b["availableBalance"]


async def ledger_ok(client: httpx.AsyncClient, admin_headers: dict[str, str], p: Prog) -> None:
    r = await client.get(f"{PORTAL}/{p.id}/ledger/verify", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "violations": []}


async def revenue(db: Database, p: Prog, currency: str = "EUR") -> int:
    """The programme's revenue balance in `currency` (0 before its first fee), over its shards."""
    async with db.transaction() as s:
        available, actual = await revenue_balance(s, int(p.id), currency)
    assert available == actual, (available, actual)
    return available


async def account_postings(
    db: Database, account_id: str, moved_only: bool = True
) -> list[tuple[str, int, int, int, int]]:
    """(transaction type, available amount, actual amount, available after, actual after) of
    every posting on the account; with `moved_only`, of those that moved money (account creation
    posts a zero entry)."""
    async with db.transaction() as s:
        rows = (
            await s.execute(
                select(
                    LedgerTransaction.type,
                    Posting.available_amount,
                    Posting.actual_amount,
                    Posting.available_after,
                    Posting.actual_after,
                )
                .join(LedgerTransaction, LedgerTransaction.id == Posting.transaction_id)
                .where(Posting.account_id == int(account_id))
            )
        ).all()
    return [
        (str(t), int(a), int(b), int(c), int(d))
        for t, a, b, c, d in rows
        if a or b or not moved_only
    ]


async def fee_count(db: Database, account_id: str) -> int:
    async with db.transaction() as s:
        n = (
            await s.execute(
                select(func.count())
                .select_from(Posting)
                .join(LedgerTransaction, LedgerTransaction.id == Posting.transaction_id)
                .where(
                    Posting.account_id == int(account_id), LedgerTransaction.type == "CHARGE_FEE"
                )
            )
        ).scalar_one()
    return int(n)
