"""The operator web portal at /portal/ (issue 14, D17): pages over the same services as the
operator API and the simulator, so no rule exists twice.

Signed in with the admin token (`portal.sessions`: a database session behind an HttpOnly,
SameSite=Strict cookie; signing out ends it). Every page answers a visitor without a session
with a redirect to the sign-in page; every form posts a CSRF token (the session's, or on the
sign-in form a cookie's), and a post without it is refused (403) before anything is read. Pages
are server-rendered (Jinja2, autoescaped) with one stylesheet and one small script (copy buttons)
served here: nothing from elsewhere, and a Content-Security-Policy that refuses any other script
and any inline one (decisions 0038, 0058). Every amount goes through one formatter
(`overview.amount`, the `money` global and `amount` filter); every refusal is said in plain words
with the API's errorCode in small print (`portal.readable`).

Every form post answers 303 to a page (POST/redirect/GET), so reloading never repeats an action.
What the action did, or why it was refused, travels to that page in a signed, HttpOnly cookie
read once (`Flash`): never in the URL, so no link can make the portal say something, and a
secret shown once (a new API key) is shown once. A refused action changes nothing: its
transaction is rolled back before the refusal is said. Actions that cannot be undone (revoking
a key, rejecting a wire transfer or a KYC, a new webhook secret) ask for confirmation on a page
of their own. Every list is paged.

The pages are a package, one module a section, each with a router of its own (`pages`, as
`portal.audit_pages` has) that `router` here includes in the order their routes are tried:
`signin` (and the portal's own files), `programmes` (the list, a programme's page, overview and
forms), `clock`, `customers`, `accounts` (statements and their downloads), `ledger`, `payments`,
`wires` (the sandbox bank's side of a wire transfer), `deliveries` (webhooks and the sandbox
inbox) and `cards`. What they share is in `common` (route class, templates, the signed-in
operator, paging, the programme a page is about), `actions` (what a form's post does and says)
and `forms` (reading what a form sent). `fallback`, the portal's "not found" page, is included
by app.py after every other portal router.
"""

from __future__ import annotations

from fastapi import Response

from multibank.api.routing import UnitOfWorkRouter
from multibank.portal.web import (
    accounts,
    cards,
    clock,
    customers,
    deliveries,
    ledger,
    payments,
    programmes,
    signin,
    wires,
)
from multibank.portal.web.actions import show
from multibank.portal.web.common import (
    PAGE,
    Offset,
    PortalRoute,
    not_found,
    pager,
    portal_router,
    render,
    signed_in,
    to_login,
)
from multibank.portal.web.forms import (
    MOST_MINOR,
    Refused,
    field_amount,
    major_amount,
    webhook_url_ascii,
)
from multibank.portal.web.signin import WRONG_TOKEN_FROM_ENV, WRONG_TOKEN_STORED

# What other modules and the tests take from `multibank.portal.web`, wherever it is defined.
__all__ = [
    "MOST_MINOR",
    "PAGE",
    "WRONG_TOKEN_FROM_ENV",
    "WRONG_TOKEN_STORED",
    "Offset",
    "PortalRoute",
    "Refused",
    "fallback",
    "field_amount",
    "major_amount",
    "pager",
    "render",
    "router",
    "show",
    "signed_in",
    "to_login",
    "webhook_url_ascii",
]

# The portal's pages, section by section in the order their routes are tried. No path of one
# section is a path of another, so only `fallback`, which app.py includes last, depends on it.
router = UnitOfWorkRouter(include_in_schema=False, route_class=PortalRoute)
router.include_router(signin.pages)
router.include_router(programmes.pages)
router.include_router(clock.pages)
router.include_router(customers.pages)
router.include_router(accounts.pages)
router.include_router(ledger.pages)
router.include_router(payments.pages)
router.include_router(wires.pages)
router.include_router(deliveries.pages)
router.include_router(cards.pages)

# Included after every other portal router (app.py): an address under /portal/ that no page
# answers gets the portal's own "not found" page, not the API's JSON. /portal/api is a mount
# matched before this, so the operator API keeps its JSON 404.
fallback = portal_router()


@fallback.get("/{rest:path}")
async def no_such_page(rest: str) -> Response:
    return not_found("page")
