"""Database round trips of an authenticated read (issue 11, goal 5): counted, not timed.

Every statement the server sends is counted on both of its engines, and so is every transaction
it opens on the database (BEGIN, COMMIT, ROLLBACK are round trips too). An authenticated read of
one account, of the identity, or of a page of accounts costs at most 2; the credentials checks
cost none while what the process knows of them is fresh, and a renewal is written at most once
a second.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql

from multibank.api import authcache, deps
from multibank.api.authcache import cache_of
from multibank.container import Container
from tests.api.fees_support import charge
from tests.factories import PASSWORD, deposit, login, open_account, verified

RENEWAL = "UPDATE auth_sessions"


async def _end_sessions_elsewhere(container: Container, p: Any) -> None:
    """The programme's sessions end behind this process's back, as another process would."""
    async with container.db.engine.begin() as conn:
        await conn.execute(
            text("UPDATE auth_sessions SET ended_at = 1 WHERE programme_id = :p"), {"p": int(p.id)}
        )


_REFS = "SELECT count(*) FROM idempotency_records WHERE ref = :ref"


async def _scalar(container: Container, sql: str, **params: Any) -> Any:
    """One value read on a connection of its own (ids given as text are compared as numbers)."""
    bound = {k: int(v) if k == "id" else v for k, v in params.items()}
    async with container.db.engine.connect() as conn:
        return (await conn.execute(text(sql), bound)).scalar_one()


class Trips:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.texts: list[str] = []  # each statement's SQL, white space collapsed

    @property
    def count(self) -> int:
        return len(self.statements)


@contextmanager
def counting(container: Container) -> Iterator[Trips]:
    trips = Trips()
    # One listener per pool: on PostgreSQL the read engine is the same engine with other
    # options, whose events its parent's listeners already see.
    engines = {
        id(e.sync_engine.pool): e.sync_engine
        for e in (container.db.read_engine, container.db.engine)
    }

    def on_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # The verb, and for an UPDATE its table: a renewal is "UPDATE auth_sessions".
        words = statement.split()
        verb = words[0].upper() if words else ""
        trips.statements.append(f"UPDATE {words[1]}" if verb == "UPDATE" else verb)
        trips.texts.append(" ".join(words))

    def on_begin(conn: Any) -> None:
        # A transaction the driver really opens: not one in autocommit.
        if not conn._is_autocommit_isolation() and conn.engine.dialect.name != "sqlite":
            # (SQLite's BEGIN IMMEDIATE is a statement, counted above.)
            trips.statements.append("BEGIN")

    def on_end(name: str) -> Any:
        def listener(conn: Any) -> None:
            if not conn._is_autocommit_isolation():  # in autocommit the driver sends nothing
                trips.statements.append(name)

        return listener

    on_commit, on_rollback = on_end("COMMIT"), on_end("ROLLBACK")
    for engine in engines.values():
        event.listen(engine, "before_cursor_execute", on_statement)
        event.listen(engine, "begin", on_begin)
        event.listen(engine, "commit", on_commit)
        event.listen(engine, "rollback", on_rollback)
    try:
        yield trips
    finally:
        for engine in engines.values():
            event.remove(engine, "before_cursor_execute", on_statement)
            event.remove(engine, "begin", on_begin)
            event.remove(engine, "commit", on_commit)
            event.remove(engine, "rollback", on_rollback)


@pytest.fixture(autouse=True)
def unhurried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round trips are counted, not timed: on a loaded machine the half second a credential is
    trusted, or the second between renewals, must not run out between two reads of a test."""
    monkeypatch.setattr(authcache, "FRESH_MS", 60_000.0)
    monkeypatch.setattr(deps, "RENEW_EVERY_MS", 100_000)


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_an_authenticated_read_costs_at_most_two_round_trips(
    client, programme, container: Container, base: str
) -> None:
    p = await programme()
    ident = await verified(client, p, "corporates")
    account = await open_account(client, ident, "EUR")
    # One statement each (decision 0019): an account, the identity with its root user, and a
    # page with its count (a window count in each row).
    reads = {
        f"{base}/managed_accounts/{account['id']}": 1,
        f"{base}/corporates": 1,
        f"{base}/managed_accounts?limit=10": 1,
    }
    for path in reads:  # a first read of each: the process learns the key and the session
        assert (await client.get(path, headers=ident.headers)).status_code == 200
    for path, expected in reads.items():
        with counting(container) as trips:
            r = await client.get(path, headers=ident.headers)
        assert r.status_code == 200, r.text
        assert trips.count == expected, (path, trips.statements)
        assert RENEWAL not in trips.statements  # renewed less than a period ago


