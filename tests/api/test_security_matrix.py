"""Every authenticated operation of every version refuses every bad caller (D7).

The routes are read from the version applications themselves, so an operation added later
cannot escape this matrix.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from multibank.api.versions import build_v3_1, build_v3_29, build_v3_63
from tests.factories import login, sign_up

VERSIONS = {
    "/multi": build_v3_29,
    "/3.29.1/multi": build_v3_29,
    "/3.1.0/multi": build_v3_1,
    "/3.63.4/multi": build_v3_63,
}
SAMPLE = {"channel": "SMS", "user_id": "1", "id": "1"}


def operations(build: Any) -> list[tuple[str, str, bool]]:
    """(method, path, needs a bearer token) for each operation of a version's OpenAPI."""
    spec = build().openapi()
    out = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            schemes = {name for req in op.get("security", []) for name in req}
            out.append((method.upper(), path, "auth_token" in schemes))
    return out


def concrete(path: str) -> str:
    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "channel":
            return "AUTHY" if "/push/" in path else "SMS"
        return SAMPLE.get(name, "1")

    return re.sub(r"\{([^}]+)\}", fill, path)


def test_every_version_has_authenticated_operations():
    for base, build in VERSIONS.items():
        ops = operations(build)
        assert sum(1 for *_, auth in ops if auth) >= 20, base
        assert all(path.startswith("/") for _, path, _ in ops)


@pytest.mark.parametrize("base", list(VERSIONS))
async def test_every_authenticated_operation_refuses_bad_callers(client, programme, base):
    p, other = await programme(), await programme()
    ident = await sign_up(client, p, "corporates")
    stranger = await sign_up(client, other, "corporates")
    logged_out = (await login(client, p, ident.email)).json()["token"]
    r = await client.post(
        "/multi/logout", headers={**p.headers, "Authorization": f"Bearer {logged_out}"}
    )
    assert r.status_code == 204
    expiring = (await login(client, p, ident.email)).json()["token"]

    ops = [op for op in operations(VERSIONS[base]) if op[2]]
    cases: list[tuple[str, dict[str, str], int]] = [
        ("no api-key", {"Authorization": ident.headers["Authorization"]}, 400),
        ("unknown api-key", {"api-key": "mb_sbx_unknown", **_auth(ident.token)}, 401),
        ("no token", dict(p.headers), 401),
        ("garbage token", {**p.headers, **_auth("not.a.jwt")}, 401),
        ("tampered token", {**p.headers, **_auth(ident.token[:-4] + "AAAA")}, 401),
        ("logged-out token", {**p.headers, **_auth(logged_out)}, 401),
        ("another programme's token", {**p.headers, **_auth(stranger.token)}, 403),
    ]
    for method, path, _ in ops:
        url = base + concrete(path)
        for name, headers, expected in cases:
            r = await client.request(method, url, headers=headers, json={})
            assert r.status_code == expected, (name, method, url, r.status_code, r.text)

    # Idle expiry, proven with the programme's sandbox clock (5 minutes without activity).
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 301}
    )
    assert r.status_code == 200
    for method, path, _ in ops:
        url = base + concrete(path)
        r = await client.request(method, url, headers={**p.headers, **_auth(expiring)}, json={})
        assert r.status_code == 401, ("expired token", method, url, r.status_code)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("base", list(VERSIONS))
async def test_api_key_only_operations_refuse_bad_keys(client, base):
    ops = [op for op in operations(VERSIONS[base]) if not op[2]]
    assert ops
    for method, path, _ in ops:
        url = base + concrete(path)
        r = await client.request(method, url, json={})
        assert r.status_code == 400, (method, url, r.status_code)
        r = await client.request(method, url, headers={"api-key": "mb_sbx_unknown"}, json={})
        assert r.status_code == 401, (method, url, r.status_code)


# The operator API and the simulator: every operation, read from their own descriptions.


def _all_operations(build: Any) -> list[tuple[str, str]]:
    spec = build().openapi()
    return [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    ]


async def test_every_operator_operation_refuses_a_caller_without_the_admin_token(client, programme):
    from multibank.portal.router import build_portal

    p = await programme()
    ops = _all_operations(build_portal)
    assert len(ops) >= 20
    for method, path in ops:
        url = "/portal/api" + re.sub(r"\{programme_id\}", p.id, concrete(path))
        for headers in ({}, _auth("not-the-admin-token"), {"api-key": p.api_key}):
            r = await client.request(method, url, headers=headers, json={})
            assert r.status_code == 401, (method, url, headers, r.status_code, r.text)


async def test_every_simulator_operation_refuses_a_bad_programme_key(client, programme):
    from multibank.simulator.router import build_simulator

    live = await programme(mode="live")
    ops = _all_operations(build_simulator)
    assert len(ops) >= 15
    for method, path in ops:
        url = "/simulate/api" + concrete(path)
        cases = (
            ({}, 400),
            ({"programme-key": "mb_sbx_unknown"}, 401),
            ({"programme-key": live.api_key}, 404),  # live programmes have no simulator
        )
        for headers, expected in cases:
            r = await client.request(method, url, headers=headers, json={})
            assert r.status_code == expected, (method, url, headers, r.status_code, r.text)
