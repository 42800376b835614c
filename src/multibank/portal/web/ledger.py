"""A programme's ledger: its transactions newest first, each with its postings on accounts named
as the other pages name them, and what `ledger verify` finds wrong in the programme's books."""

from __future__ import annotations

from fastapi import Request, Response
from sqlalchemy import select

from multibank.api.routing import container_of
from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting
from multibank.portal import payment_detail
from multibank.portal.web.actions import show
from multibank.portal.web.common import PAGE, Offset, db_of, open_programme, portal_router
from multibank.reconciliation import verify_alone

pages = portal_router()


@pages.get("/programmes/{programme_id}/ledger")
async def ledger_page(request: Request, programme_id: str, offset: Offset = 0) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    txs = list(
        (
            await db.execute(
                select(LedgerTransaction)
                .where(LedgerTransaction.programme_id == programme.id)
                .order_by(LedgerTransaction.created_at.desc(), LedgerTransaction.id.desc())
                .offset(offset)
                .limit(PAGE + 1)
            )
        ).scalars()
    )
    more, txs = len(txs) > PAGE, txs[:PAGE]
    postings: dict[int, list[Posting]] = {t.id: [] for t in txs}
    if txs:
        rows = await db.execute(
            select(Posting).where(Posting.transaction_id.in_(list(postings))).order_by(Posting.id)
        )
        for p in rows.scalars():
            postings[p.transaction_id].append(p)
    account_ids = {p.account_id for ps in postings.values() for p in ps}
    kinds = {}
    if account_ids:
        found = await db.execute(
            select(LedgerAccount.id, LedgerAccount.kind).where(
                LedgerAccount.id.in_(list(account_ids))
            )
        )
        kinds = {i: k.lower().replace("_", " ") for i, k in found.all()}
    names = await payment_detail.instrument_names(db, programme.id, account_ids)
    return await show(
        request,
        signed,
        "ledger.html",
        title="Ledger",
        programme=programme,
        violations=await verify_alone(container_of(request).db, programme.id),
        transactions=[(t, postings[t.id]) for t in txs],
        kinds=kinds,
        names=names,
        offset=offset,
        limit=PAGE,
        more=more,
    )