async def _read_then_a_period_later(client, programme, path: str) -> dict[str, str]:
    """A logged-in identity that read `path` once, a renewal period ago by the programme's clock
    (100 s here, 1 s in service); its headers."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    assert (await client.get(path, headers=ident.headers)).status_code == 200
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 101}
    )
    assert r.status_code == 200
    return ident.headers


async def test_a_read_renews_its_session_once_per_period(client, programme, container) -> None:
    path = "/multi/corporates"
    headers = await _read_then_a_period_later(client, programme, path)
    with counting(container) as trips:
        assert (await client.get(path, headers=headers)).status_code == 200
        assert (await client.get(path, headers=headers)).status_code == 200
    assert trips.statements.count(RENEWAL) == 1, trips.statements


async def test_concurrent_reads_that_find_their_credentials_stale_read_and_renew_once(
    client, programme, container
) -> None:
    """Everything remembered of a key and a session goes stale for every request in flight at
    once (decision 0022): sixteen reads at that moment look the key and the session up once,
    and renew the session once, not sixteen times each."""
    path = "/multi/corporates"
    headers = await _read_then_a_period_later(client, programme, path)
    cache_of(container).clear(programmes=True, sessions=True)
    with counting(container) as trips:
        answers = await asyncio.gather(*(client.get(path, headers=headers) for _ in range(16)))
    assert [a.status_code for a in answers] == [200] * 16
    assert trips.statements.count(RENEWAL) == 1, trips.statements
    # The key's programme, the session, and each read's own statement.
    assert trips.statements.count("SELECT") == 2 + 16, trips.statements


async def test_a_write_renews_in_its_own_transaction_once_per_period(
    client, programme, container
) -> None:
    """A write's renewal is written in its own transaction, committed with its work. On
    PostgreSQL every write renews (its row lock serialises a session's writes); on SQLite,
    where every write holds the one write lock anyway, a write renews once per period as a
    read does, and otherwise reads in its transaction that the session is still live
    (decision 0030)."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    account = await open_account(client, ident, "EUR")
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 101}
    )
    assert r.status_code == 200
    path = f"/multi/managed_accounts/{account['id']}"
    for name in ("renamed", "renamed again"):
        with counting(container) as trips:
            r = await client.patch(path, headers=ident.headers, json={"friendlyName": name})
        assert r.status_code == 200, r.text
        assert r.json()["friendlyName"] == name
        assert "COMMIT" in trips.statements and "ROLLBACK" not in trips.statements
        if name == "renamed" or not container.db.is_sqlite:
            # The session's own renewal, besides the account's update, committed with it.
            assert trips.statements.count(RENEWAL) == 1, trips.statements
        else:
            # Renewed a moment ago: confirmed live (one SELECT) before the update, not renewed.
            assert RENEWAL not in trips.statements, trips.statements
            assert trips.statements.index("SELECT") < trips.statements.index("COMMIT")


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_a_plain_login_is_its_check_and_one_write(
    client, programme, container: Container, base: str
) -> None:
    """A right password with nothing else to do (decision 0020): the credential read before
    the hash, then one INSERT that opens the session if the user is still as read, committed
    on its own. On SQLite that INSERT is the writer's, with its BEGIN IMMEDIATE and COMMIT."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    with counting(container) as trips:
        r = await login(client, p, ident.email, base=base)
    assert r.status_code == 200, r.text
    writes = [s for s in trips.statements if s not in ("BEGIN", "COMMIT")]
    if container.db.is_sqlite:
        writes = [s for s in writes if s != "BEGIN"]  # BEGIN IMMEDIATE, counted by its verb
    assert writes == ["SELECT", "INSERT"], trips.statements
    assert "ROLLBACK" not in trips.statements
    # The token it answered works.
    token = r.json()["token"]
    headers = {**p.headers, "Authorization": f"Bearer {token}"}
    assert (await client.get(f"{base}/corporates", headers=headers)).status_code == 200


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_a_login_after_a_login_is_one_write(
    client, programme, container: Container, base: str
) -> None:
    """The user's hash is remembered from their last login on this process (decision 0025):
    the next login's password is checked against it, and its one INSERT, which opens the
    session only if the user still has that hash, is all it sends."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    assert (await login(client, p, ident.email, base=base)).status_code == 200
    with counting(container) as trips:
        r = await login(client, p, ident.email, base=base)
    assert r.status_code == 200, r.text
    writes = [s for s in trips.statements if s not in ("BEGIN", "COMMIT")]
    assert writes == ["INSERT"], trips.statements
    token = r.json()["token"]
    headers = {**p.headers, "Authorization": f"Bearer {token}"}
    assert (await client.get(f"{base}/corporates", headers=headers)).status_code == 200


