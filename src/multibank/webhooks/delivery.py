"""Delivery of webhook events (D16; money-movement.md §2.1), safely from any number of processes.

A round runs in three steps, no transaction open while the network is used:

1. claim: take the resources whose oldest pending event is due (state PENDING, next attempt due
   on the programme's clock, no lease running), and of each its oldest pending events up to a
   chain's length, so one resource's events go in the order they happened; set a lease on them
   so no other process sends them meanwhile. PostgreSQL locks the oldest events `FOR UPDATE SKIP
   LOCKED`, and only the holder of a resource's oldest event takes the others; SQLite's write
   lock serialises claimers. Only pending events are read (partial indexes, decision 0062).
2. send each resource's events one after the other, each as soon as the one before it was
   delivered, resources side by side; a resource's chain stops at its first event not
   delivered (its later events wait for it), so order holds. Each: `POST {url}{path}` with the
   payload as recorded, `call-ref`, `published-timestamp` (the programme's clock now),
   `signature` (HMAC-SHA256 of the timestamp) and `signature-v2` (HMAC-SHA256 of call-ref +
   payload + timestamp), both base64, keyed by the programme's webhook secret (a sandbox
   programme's: its API key). 10 s timeout; a redirect is followed only to the
   same scheme, host and port. Only the first 200 characters of the answer are read.
3. record the round's attempts, in one transaction: a 2xx delivers; a connection error, a
   timeout, 408, 409, 425, 429 or a 5xx retries after 10 s x 6^n of the programme clock, five
   times, then FAILED; any other answer is final (FAILED).

A process that dies between 1 and 3 leaves leases that run out (60 s, well over the 10 s
timeout; a chain sends only within half the lease): the next claimer sends the events again
with the same call-refs. Events are delivered at least once, and a receiver dedupes on
call-ref. A round that sent something starts the next at once.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Row,
    Select,
    Update,
    bindparam,
    func,
    insert,
    literal_column,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.destinations import checked_addresses
from multibank.kernel.ids import new_id
from multibank.kernel.loop import PeriodicWorker
from multibank.programmes.models import ApiKey, Programme
from multibank.webhooks.models import (
    DELIVERED,
    FAILED,
    PENDING,
    WebhookAttempt,
    WebhookEvent,
)

log = logging.getLogger("multibank.webhooks")

RETRY_STATUSES = frozenset({408, 409, 425, 429})
MAX_RETRIES = 5
FIRST_DELAY_MS = 10_000
FACTOR = 6
TIMEOUT_SECONDS = 10.0
LEASE_MS = 60_000  # the default of MULTIBANK_WEBHOOKS_LEASE_SECONDS
EXCERPT = 200
MAX_REDIRECTS = 3
MAX_ADDRESSES = 4  # of a name's addresses, the most one attempt tries to connect to


def retry_delay_ms(attempts: int) -> int:
    """The wait after the `attempts`-th failed attempt: 10 s, 1 min, 6 min, 36 min, 3.6 h."""
    return int(FIRST_DELAY_MS * FACTOR ** max(0, attempts - 1))


def signatures(secret: str, call_ref: str, payload: bytes, published: int) -> tuple[str, str]:
    """(`signature`, `signature-v2`) as the reference computes them."""
    key = secret.encode()
    stamp = str(published).encode()
    v1 = hmac.new(key, stamp, hashlib.sha256).digest()
    v2 = hmac.new(key, call_ref.encode() + payload + stamp, hashlib.sha256).digest()
    return base64.b64encode(v1).decode(), base64.b64encode(v2).decode()


async def secret_of(db: AsyncSession, programme: Programme) -> str | None:
    """A live programme's own secret; a sandbox programme's API key (its oldest live one), so
    receivers written for the reference verify unchanged."""
    if programme.mode != "sandbox":
        return programme.webhook_secret
    stmt = (
        select(ApiKey.sandbox_plaintext)
        .where(
            ApiKey.programme_id == programme.id,
            ApiKey.revoked_at.is_(None),
            ApiKey.sandbox_plaintext.is_not(None),
        )
        .order_by(ApiKey.created_at, ApiKey.id)
        .limit(1)
    )
    return (await db.execute(stmt)).scalar_one_or_none()


# 1. claim

# A round takes up to this many resources, and up to CHAIN events of each, oldest first.
HEADS = 50
CHAIN = 20
MAX_ID = 2**63 - 1
# The literal, never a bound parameter: a partial index (`WHERE state = 'PENDING'`, migration
# 0027) serves a statement only when the planner sees that the statement's condition implies
# the index's, which SQLite never assumes of a parameter, nor PostgreSQL in a generic plan.
_IS_PENDING: ColumnElement[str] = literal_column(f"'{PENDING}'")


@dataclass(frozen=True)
class Claimed:
    event_id: int
    url: str
    secret: str | None
    call_ref: str
    payload: bytes
    clock_offset_ms: int
    live: bool
    due_at: int | None = None  # programme clock: the event is not sent before


@functools.lru_cache(maxsize=8)
def claim_queries(
    heads: int, chain: int, sqlite: bool
) -> tuple[Select[int], Select[int, int, str, int]]:
    """The probe and the heads of a round, built once per batch size: building them (the
    aliased self-joins, the subqueries) cost an idle server's round more than running the
    probe, twice a second (decision 0020).

    Both walk pending events only, through the partial indexes of migration 0027, so a round
    costs the same whatever the history of delivered events: the walk in id order runs on
    `ix_webhook_events_pending`; whether an event is the oldest pending one of its resource,
    and which is the `chain`-th, are probes of `ix_webhook_events_pending_resource`, which
    holds no delivered event (decision 0062)."""
    e = WebhookEvent
    earlier = aliased(WebhookEvent)
    later = aliased(WebhookEvent)
    # The oldest pending event of `e`'s resource: a probe of the partial index, as a scalar
    # subquery so that PostgreSQL runs it per event the walk reaches, with the event's own
    # resource as the index's bounds (a NOT EXISTS may become an anti join reading every
    # pending event of the database).
    head = (
        select(earlier.id)
        .where(
            earlier.state == _IS_PENDING,
            earlier.programme_id == e.programme_id,
            earlier.resource == e.resource,
        )
        .order_by(earlier.id)
        .limit(1)
        .scalar_subquery()
    )
    # The last event the resource's chain may take: its `chain`-th pending one from the head
    # (none: every pending one).
    last = (
        select(later.id)
        .where(
            later.state == _IS_PENDING,
            later.programme_id == e.programme_id,
            later.resource == e.resource,
            later.id >= e.id,
        )
        .order_by(later.id)
        .offset(chain - 1)
        .limit(1)
        .scalar_subquery()
    )
    server_now: BindParameter[int] = bindparam("server_now", type_=BigInteger)
    query = (
        select(e.id, e.programme_id, e.resource, func.coalesce(last, MAX_ID))
        .join(Programme, Programme.id == e.programme_id)
        .where(
            e.state == _IS_PENDING,
            e.next_attempt_at <= server_now + Programme.clock_offset_ms,
            or_(e.lease_until.is_(None), e.lease_until < server_now),
            e.id == head,
        )
        .order_by(e.id)
        .limit(heads)
    )
    probe = query.with_only_columns(e.id).limit(1)
    if not sqlite:
        # A head another claimer holds is skipped, and with it its resource: no other event of
        # the resource is its oldest pending one while the head is pending.
        query = query.with_for_update(skip_locked=True, of=e)
    return probe, query


def chains_of(heads: Sequence[Row[int, int, str, int]]) -> CompoundSelect[int]:
    """The ids of each head's chain: the head and its resource's later pending events up to
    its last. One index range of `ix_webhook_events_pending_resource` per chain, each bounded
    on its three columns (an OR of the ranges, or a join with them, can let PostgreSQL read
    every pending event of the programme instead)."""
    e = aliased(WebhookEvent)
    return union_all(
        *(
            select(e.id).where(
                e.state == _IS_PENDING,
                e.programme_id == pid,
                e.resource == resource,
                e.id >= head,
                e.id <= last,
            )
            for head, pid, resource, last in heads
        )
    )


def _lease(ids: list[int], until: int) -> Update:
    """Leases the events of `ids` still pending, answering what sending them needs. Only a
    claimer holding a chain's head leases its chain: on PostgreSQL the heads are locked, on
    SQLite the round holds the write lock."""
    e = WebhookEvent
    return (
        update(e)
        .where(e.id.in_(ids), e.state == _IS_PENDING)
        .values(lease_until=until)
        .returning(
            e.id, e.programme_id, e.resource, e.path, e.call_ref, e.payload, e.next_attempt_at
        )
        .execution_options(synchronize_session=False)
    )


async def claim(
    db: Database,
    server_now: int,
    limit: int = HEADS,
    lease_ms: int = LEASE_MS,
    chain: int = CHAIN,
) -> list[list[Claimed]]:
    """Claims the due work of a round: up to `limit` resources whose oldest pending event is
    due and not leased, and of each its oldest `chain` pending events, leased together.
    Answers each resource's events in their order, resources oldest first."""
    probe, query = claim_queries(limit, chain, db.is_sqlite)
    params = {"server_now": server_now}
    # Most rounds find nothing: a read says so without taking a write lock (on SQLite the
    # transaction below would take the database's only one).
    async with db.read_sessionmaker() as session:
        if (await session.execute(probe, params)).first() is None:
            return []
    out: dict[tuple[int, str], list[Claimed]] = {}
    async with db.transaction() as session:
        heads = (await session.execute(query, params)).all()
        if not heads:
            return []
        ids = list((await session.scalars(chains_of(heads))).all())
        rows = (await session.execute(_lease(ids, server_now + lease_ms))).all()
        pids = {row.programme_id for row in rows}
        programmes = {
            p.id: p
            for p in (await session.scalars(select(Programme).where(Programme.id.in_(pids))))
        }
        secrets = {pid: await secret_of(session, p) for pid, p in programmes.items()}
        for _head, pid, resource, _last in heads:
            out[(pid, resource)] = []
        for row in sorted(rows, key=lambda r: r.id):
            programme = programmes[row.programme_id]
            base = (programme.webhook_url or "").rstrip("/")
            out[(row.programme_id, row.resource)].append(
                Claimed(
                    row.id,
                    f"{base}{row.path}" if base else "",
                    secrets[row.programme_id],
                    row.call_ref,
                    row.payload.encode(),
                    programme.clock_offset_ms,
                    programme.mode != "sandbox",
                    row.next_attempt_at,
                )
            )
    return [events for events in out.values() if events]


