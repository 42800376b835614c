"""The operator web portal at /portal/ (issue 14, D17): pages over the same services as the
operator API and the simulator, so no rule exists twice.

Signed in with the admin token (`portal.sessions`: a database session behind an HttpOnly,
SameSite=Strict cookie; signing out ends it). Every page answers a visitor without a session
with a redirect to the sign-in page; every form posts the session's CSRF token, and a post without
it is refused (403) before anything is read. Pages are server-rendered (Jinja2, autoescaped) with
one stylesheet served here: no script, no CDN.
"""

from __future__ import annotations

import io
import secrets
from functools import partial
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import repository as accounts_repo
from multibank.accounts import service as accounts
from multibank.accounts import statement_pdf
from multibank.api.routing import UnitOfWorkRoute, after_commit, container_of
from multibank.api.v3_29.statements import CSV_COLUMNS, entry_body, to_csv
from multibank.identities import service as identities
from multibank.identities.models import Identity
from multibank.kernel.errors import DomainError
from multibank.kernel.money import Money
from multibank.kernel.notify import OutboxMessage
from multibank.kernel.validation import parse_id
from multibank.ledger import statements
from multibank.ledger.models import LedgerAccount, LedgerTransaction, Posting
from multibank.ledger.verify import verify_alone
from multibank.payments import owt
from multibank.payments import repository as payments_repo
from multibank.payments import steps as payment_steps
from multibank.payments.models import Payment
from multibank.portal import sessions
from multibank.programmes import repository, service
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.programmes.schemas import (
    ProfileUpdate,
    ProgrammeCreate,
    ProgrammeSettingsUpdate,
)
from multibank.users import repository as users_repo
from multibank.users.models import ROOT, User
from multibank.webhooks import service as webhooks

router = APIRouter(prefix="/portal", include_in_schema=False, route_class=UnitOfWorkRoute)
HERE = Path(__file__).parent
templates = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
)
PAGE = 50


def _when(ms: int | None) -> str:
    return "" if ms is None else statement_pdf.utc(ms)


def _money(amount: int, currency: str) -> str:
    return Money(amount, currency).format()


def _yesno(value: bool) -> Markup:
    yes = " selected" if value else ""
    no = "" if value else " selected"
    return Markup(f'<option value="true"{yes}>yes</option><option value="false"{no}>no</option>')


templates.globals.update(when=_when, money=_money, describe=statement_pdf.describe, yesno=_yesno)


def _db(request: Request) -> AsyncSession:
    db: AsyncSession = request.state.db
    return db


def _now(request: Request) -> int:
    return container_of(request).clock.system_ms()


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("programme", None)
    context.setdefault("msg", None)
    context.setdefault("title", "Portal")
    html = templates.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers={"cache-control": "no-store"})


def flash(request: Request) -> dict[str, Any]:
    """The message a redirect carried back (`back`), for the page to show."""
    return {
        "msg": request.query_params.get("msg"),
        "error": bool(request.query_params.get("error")),
    }


def to_login() -> RedirectResponse:
    return RedirectResponse("/portal/login", status_code=303)


def back(url: str, msg: str, error: bool = False) -> RedirectResponse:
    query = urlencode({"msg": msg, **({"error": "1"} if error else {})})
    return RedirectResponse(f"{url}?{query}", status_code=303)


async def signed_in(request: Request) -> sessions.Signed | None:
    return await sessions.current(_db(request), request.cookies.get(sessions.COOKIE), _now(request))


# Sign-in and out


@router.get("/login")
async def login_page(request: Request) -> Response:
    if await signed_in(request) is not None:
        return RedirectResponse("/portal/", status_code=303)
    return render("login.html", title="Sign in", msg=request.query_params.get("msg"), error=True)


