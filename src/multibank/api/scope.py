"""One object per request, made by the route class (`api.routing.UnitOfWorkRoute`) and kept in
the ASGI scope under one key: the request's database session, its programme and caller, its
idempotency claim, and the portal's bits. Dependencies and services read and write its fields
instead of names in `request.state` (decision 0063).

The session is made on first use (`session`), from the read engine for a GET or HEAD and from
the writer's for anything else: a request refused before it needs the database (a missing or
unknown key, a token this process knows is not live) makes none, and a request has at most this
one session of its own. The loads shared between requests (a key's programme, a session's row,
`api.authcache`) run on short read sessions of their own, as they serve other requests too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection, Request

from multibank.kernel.db import Database
from multibank.kernel.idempotency import Claim
from multibank.kernel.tokens import AuthSession
from multibank.programmes.models import Programme

# The key of the request's `RequestScope` in the ASGI scope.
SCOPE_KEY = "multibank.request"


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated caller (api/deps.py `authenticate`)."""

    programme: Programme
    session: AuthSession
    now_ms: int  # the programme's clock when the request was authenticated


@dataclass(slots=True, eq=False)
class RequestScope:
    """What one request knows of itself. The fields below `opened` are per attempt: a write run
    again after a lost race (api/routing.py) starts them afresh (`next_attempt`)."""

    database: Database
    read_only: bool  # GET or HEAD: its statements run in autocommit on the read engine
    # The request's session, once something asked for it (`session`); None before.
    opened: AsyncSession | None = None
    caller: Caller | None = None  # authenticated once, however many dependencies ask
    # A logged-in write's claim of its `idempotency-ref`, sent with its session's renewal:
    # the claim's values and the row it took (None: the ref was taken already).
    claim_outcome: tuple[dict[str, Any], Claim | None] | None = None
    idempotency_record: Claim | None = None  # the claim this request owns; its answer goes there
    # Kept across attempts: a programme is a read-only snapshot, the rest is set again by the
    # dependencies that made it when a write runs again.
    programme: Programme | None = None
    password_check: Any = None  # a login's password, checked before its transaction begins
    audit_watch: Any = None  # the portal's operator API: what a write is about (portal/auditing)

    @property
    def session(self) -> AsyncSession:
        """The request's session, made at the first call: no statement runs until one is
        executed on it (a write's transaction begins at its first statement)."""
        opened = self.opened
        if opened is None:
            database = self.database
            maker = database.read_sessionmaker if self.read_only else database.sessionmaker
            opened = self.opened = maker()
        return opened

    def in_transaction(self) -> bool:
        """Whether the request's session holds a transaction (and so its connection)."""
        opened = self.opened
        return opened is not None and opened.in_transaction()

    def next_attempt(self) -> None:
        """Forgets what one run of a write learnt, before it runs again: its session (closed by
        then), its caller (whose renewal was rolled back) and its claim."""
        self.opened = None
        self.caller = None
        self.claim_outcome = None
        self.idempotency_record = None


def scope_of(request: HTTPConnection) -> RequestScope:
    """The request's scope object; every route of the server's APIs has one
    (`api.routing.UnitOfWorkRouter`, tests/api/test_request_scope.py)."""
    scope: RequestScope = request.scope[SCOPE_KEY]
    return scope


async def request_scope(request: Request) -> RequestScope:
    """The one dependency that gives the request's scope object."""
    return scope_of(request)


Scope = Annotated[RequestScope, Depends(request_scope)]