# 2. send


@dataclass(frozen=True)
class Result:
    published: int
    duration_ms: int
    status: int | None = None
    error: str | None = None
    excerpt: str | None = None
    retry: bool = False

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


async def send(
    client: httpx.AsyncClient, c: Claimed, published: int, allow_private: bool
) -> Result:
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    if not c.url:
        return Result(published, 0, error="the programme has no webhook URL")
    if c.secret is None:
        return Result(published, 0, error="the programme has no webhook secret")
    # A live programme's events go only to the addresses checked here, resolved once per
    # attempt: the connection is made to one of them (`_post`), so a name that resolves to
    # a public address for the check and to a private one a moment later (DNS rebinding)
    # cannot steer it.
    pinned: list[str] = []
    if c.live and not allow_private:
        pinned, why = await checked_addresses(c.url)
        if why is not None:
            return Result(published, took(), error=f"not sent: {why}")
    v1, v2 = signatures(c.secret, c.call_ref, c.payload, published)
    headers = {
        "content-type": "application/json",
        "call-ref": c.call_ref,
        "published-timestamp": str(published),
        "signature": v1,
        "signature-v2": v2,
    }
    url = c.url
    try:
        for _ in range(MAX_REDIRECTS + 1):
            answer = await _post(client, url, pinned, c.payload, headers)
            try:
                excerpt = await _excerpt(answer)
                status = answer.status_code
                location = answer.headers.get("location")
            finally:
                await answer.aclose()
            if status in (307, 308) and location:
                target = urljoin(url, location)
                if _origin(target) != _origin(url):
                    return Result(
                        published,
                        took(),
                        status,
                        f"redirect to another host not followed: {_origin(target)}",
                        excerpt,
                    )
                url = target  # the same host: the same checked addresses
                continue
            return Result(published, took(), status, None, excerpt, _retryable(status))
        return Result(published, took(), status, "too many redirects", excerpt)
    except httpx.TimeoutException:
        return Result(published, took(), error="timed out after 10 s", retry=True)
    except httpx.HTTPError as exc:
        return Result(published, took(), error=f"{type(exc).__name__}: {exc}"[:300], retry=True)


