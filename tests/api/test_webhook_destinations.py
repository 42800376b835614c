"""Where a live programme's webhook events may go (issue 32 §2.3, D16): only to public unicast
addresses, whatever an IPv6 address carries inside it, checked when the URL is set and again
before each send, and the connection goes to the address that was checked.

Every host here is an IP literal (no DNS needed) except in the rebinding test, whose resolver
answers what the test says."""

from __future__ import annotations

import asyncio
import secrets
import socket
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from multibank.factors import events
from multibank.kernel.destinations import refused_destination
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.webhooks.delivery import Claimed, deliver_due, send

PORTAL = "/portal/api/programmes"

# Each address the issue names, and the neighbours of each.
REFUSED = [
    "100.100.100.200",  # shared address space 100.64.0.0/10: a cloud metadata address
    "100.64.0.1",
    "192.88.99.1",  # 6to4 relay anycast (deprecated)
    "2002:7f00:1::1",  # 6to4 embedding 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 embedding 169.254.169.254
    "2002:a00:1::1",  # 6to4 embedding 10.0.0.1
    "2002:5db8:d70e::1",  # 6to4 of a public address: deprecated, not global on newer Pythons
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "::ffff:10.1.2.3",
    "64:ff9b::a9fe:a9fe",  # NAT64 (well-known prefix) embedding 169.254.169.254
    "64:ff9b::7f00:1",  # ... and 127.0.0.1
    "64:ff9b:1::a9fe:a9fe",  # NAT64 local-use prefix
    "64:ff9b:1::5db8:d70e",  # local-use: not global whatever it embeds
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo (client 192.0.2.45)
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:db8::1",  # documentation
    "3fff::1",  # documentation (RFC 9637)
    "224.0.0.1",  # multicast
    "233.252.0.1",  # multicast (documentation)
    "ff02::1",
    "ff0e::1",  # global-scope multicast
    "::7f00:1",  # IPv4-compatible (deprecated)
    "fec0::1",  # site-local (deprecated)
    "fd00::1",  # unique local
    "fe80::1",
    "::1",
    "::",
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "0.0.0.0",
    "198.18.0.1",  # benchmarking
    "192.0.2.1",  # documentation
    "192.0.0.8",  # IETF protocol assignments
    "240.0.0.1",  # reserved
    "255.255.255.255",
]
ACCEPTED = [
    "93.184.215.14",
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:93.184.215.14",  # IPv4-mapped public address
    "64:ff9b::5db8:d70e",  # NAT64 (DNS64 on an IPv6-only network) of a public address
]


def _url(address: str, path: str = "/hooks") -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}{path}"


@pytest.mark.parametrize("address", REFUSED)
async def test_refused_addresses(address: str) -> None:
    why = await refused_destination(_url(address))
    assert why is not None, address


@pytest.mark.parametrize("address", ACCEPTED)
async def test_public_addresses_are_accepted(address: str) -> None:
    assert await refused_destination(_url(address)) is None, address


async def _live(client: httpx.AsyncClient, admin: dict[str, str], **body: Any) -> httpx.Response:
    return await client.post(
        PORTAL,
        headers=admin,
        json={"name": f"live{secrets.token_hex(4)}", "mode": "live", **body},
    )


async def test_setting_a_live_programmes_url_refuses_what_is_not_public(
    client: httpx.AsyncClient, admin_headers: dict[str, str]
) -> None:
    for address in ("100.100.100.200", "2002:7f00:1::1", "192.88.99.1"):
        r = await _live(client, admin_headers, webhookUrl=_url(address))
        assert r.status_code == 409, (address, r.text)
        assert r.json()["errorCode"] == "WEBHOOK_URL_NOT_ALLOWED"
    r = await _live(client, admin_headers, webhookUrl="https://93.184.215.14/hooks")
    assert r.status_code == 201, r.text
    pid = r.json()["programmeId"]
    settings = f"{PORTAL}/{pid}/settings"
    for address in (
        "100.100.100.200",
        "2002:7f00:1::1",
        "2002:a9fe:a9fe::1",
        "192.88.99.1",
        "::ffff:127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "2001:db8::1",
        "ff0e::1",
    ):
        r = await client.patch(settings, headers=admin_headers, json={"webhookUrl": _url(address)})
        assert r.status_code == 409, (address, r.text)
        assert r.json()["errorCode"] == "WEBHOOK_URL_NOT_ALLOWED"
    r = await client.get(f"{PORTAL}/{pid}", headers=admin_headers)
    assert r.json()["settings"]["webhookUrl"] == "https://93.184.215.14/hooks"  # unchanged
    for address in ("8.8.8.8", "2606:4700:4700::1111", "64:ff9b::5db8:d70e"):
        r = await client.patch(settings, headers=admin_headers, json={"webhookUrl": _url(address)})
        assert r.status_code == 200, (address, r.text)
        assert r.json()["webhookUrl"] == _url(address)