@router.post("/login")
async def login(request: Request, token: Annotated[str, Form(max_length=500)] = "") -> Response:
    expected = container_of(request).admin_token
    if not expected or not secrets.compare_digest(token.encode(), expected.encode()):
        return render(
            "login.html", status=401, title="Sign in", msg="Wrong admin token.", error=True
        )
    value = await sessions.sign_in(_db(request), _now(request))
    response = RedirectResponse("/portal/", status_code=303)
    response.set_cookie(
        sessions.COOKIE,
        value,
        max_age=sessions.TTL_MS // 1000,
        path="/portal",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def _posted(
    request: Request,
) -> tuple[sessions.Signed | None, dict[str, str], Response | None]:
    """A form post's session and fields, or the answer that refuses it: no session (to the
    sign-in page) or no valid CSRF token (403)."""
    signed = await signed_in(request)
    if signed is None:
        return None, {}, to_login()
    form = {k: str(v) for k, v in (await request.form()).items()}
    if not sessions.csrf_ok(signed, form.get("csrf")):
        page = render(
            "message.html",
            status=403,
            title="Refused",
            text="The form's CSRF token is missing or wrong: reload the page and try again.",
        )
        return None, {}, page
    return signed, form, None


@router.post("/logout")
async def logout(request: Request) -> Response:
    signed, _, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    await sessions.sign_out(_db(request), signed, _now(request))
    response = back("/portal/login", "Signed out.")
    response.delete_cookie(sessions.COOKIE, path="/portal")
    return response


@router.get("/static/portal.css")
async def stylesheet() -> Response:
    css = (HERE / "static" / "portal.css").read_text()
    return Response(css, media_type="text/css", headers={"cache-control": "max-age=3600"})


# Programmes


@router.get("/")
async def home(request: Request) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    db = _db(request)
    listed = [await service.read(db, p) for p in await repository.list_programmes(db)]
    return render(
        "programmes.html",
        title="Programmes",
        programmes=listed,
        csrf=signed.csrf,
        **flash(request),
    )


@router.post("/programmes")
async def programme_create(request: Request) -> Response:
    signed, form, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    container = container_of(request)
    try:
        data = ProgrammeCreate(
            name=form.get("name", ""),
            mode="live" if form.get("mode") == "live" else "sandbox",
            currencies=[c.strip() for c in form.get("currencies", "EUR").split(",") if c.strip()],
        )
        programme, key = await service.create_programme(
            _db(request), container.clock, data, container.settings.webhooks_allow_private
        )
    except ValidationError as exc:
        return back("/portal/", _problems(exc), error=True)
    except DomainError as exc:
        return back("/portal/", _refusal(exc), error=True)
    return await _programme_page(request, signed, programme, new_key=key)


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())[
        :300
    ]


def _refusal(exc: DomainError) -> str:
    body = exc.body() or {}
    return str(body.get("message") or body.get("errorCode") or type(exc).__name__)


async def _programme(request: Request, programme_id: str) -> Programme | None:
    number = parse_id(programme_id)
    return None if number is None else await repository.get_programme(_db(request), number)


async def _open_programme(
    request: Request, programme_id: str
) -> tuple[sessions.Signed, Programme] | Response:
    """A programme's page for the signed-in operator, or the answer instead: the sign-in page
    without a session, 404 for an unknown programme."""
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await _programme(request, programme_id)
    if programme is None:
        return _not_found("programme")
    return signed, programme


def _ctx(request: Request, programme: Programme) -> Ctx:
    clock = container_of(request).clock
    return Ctx(_db(request), programme, clock.now_ms(programme.clock_offset_ms))


def _not_found(what: str) -> HTMLResponse:
    return render("message.html", status=404, title="Not found", text=f"No such {what}.")


async def _programme_page(
    request: Request,
    signed: sessions.Signed,
    programme: Programme,
    new_key: str | None = None,
    new_secret: str | None = None,
) -> Response:
    db = _db(request)
    return render(
        "programme.html",
        title=programme.name,
        programme=programme,
        csrf=signed.csrf,
        settings=service.settings_of(programme),
        keys=await service.list_api_keys(db, programme),
        profiles=await service.list_profiles(db, programme),
        fee_types=await service.list_fee_types(db, programme),
        now=_ctx(request, programme).now,
        new_key=new_key,
        new_secret=new_secret,
        **flash(request),
    )


@router.get("/programmes/{programme_id}")
async def programme_page(request: Request, programme_id: str) -> Response:
    opened = await _open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    return await _programme_page(request, signed, programme)


def _setting_value(name: str, raw: str) -> Any:
    if raw == "" and name in ("webhookUrl", "passwordExpiryDays"):
        return None
    if raw in ("true", "false"):
        return raw == "true"
    if raw.lstrip("-").isdigit():
        return int(raw)
    return raw