async def _post(
    client: httpx.AsyncClient,
    url: str,
    pinned: list[str],
    payload: bytes,
    headers: dict[str, str],
) -> httpx.Response:
    """`POST url`, its answer streaming (the caller closes it). With `pinned` addresses the
    connection goes to them, in order until one connects, never to what the name resolves to
    now: the URL names the address, the `Host` header and TLS (SNI and the certificate's
    name, httpx's `sni_hostname` extension) the host."""
    target = httpx.URL(url)
    host = target.raw_host.decode("ascii")
    if not pinned or host in pinned:  # no check, or the URL names its address itself
        request = client.build_request("POST", target, content=payload, headers=headers)
        return await client.send(request, stream=True)
    extensions = {"sni_hostname": host} if target.scheme == "https" else {}
    # `connection: close`: the client's pool knows a connection by its address, not by the
    # host its TLS session was made for; reused for another host on the same address (a
    # CDN's), one programme's events would travel in a session made for another's.
    named = {**headers, "host": target.netloc.decode("ascii"), "connection": "close"}
    failure: httpx.ConnectError | None = None
    for address in pinned[:MAX_ADDRESSES]:
        request = client.build_request(
            "POST",
            target.copy_with(host=address),
            content=payload,
            headers=named,
            extensions=extensions,
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:  # refused or unreachable: the next address
            failure = exc
    assert failure is not None
    raise failure


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or ""), parts.port


