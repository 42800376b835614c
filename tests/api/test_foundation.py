"""The platform every operation stands on: versions, tenancy, error bodies, limits, operations."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from multibank.api.routing import compose
from multibank.app import create_app
from tests.conftest import BASES, open_test_session
from tests.factories import sign_up

STRONG = {"password": {"value": "Abcdef1!"}}


def validate(base: str = "/multi") -> str:
    return f"{base}/passwords/validate"


# Versions (D2)


@pytest.mark.parametrize(
    ("base", "version"),
    [("/multi", "3.29.1"), ("/3.29.1/multi", "3.29.1"), ("/3.1.0/multi", "3.1.0")],
)
async def test_each_base_has_its_own_openapi_and_docs(client, base, version):
    r = await client.get(f"{base}/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["info"]["version"] == version
    assert "/passwords/validate" in doc["paths"]
    schemes = doc["components"]["securitySchemes"]
    assert schemes["api_key"] == {"type": "apiKey", "in": "header", "name": "api-key"}
    docs = await client.get(f"{base}/docs")
    assert docs.status_code == 200
    assert f"{base}/openapi.json" in docs.text


async def test_operation_is_served_on_every_base(client, programme):
    p = await programme()
    for base in BASES:
        r = await client.post(validate(base), headers=p.headers, json=STRONG)
        assert r.status_code == 204, (base, r.text)


def test_compose_removes_and_overrides_by_method_and_path():
    from fastapi import APIRouter

    base = APIRouter()

    @base.get("/a", operation_id="getA")
    async def get_a() -> dict[str, str]:
        return {"v": "base"}

    @base.get("/b", operation_id="getB")
    async def get_b() -> dict[str, str]:
        return {"v": "base"}

    over = APIRouter()

    @over.get("/a", operation_id="getA")
    async def get_a_old() -> dict[str, str]:
        return {"v": "old"}

    routes = compose([base], [over], {"getB"}).routes
    paths = [
        (r.path, r.endpoint.__name__)  # type: ignore[attr-defined]
        for r in routes
        if r.include_in_schema  # type: ignore[attr-defined]
    ]
    assert paths == [("/a", "get_a_old")]
    # The removed operation stays behind as a hidden 404 (D2), not as a 405 or a live route.
    hidden = [r for r in routes if not r.include_in_schema]  # type: ignore[attr-defined]
    assert [(r.path, r.endpoint.__name__) for r in hidden] == [("/b", "_absent")]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown"):
        compose([base], [], {"nope"})


# Tenancy (D7)


@pytest.mark.parametrize("base", BASES)
async def test_api_key_missing_or_empty_is_400(client, base):
    for headers in ({}, {"api-key": ""}, {"api-key": "   "}):
        r = await client.post(validate(base), headers=headers, json=STRONG)
        assert r.status_code == 400, headers
        body = r.json()
        assert body["syntaxErrors"]["invalidFields"] == [
            {"fieldName": "api-key", "error": "REQUIRED", "params": []}
        ]


@pytest.mark.parametrize("base", BASES)
async def test_unknown_api_key_is_401_without_body(client, base):
    r = await client.post(validate(base), headers={"api-key": "mb_sbx_nope"}, json=STRONG)
    assert r.status_code == 401
    assert r.content == b""


async def test_token_of_another_programme_is_403(client, programme, container):
    mine, theirs = await programme(), await programme()
    token = await open_test_session(container, theirs)
    r = await client.post(
        "/multi/logout", headers={**mine.headers, "Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 403
    # The session was not touched: it still works with its own programme's key.
    r = await client.post(
        "/multi/logout", headers={**theirs.headers, "Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 204


@pytest.mark.parametrize("base", BASES)
async def test_bad_tokens_are_401_without_body(client, programme, container, base):
    p = await programme()
    good = await open_test_session(container, p)
    for auth in (None, "Bearer ", "Bearer garbage", f"Bearer {good[:-3]}xyz", "Basic abc"):
        headers = dict(p.headers)
        if auth is not None:
            headers["Authorization"] = auth
        r = await client.post(f"{base}/logout", headers=headers)
        assert r.status_code == 401, auth
        assert r.content == b""


async def test_logged_out_token_is_401(client, programme, container):
    p = await programme()
    token = await open_test_session(container, p)
    headers = {**p.headers, "Authorization": f"Bearer {token}"}
    assert (await client.post("/multi/logout", headers=headers)).status_code == 204
    r = await client.post("/multi/logout", headers=headers)
    assert r.status_code == 401


async def test_idle_token_expires_with_the_programme_clock(client, programme, container):
    p = await programme()
    token = await open_test_session(container, p)
    headers = {**p.headers, "Authorization": f"Bearer {token}"}
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 301}
    )
    assert r.status_code == 200
    assert (await client.post("/multi/logout", headers=headers)).status_code == 401


# Error model (contract §2)


async def test_validation_error_body(client, programme):
    p = await programme()
    r = await client.post(validate(), headers=p.headers, json={"password": {}})
    assert r.status_code == 400
    body = r.json()
    assert body["syntaxErrors"]["invalidFields"] == [
        {"fieldName": "password.value", "error": "REQUIRED", "params": []}
    ]
    assert body["message"] == "request.password.value: must not be null"


async def test_wrong_type_and_missing_body(client, programme):
    p = await programme()
    r = await client.post(validate(), headers=p.headers, json={"password": "x"})
    assert r.status_code == 400
    assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "password"
    r = await client.post(validate(), headers=p.headers)
    assert r.status_code == 400
    assert r.json()["syntaxErrors"]["invalidFields"][0]["error"] == "REQUIRED"


async def test_malformed_json_is_400(client, programme):
    p = await programme()
    for raw in (b"{", b'{"password": ', b"\xff\xfe", b"[1,2"):
        r = await client.post(
            validate(),
            headers={**p.headers, "content-type": "application/json"},
            content=raw,
        )
        assert r.status_code == 400, raw
        assert "message" in r.json()


async def test_body_over_one_mib_is_413(client, programme):
    p = await programme()
    big = json.dumps({"password": {"value": "A" * (1024 * 1024)}}).encode()
    r = await client.post(
        validate(), headers={**p.headers, "content-type": "application/json"}, content=big
    )
    assert r.status_code == 413

    async def chunks():  # no content-length: the limit holds on the streamed body too
        for _ in range(20):
            yield b"x" * 65536

    r = await client.post(
        validate(), headers={**p.headers, "content-type": "application/json"}, content=chunks()
    )
    assert r.status_code == 413


async def test_404_and_405_bodies(client, programme):
    p = await programme()
    r = await client.get("/multi/no_such_operation", headers=p.headers)
    assert r.status_code == 404
    assert set(r.json()) == {"code", "message"}
    r = await client.get(validate(), headers=p.headers)
    assert r.status_code == 405
    assert r.json()["code"] == "METHOD_NOT_ALLOWED"


ABSENT = {"code": "NOT_FOUND", "message": "This operation does not exist in this version"}


async def test_operations_a_version_lacks_answer_404_alike_in_both_directions(client, programme):
    """Managed account remove and root-user mobile verification exist on 3.1.0 only; identities,
    step-up and user KYC on 3.29.1 only. Every one answers the same 404 where it is absent,
    whatever the method."""
    p = await programme()
    lacking = [
        ("POST", base, path)
        for base in ("/multi", "/3.29.1/multi")
        for path in (
            "/managed_accounts/123/remove",
            "/corporates/verification/mobile/send",
            "/corporates/verification/mobile/verify",
            "/consumers/verification/mobile/send",
            "/consumers/verification/mobile/verify",
        )
    ] + [
        ("GET", "/3.1.0/multi", "/identities"),
        ("POST", "/3.1.0/multi", "/users/kyc"),
        ("POST", "/3.1.0/multi", "/stepup/challenges/otp/SMS"),
        ("PUT", "/multi", "/managed_accounts/123/remove"),
    ]
    for method, base, path in lacking:
        r = await client.request(method, base + path, headers=p.headers)
        assert (r.status_code, r.json()) == (404, ABSENT), (method, base, path)
        assert "allow" not in r.headers
    # Where 3.1.0 has them, they are served (here: refused for want of a token).
    r = await client.post("/3.1.0/multi/managed_accounts/123/remove", headers=p.headers)
    assert r.status_code == 401


async def test_a_405_lists_every_method_the_path_serves(client, programme):
    p = await programme()
    for path, allowed in (
        ("/multi/corporates", "GET, PATCH, POST"),
        ("/3.1.0/multi/corporates", "GET, PATCH, POST"),
        ("/multi/managed_accounts/1", "GET, PATCH"),
        ("/multi/managed_accounts", "GET, POST"),
        ("/portal/api/programmes", "GET, POST"),
        ("/simulate/api/clock/advance", "POST"),
    ):
        r = await client.put(path, headers=p.headers)
        assert r.status_code == 405, path
        assert r.headers["allow"] == allowed, path
        assert r.json() == {"code": "METHOD_NOT_ALLOWED", "message": "Method Not Allowed"}
    # A path written out in full is a resource of its own: /users/kyc serves POST only,
    # though /users/{user_id} would match it for GET and PATCH.
    ident = await sign_up(client, p)
    for method in ("GET", "PATCH", "PUT", "DELETE"):
        r = await client.request(method, "/multi/users/kyc", headers=ident.headers)
        assert (r.status_code, r.headers.get("allow")) == (405, "POST"), method


async def test_private_answers_are_never_cached_nor_sniffed(client, programme, admin_headers):
    """Issue 10: answers carry personal data and tokens. Every one says `nosniff` and names no
    server; those of the banking APIs and the operator API also say `no-store`."""
    p = await programme()
    ident = await sign_up(client, p)
    for path, headers in (
        ("/multi/corporates", ident.headers),
        ("/3.29.1/multi/corporates", ident.headers),
        ("/3.1.0/multi/corporates", ident.headers),
        ("/multi/corporates", {}),  # a refusal too
        ("/multi/no_such_operation", p.headers),
        (f"/portal/api/programmes/{p.id}", admin_headers),
        ("/portal/api/programmes", {}),
    ):
        r = await client.get(path, headers=headers)
        assert r.headers.get("cache-control") == "no-store", (path, r.status_code)
        assert r.headers.get("x-content-type-options") == "nosniff", path
        assert "server" not in r.headers, path
    r = await client.get("/healthz")
    assert r.headers["x-content-type-options"] == "nosniff"
    # No CORS unless the operator lists origins (MULTIBANK_CORS_ALLOWED_ORIGINS).
    r = await client.get(
        "/multi/corporates", headers={**ident.headers, "origin": "https://evil.example"}
    )
    assert "access-control-allow-origin" not in r.headers


async def test_cors_only_for_the_origins_the_operator_lists(settings):
    import httpx

    app = create_app(settings.model_copy(update={"cors_allowed_origins": ["https://app.example"]}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        preflight = {"access-control-request-method": "POST"}
        r = await c.options(
            "/multi/login_with_password", headers={"origin": "https://app.example", **preflight}
        )
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        r = await c.options(
            "/multi/login_with_password", headers={"origin": "https://evil.example", **preflight}
        )
        assert "access-control-allow-origin" not in r.headers
    await app.state.container.db.dispose()


async def test_every_response_carries_a_request_ref(client, programme):
    p = await programme()
    responses = [
        await client.post(validate(), headers=p.headers, json=STRONG),
        await client.post(validate(), headers=p.headers, json={"password": {"value": "x"}}),
        await client.post(validate(), headers={}, json=STRONG),
        await client.post(validate(), headers={"api-key": "unknown"}, json=STRONG),
        await client.get("/multi/nothing"),
        await client.get("/healthz"),
        await client.get("/metrics"),
    ]
    refs = [r.headers.get("request-ref") for r in responses]
    assert all(refs), refs
    assert len(set(refs)) == len(refs)


async def test_unexpected_failure_is_500_without_details(
    app, client, monkeypatch, programme, caplog
):
    from multibank.access import service

    p = await programme()

    def boom(_: str) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(service, "check_complexity", boom)
    caplog.set_level(logging.INFO)
    r = await client.post(validate(), headers=p.headers, json=STRONG)
    assert r.status_code == 500
    assert "secret" not in r.text
    assert r.headers.get("request-ref")
    # Logged once, with its traceback (not again by the edge as the exception comes up).
    traced = [rec for rec in caplog.records if rec.exc_info]
    assert len(traced) == 1 and traced[0].levelno == logging.ERROR, traced


# Idempotency (D6), through the simulator's clock advance, an operation with a visible effect


async def _offset(client, p) -> int:
    r = await client.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key, "idempotency-ref": f"probe-{id(object())}"},
        json={"seconds": 1},
    )
    return int(r.json()["offsetSeconds"]) - 1


async def test_same_ref_same_payload_replays_without_second_effect(client, programme):
    p = await programme()
    headers = {"programme-key": p.api_key, "idempotency-ref": "adv-1"}
    first = await client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": 60})
    again = await client.post(
        "/simulate/api/clock/advance", headers=headers, content=b'{ "seconds" : 60 }'
    )
    assert first.status_code == again.status_code == 200
    assert first.content == again.content
    assert await _offset(client, p) == 60


async def test_same_ref_other_payload_is_400(client, programme):
    p = await programme()
    headers = {"programme-key": p.api_key, "idempotency-ref": "adv-2"}
    await client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": 60})
    r = await client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": 61})
    assert r.status_code == 400
    assert r.json()["message"] == "Payloads do not match for the same idempotency-ref."
    assert await _offset(client, p) == 60


async def test_long_ref_is_413_and_changes_nothing(client, programme):
    p = await programme()
    headers = {"programme-key": p.api_key, "idempotency-ref": "r" * 256}
    r = await client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": 60})
    assert r.status_code == 413
    assert await _offset(client, p) == 0


async def test_refused_request_does_not_burn_the_ref(client, programme):
    p = await programme()
    headers = {"programme-key": p.api_key, "idempotency-ref": "adv-3"}
    bad = await client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": -5})
    assert bad.status_code == 400
    r = await client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": 5})
    assert r.status_code == 200
    assert await _offset(client, p) == 5


async def test_parallel_duplicates_have_one_effect(client, programme):
    p = await programme()
    headers = {"programme-key": p.api_key, "idempotency-ref": "adv-par"}
    replies = await asyncio.gather(
        *[
            client.post("/simulate/api/clock/advance", headers=headers, json={"seconds": 10})
            for _ in range(10)
        ]
    )
    assert {r.status_code for r in replies} == {200}
    assert len({r.content for r in replies}) == 1
    assert await _offset(client, p) == 10


# Simulator authentication (D8)


async def test_simulator_programme_key_rules(client, programme):
    p = await programme()
    live = await programme(mode="live")
    url = "/simulate/api/clock/advance"
    assert (await client.post(url, json={"seconds": 1})).status_code == 400
    assert (
        await client.post(url, headers={"programme-key": "nope"}, json={"seconds": 1})
    ).status_code == 401
    r = await client.post(url, headers={"programme-key": live.api_key}, json={"seconds": 1})
    assert r.status_code == 404
    r = await client.post(url, headers={"programme-key": p.api_key}, json={"seconds": 0})
    assert r.status_code == 400
    assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "seconds"


async def test_clock_advance_moves_only_that_programme(client, programme):
    a, b = await programme(), await programme()
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": a.api_key}, json={"seconds": 3600}
    )
    assert r.status_code == 200
    assert r.json()["offsetSeconds"] == 3600
    assert await _offset(client, a) == 3600
    assert await _offset(client, b) == 0


# Operations (D10)


async def test_health_ready_metrics(client, programme, admin_headers):
    p = await programme()
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    await client.post(validate(), headers=p.headers, json=STRONG)
    # Issue 10: the metrics are the operator's, behind the admin token.
    for headers in ({}, {"Authorization": "Bearer wrong"}, p.headers):
        r = await client.get("/metrics", headers=headers)
        assert r.status_code == 401 and "multibank_http" not in r.text
    text = (await client.get("/metrics", headers=admin_headers)).text
    assert "multibank_http_requests_total" in text
    assert 'route="/multi/passwords/validate"' in text
    assert "multibank_http_request_duration_seconds_bucket" in text


async def test_readyz_reports_an_unreachable_database(settings):
    import httpx

    from multibank.app import build_container, create_app, startup

    c = build_container(settings)
    await startup(c)
    await c.db.dispose()
    from multibank.kernel.db import Database

    c.db = Database("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    app = create_app(container=c)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as cl:
        r = await cl.get("/readyz")
    assert r.status_code == 503
    await c.db.dispose()


async def test_access_log_is_json_with_the_request_ref(client, programme, caplog):
    from multibank.observability import JsonFormatter

    p = await programme()
    with caplog.at_level(logging.INFO, logger="multibank.access"):
        r = await client.post(validate(), headers=p.headers, json=STRONG)
    ref = r.headers["request-ref"]
    records = [rec for rec in caplog.records if rec.name == "multibank.access"]
    assert records
    lines = [json.loads(JsonFormatter().format(rec)) for rec in records]
    line = lines[-1]
    assert line["status"] == 204
    assert line["route"] == "/multi/passwords/validate"
    assert line["request_ref"] == ref