async def test_a_sandbox_programme_may_still_use_a_private_address(
    client: httpx.AsyncClient, admin_headers: dict[str, str], programme: Any
) -> None:
    p = await programme()
    r = await client.patch(
        f"{PORTAL}/{p.id}/settings",
        headers=admin_headers,
        json={"webhookUrl": _url("2002:7f00:1::1")},
    )
    assert r.status_code == 200, r.text


async def test_each_send_checks_the_address_again(
    client: httpx.AsyncClient, admin_headers: dict[str, str], container: Any
) -> None:
    """A URL stored before the rules tightened (or by hand) is refused before each send, and
    the attempt says why; no connection is tried."""
    r = await _live(client, admin_headers)
    pid = r.json()["programmeId"]
    await client.post(f"{PORTAL}/{pid}/webhook_secret", headers=admin_headers)
    for address, embedded in (("2002:7f00:1::1", "127.0.0.1"), ("100.100.100.200", None)):
        async with container.db.transaction() as s:
            await s.execute(
                update(Programme).where(Programme.id == int(pid)).values(webhook_url=_url(address))
            )
            programme = await s.get(Programme, int(pid))
            assert programme is not None
            await events.factor(Ctx(s, programme, container.clock.now_ms()), 42, "SMS", "ACTIVE")
        async with httpx.AsyncClient(timeout=10) as http:
            for _ in range(10):
                if await deliver_due(container.db, container.clock, http) == 0:
                    break
        r = await client.get(f"{PORTAL}/{pid}/webhooks/deliveries", headers=admin_headers)
        latest = r.json()["deliveries"][0]
        assert latest["state"] == "FAILED", latest
        [attempt] = latest["attempts"]
        assert attempt["statusCode"] is None and attempt["outcome"] == "FAILED"
        assert attempt["error"].startswith("not sent: "), attempt
        assert (embedded or address) in attempt["error"]


class Resolver:
    """`getaddrinfo` answering the addresses the test gives, one list per call (the last one
    again once they run out): a name whose answer changes between two lookups."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    async def __call__(self, host: str, port: Any, **kw: Any) -> list[Any]:
        self.calls.append(host)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return [
            (
                socket.AF_INET6 if ":" in a else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (a, 0, 0, 0) if ":" in a else (a, 0),
            )
            for a in answer
        ]


def _claimed(url: str) -> Claimed:
    return Claimed(1, url, "secret", "ref-1", b'{"x":1}', 0, True)


async def test_the_connection_goes_to_the_address_that_was_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: the name resolves to a public address for the check and to a loopback
    one afterwards; the request still goes to the checked address, naming the host in `Host`
    and in TLS (SNI, certificate)."""
    resolver = Resolver(["93.184.215.14"], ["127.0.0.1"])
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolver)
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/first":  # a redirect on the same host: followed, pinned
            return httpx.Response(307, headers={"location": "/second"})
        return httpx.Response(204)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        result = await send(http, _claimed("https://hooks.example.test:8443/first"), 1, False)
    assert (result.status, result.error) == (204, None)
    assert resolver.calls == ["hooks.example.test"]  # one lookup, the checked one
    assert [str(r.url) for r in seen] == [
        "https://93.184.215.14:8443/first",
        "https://93.184.215.14:8443/second",
    ]
    for r in seen:
        assert r.headers["host"] == "hooks.example.test:8443"
        assert r.extensions["sni_hostname"] == "hooks.example.test"
        # Not kept in the pool, where another host on the same address could be sent over it.
        assert r.headers["connection"] == "close"


async def test_every_resolved_address_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = Resolver(["93.184.215.14", "2002:a9fe:a9fe::1"])
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolver)
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        result = await send(http, _claimed("http://hooks.example.test/x"), 1, False)
    assert result.status is None and seen == []
    assert result.error is not None and "169.254.169.254" in result.error


async def test_the_next_checked_address_when_one_does_not_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name with an IPv6 and an IPv4 address, the first unreachable from here: the second is
    tried (as a client given the name would), never a third lookup's answer."""
    resolver = Resolver(["2606:4700:4700::1111", "93.184.215.14"])
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolver)
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "2606:4700:4700::1111":
            raise httpx.ConnectError("unreachable", request=request)
        return httpx.Response(204)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        result = await send(http, _claimed("http://hooks.example.test/x"), 1, False)
    assert result.status == 204
    assert seen == ["http://[2606:4700:4700::1111]/x", "http://93.184.215.14/x"]
    assert resolver.calls == ["hooks.example.test"]