async def _excerpt(answer: httpx.Response) -> str:
    """The first characters of the answer, never the whole of a large one."""
    buf = b""
    async for chunk in answer.aiter_bytes():
        buf += chunk
        if len(buf) >= EXCERPT:
            break
    return buf[:EXCERPT].decode("utf-8", errors="replace")


# 3. record


def _delivered_update() -> Update:
    """The update of one delivered event, run once for all of a round's (executemany)."""
    t = WebhookEvent.metadata.tables[WebhookEvent.__tablename__]
    return (
        update(t)
        .where(t.c.id == bindparam("event_id"), t.c.state == PENDING)
        .values(
            state=DELIVERED,
            attempts=t.c.attempts + 1,
            lease_until=None,
            last_status=bindparam("status"),
            last_error=None,
            delivered_at=bindparam("published"),
            next_attempt_at=None,
        )
    )


async def record(
    db: Database, sent: list[tuple[Claimed, Result]], unsent: Sequence[int] = ()
) -> list[str]:
    """Writes the attempts of a round and their events' new states, in one transaction, and
    gives back the leases of the `unsent` events (a chain stopped before them); answers each
    sent event's state.

    Deliveries, nearly all of a busy round, are written by three statements whatever their
    number: which are still pending (locked on PostgreSQL), their updates, their attempts. An
    event no longer pending (redelivered or settled meanwhile) is left as it is, as is every
    other outcome's event, each written on its own."""
    states: dict[int, str] = {}
    async with db.transaction() as session:
        delivered = {c.event_id: (c, r) for c, r in sent if r.delivered}
        if delivered:
            e = WebhookEvent
            pending = select(e.id).where(e.id.in_(list(delivered)), e.state == PENDING)
            if not db.is_sqlite:
                pending = pending.with_for_update()
            still = set((await session.scalars(pending)).all())
            if still:
                ordered = [delivered[i] for i in sorted(still)]
                await session.execute(
                    _delivered_update(),
                    [
                        {"event_id": c.event_id, "status": r.status, "published": r.published}
                        for c, r in ordered
                    ],
                )
                await session.execute(
                    insert(WebhookAttempt), [_attempt(c, r, DELIVERED) for c, r in ordered]
                )
                states.update(dict.fromkeys(still, DELIVERED))
        for c, result in sent:
            if c.event_id not in states:
                states[c.event_id] = await _record_one(session, c, result)
        if unsent:
            await session.execute(
                update(WebhookEvent)
                .where(WebhookEvent.id.in_(unsent), WebhookEvent.state == PENDING)
                .values(lease_until=None)
                .execution_options(synchronize_session=False)
            )
    return [states[c.event_id] for c, _ in sent]


def _attempt(c: Claimed, result: Result, outcome: str) -> dict[str, Any]:
    return {
        "id": new_id(),
        "event_id": c.event_id,
        "url": c.url[:2100],
        "attempted_at": result.published,
        "duration_ms": result.duration_ms,
        "status_code": result.status,
        "error": result.error,
        "excerpt": result.excerpt,
        "outcome": outcome,
    }


async def _record_one(session: AsyncSession, c: Claimed, result: Result) -> str:
    event = await session.get(WebhookEvent, c.event_id, populate_existing=True)
    if event is None or event.state != PENDING:  # redelivered or settled meanwhile
        return event.state if event is not None else FAILED
    event.attempts += 1
    event.lease_until = None
    event.last_status = result.status
    event.last_error = result.error
    if result.delivered:
        event.state = DELIVERED
        event.delivered_at = result.published
        event.next_attempt_at = None
        outcome = DELIVERED
    elif result.retry and event.attempts <= MAX_RETRIES:
        event.next_attempt_at = result.published + retry_delay_ms(event.attempts)
        outcome = "RETRY"
    else:
        event.state = FAILED
        event.next_attempt_at = None
        outcome = FAILED
    session.add(WebhookAttempt(**_attempt(c, result, outcome)))
    return event.state


