"""What every page of the portal shares: its route class (the request's unit of work and the
security headers), its routers, the templates and the one way they write dates and amounts, the
signed-in operator, the form post's checks, paging, and finding the programme (or the customer's
name) a page is about."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import statement_pdf
from multibank.api.routing import UnitOfWorkRoute, UnitOfWorkRouter, container_of
from multibank.api.scope import scope_of
from multibank.identities.models import Identity
from multibank.kernel.money import ISO_4217, Money, minor_unit_exponent
from multibank.kernel.validation import parse_id
from multibank.ledger import statements
from multibank.portal import overview, sessions
from multibank.portal.web.forms import field_amount
from multibank.programmes import repository
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.users.models import ROOT, User

# Every answer of the portal's pages: no script or style but its own files, never in a frame,
# no URL of it (ids, searched e-mails) sent on to another site.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


class PortalRoute(UnitOfWorkRoute):
    """A page's route: the request's unit of work, and the security headers on its answer."""

    def wrap(
        self, handler: Callable[[Request], Coroutine[Any, Any, Response]]
    ) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        inner = super().wrap(handler)

        async def run(request: Request) -> Response:
            try:
                response = await inner(request)
            except RequestValidationError as exc:
                # A query string a page cannot use (a letter in `offset`): said on a page.
                response = _bad_address(exc)
            response.headers.update(SECURITY_HEADERS)
            return response

        return run


def portal_router() -> UnitOfWorkRouter:
    """A router of portal pages, as each section of `portal.web` (and `portal.audit_pages`) has:
    under /portal, in no OpenAPI document, each route a `PortalRoute`."""
    return UnitOfWorkRouter(prefix="/portal", include_in_schema=False, route_class=PortalRoute)


PORTAL_DIR = Path(__file__).parents[1]  # the portal package: its templates/ and static/
templates = Environment(
    loader=FileSystemLoader(PORTAL_DIR / "templates"), autoescape=select_autoescape(["html"])
)
PAGE = 50
Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]


def when(ms: int | None) -> str:
    """A timestamp as a UTC date; one no calendar date can show (a clock moved absurdly far
    before decision 0038 bounded it) as its milliseconds, never an error."""
    if ms is None:
        return ""
    try:
        return statement_pdf.utc(ms)
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"


def money(amount: int, currency: str) -> str:
    """The one way the portal writes an amount: `overview.amount` (thousands separated, the
    currency's own decimals); statements' CSV and PDF keep their own machine formats."""
    return overview.amount(amount, currency)


def _describe(entry: statements.Entry) -> str:
    """The PDF's description of a statement entry, with its fee written as the portal writes
    amounts (the PDF keeps its own) and a card step's merchant."""
    text = statement_pdf.describe(entry)
    merchant = entry.details.get("merchantName")
    if merchant:  # a card step: where the card was used
        text = f"{text} at {merchant}"
    pdf_fee = f", fee {Money(entry.fee, entry.currency).format()}"
    if entry.fee and text.endswith(pdf_fee):
        return f"{text.removesuffix(pdf_fee)}, fee {money(entry.fee, entry.currency)}"
    return text


def _yesno(value: bool) -> Markup:
    yes = " selected" if value else ""
    no = "" if value else " selected"
    return Markup(f'<option value="true"{yes}>yes</option><option value="false"{no}>no</option>')


# The currencies whose minor unit is not a hundredth, for the script's "= N minor units" line.
ODD_EXPONENTS = json.dumps(
    {c: minor_unit_exponent(c) for c in sorted(ISO_4217) if minor_unit_exponent(c) != 2}
)
templates.globals.update(
    when=when,
    money=money,
    describe=_describe,
    yesno=_yesno,
    major=field_amount,
    odd_exponents=ODD_EXPONENTS,
)
templates.filters["amount"] = overview.amount


def db_of(request: Request) -> AsyncSession:
    return scope_of(request).session


def system_ms(request: Request) -> int:
    return container_of(request).clock.system_ms()


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("programme", None)
    context.setdefault("msg", None)
    context.setdefault("error", False)
    context.setdefault("code", None)
    context.setdefault("secret", None)
    context.setdefault("csrf", None)
    context.setdefault("title", "Portal")
    html = templates.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers={"cache-control": "no-store"})


def to_login() -> RedirectResponse:
    return RedirectResponse("/portal/login", status_code=303)


