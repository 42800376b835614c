"""The idempotency-ref store against the real database (SQLite or PostgreSQL)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select

from multibank.container import Container
from multibank.kernel.db import Database
from multibank.kernel.errors import BadRequest, PayloadTooLarge
from multibank.kernel.idempotency import (
    PAYLOAD_MISMATCH,
    Claim,
    IdempotencyRecord,
    IdempotencyStore,
    StoredResponse,
    payload_hash,
)
from multibank.kernel.ids import new_id

BODY = b'{"amount": {"currency": "EUR", "amount": 100}, "description": "rent"}'
RESPONSE = b'{"id": "123", "state": "COMPLETED"}'
TIMEOUT = 15  # seconds; a lock that is never released fails the test instead of hanging it


def _key(programme_id: int, ref: str = "ref-1", **over: Any) -> dict[str, Any]:
    key: dict[str, Any] = {
        "programme_id": programme_id,
        "caller": "user:1",
        "operation": "POST /outgoing_wire_transfers",
        "ref": ref,
        "body_hash": payload_hash(BODY),
        "now_ms": 1_700_000_000_000,
    }
    key.update(over)
    return key


async def _first(container: Container, key: dict[str, Any], body: bytes = RESPONSE) -> None:
    """One complete request: claims the ref, stores its response, commits."""
    async with container.db.transaction() as s:
        store = IdempotencyStore(s)
        record = await store.begin(**key)
        assert isinstance(record, Claim)
        await store.complete(record, 200, "application/json", body)


async def _begin(container: Container, key: dict[str, Any]) -> StoredResponse | Claim:
    async with container.db.transaction() as s:
        return await IdempotencyStore(s).begin(**key)


async def _rows(container: Container, **where: Any) -> int:
    async with container.db.transaction() as s:
        stmt = select(func.count()).select_from(IdempotencyRecord).filter_by(**where)
        return int((await s.execute(stmt)).scalar_one())


# --- payload hash --------------------------------------------------------------------------------


def test_payload_hash_ignores_key_order_and_whitespace() -> None:
    a = b'{"a": 1, "b": {"x": [1, 2, 3], "y": null}}'
    b = b'{\n  "b" : {"y":null,"x":[1,2,3]},\n  "a":1\n}\n'
    assert payload_hash(a) == payload_hash(b)
    assert len(payload_hash(a)) == 64
    int(payload_hash(a), 16)  # hex


def test_payload_hash_of_a_body_decoded_already_is_the_same() -> None:
    """A request whose JSON body was decoded hands it over (api/deps.py): same hash, and JSON's
    null is a body like any other."""
    for raw in (b'{"b": [1, {"y": 2, "x": 1}], "a": "z"}', b"null", b"[]"):
        assert payload_hash(raw, "3.29.1", json.loads(raw)) == payload_hash(raw, "3.29.1")
    # None handed over is the body's null, not "not decoded": the bytes are not decoded again.
    assert payload_hash(b"{}", "", None) == payload_hash(b"null", "")
    assert payload_hash(b"{}", "", None) != payload_hash(b"{}", "")


@pytest.mark.parametrize(
    "other",
    [
        b'{"a": 2, "b": {"x": [1, 2, 3], "y": null}}',
        b'{"a": 1, "b": {"x": [3, 2, 1], "y": null}}',  # array order matters
        b'{"a": 1, "b": {"x": [1, 2, 3]}}',
        b'{"a": "1", "b": {"x": [1, 2, 3], "y": null}}',
        b'{"A": 1, "b": {"x": [1, 2, 3], "y": null}}',
    ],
)
def test_payload_hash_sees_real_differences(other: bytes) -> None:
    assert payload_hash(b'{"a": 1, "b": {"x": [1, 2, 3], "y": null}}') != payload_hash(other)


def test_payload_hash_of_non_json_is_the_raw_hash() -> None:
    for body in (b"not json", b"", b"\xff\xfe", b'{"a": '):
        assert payload_hash(body) == hashlib.sha256(body).hexdigest()
    assert payload_hash(b"not json") != payload_hash(b"not  json")


def test_payload_hash_depends_on_its_context() -> None:
    body = b'{"a": 1}'
    assert payload_hash(body, "3.29.1") == payload_hash(b'{ "a" : 1 }', "3.29.1")
    assert payload_hash(body, "3.29.1") != payload_hash(body, "3.1.0")
    assert payload_hash(body, "3.29.1") != payload_hash(body)


# --- begin / complete / replay -------------------------------------------------------------------


async def test_first_begin_returns_a_record(container: Container) -> None:
    pid = new_id()
    key = _key(pid)
    async with container.db.transaction() as s:
        claim = await IdempotencyStore(s).begin(**key)
        assert isinstance(claim, Claim)
        record = await s.get(IdempotencyRecord, claim.id)  # the placeholder row it owns
        assert record is not None
        assert (record.programme_id, record.caller, record.operation, record.ref) == (
            pid,
            "user:1",
            "POST /outgoing_wire_transfers",
            "ref-1",
        )
        assert record.payload_hash == payload_hash(BODY)
        assert record.status_code is None
        assert record.created_at == key["now_ms"]
    assert await _rows(container, programme_id=pid) == 1


async def test_completed_request_is_replayed(container: Container) -> None:
    key = _key(new_id())
    await _first(container, key)
    replay = await _begin(container, key)
    assert replay == StoredResponse(200, "application/json", RESPONSE)
    again = await _begin(container, key | {"now_ms": key["now_ms"] + 60_000})
    assert again == replay
    assert await _rows(container, programme_id=key["programme_id"]) == 1


async def test_replay_matches_reordered_payload(container: Container) -> None:
    key = _key(new_id())
    await _first(container, key)
    same = b'{"description":"rent","amount":{"amount":100,"currency":"EUR"}}'
    replay = await _begin(container, key | {"body_hash": payload_hash(same)})
    assert isinstance(replay, StoredResponse) and replay.body == RESPONSE


async def test_replay_keeps_status_type_and_empty_body(container: Container) -> None:
    key = _key(new_id())
    async with container.db.transaction() as s:
        store = IdempotencyStore(s)
        record = await store.begin(**key)
        assert isinstance(record, Claim)
        await store.complete(record, 204, None, b"")
    assert await _begin(container, key) == StoredResponse(204, None, b"")


async def test_other_payload_is_refused(container: Container) -> None:
    key = _key(new_id())
    await _first(container, key)
    with pytest.raises(BadRequest) as info:
        await _begin(container, key | {"body_hash": payload_hash(b'{"amount": 101}')})
    assert info.value.status_code == 400
    assert info.value.message == PAYLOAD_MISMATCH
    assert PAYLOAD_MISMATCH == "Payloads do not match for the same idempotency-ref."
    assert info.value.body() == {"message": PAYLOAD_MISMATCH}


async def test_duplicate_inside_the_running_request_is_refused(container: Container) -> None:
    key = _key(new_id())
    async with container.db.transaction() as s:
        store = IdempotencyStore(s)
        assert isinstance(await store.begin(**key), Claim)
        with pytest.raises(BadRequest):
            await store.begin(**key)


async def test_rolled_back_request_leaves_no_trace(container: Container) -> None:
    key = _key(new_id())
    with pytest.raises(RuntimeError):
        async with container.db.transaction() as s:
            assert isinstance(await IdempotencyStore(s).begin(**key), Claim)
            raise RuntimeError("the operation failed")
    assert await _rows(container, programme_id=key["programme_id"]) == 0
    assert isinstance(await _begin(container, key), Claim)  # the retry runs


# --- the ref itself ------------------------------------------------------------------------------


async def test_ref_longer_than_255_is_413(container: Container) -> None:
    pid = new_id()
    with pytest.raises(PayloadTooLarge) as info:
        await _begin(container, _key(pid, "r" * 256))
    assert info.value.status_code == 413
    assert info.value.body() == {"message": info.value.message}
    assert await _rows(container, programme_id=pid) == 0


async def test_ref_of_255_is_accepted(container: Container) -> None:
    key = _key(new_id(), "é" * 255)  # characters, not bytes
    await _first(container, key)
    assert isinstance(await _begin(container, key), StoredResponse)


@pytest.mark.parametrize("ref", ["", " ", "\t\n  "])
async def test_blank_ref_is_400(container: Container, ref: str) -> None:
    pid = new_id()
    with pytest.raises(BadRequest) as info:
        await _begin(container, _key(pid, ref))
    assert info.value.status_code == 400
    body = info.value.body()
    assert body["syntaxErrors"]["invalidFields"][0]["fieldName"] == "idempotency-ref"
    assert await _rows(container, programme_id=pid) == 0


async def test_scope(container: Container) -> None:
    pid = new_id()
    key = _key(pid, "shared-ref")
    await _first(container, key)
    other_payload = {"body_hash": payload_hash(b"{}")}
    for same, changed in (
        ({"caller": "user:2"}, {"caller": "user:3"}),
        ({"operation": "POST /send"}, {"operation": "POST /receive"}),
        ({"programme_id": new_id()}, {"programme_id": new_id()}),
    ):
        # Same ref in another scope is a fresh request, not a replay, with the same payload...
        assert isinstance(await _begin(container, key | same), Claim)
        # ...and not a mismatch with another one.
        assert isinstance(await _begin(container, key | changed | other_payload), Claim)
    assert isinstance(await _begin(container, key), StoredResponse)  # the original is untouched
    assert await _rows(container, programme_id=pid, ref="shared-ref", caller="user:2") == 1


async def test_refs_are_case_and_space_sensitive(container: Container) -> None:
    key = _key(new_id(), "Ref-1")
    await _first(container, key)
    assert isinstance(await _begin(container, key | {"ref": "ref-1"}), Claim)
    assert isinstance(await _begin(container, key | {"ref": "Ref-1 "}), Claim)


# --- purge ---------------------------------------------------------------------------------------


async def test_purge_removes_old_rows(container: Container) -> None:
    pid = new_id()
    for i, at in enumerate((1_000, 2_000, 50_000, 60_000)):
        await _first(container, _key(pid, f"p{i}", now_ms=at))
    cutoff = 50_000
    async with container.db.transaction() as s:
        older = select(func.count()).where(IdempotencyRecord.created_at < cutoff)
        expected = int((await s.execute(older)).scalar_one())
        assert expected >= 2
        assert await IdempotencyStore(s).purge(cutoff) == expected
    async with container.db.transaction() as s:
        left = await s.execute(
            select(IdempotencyRecord.ref).where(IdempotencyRecord.programme_id == pid)
        )
        assert sorted(left.scalars()) == ["p2", "p3"]  # created_at == cutoff is kept
    # A purged ref starts over.
    assert isinstance(await _begin(container, _key(pid, "p0", now_ms=70_000)), Claim)
    assert isinstance(await _begin(container, _key(pid, "p2", now_ms=70_000)), StoredResponse)


# --- concurrency ---------------------------------------------------------------------------------


@pytest.fixture(params=["same-process", "other-process"])
async def second_db(
    request: pytest.FixtureRequest, container: Container
) -> AsyncIterator[Database]:
    """Where the duplicate comes from: the same engine (and pool) as the first request, or an
    engine of its own on the same database, as another worker process would have."""
    if request.param == "same-process":
        yield container.db
        return
    db = Database(container.db.url)
    try:
        yield db
    finally:
        await db.dispose()


async def _race(
    container: Container, second_db: Database, first_commits: bool
) -> StoredResponse | Claim:
    """Session 1 claims the ref; session 2 asks for the same ref while 1 is still open; then 1
    commits (or rolls back). Returns what session 2 got."""
    key = _key(new_id(), "race")
    async with container.db.sessionmaker() as s1, second_db.sessionmaker() as s2:
        store1 = IdempotencyStore(s1)
        record = await asyncio.wait_for(store1.begin(**key), TIMEOUT)
        assert isinstance(record, Claim)
        second = asyncio.create_task(IdempotencyStore(s2).begin(**key))
        try:
            await asyncio.sleep(0.3)
            # SQLite: waiting for the write lock (BEGIN IMMEDIATE), or for the pool's connection;
            # PostgreSQL: waiting on the unique index.
            assert not second.done(), "the duplicate did not wait for the first request"
            if first_commits:
                await store1.complete(record, 201, "application/json", RESPONSE)
                await s1.commit()
            else:
                await s1.rollback()
            got = await asyncio.wait_for(second, TIMEOUT)
            if isinstance(got, Claim):
                await IdempotencyStore(s2).complete(got, 202, "application/json", b"{}")
            await s2.commit()
        finally:
            if not second.done():
                await s1.rollback()  # release whatever the duplicate waits on, then stop it
                second.cancel()
                await asyncio.gather(second, return_exceptions=True)
    assert await _rows(container, programme_id=key["programme_id"]) == 1
    return got


async def test_concurrent_duplicate_replays_once_first_commits(
    container: Container, second_db: Database
) -> None:
    got = await _race(container, second_db, first_commits=True)
    assert got == StoredResponse(201, "application/json", RESPONSE)


async def test_concurrent_duplicate_runs_when_first_rolls_back(
    container: Container, second_db: Database
) -> None:
    got = await _race(container, second_db, first_commits=False)
    assert isinstance(got, Claim)
    async with container.db.sessionmaker() as s:
        row = await s.get(IdempotencyRecord, got.id)
    assert row is not None and row.ref == "race"
    replay = await _begin(container, _key(row.programme_id, "race"))
    assert replay == StoredResponse(202, "application/json", b"{}")  # the duplicate's own result
