"""A programme's customers: the list (searched by name, e-mail or id, filtered by type and
due-diligence state), a customer's page (its users, accounts,
trusted beneficiaries and linked accounts), and in a sandbox the bank's
answer to its KYC or KYB: approved, or rejected after confirming."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.responses import RedirectResponse
from sqlalchemy import ColumnElement, Select, func, or_, select

from multibank.accounts import repository as accounts_repo
from multibank.beneficiaries import repository as beneficiaries_repo
from multibank.beneficiaries.models import Beneficiary
from multibank.identities import service as identities
from multibank.identities.models import Identity
from multibank.kernel.validation import parse_id
from multibank.kernel.vocabulary import KyiStatus
from multibank.ledger.models import LedgerAccount
from multibank.linked_accounts import repository as linked_repo
from multibank.linked_accounts.models import LinkedAccount
from multibank.portal import sessions
from multibank.portal.web.actions import Flash, act, confirm_page, confirmed, show
from multibank.portal.web.common import (
    PAGE,
    SEARCH_LONGEST,
    Offset,
    contains,
    count_rows,
    customer_name,
    db_of,
    find_programme,
    not_found,
    open_programme,
    pager,
    portal_router,
    posted_form,
    programme_ctx,
    signed_in,
    to_login,
)
from multibank.portal.web.forms import Refused
from multibank.programmes.models import Programme
from multibank.users import repository as users_repo
from multibank.users.models import ROOT, User

pages = portal_router()

# The customer page's beneficiaries and linked accounts: the newest this many, no pager (the
# page's one pager is its users'); a line says when there are more.
NEWEST = 50


CUSTOMER_TYPES = ("CORPORATE", "CONSUMER")
DD_STATES = tuple(status.value for status in KyiStatus)


def _customers_query(
    programme: Programme, q: str | None, kind: str | None, dd: str | None
) -> Select[Identity, User]:
    stmt = (
        select(Identity, User)
        .join(User, (User.identity_id == Identity.id) & (User.role == ROOT))
        .where(Identity.programme_id == programme.id)
    )
    if q and q.strip():
        like = contains(q.strip())
        # Both sides lower-cased, so the match ignores case on SQLite and PostgreSQL alike; the
        # names are those the list shows: the company's name, or "name surname" for a person.
        conditions: list[ColumnElement[bool]] = [
            User.email_key.like(like, escape="\\"),
            func.lower(User.name + " " + User.surname).like(like, escape="\\"),
            func.lower(Identity.company["name"].as_string()).like(like, escape="\\"),
        ]
        number = parse_id(q.strip())
        if number is not None:
            conditions.append(Identity.id == number)
        stmt = stmt.where(or_(*conditions))
    if kind:
        stmt = stmt.where(Identity.type == kind)
    if dd:
        stmt = stmt.where(Identity.dd_status == dd)
    return stmt


def _choice(raw: str | None, allowed: tuple[str, ...], what: str) -> tuple[str | None, str | None]:
    """A filter's chosen value (None for "any") and, when it is not one of `allowed`, the
    sentence the page shows instead of filtering."""
    if not raw:
        return None, None
    value = raw.strip().upper()
    if value in allowed:
        return value, None
    return None, f"{what} must be one of: {', '.join(a.lower() for a in allowed)}."


@pages.get("/programmes/{programme_id}/customers")
async def customers_page(
    request: Request,
    programme_id: str,
    q: str | None = None,
    kind_raw: Annotated[str | None, Query(alias="type")] = None,
    dd: str | None = None,
    offset: Offset = 0,
) -> Response:
    opened = await open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = db_of(request)
    kind, kind_error = _choice(kind_raw, CUSTOMER_TYPES, "Type")
    dd_state, dd_error = _choice(dd, DD_STATES, "Due-diligence state")
    problems = [e for e in (kind_error, dd_error) if e]
    if q and len(q) > SEARCH_LONGEST:
        problems.append(f"Search text must be at most {SEARCH_LONGEST} characters; it was ignored.")
        q = None
    stmt = _customers_query(programme, q, kind, dd_state)
    count = await count_rows(db, stmt)
    rows = (await db.execute(stmt.order_by(Identity.id.desc()).offset(offset).limit(PAGE))).all()
    customers = [
        {
            "id": identity.id,
            "type": identity.type.lower(),
            "name": customer_name(identity, root),
            "email": root.email,
            "dd": identity.dd_status,
            "created": identity.created_at,
        }
        for identity, root in rows
    ]
    return await show(
        request,
        signed,
        "customers.html",
        title="Customers",
        programme=programme,
        q=q,
        type=kind,
        dd=dd_state,
        types=CUSTOMER_TYPES,
        dd_states=DD_STATES,
        problems=problems,
        customers=customers,
        pager=pager(request, offset, PAGE, count),
    )


async def _identity(request: Request, programme: Programme, value: str) -> Identity | None:
    number = parse_id(value)
    if number is None:
        return None
    stmt = select(Identity).where(Identity.programme_id == programme.id, Identity.id == number)
    return (await db_of(request).execute(stmt)).scalar_one_or_none()


@pages.get("/programmes/{programme_id}/customers/{identity_id}")
async def customer_page(
    request: Request, programme_id: str, identity_id: str, offset: Offset = 0
) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await find_programme(request, programme_id)
    identity = None if programme is None else await _identity(request, programme, identity_id)
    if programme is None or identity is None:
        return not_found("customer")
    db = db_of(request)
    root = await users_repo.root_of(db, programme.id, identity.id)
    count, users = await users_repo.list_authorised(
        db, programme.id, identity.id, offset=offset, limit=PAGE, active=None, email=None
    )
    owned = accounts_repo.of_owner(programme.id, identity.id).order_by(LedgerAccount.id)
    rows = [(a, la) for a, la in (await db.execute(owned)).all()]
    mobile = f"{root.mobile_country_code or ''}{root.mobile_number or ''}"
    beneficiaries = await beneficiaries_repo.of_identity(db, programme.id, identity.id, NEWEST + 1)
    linked = await linked_repo.of_identity(db, programme.id, identity.id, NEWEST + 1)
    return await show(
        request,
        signed,
        "customer.html",
        title=customer_name(identity, root),
        programme=programme,
        identity=identity,
        name=customer_name(identity, root),
        root=root,
        mobile=mobile,
        users=users,
        pager=pager(request, offset, PAGE, count),
        accounts=rows,
        beneficiaries=[_beneficiary(programme, b, here) for b, here in beneficiaries[:NEWEST]],
        more_beneficiaries=len(beneficiaries) > NEWEST,
        linked_accounts=[_linked(a) for a in linked[:NEWEST]],
        more_linked=len(linked) > NEWEST,
        newest=NEWEST,
        can_approve=_approve_changes(identity, root),
        can_reject=identity.dd_status != KyiStatus.REJECTED,
    )


INSTRUMENT_PAGES = {"managed_accounts": ("accounts", "account"), "managed_cards": ("cards", "card")}


def _beneficiary(programme: Programme, b: Beneficiary, here: bool) -> dict[str, Any]:
    """A beneficiary as the customer page lists it: its name and what it pays, an instrument
    (linked to its page when it is one of the programme's) or a bank account."""
    info = b.information
    row: dict[str, Any] = {
        "b": b,
        "name": info.get("businessName") or info.get("fullName") or "",
        "url": None,
        "iban": b.iban,
        "pays": "",
    }
    if b.instrument_type is not None:
        path, noun = INSTRUMENT_PAGES.get(b.instrument_type, ("", b.instrument_type))
        row["pays"] = f"{noun} {b.instrument_id}"
        if here and path:
            row["url"] = f"/portal/programmes/{programme.id}/{path}/{b.instrument_id}"
    elif not b.iban:
        row["pays"] = f"account {b.account_number or ''}, sort code {b.sort_code or ''}"
    return row


def _linked(account: LinkedAccount) -> dict[str, Any]:
    """A linked account as the customer page lists it, with its reference: the IBAN (shown
    copyable), or the UK account number and sort code, or the account's descriptor."""
    ref = account.account_reference
    row: dict[str, Any] = {"a": account, "iban": ref.get("iban"), "reference": ""}
    if ref.get("accountNumber"):
        row["reference"] = f"account {ref['accountNumber']}, sort code {ref.get('sortCode', '')}"
    elif not row["iban"]:
        row["reference"] = str(ref.get("accountDescriptor") or "")
    return row


def _approve_changes(identity: Identity, root: User) -> bool:
    """Whether the sandbox's approval would change anything: it approves the due diligence
    and verifies the root user's e-mail and mobile (identities.simulate_verify)."""
    return not (
        identity.dd_status == KyiStatus.APPROVED and root.email_verified and root.mobile_verified
    )


async def _sandbox_identity(
    request: Request, programme_id: str, identity_id: str, posted: bool
) -> tuple[sessions.Signed, dict[str, str], Programme, Identity] | Response:
    if posted:
        signed, form, refused = await posted_form(request)
        if refused is not None or signed is None:
            return refused or to_login()
    else:
        signed, form = await signed_in(request), {}
        if signed is None:
            return to_login()
    programme = await find_programme(request, programme_id)
    identity = None if programme is None else await _identity(request, programme, identity_id)
    if programme is None or identity is None or programme.mode != "sandbox":
        return not_found("customer")
    return signed, form, programme, identity


@pages.get("/programmes/{programme_id}/customers/{identity_id}/reject")
async def customer_reject_confirm(
    request: Request, programme_id: str, identity_id: str
) -> Response:
    opened = await _sandbox_identity(request, programme_id, identity_id, posted=False)
    if isinstance(opened, Response):
        return opened
    signed, _, programme, identity = opened
    url = f"/portal/programmes/{programme.id}/customers/{identity.id}"
    check = "KYB" if identity.type == "CORPORATE" else "KYC"
    return confirm_page(
        signed,
        programme,
        f"Reject the {check} of customer {identity.id}? The customer is told it was rejected.",
        f"{url}/reject",
        f"Reject the {check}",
        url,
    )


@pages.post("/programmes/{programme_id}/customers/{identity_id}/{decision}")
async def customer_decide(
    request: Request, programme_id: str, identity_id: str, decision: str
) -> Response:
    opened = await _sandbox_identity(request, programme_id, identity_id, posted=True)
    if isinstance(opened, Response):
        return opened
    signed, form, programme, identity = opened
    url = f"/portal/programmes/{programme.id}/customers/{identity.id}"
    if decision not in ("verify", "reject"):
        return not_found("action")
    if decision == "reject" and not confirmed(form):
        return RedirectResponse(f"{url}/reject", status_code=303)
    ctx = programme_ctx(request, programme)

    root = await users_repo.root_of(db_of(request), programme.id, identity.id)
    check = "KYB" if identity.type == "CORPORATE" else "KYC"

    async def work() -> Flash:
        # A stale page's button that would change nothing is said, not done again.
        if decision == "verify" and not _approve_changes(identity, root):
            raise Refused(f"The {check} is approved already: nothing changed.", "ALREADY_VERIFIED")
        if decision == "reject" and identity.dd_status == KyiStatus.REJECTED:
            raise Refused(f"The {check} is rejected already: nothing changed.")
        if decision == "verify":
            await identities.simulate_verify(ctx, identity.id, identity.type)
            return Flash("Approved.")
        await identities.simulate_reject(ctx, identity.id, identity.type, False)
        return Flash("Rejected.")

    return await act(request, signed, url, work)