async def _send_chain(
    client: httpx.AsyncClient,
    clock: Clock,
    chain: list[Claimed],
    allow_private: bool,
    send_until: float,
) -> list[tuple[Claimed, Result]]:
    """Sends one resource's claimed events one after the other, each only once the one before
    it was delivered: the chain stops at its first event not delivered (later ones wait for
    it: order), at one not yet due (its retry time, which may follow a redelivery of an
    earlier event), and when the round's sending time is spent (its leases must outlive it)."""
    out: list[tuple[Claimed, Result]] = []
    for c in chain:
        now = clock.now_ms(c.clock_offset_ms)
        if out and (
            not out[-1][1].delivered
            or (c.due_at is not None and c.due_at > now)
            or time.monotonic() >= send_until
        ):
            break
        out.append((c, await send(client, c, now, allow_private)))
    return out


async def deliver_due(
    db: Database,
    clock: Clock,
    client: httpx.AsyncClient | Sequence[httpx.AsyncClient],
    *,
    limit: int = HEADS,
    chain: int = CHAIN,
    allow_private: bool = False,
    lease_ms: int = LEASE_MS,
) -> int:
    """One round: claims the due work of up to `limit` resources (up to `chain` events of
    each), sends each resource's events in order, resources side by side, and records them.
    Answers how many events were sent. With several clients, the chains take them in turn.
    """
    clients = [client] if isinstance(client, httpx.AsyncClient) else list(client)
    started = time.monotonic()
    chains = await claim(db, clock.system_ms(), limit, lease_ms, chain)
    if not chains:
        return 0
    # A chain starts a send only while the sends it starts end, timed out at worst, within
    # half the lease: the round's record then lands well before another process may claim
    # the same events again. The head of each chain is always sent (as a round always did).
    send_until = started + (lease_ms / 2000) - TIMEOUT_SECONDS
    results = await asyncio.gather(
        *(
            _send_chain(clients[i % len(clients)], clock, events, allow_private, send_until)
            for i, events in enumerate(chains)
        )
    )
    sent = [pair for pairs in results for pair in pairs]
    unsent = [
        c.event_id
        for events, pairs in zip(chains, results, strict=True)
        for c in events[len(pairs) :]
    ]
    for (c, result), state in zip(sent, await record(db, sent, unsent), strict=True):
        if state == FAILED:
            log.warning(
                "webhook event failed",
                extra={"event_id": str(c.event_id), "status": result.status, "error": result.error},
            )
    return len(sent)


# The clients a worker sends through, the chains of a round taking them in turn: a client's
# connection pool looks at each of its connections and waiting requests at every request and
# answer (httpcore), so one client under all of a round's chains spends more CPU a delivery in
# its pool than in the delivery itself; a few connections each keep that small (decision 0062).
LANES = 10


def new_clients(lanes: int = LANES) -> list[httpx.AsyncClient]:
    """The worker's clients: one TLS context (loading the trusted certificates once), each
    client keeping alive as many connections as a round may use at once."""
    tls = httpx.create_ssl_context()
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=HEADS)
    return [
        httpx.AsyncClient(
            timeout=httpx.Timeout(TIMEOUT_SECONDS),
            follow_redirects=False,
            verify=tls,
            limits=limits,
        )
        for _ in range(lanes)
    ]


class WebhookWorker(PeriodicWorker):
    """The delivery loop every server process runs (the app's lifespan), with its clients."""

    name = "multibank-webhooks"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        interval: float,
        allow_private: bool,
        lease_ms: int = LEASE_MS,
    ) -> None:
        super().__init__(interval, log)
        self.db = db
        self.clock = clock
        self.allow_private = allow_private
        self.lease_ms = lease_ms
        self.clients: list[httpx.AsyncClient] = []

    async def round(self) -> bool:
        if not self.clients:
            self.clients = new_clients()
        sent = await deliver_due(
            self.db,
            self.clock,
            self.clients,
            allow_private=self.allow_private,
            lease_ms=self.lease_ms,
        )
        # A round that sent something starts the next at once: a resource's next events
        # (after its chain) are due now, and other resources' may be waiting.
        return sent > 0

    async def stop(self) -> None:
        await super().stop()
        clients, self.clients = self.clients, []
        for client in clients:
            await client.aclose()