@router.post("/programmes/{programme_id}/{action}")
async def programme_action(request: Request, programme_id: str, action: str) -> Response:
    signed, form, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    if programme is None:
        return _not_found("programme")
    db, url = _db(request), f"/portal/programmes/{programme.id}"
    container = container_of(request)
    try:
        if action == "settings":
            fields = ProgrammeSettingsUpdate.model_fields
            data = ProgrammeSettingsUpdate(
                **{k: _setting_value(k, v) for k, v in form.items() if k in fields}
            )
            await service.update_settings(
                db, programme, data, container.settings.webhooks_allow_private
            )
            return back(url, "Settings saved.")
        if action == "api_keys":
            created = await service.create_api_key(
                db, container.clock, programme, form.get("label") or None
            )
            return await _programme_page(request, signed, programme, new_key=created.apiKey)
        if action == "movement_fee":
            amount = int(form.get("amount", "0"))
            await service.set_movement_fee(
                db, programme, form.get("kind", ""), form.get("currency", ""), amount
            )
            return back(url, "Fee set.")
        if action == "fee_type":
            name = form.get("name", "")
            await service.set_fee_type_amount(
                db,
                container.clock,
                programme,
                name,
                form.get("group", "") or "DEFAULT",
                form.get("currency", ""),
                int(form.get("amount", "0")),
            )
            return back(url, f"Fee type {name} saved.")
        if action == "webhook_secret":
            secret = await service.rotate_webhook_secret(db, programme)
            return await _programme_page(request, signed, programme, new_secret=secret)
        if action == "clock" and programme.mode == "sandbox":
            offset = await service.advance_clock(db, programme, int(form.get("seconds", "0")))
            now = container.clock.now_ms(offset)
            steps = partial(payment_steps.catch_up, container.db, container.clock, programme.id)
            after_commit(db, steps)  # as the simulator's clock/advance
            return back(url, f"The clock moved on to {_when(now)} UTC.")
    except ValidationError as exc:
        return back(url, _problems(exc), error=True)
    except ValueError as exc:
        return back(url, f"Not a number: {exc}", error=True)
    except DomainError as exc:
        await db.rollback()
        return back(url, _refusal(exc), error=True)
    return _not_found("action")


@router.post("/programmes/{programme_id}/profiles/{profile_id}")
async def profile_update(request: Request, programme_id: str, profile_id: str) -> Response:
    signed, form, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    number = parse_id(profile_id)
    if programme is None or number is None:
        return _not_found("profile")
    url = f"/portal/programmes/{programme.id}"
    try:
        data = ProfileUpdate(
            currencies=[c.strip() for c in form.get("currencies", "").split(",") if c.strip()],
            active=form.get("active") == "true",
        )
        await service.update_profile(_db(request), programme, number, data)
    except ValidationError as exc:
        return back(url, _problems(exc), error=True)
    except DomainError as exc:
        await _db(request).rollback()
        return back(url, _refusal(exc), error=True)
    return back(url, "Profile saved.")


@router.post("/programmes/{programme_id}/api_keys/{key_id}/revoke")
async def key_revoke(request: Request, programme_id: str, key_id: str) -> Response:
    signed, _, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    number = parse_id(key_id)
    if programme is None or number is None:
        return _not_found("API key")
    try:
        await service.revoke_api_key(_db(request), container_of(request).clock, programme, number)
    except DomainError as exc:
        return back(f"/portal/programmes/{programme.id}", _refusal(exc), error=True)
    return back(f"/portal/programmes/{programme.id}", "API key revoked.")


# Customers


async def _customer_rows(
    db: AsyncSession, programme: Programme, q: str | None
) -> list[dict[str, Any]]:
    stmt = (
        select(Identity, User)
        .join(User, (User.identity_id == Identity.id) & (User.role == ROOT))
        .where(Identity.programme_id == programme.id)
    )
    if q:
        like = f"%{q.strip().lower()}%"
        conditions: list[ColumnElement[bool]] = [
            User.email_key.like(like),
            User.name.ilike(like),
            User.surname.ilike(like),
        ]
        number = parse_id(q.strip())
        if number is not None:
            conditions.append(Identity.id == number)
        stmt = stmt.where(or_(*conditions))
    rows = (await db.execute(stmt.order_by(Identity.id.desc()).limit(200))).all()
    return [
        {
            "id": identity.id,
            "type": identity.type.lower(),
            "name": _name(identity, root),
            "email": root.email,
            "dd": identity.dd_status,
            "created": identity.created_at,
        }
        for identity, root in rows
    ]


def _name(identity: Identity, root: User) -> str:
    if identity.company and identity.company.get("name"):
        return str(identity.company["name"])
    return f"{root.name} {root.surname}"


@router.get("/programmes/{programme_id}/customers")
async def customers_page(
    request: Request, programme_id: str, q: Annotated[str | None, Query(max_length=100)] = None
) -> Response:
    opened = await _open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    return render(
        "customers.html",
        title="Customers",
        programme=programme,
        csrf=signed.csrf,
        q=q,
        customers=await _customer_rows(_db(request), programme, q),
    )


