"""Every authenticated operation of every version refuses every bad caller (D7).

The routes are read from the version applications themselves, so an operation added later
cannot escape this matrix.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from multibank.api.versions import build_v3_1, build_v3_29
from tests.factories import login, sign_up

VERSIONS = {"/multi": build_v3_29, "/3.29.1/multi": build_v3_29, "/3.1.0/multi": build_v3_1}
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