async def test_a_login_with_a_ref_keeps_its_answer(client, programme, container: Container) -> None:
    """With an idempotency-ref the login runs in the request's transaction, which stores its
    answer: the same ref answers the same token, and the replay writes nothing."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    headers = {**p.headers, "idempotency-ref": "login-once"}
    body = {"email": ident.email, "password": {"value": PASSWORD}}
    first = await client.post("/multi/login_with_password", headers=headers, json=body)
    assert first.status_code == 200, first.text
    with counting(container) as trips:
        again = await client.post("/multi/login_with_password", headers=headers, json=body)
    assert again.status_code == 200, again.text
    assert again.json()["token"] == first.json()["token"]
    # The replay's claim found the stored answer and its transaction wrote nothing.
    assert trips.statements[-1] == "ROLLBACK" and "COMMIT" not in trips.statements, trips.statements


def test_each_read_view_selects_every_field_it_promises() -> None:
    """The plain rows a read answers from (decision 0019) carry every attribute their protocol
    names: a field added to a view but not to its statement fails here, not in a client."""
    from multibank.accounts import repository as accounts
    from multibank.identities import repository as identities

    def promised(protocol: type) -> set[str]:
        return {name for name, value in vars(protocol).items() if isinstance(value, property)}

    assert promised(accounts.AccountView) <= set(accounts._VIEW.selected_columns.keys())
    labels = set(identities._VIEW_WITH_ROOT.selected_columns.keys())
    assert {f"i_{name}" for name in promised(identities.IdentityView)} <= labels
    assert {f"u_{name}" for name in promised(identities.RootView)} <= labels


@pytest.mark.parametrize("with_ref", [False, True])
async def test_a_write_not_due_to_renew_is_refused_once_its_session_ended_elsewhere(
    client, programme, container, with_ref: bool
) -> None:
    """The session was renewed a moment ago, and this process still remembers it as live; it
    is ended behind its back (as another process would). A write that does not renew it still
    reads it in its own transaction (SQLite, decision 0030), or renews it (PostgreSQL): 401,
    and nothing of the write is kept, not even its ref."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    account = await open_account(client, ident, "EUR")
    path = f"/multi/managed_accounts/{account['id']}"
    assert (await client.get(path, headers=ident.headers)).status_code == 200
    await _end_sessions_elsewhere(container, p)
    headers = {**ident.headers, **({"idempotency-ref": "ended-elsewhere"} if with_ref else {})}
    with counting(container) as trips:
        r = await client.patch(path, headers=headers, json={"friendlyName": "never"})
    assert r.status_code == 401, r.text
    assert "UPDATE managed_accounts" not in trips.statements, trips.statements
    name = await _scalar(
        container, "SELECT friendly_name FROM managed_accounts WHERE id = :id", id=account["id"]
    )
    refs = await _scalar(container, _REFS, ref="ended-elsewhere")
    assert name == account["friendlyName"] and refs == 0


