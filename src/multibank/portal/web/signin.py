"""Signing in with the admin token and out (`portal.sessions`), and the portal's own stylesheet
and script, which the sign-in page needs before any session. The sign-in form's CSRF token is a
cookie of its own; a wrong token says where this server's comes from (decision 0067)."""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Mapping

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from multibank.api.routing import container_of
from multibank.portal import auditing, sessions
from multibank.portal.guard import AdminThrottled, admin_authenticated
from multibank.portal.web.common import (
    PORTAL_DIR,
    db_of,
    portal_router,
    posted_form,
    render,
    secure,
    signed_in,
    system_ms,
    to_login,
)

pages = portal_router()


LOGIN_COOKIE = "mb_portal_login"
LOGIN_TOKEN = re.compile(r"[A-Za-z0-9_-]{32}")
# What the sign-in page may say when a link asks it to: only these.
LOGIN_NOTES = {"signed-out": "Signed out."}


def _login_page(
    request: Request,
    status: int = 200,
    msg: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """The sign-in form with its CSRF token: a random value kept in a SameSite=Strict cookie
    of its own and posted back with the form (another site can neither read nor send it)."""
    value = request.cookies.get(LOGIN_COOKIE, "")
    if not LOGIN_TOKEN.fullmatch(value):
        value = secrets.token_urlsafe(24)
    response = render(
        "login.html",
        status,
        title="Sign in",
        msg=msg,
        error=status >= 400,
        login_csrf=value,
        token_from_env=bool(container_of(request).settings.admin_token),
    )
    response.headers.update(headers or {})
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        path="/portal/login",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )
    return response


@pages.get("/login")
async def login_page(request: Request) -> Response:
    if await signed_in(request) is not None:
        return RedirectResponse("/portal/", status_code=303)
    return _login_page(request, msg=LOGIN_NOTES.get(request.query_params.get("flash", "")))


# Where the server's admin token comes from, said truthfully (decision 0067): the operator's
# setting, or the one a sandbox generated on its first start and keeps in its database.
WRONG_TOKEN_FROM_ENV = (
    "Wrong admin token: type the value of this server's MULTIBANK_ADMIN_TOKEN and sign in again."
)
WRONG_TOKEN_STORED = (
    "Wrong admin token: this sandbox generated its own on its first start; "
    "`multibank admin-token` (run with the server's settings) shows it. Sign in again with it."
)


@pages.post("/login")
async def login(request: Request) -> Response:
    form = await request.form()
    token, given_csrf = str(form.get("token") or "")[:500], str(form.get("csrf") or "")
    expected_csrf = request.cookies.get(LOGIN_COOKIE, "")
    # (Compared as bytes: a str holding anything but ASCII makes compare_digest raise.)
    if not expected_csrf or not hmac.compare_digest(given_csrf.encode(), expected_csrf.encode()):
        text = "The sign-in form's CSRF token is missing or wrong: reload the page and sign in."
        return _login_page(request, 403, text)
    container = container_of(request)
    try:
        ok = await admin_authenticated(container, request, token)
    except AdminThrottled as exc:
        text = (
            "Too many wrong admin tokens from your address: "
            f"try again in {max(1, exc.reset_seconds)} seconds."
        )
        return _login_page(request, 429, text, exc.headers())
    if not ok:
        await auditing.sign_in_refused(request, token)
        text = WRONG_TOKEN_FROM_ENV if container.settings.admin_token else WRONG_TOKEN_STORED
        return _login_page(request, 401, text)
    value = await sessions.sign_in(db_of(request), system_ms(request), container.admin_token or "")
    await auditing.signed_in(request, value)
    response = RedirectResponse("/portal/", status_code=303)
    response.set_cookie(
        sessions.COOKIE,
        value,
        max_age=sessions.TTL_MS // 1000,
        path="/portal",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )
    response.delete_cookie(LOGIN_COOKIE, path="/portal/login")
    return response


@pages.post("/logout")
async def logout(request: Request) -> Response:
    signed, _, refused = await posted_form(request)
    if refused is not None or signed is None:
        return refused or to_login()
    await sessions.sign_out(db_of(request), signed, system_ms(request))
    await auditing.signed_out(request, signed)
    response = RedirectResponse("/portal/login?flash=signed-out", status_code=303)
    response.delete_cookie(sessions.COOKIE, path="/portal")
    return response


@pages.get("/static/portal.css")
async def stylesheet() -> Response:
    css = (PORTAL_DIR / "static" / "portal.css").read_text()
    return Response(css, media_type="text/css", headers={"cache-control": "max-age=3600"})


@pages.get("/static/portal.js")
async def script() -> Response:
    """The portal's one script (copy buttons, decision 0058): first-party, so `default-src
    'self'` lets it run; the pages load it with `<script src defer>` and no inline script."""
    js = (PORTAL_DIR / "static" / "portal.js").read_text()
    return Response(js, media_type="text/javascript", headers={"cache-control": "max-age=3600"})
