"""What a form's post does and says. Its action runs (`act`, recorded in the audit log) and the
post answers 303 to a page (POST/redirect/GET), which shows once what the action did or why it
was refused (`Flash`, `done`, `show`). The forms of a programme's page are registered as one
(`programme_form`); an action that cannot be undone asks first on a page of its own
(`confirm_page`)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError

from multibank.api.routing import container_of
from multibank.kernel.errors import DomainError
from multibank.portal import auditing, readable, sessions
from multibank.portal.web.common import db_of, not_found, posted_programme, render, secure
from multibank.portal.web.forms import Refused
from multibank.programmes.models import Programme

# Flash: what a form's action did, carried to the page the post redirects to.

FLASH_COOKIE = "mb_portal_flash"
# Secrets a page may show once, by the element id the page gives them.
SECRET_LABELS = {"new-key": "New API key", "new-secret": "New webhook secret"}


@dataclass(frozen=True)
class Flash:
    text: str
    error: bool = False
    secret: str | None = None
    secret_id: str | None = None
    code: str | None = None  # the API's errorCode, shown in small print after the text


def _flash_mac(request: Request, signed: sessions.Signed, payload: str) -> str:
    # Keyed with the admin token and bound to the session: no one else can make the portal say
    # anything, and one session's message is not another's.
    key = (container_of(request).admin_token or "").encode()
    return hmac.new(key, f"{signed.token_hash}|{payload}".encode(), hashlib.sha256).hexdigest()


def done(request: Request, signed: sessions.Signed, url: str, flash: Flash) -> RedirectResponse:
    """The answer to a form's post: 303 to `url`, which shows `flash` once."""
    payload = base64.urlsafe_b64encode(json.dumps(asdict(flash)).encode()).decode()
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(
        FLASH_COOKIE,
        f"{payload}.{_flash_mac(request, signed, payload)}",
        max_age=300,
        path="/portal",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )
    return response


def _taken_flash(request: Request, signed: sessions.Signed) -> Flash | None:
    payload, _, mac = request.cookies.get(FLASH_COOKIE, "").partition(".")
    expected = _flash_mac(request, signed, payload)
    if not payload or not hmac.compare_digest(mac.encode(), expected.encode()):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload))
        flash = Flash(**data)
    except (ValueError, TypeError):
        return None
    return flash if flash.secret_id in (None, *SECRET_LABELS) else None


async def show(
    request: Request, signed: sessions.Signed, template: str, status: int = 200, **context: Any
) -> HTMLResponse:
    """A signed-in page, with the message the last post left for it (once)."""
    flash = _taken_flash(request, signed)
    if flash is not None:
        context.update(msg=flash.text, error=flash.error, code=flash.code)
        if flash.secret and flash.secret_id:
            context["secret"] = {
                "id": flash.secret_id,
                "label": SECRET_LABELS[flash.secret_id],
                "value": flash.secret,
            }
    response = render(template, status, csrf=signed.csrf, **context)
    if FLASH_COOKIE in request.cookies:
        response.delete_cookie(FLASH_COOKIE, path="/portal")
    return response


async def act(
    request: Request,
    signed: sessions.Signed,
    url: str,
    work: Callable[[], Awaitable[Flash]],
    to: Callable[[], str] | None = None,
) -> Response:
    """Runs a form's action and redirects to `url` (or, once it is done, to `to()`) with what it
    did; a refusal (a value the models or the service refuse) rolls back whatever the action had
    begun and says why on `url`'s page."""
    try:
        flash = await auditing.portal_action(request, signed, work)  # recorded once done
    except (ValidationError, DomainError, Refused) as exc:
        await db_of(request).rollback()
        code: str | None
        if isinstance(exc, ValidationError):
            text, code = readable.validation_sentence(exc)
        elif isinstance(exc, DomainError):
            text, code = readable.refusal(exc)
        else:
            text, code = str(exc), exc.code
        return done(request, signed, url, Flash(text, error=True, code=code))
    return done(request, signed, to() if to else url, flash)


ProgrammeForm = Callable[[Request, dict[str, str], Programme], Awaitable[Flash]]


def programme_form(
    pages: APIRouter, action: str, sandbox_only: bool = False
) -> Callable[[ProgrammeForm], ProgrammeForm]:
    """Registers on `pages` `POST /programmes/{id}/{action}`, a form of the programme's page:
    the operator signed in and the CSRF token checked, the programme found, and then the form's
    work, whose refusal is shown on the programme's page (`act`)."""

    def register(work: ProgrammeForm) -> ProgrammeForm:
        async def endpoint(request: Request, programme_id: str) -> Response:
            opened = await posted_programme(request, programme_id)
            if isinstance(opened, Response):
                return opened
            signed, form, programme = opened
            if sandbox_only and programme.mode != "sandbox":
                return not_found("sandbox programme")
            home = f"/portal/programmes/{programme.id}"
            return await act(request, signed, home, partial(work, request, form, programme))

        endpoint.__name__ = work.__name__
        pages.post(f"/programmes/{{programme_id}}/{action}")(endpoint)
        return work

    return register


# Confirmation pages: an action that cannot be undone is a link to a page that says what it
# will do, whose form (with confirm=yes) does it. A post without confirm=yes is sent there.


def confirmed(form: dict[str, str]) -> bool:
    return form.get("confirm") == "yes"


def confirm_page(
    signed: sessions.Signed, programme: Programme, text: str, action: str, button: str, back: str
) -> HTMLResponse:
    return render(
        "confirm.html",
        title="Confirm",
        programme=programme,
        csrf=signed.csrf,
        text=text,
        action=action,
        button=button,
        back=back,
    )