async def charged_twice(client: Any, p: Any, base: str) -> tuple[Any, dict[str, Any]]:
    """A corporate with 1000 on an account, charged twice: the programme's first charge opens
    its revenue account, the second reads it; the next ones know its id."""
    ident = await verified(client, p, "corporates", base)
    account = await open_account(client, ident, "EUR", base)
    await deposit(client, p, account["id"], 1000)
    for _ in range(2):
        warm = await charge(client, ident, account["id"], base, ref=f"ref-{secrets.token_hex(8)}")
        assert warm.status_code in (200, 204), warm.text
    return ident, account


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_a_charge_with_a_ref_stores_its_answer_in_its_transaction(
    client, programme, container, base
) -> None:
    """The ref's row holds the answer once the charge has committed, and the replay is the
    first answer. On PostgreSQL the charge is one transaction: the renewal, the claim, the
    lookup and the movement in one statement (decision 0064), the answer, the commit."""
    ident, account = await charged_twice(client, await programme(), base)
    key = f"ref-{secrets.token_hex(8)}"
    with counting(container) as trips:
        first = await charge(client, ident, account["id"], base, ref=key)
    assert first.status_code in (200, 204), first.text
    if not container.db.is_sqlite:
        expected = ["BEGIN", "WITH", "UPDATE idempotency_records", "COMMIT"]
        assert trips.statements == expected, trips.texts
        _is_the_whole_charge(trips.texts[0], claim=True)
    assert "COMMIT" in trips.statements and "ROLLBACK" not in trips.statements, trips.statements
    async with container.db.engine.connect() as conn:
        stored = (
            await conn.execute(
                text("SELECT status_code, body FROM idempotency_records WHERE ref = :ref"),
                {"ref": key},
            )
        ).one()
    assert (stored.status_code, bytes(stored.body or b"")) == (first.status_code, first.content)
    again = await charge(client, ident, account["id"], base, ref=key)
    assert (again.status_code, again.content) == (first.status_code, first.content)
    r = await client.get(f"{base}/managed_accounts/{account['id']}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 700


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_a_charge_without_a_ref_is_one_transaction_of_three_statements(
    client, programme, container, base
) -> None:
    """A charge without a ref on PostgreSQL: BEGIN, one statement (its session's renewal, its
    lookup of fee group, fee type, account and revenue shard, and its movement: decision 0064),
    COMMIT; three round trips, as before issue 33. On SQLite its lookup is one statement and
    its movement a statement per leg and one for the postings."""
    ident, account = await charged_twice(client, await programme(), base)
    with counting(container) as trips:
        r = await charge(client, ident, account["id"], base)
    assert r.status_code in (200, 204), r.text
    if container.db.is_sqlite:
        assert trips.statements[0] == "BEGIN" and trips.statements[-1] == "COMMIT", trips.texts
        lookups = [t for t in trips.texts if t.startswith("SELECT") and "fee_types" in t]
        assert len(lookups) == 1, trips.texts
    else:
        assert trips.statements == ["BEGIN", "WITH", "COMMIT"], trips.texts
        _is_the_whole_charge(trips.texts[0], claim=False)
    r = await client.get(f"{base}/managed_accounts/{account['id']}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 700


def _is_the_whole_charge(sql: str, claim: bool) -> None:
    """One statement renews the session (and claims the ref), looks the fee up, moves the money
    and appends the postings."""
    parts = [
        "UPDATE auth_sessions",
        "FROM identities",
        "fee_types",
        "UPDATE ledger_accounts",
        "INSERT INTO ledger_transactions",
        "INSERT INTO postings",
    ]
    assert all(part in sql for part in parts), sql
    assert ("INSERT INTO idempotency_records" in sql) is claim, sql


# A read of a session's row (`tokens.read_session`), as the auth cache loads it.
_READS_SESSION = "auth_sessions.token_type"


def _forgotten_long_ago(container: Container) -> None:
    """Whatever this process remembers of sessions was read long ago (stale for a read)."""
    for entry in cache_of(container).sessions.values():
        entry.seen_at -= 3_600_000


@pytest.mark.parametrize("with_ref", [False, True])
async def test_a_charge_on_a_session_remembered_long_ago_does_not_read_it_again(
    client, programme, container, with_ref: bool
) -> None:
    """A charge checks its session live in its own transaction (its renewal, or the claim of
    its ref: decision 0034): what this process remembers of the session serves however old it
    is, and no read of it is sent first. A read of the same session still reads it again."""
    ident, account = await charged_twice(client, await programme(), "/multi")
    _forgotten_long_ago(container)
    ref = f"ref-{secrets.token_hex(8)}" if with_ref else None
    with counting(container) as trips:
        r = await charge(client, ident, account["id"], ref=ref)
    assert r.status_code == 200, r.text
    # (Without a ref, on SQLite, its check is a read of the session's liveness, not its row.)
    assert not any(_READS_SESSION in t for t in trips.texts), trips.texts
    _forgotten_long_ago(container)
    with counting(container) as trips:
        r = await client.get(f"/multi/managed_accounts/{account['id']}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 700
    assert any(_READS_SESSION in t for t in trips.texts), trips.texts


@pytest.mark.parametrize("with_ref", [False, True])
@pytest.mark.parametrize("fee_type", ["ADMIN_FEE", "NO_SUCH_FEE"])
async def test_a_charge_on_a_session_ended_elsewhere_is_refused_however_old_what_is_remembered(
    client, programme, container, with_ref: bool, fee_type: str
) -> None:
    """The session ended in another process, and this one remembers it, long ago, as live: the
    charge's own check refuses it (401, before a refusal of the charge itself), nothing moves
    and its ref is not kept; the session is forgotten, and the next call reads it again."""
    p = await programme()
    ident, account = await charged_twice(client, p, "/multi")
    _forgotten_long_ago(container)
    await _end_sessions_elsewhere(container, p)
    ref = "ended-long-ago" if with_ref else None
    r = await charge(client, ident, account["id"], ref=ref, fee_type=fee_type)
    assert r.status_code == 401, r.text
    ours = [e for e in cache_of(container).sessions.values() if e.row.identity_id == int(ident.id)]
    assert ours == []
    available = await _scalar(
        container, "SELECT available FROM ledger_accounts WHERE id = :id", id=account["id"]
    )
    assert (available, await _scalar(container, _REFS, ref="ended-long-ago")) == (800, 0)


@pytest.mark.parametrize("with_ref", [False, True])
async def test_a_charge_its_account_cannot_pay_on_a_session_ended_elsewhere_is_a_401(
    client, programme, container, with_ref: bool
) -> None:
    """The charge's first write carries its checks (decision 0034) and changes nothing; what
    refused it is then read in order: the session first (401, as when it went first), not the
    funds (409). With the session live, the funds are the answer; nothing is written either way."""
    p = await programme()
    ident, _ = await charged_twice(client, p, "/multi")
    empty = await open_account(client, ident, "EUR")

    async def written() -> tuple[int, int]:
        async with container.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT (SELECT count(*) FROM postings),"
                        " (SELECT count(*) FROM idempotency_records)"
                    )
                )
            ).one()
        return int(row[0]), int(row[1])

    before = await written()
    ref = "cannot-pay" if with_ref else None
    r = await charge(client, ident, empty["id"], ref=ref)
    assert r.status_code == 409 and r.json()["errorCode"] == "FUNDS_INSUFFICIENT", r.text
    assert (await written())[0] == before[0]
    await _end_sessions_elsewhere(container, p)
    before = await written()
    r = await charge(client, ident, empty["id"], ref=f"{ref}-again" if ref else None)
    assert r.status_code == 401, r.text
    assert await written() == before


