"""The sandbox provider page at `/kyc/{reference}`: what the embedded provider UI would be, for a
tester to move a KYB/KYC to review, approval or rejection by hand (D8)."""

from __future__ import annotations

import html
from typing import Annotated

from fastapi import Depends, Form, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from multibank.api.deps import AppContainer, Db
from multibank.api.routing import UnitOfWorkRouter
from multibank.identities import repository as identities_repo
from multibank.identities import service as identities
from multibank.identities.models import Identity
from multibank.kernel.errors import NotFound
from multibank.programmes.context import Ctx
from multibank.programmes.repository import get_programme
from multibank.users import repository as users_repo
from multibank.users.models import User

router = UnitOfWorkRouter(include_in_schema=False)
Reference = Annotated[str, Path(pattern=r"^[0-9]{1,30}$")]
OUTCOMES = {
    "review": "PENDING_REVIEW",
    "approve": "APPROVED",
    "reject": "REJECTED",
    "reject_permanently": "REJECTED",
}


async def subject(db: Db, reference: Reference) -> Identity | User:
    """The identity or user the reference belongs to, in a sandbox programme only."""
    found: Identity | User | None = await identities_repo.by_reference(db, reference)
    if found is None:
        found = await users_repo.by_kyc_reference(db, reference)
    if found is None:
        raise NotFound("Unknown reference")
    programme = await get_programme(db, found.programme_id)
    if programme is None or programme.mode != "sandbox":
        raise NotFound("Unknown reference")
    return found


Subject = Annotated[Identity | User, Depends(subject)]


def _describe(found: Identity | User) -> tuple[str, str, str]:
    if isinstance(found, User):
        return (
            "KYC (user)",
            f"{found.name} {found.surname} &lt;{html.escape(found.email)}&gt;",
            (found.kyc_status),
        )
    kind = "KYB" if found.type == "CORPORATE" else "KYC"
    name = html.escape((found.company or {}).get("name", "")) if found.company else ""
    return kind, name or f"consumer {found.id}", found.dd_status


@router.get("/kyc/{reference}", response_class=HTMLResponse)
async def page(reference: Reference, found: Subject) -> HTMLResponse:
    kind, who, status = _describe(found)
    buttons = "".join(
        f'<button name="outcome" value="{v}">{v.replace("_", " ").capitalize()}</button> '
        for v in OUTCOMES
    )
    body = f"""<!doctype html><html><head><meta charset="utf-8">
<title>multibank sandbox {kind}</title>
<style>body{{font-family:sans-serif;max-width:40em;margin:3em auto}}button{{margin:.3em}}</style>
</head><body><h1>Sandbox {kind} provider</h1>
<p>Reference <code>{html.escape(reference)}</code> for {who}.</p>
<p>Status: <strong id="status">{html.escape(status)}</strong></p>
<form method="post" action="/kyc/{html.escape(reference)}">{buttons}</form>
<p>This page stands in for the provider's embedded UI. Nothing is checked.</p>
</body></html>"""
    return HTMLResponse(body)


@router.post("/kyc/{reference}")
async def decide(
    request: Request,
    reference: Reference,
    found: Subject,
    outcome: Annotated[str, Form(pattern="^(review|approve|reject|reject_permanently)$")],
    db: Db,
    container: AppContainer,
) -> Response:
    status = OUTCOMES[outcome]
    if isinstance(found, User):
        found.kyc_status = status
    else:
        programme = await get_programme(db, found.programme_id)
        assert programme is not None  # `subject` found it
        ctx = Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))
        await identities.decide(ctx, found, status, permanent=outcome == "reject_permanently")
    return RedirectResponse(f"/kyc/{reference}", status_code=303)
