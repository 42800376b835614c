"""The audit log shown (issue 35 §4, decision 0057): the portal's pages `/portal/audit` (every
programme) and `/portal/programmes/{id}/audit`, and the operator API's `GET /audit` and
`GET /programmes/{id}/audit`, newest first, paged, filtered by action and actor."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Response
from pydantic import BaseModel, Field

from multibank.api.deps import Db
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.scope import scope_of
from multibank.audit import service as audit
from multibank.kernel.validation import parse_id
from multibank.portal import web
from multibank.portal.auditing import AuditedRoute
from multibank.portal.router import THROTTLED, ProgrammePath, require_admin
from multibank.programmes import repository

ActionFilter = Annotated[
    str | None,
    Query(max_length=60, description="An action (`api_key.revoke`) or what it acts on (`api_key`)"),
]
ActorFilter = Annotated[
    str | None,
    Query(max_length=80, description="Who: `admin token`, `cli`, `portal session 1a2b3c4d`."),
]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]
Limit = Annotated[int, Query(ge=1, le=100)]


# The portal's pages.

pages = UnitOfWorkRouter(prefix="/portal", include_in_schema=False, route_class=web.PortalRoute)


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


async def _page(
    request: Request, programme_id: int | None, action: str | None, actor: str | None, offset: int
) -> tuple[dict[str, Any], int]:
    db = scope_of(request).session
    count, rows = await audit.page(db, programme_id, action, actor, offset, web.PAGE)
    actions, actors = await audit.choices(db, programme_id)
    context = {
        "records": [audit.wire(row) for row in rows],
        "kinds": sorted({a.split(".")[0] for a in actions if "." in a}),
        "actions": actions,
        "actors": actors,
        "action": action or "",
        "actor": actor or "",
        "shown": _shown,
        "pager": web.pager(request, offset, web.PAGE, count),
    }
    return context, count


@pages.get("/audit")
async def audit_page(
    request: Request,
    action: Annotated[str | None, Query(max_length=60)] = None,
    actor: Annotated[str | None, Query(max_length=80)] = None,
    offset: web.Offset = 0,
) -> Response:
    signed = await web.signed_in(request)
    if signed is None:
        return web.to_login()
    context, _ = await _page(request, None, action or None, actor or None, offset)
    return await web.show(request, signed, "audit.html", title="Audit log", **context)


@pages.get("/programmes/{programme_id}/audit")
async def programme_audit_page(
    request: Request,
    programme_id: str,
    action: Annotated[str | None, Query(max_length=60)] = None,
    actor: Annotated[str | None, Query(max_length=80)] = None,
    offset: web.Offset = 0,
) -> Response:
    signed = await web.signed_in(request)
    if signed is None:
        return web.to_login()
    number = parse_id(programme_id)
    db = scope_of(request).session
    programme = None if number is None else await repository.get_programme(db, number)
    if programme is None:
        return web.render("message.html", 404, title="Not found", text="No such programme.")
    context, _ = await _page(request, programme.id, action or None, actor or None, offset)
    return await web.show(
        request, signed, "audit.html", title="Audit log", programme=programme, **context
    )


# The operator API.


class AuditTarget(BaseModel):
    kind: str = Field(
        description="`programme`, `api_key`, `profile`, `customer`, `account`, "
        "`payment`, `card`, `webhook_event`, `fee_type`, `card_pool` (its id: the programme's)."
    )
    id: str


class AuditChange(BaseModel):
    field: str = Field(description="`settings.webhookUrl`, `profiles.{id}.fees`, `apiKeys.{id}`…")
    before: Any = Field(description="null: the field did not exist (a new key, profile…).")
    after: Any = Field(description="null: the field is no more.")


class AuditRecordRead(BaseModel):
    id: str
    timestamp: int = Field(description="When, in the server's wall clock (UTC), in ms.")
    actor: str = Field(
        description="`admin token`, `cli`, `portal session {8 hex}`, `portal` or `simulator`."
    )
    action: str = Field(description="`api_key.revoke`, `programme.settings`, `portal.sign_in`…")
    programmeId: str | None
    target: AuditTarget | None
    changes: list[AuditChange] = Field(
        description="The settings the action changed, and the state of what it acted on "
        "(`account.state`, `card.blockedReason`, `delivery.attempts`, `cardPool.unassigned`…); "
        "API keys as prefix and label, never a secret."
    )
    note: str | None
    seq: int | None = Field(
        description="The record's place in the hash chain (1, 2, 3…); `multibank audit verify` "
        "checks it."
    )
    hash: str | None = Field(
        description="SHA-256 of the record and the hash of the one before it (hex): keep the "
        "newest to tell later that no record was changed or removed."
    )


class AuditPage(BaseModel):
    count: int = Field(description="How many records match, in all.")
    records: list[AuditRecordRead]


api = UnitOfWorkRouter(
    tags=["Audit log"],
    route_class=AuditedRoute,
    dependencies=[Depends(require_admin)],
    responses=THROTTLED,
)


@api.get("/audit", operation_id="auditList")
async def audit_list(
    db: Db,
    action: ActionFilter = None,
    actor: ActorFilter = None,
    offset: Offset = 0,
    limit: Limit = 20,
) -> AuditPage:
    """Every operator action of the portal, this API and the CLI, newest first: who, what, when
    and the settings it changed (before and after). Append-only."""
    count, rows = await audit.page(db, None, action or None, actor or None, offset, limit)
    return AuditPage.model_validate({"count": count, "records": [audit.wire(r) for r in rows]})


@api.get(
    "/programmes/{programme_id}/audit",
    operation_id="programmeAuditList",
    responses=not_found("no programme of that id"),
)
async def programme_audit_list(
    programme: ProgrammePath,
    db: Db,
    action: ActionFilter = None,
    actor: ActorFilter = None,
    offset: Offset = 0,
    limit: Limit = 20,
) -> AuditPage:
    """The programme's operator actions, newest first (as `GET /audit`)."""
    count, rows = await audit.page(db, programme.id, action or None, actor or None, offset, limit)
    return AuditPage.model_validate({"count": count, "records": [audit.wire(r) for r in rows]})