async def _identity(request: Request, programme: Programme, value: str) -> Identity | None:
    number = parse_id(value)
    if number is None:
        return None
    stmt = select(Identity).where(Identity.programme_id == programme.id, Identity.id == number)
    return (await _db(request).execute(stmt)).scalar_one_or_none()


@router.get("/programmes/{programme_id}/customers/{identity_id}")
async def customer_page(request: Request, programme_id: str, identity_id: str) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await _programme(request, programme_id)
    identity = None if programme is None else await _identity(request, programme, identity_id)
    if programme is None or identity is None:
        return _not_found("customer")
    db = _db(request)
    root = await users_repo.root_of(db, programme.id, identity.id)
    _, users = await users_repo.list_authorised(
        db, programme.id, identity.id, offset=0, limit=100, active=None, email=None
    )
    owned = accounts_repo.of_owner(programme.id, identity.id).order_by(LedgerAccount.id)
    rows = [(a, la) for a, la in (await db.execute(owned)).all()]
    mobile = f"{root.mobile_country_code or ''}{root.mobile_number or ''}"
    return render(
        "customer.html",
        title=_name(identity, root),
        programme=programme,
        csrf=signed.csrf,
        identity=identity,
        name=_name(identity, root),
        root=root,
        mobile=mobile,
        users=users,
        accounts=rows,
        **flash(request),
    )


@router.post("/programmes/{programme_id}/customers/{identity_id}/{decision}")
async def customer_decide(
    request: Request, programme_id: str, identity_id: str, decision: str
) -> Response:
    signed, _, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    identity = None if programme is None else await _identity(request, programme, identity_id)
    if programme is None or identity is None or programme.mode != "sandbox":
        return _not_found("customer")
    url = f"/portal/programmes/{programme.id}/customers/{identity.id}"
    ctx = _ctx(request, programme)
    if decision == "verify":
        await identities.simulate_verify(ctx, identity.id, identity.type)
        return back(url, "Approved.")
    if decision == "reject":
        await identities.simulate_reject(ctx, identity.id, identity.type, False)
        return back(url, "Rejected.")
    return _not_found("action")


# Accounts


async def _account(request: Request, programme: Programme, value: str) -> Any:
    number = parse_id(value)
    if number is None:
        return None
    return await accounts_repo.get_in_programme(_db(request), programme.id, number)


@router.post("/programmes/{programme_id}/accounts/{account_id}/{action}")
async def account_action(
    request: Request, programme_id: str, account_id: str, action: str
) -> Response:
    signed, form, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    account = None if programme is None else await _account(request, programme, account_id)
    if programme is None or account is None or programme.mode != "sandbox":
        return _not_found("account")
    url = f"/portal/programmes/{programme.id}/customers/{account.identity_id}"
    ctx = _ctx(request, programme)
    try:
        if action == "iban":
            await accounts.grant_iban(ctx, account)
            return back(url, f"IBAN {account.iban} allocated.")
        if action == "deposit":
            amount = int(form.get("amount", "0"))
            code = await accounts.deposit(
                ctx, account, account.currency, amount, {"sender": "Portal deposit"}
            )
            return back(url, f"Deposit: {code}.", error=code != "COMPLETED")
    except ValueError:
        return back(url, "The amount must be a whole number of minor units.", error=True)
    except DomainError as exc:
        await _db(request).rollback()
        return back(url, _refusal(exc), error=True)
    return _not_found("action")