async def test_a_page_of_accounts_keeps_one_plan_on_postgresql(
    client, programme, container: Container
) -> None:
    """PostgreSQL plans a prepared statement anew for each of its first five executions, then
    keeps its generic plan unless that costs more than the custom plans did, planning included.
    A page by LIMIT $n OFFSET $m costs its generic plan as if an unknown offset skipped rows:
    on a small database (tables never analysed, as a sandbox's are) every page was planned
    again, half of what it cost the server (decision 0035). Numbered rows cost the same with
    the page unknown, and their pages are still the right ones."""
    if container.db.is_sqlite:
        pytest.skip("SQLite does not keep plans across executions")
    from multibank.accounts import repository

    p = await programme()
    ident = await verified(client, p, "corporates")
    ids = [(await open_account(client, ident, "EUR"))["id"] for _ in range(3)]
    me = (await client.get("/multi/corporates", headers=ident.headers)).json()
    owner = (int(p.id), int(me["id"]["id"]))
    pages = {}
    async with container.db.transaction() as session:
        for offset, limit in [(0, 10), (1, 1), (0, 2), (2, 100), (1, 2), (3, 10)]:
            total, rows = await repository.page(
                session, *owner, repository.Filters(), offset, limit
            )
            pages[offset, limit] = (total, [str(row.id) for row in rows])
        # The statement the server sends, its named parameters numbered in their order.
        named = str(repository._VIEW_PAGE_NUMBERED.compile(dialect=postgresql.dialect()))
        names: list[str] = []

        def number(found: re.Match[str]) -> str:
            names.append(found.group(1))
            return f"${len(names)}"

        sql = re.sub(r"%\((\w+)\)s", number, named)
        await session.execute(text(f"PREPARE page_under_test AS {sql}"))
        # The first page of ten (`limit` is LIMIT's, `end` the numbered rows' last).
        params = {"programme_id": owner[0], "identity_id": owner[1]}
        params |= {"offset": 0, "limit": 10, "end": 10}
        arguments = ", ".join(str(params[name]) for name in names)
        costs = {}
        for mode in ("force_custom_plan", "force_generic_plan"):
            await session.execute(text(f"SET LOCAL plan_cache_mode = {mode}"))
            explained = await session.execute(
                text(f"EXPLAIN (FORMAT JSON) EXECUTE page_under_test({arguments})")
            )
            costs[mode] = explained.scalar_one()[0]["Plan"]["Total Cost"]
        await session.rollback()
    assert pages == {
        (0, 10): (3, ids),
        (1, 1): (3, ids[1:2]),
        (0, 2): (3, ids[:2]),
        (2, 100): (3, ids[2:]),
        (1, 2): (3, ids[1:3]),
        (3, 10): (3, []),  # past the last row: its count asked for on its own
    }
    assert costs["force_generic_plan"] <= costs["force_custom_plan"], costs