def secure(request: Request) -> bool:
    return request.url.scheme == "https"


def not_found(what: str) -> HTMLResponse:
    text = (
        f"No such {what}: it may have been removed, or the link is wrong or old. "
        "Go back and follow the portal's own links."
    )
    return render("message.html", status=404, title="Not found", text=text)


def _bad_address(exc: RequestValidationError) -> HTMLResponse:
    """A page's answer to a query string it cannot use: a page in plain words, never JSON."""
    fields = [str(e["loc"][-1]) for e in exc.errors() if e.get("loc")]
    named = ", ".join(dict.fromkeys(fields)) or "a value"
    text = (
        f"The address of this page has a value it cannot use ({named}): follow the page's own "
        "links and forms instead of editing the address, or go back to the portal's start."
    )
    return render(
        "message.html", status=400, title="Not a page", text=text, code=f"invalid: {named}"
    )


# The operator: signed in, and a form post's checks.


async def signed_in(request: Request) -> sessions.Signed | None:
    container = container_of(request)
    return await sessions.current(
        db_of(request),
        request.cookies.get(sessions.COOKIE),
        system_ms(request),
        container.admin_token,
    )


async def posted_form(
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


# Paging


def pager(
    request: Request, offset: int, limit: int, count: int, key: str = "offset"
) -> dict[str, Any]:
    """What a list page says under its rows: which rows of how many, and links to the pages
    before and after, keeping the page's other query parameters (a search, a filter, another
    list's page); `key`: the parameter of this list's offset."""

    def link(to: int) -> str:
        query = {k: v for k, v in request.query_params.items() if k != key}
        return "?" + urlencode({**query, key: str(to)})

    shown = max(0, min(limit, count - offset))
    return {
        "first": offset + 1 if shown else 0,
        "last": offset + shown,
        "count": count,
        "newer": link(max(offset - limit, 0)) if offset > 0 else None,
        "older": link(offset + limit) if offset + limit < count else None,
    }


async def count_rows(db: AsyncSession, stmt: Select[*tuple[Any, ...]]) -> int:
    return int((await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one())


# The programme a page is about.


async def find_programme(request: Request, programme_id: str) -> Programme | None:
    number = parse_id(programme_id)
    return None if number is None else await repository.get_programme(db_of(request), number)


async def open_programme(
    request: Request, programme_id: str
) -> tuple[sessions.Signed, Programme] | Response:
    """A programme's page for the signed-in operator, or the answer instead: the sign-in page
    without a session, 404 for an unknown programme."""
    signed = await signed_in(request)
    if signed is None:
        return to_login()
    programme = await find_programme(request, programme_id)
    if programme is None:
        return not_found("programme")
    return signed, programme


async def posted_programme(
    request: Request, programme_id: str
) -> tuple[sessions.Signed, dict[str, str], Programme] | Response:
    signed, form, refused = await posted_form(request)
    if refused is not None or signed is None:
        return refused or to_login()
    programme = await find_programme(request, programme_id)
    if programme is None:
        return not_found("programme")
    return signed, form, programme


def programme_ctx(request: Request, programme: Programme) -> Ctx:
    clock = container_of(request).clock
    return Ctx(db_of(request), programme, clock.now_ms(programme.clock_offset_ms))


# Customers by name, and searching them (the customers and cards pages).

SEARCH_LONGEST = 100  # longer than any name or e-mail the list shows


def contains(text: str) -> str:
    """A LIKE pattern finding `text` anywhere, lower-cased, with the operator's `%`, `_` and the
    escape character itself matching only themselves (used with ESCAPE '\\')."""
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def customer_name(identity: Identity, root: User) -> str:
    if identity.company and identity.company.get("name"):
        return str(identity.company["name"])
    return f"{root.name} {root.surname}"


async def owner_name(db: AsyncSession, programme_id: int, identity_id: int | None) -> str:
    """The name the customers page gives an owner (the company's, or "name surname")."""
    if identity_id is None:
        return ""
    stmt = (
        select(Identity, User)
        .join(User, (User.identity_id == Identity.id) & (User.role == ROOT))
        .where(Identity.programme_id == programme_id, Identity.id == identity_id)
    )
    row = (await db.execute(stmt)).one_or_none()
    return "" if row is None else customer_name(row[0], row[1])