@router.get("/programmes/{programme_id}/accounts/{account_id}")
async def account_page(
    request: Request,
    programme_id: str,
    account_id: str,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await _programme(request, programme_id)
    account = None if programme is None else await _account(request, programme, account_id)
    if programme is None or account is None:
        return _not_found("account")
    db = _db(request)
    page = await statements.statement(
        db, statements.StatementQuery(account.id, offset=offset, limit=PAGE)
    )
    return render(
        "account.html",
        title=account.friendly_name,
        programme=programme,
        csrf=signed.csrf,
        account=account,
        ledger_account=await db.get(LedgerAccount, account.id),
        entries=page.entries,
        count=page.count,
        offset=offset,
        limit=PAGE,
    )


@router.get("/programmes/{programme_id}/accounts/{account_id}/statement.{kind}")
async def account_download(
    request: Request, programme_id: str, account_id: str, kind: str
) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await _programme(request, programme_id)
    account = None if programme is None else await _account(request, programme, account_id)
    if programme is None or account is None or kind not in ("csv", "pdf"):
        return _not_found("statement")
    db = _db(request)
    page = await statements.statement(db, statements.StatementQuery(account.id, limit=100))
    name = f"statement-{account.id}.{kind}"
    disposition = {"content-disposition": f'attachment; filename="{name}"'}
    if kind == "csv":
        text = to_csv([entry_body(e) for e in page.entries], CSV_COLUMNS)
        return Response(text, media_type="text/csv", headers=disposition)
    la = await db.get(LedgerAccount, account.id)
    heading = statement_pdf.StatementHeading(
        account_id=account.id,
        friendly_name=account.friendly_name,
        currency=account.currency,
        from_ms=None,
        to_ms=None,
        generated_ms=_ctx(request, programme).now,
        available=la.available if la else 0,
        actual=la.actual if la else 0,
        count=page.count,
        offset=0,
        ascending=False,
    )
    pdf = statement_pdf.render(heading, page.entries)
    return Response(io.BytesIO(pdf).getvalue(), media_type="application/pdf", headers=disposition)


# Ledger, payments, webhooks, inbox


@router.get("/programmes/{programme_id}/ledger")
async def ledger_page(
    request: Request, programme_id: str, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0
) -> Response:
    opened = await _open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    db = _db(request)
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
    return render(
        "ledger.html",
        title="Ledger",
        programme=programme,
        csrf=signed.csrf,
        violations=await verify_alone(container_of(request).db, programme.id),
        transactions=[(t, postings[t.id]) for t in txs],
        kinds=kinds,
        offset=offset,
        limit=PAGE,
        more=more,
    )


@router.get("/programmes/{programme_id}/payments")
async def payments_page(request: Request, programme_id: str) -> Response:
    opened = await _open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    rows = await _db(request).execute(
        select(Payment)
        .where(Payment.programme_id == programme.id)
        .order_by(Payment.created_at.desc(), Payment.id.desc())
        .limit(200)
    )
    return render(
        "payments.html",
        title="Payments",
        programme=programme,
        csrf=signed.csrf,
        payments=list(rows.scalars()),
        **flash(request),
    )


@router.post("/programmes/{programme_id}/wire/{payment_id}/{action}")
async def wire_action(
    request: Request, programme_id: str, payment_id: str, action: str
) -> Response:
    signed, _, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    number = parse_id(payment_id)
    if programme is None or number is None or programme.mode != "sandbox":
        return _not_found("wire transfer")
    payment = await payments_repo.by_id(_db(request), programme.id, number, lock=True)
    if payment is None or action not in ("accept", "reject"):
        return _not_found("wire transfer")
    code = await owt.simulate(_ctx(request, programme), payment, action)
    return back(f"/portal/programmes/{programme.id}/payments", f"{action.capitalize()}: {code}.")


@router.get("/programmes/{programme_id}/webhooks")
async def webhooks_page(
    request: Request,
    programme_id: str,
    eventType: Annotated[str | None, Query(max_length=80)] = None,
    state: Annotated[str | None, Query(pattern="^(|PENDING|DELIVERED|FAILED)$")] = None,
) -> Response:
    opened = await _open_programme(request, programme_id)
    if isinstance(opened, Response):
        return opened
    signed, programme = opened
    page = await webhooks.page(_db(request), programme.id, eventType, state or None, 0, 100)
    return render(
        "webhooks.html",
        title="Webhooks",
        programme=programme,
        csrf=signed.csrf,
        settings=service.settings_of(programme),
        deliveries=page["deliveries"],
        event_type=eventType,
        state=state,
        **flash(request),
    )


@router.post("/programmes/{programme_id}/webhooks/{event_id}/redeliver")
async def webhook_redeliver(request: Request, programme_id: str, event_id: str) -> Response:
    signed, _, refused = await _posted(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await _programme(request, programme_id)
    number = parse_id(event_id)
    if programme is None or number is None:
        return _not_found("delivery")
    url = f"/portal/programmes/{programme.id}/webhooks"
    try:
        await webhooks.redeliver(_ctx(request, programme), number)
    except DomainError as exc:
        await _db(request).rollback()
        return back(url, _refusal(exc), error=True)
    return back(url, "Sent again shortly.")


@router.get("/programmes/{programme_id}/inbox")
async def inbox_page(request: Request, programme_id: str) -> Response:
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await _programme(request, programme_id)
    if programme is None or programme.mode != "sandbox":
        return _not_found("sandbox programme")
    rows = await _db(request).execute(
        select(OutboxMessage)
        .where(OutboxMessage.programme_id == programme.id)
        .order_by(OutboxMessage.created_at.desc(), OutboxMessage.id.desc())
        .limit(200)
    )
    return render(
        "inbox.html",
        title="Inbox",
        programme=programme,
        csrf=signed.csrf,
        messages=list(rows.scalars()),
    )
