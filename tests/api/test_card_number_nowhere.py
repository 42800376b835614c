"""A card's whole journey leaves its number, CVV and PIN in clear nowhere (issue 34, D20, D21).

One consumer runs every card operation there is — prepaid and debit cards, list filters, spend
rules, funding by transfer, every step of the card simulator (by card id and by card details,
approved, declined and malformed), statements as JSON, CSV and PDF, physical cards with their
PIN, lost and damaged replacements, pool cards, expiry and renewal on the programme clock,
block / unblock / remove, the operator's card routes and web pages with a SYSTEM block — on a
programme whose webhooks go to a live receiver. Everything the
server lets out is recorded: every HTTP answer (body and headers), every log record of every
logger at DEBUG (the access log and SQLAlchemy's statement log included), every webhook
delivered, the operator's listing of deliveries, and afterwards every column of every table.

The number is learnt as its owner learns it, through the sandbox's `secure_session/detokenize`;
those answers (and no other) may hold it. What the client itself sends (a purchase by card
details carries the number) is not searched: the test looks for the server leaking the card's
data, so the number is never typed into a free-text field here. Only the `*_encrypted` columns
may hold the secrets, as ciphertext.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import select

from multibank.cards.events import (
    AUTHORISATIONS,
    EXPIRIES,
    PHYSICAL_UPGRADE,
    REPLACEMENT,
    SETTLEMENTS,
    STATE_CHANGE,
)
from multibank.kernel.db import Base
from multibank.models import load_all
from tests.api.test_card_assign import assign, make_pool, pool_state
from tests.api.test_card_funding import ACCOUNTS, CARDS, body, move, ref
from tests.api.test_card_lifecycle import advance_to, month_start, relogin
from tests.api.test_managed_cards import LATEST, V3291, card_body, create, get, luhn_ok
from tests.api.test_physical_cards import CODE, tokenize, upgrade_body
from tests.api.test_portal_web import browser, submit  # noqa: F401 (the fixture)
from tests.api.test_webhooks import deliver, deliveries, hooked  # noqa: F401 (the fixture)
from tests.factories import Identity, deposit, open_account, verified

SIM = "/simulate/api"
DETOKENIZE = f"{SIM}/secure_session/detokenize"
PIN = "8264"
SECRET_WORDS = r"(?:cvv|cvc|cvv2|pin|secur|expir)"
# A word that names a secret, then its value, maybe as `{"value": ...}`.
NAMED = rf"{SECRET_WORDS}\w*(?:\W+value)?\W{{0,6}}"


@dataclass
class Card:
    id: str
    number: str
    expiry: str
    cvvs: set[str] = field(default_factory=set)
    mmyy: set[str] = field(default_factory=set)  # start and expiry months, shown openly


@dataclass
class Recorder:
    """Every answer the client received, except the detokenize answers that reveal a value to
    its owner (kept by identity, so exactly those are left out)."""

    answers: list[httpx.Response] = field(default_factory=list)
    revealed: set[int] = field(default_factory=set)

    async def hook(self, response: httpx.Response) -> None:
        await response.aread()
        self.answers.append(response)

    def texts(self) -> list[tuple[str, str]]:
        out = []
        for r in self.answers:
            if id(r) in self.revealed:
                continue
            where = f"{r.request.method} {r.request.url.path} -> {r.status_code}"
            out.append((f"{where} headers", json.dumps(list(r.headers.multi_items()))))
            out.extend((f"{where} body", t) for t in decoded(r.content))
        return out


def decoded(content: bytes) -> list[str]:
    """The bytes as text, and for a PDF also the text of each (deflated) content stream."""
    texts = [content.decode("latin-1")]
    if content.startswith(b"%PDF"):
        # Each stream's bytes as its dictionary's `/Length` counts them: a delimiter search
        # (`stream ... endstream`) cuts a deflated stream that happens to end in a CR byte.
        streams = [
            content[m.end() : m.end() + int(m.group(1))]
            for m in re.finditer(rb"/Length (\d+)(?!\s+\d+\s+R)\b[^>]*>>\s*stream\r?\n", content)
        ]
        assert streams, "a PDF without streams"
        for raw in streams:
            try:
                texts.append(zlib.decompress(raw).decode("latin-1"))
            except zlib.error:
                texts.append(raw.decode("latin-1"))
    return texts


def pdf_text(content: bytes) -> str:
    """The literal strings drawn by a PDF's content streams (core fonts: `(text) Tj`)."""
    return "".join(
        m.decode("latin-1")
        for t in decoded(content)[1:]
        for m in re.findall(rb"\(((?:[^()\\]|\\.)*)\)", t.encode("latin-1"))
    )


@dataclass
class Secrets:
    cards: list[Card] = field(default_factory=list)
    pins: set[str] = field(default_factory=set)

    def leaks(self, text: str) -> list[str]:
        found = []
        squeezed = re.sub(r"[\s\-./]", "", text)
        for card in self.cards:
            n = card.number
            groups = [n[i : i + 4] for i in range(0, 16, 4)]
            forms = {n, " ".join(groups), "-".join(groups), n[::-1]}
            forms |= {hashlib.new(h, n.encode()).hexdigest() for h in ("sha256", "sha1", "md5")}
            if any(f in text for f in forms) or n in squeezed:
                found.append(f"number of card {card.id}")
            for cvv in card.cvvs:
                # A CVV is three digits: leaked when it stands by the expiry or by a word that
                # names it (a bare three-digit figure is any amount).
                near = rf"(?<!\d){cvv}(?!\d)"
                months = "|".join(f"{m}|{m[:2]}/{m[2:]}" for m in card.mmyy | {card.expiry})
                exp = rf"(?<!\d)(?:{months})(?!\d)"
                if re.search(
                    rf"{NAMED}{near}|{near}\W{{0,12}}{SECRET_WORDS}"
                    rf"|{exp}\D{{0,24}}{near}|{near}\D{{0,24}}{exp}",
                    text,
                    re.I,
                ):
                    found.append(f"cvv of card {card.id}")
        for pin in self.pins:
            # Four digits: leaked when a word names it (a bare figure is any amount).
            near = rf"(?<!\d){pin}(?!\d)"
            if re.search(rf"{NAMED}{near}|{near}\W{{0,12}}{SECRET_WORDS}", text, re.I):
                found.append(f"pin {pin}")
        return found


def sim_headers(ident: Identity) -> dict[str, str]:
    return {"programme-key": ident.p.api_key, "Authorization": ident.headers["Authorization"]}


async def test_a_cards_whole_journey_shows_its_number_cvv_and_pin_nowhere(
    client,
    container,
    hooked,  # noqa: F811
    browser,  # noqa: F811
    admin_headers,
    caplog,
):
    for name in ["", *list(logging.root.manager.loggerDict)]:
        caplog.set_level(logging.DEBUG, logger=name or None)
    p, receiver = hooked
    recorder = Recorder()
    client.event_hooks["response"].append(recorder.hook)
    browser.event_hooks["response"].append(recorder.hook)
    secrets = Secrets()
    sim = {"programme-key": p.api_key}
    portal = f"/portal/api/programmes/{p.id}"

    async def call(
        method: str,
        path: str,
        json_body: Any = None,
        ok: int | tuple[int, ...] = (200, 204),
        **kw: Any,
    ) -> httpx.Response:
        headers = kw.pop("headers", None) or ident.headers
        r = await client.request(method, path, headers=headers, json=json_body, **kw)
        assert r.status_code in ((ok,) if isinstance(ok, int) else ok), (path, r.text)
        return r

    async def reveal(token: str, what: str) -> str:
        r = await call(
            "POST", DETOKENIZE, {"token": token, "field": what}, headers=sim_headers(ident)
        )
        recorder.revealed.add(id(r))
        value: str = r.json()["value"]
        return value

    async def learn(card_id: str) -> Card:
        """The owner reads the card and detokenizes its number and CVV."""
        c = await get(client, ident, card_id)
        number = await reveal(c["cardNumber"]["value"], "CARD_NUMBER")
        assert len(number) == 16 and luhn_ok(number)
        assert number[:6] == c["cardNumberFirstSix"] and number[-4:] == c["cardNumberLastFour"]
        known = next((k for k in secrets.cards if k.id == card_id), None)
        if known is None:
            known = Card(card_id, number, c["expiryMmyy"])
            secrets.cards.append(known)
        assert known.number == number
        known.expiry = c["expiryMmyy"]
        known.mmyy |= {c["startMmyy"], c["expiryMmyy"]}
        known.cvvs.add(await reveal(c["cvv"]["value"], "CVV"))
        return known

    async def simulate(path: str, body_: dict[str, Any] | None = None, ok: int = 200) -> Any:
        return (await call("POST", f"{SIM}/cards/{path}", body_, ok, headers=sim)).json()

    def buy(amount: int, **over: Any) -> dict[str, Any]:
        return {
            "merchantName": "Amazon IT",
            "transactionAmount": {"currency": "EUR", "amount": amount},
            **over,
        }

    # An identity with a funded EUR account, a prepaid and a debit card.
    ident = await verified(client, p)
    account = (await open_account(client, ident, "EUR", friendlyName="Main"))["id"]
    assert await deposit(client, p, account, 100_000) == "COMPLETED"
    # Made with an idempotency-ref, and replayed: the stored answer is searched too.
    once = {**ident.headers, "idempotency-ref": "prepaid-1"}
    made_body = card_body(ident, renewalType="AUTO_RENEW")
    prepaid = (await call("POST", f"{LATEST}/managed_cards", made_body, headers=once)).json()
    again = await call("POST", f"{LATEST}/managed_cards", made_body, headers=once)
    assert again.json()["id"] == prepaid["id"]
    debit = await create(
        client,
        ident,
        mode="DEBIT_MODE",
        parentManagedAccountId=account,
        currency=None,
        friendlyName="Daily",
    )
    pre, deb = await learn(prepaid["id"]), await learn(debit["id"])
    cards = f"{LATEST}/managed_cards"

    # Read, list with filters, update; on both base URLs.
    for base in (LATEST, V3291):
        for c in (pre, deb):
            await call("GET", f"{base}/managed_cards/{c.id}")
        for params in (
            {"cardNumberFirstSix": pre.number[:6]},
            {"cardNumberLastFour": pre.number[-4:]},
            {"cardNumberFirstSix": pre.number[:6], "cardNumberLastFour": deb.number[-4:]},
            {"mode": "DEBIT_MODE", "state": "ACTIVE", "type": "VIRTUAL"},
            {"friendlyName": "Daily", "currency": "EUR", "parentManagedAccountId": account},
        ):
            r = await call("GET", f"{base}/managed_cards", params=params)
            assert r.json()["cards"], params
    await call("PATCH", f"{cards}/{pre.id}", {"friendlyName": "Travel", "tag": "trip"})

    # Spend rules: every operation.
    limits = {
        "spendLimit": [{"value": {"currency": "EUR", "amount": 50_000}, "interval": "ALWAYS"}]
    }
    rules = f"{cards}/{deb.id}/spend_rules"
    await call("GET", rules)
    await call("POST", rules, {"allowedMerchantCategories": ["5411"]}, (200, 204, 409))
    await call("PATCH", rules, {"blockedMerchantCountries": ["US"]}, (200, 204, 409))
    await call("DELETE", rules)
    await call("PUT", rules, limits)
    await call("PUT", f"{cards}/{pre.id}/spend_rules", {"blockedMerchantCountries": ["US"]})

    # Funding the prepaid card by transfer.
    r = await move(client, ident, body(p, ref(ACCOUNTS, account), ref(CARDS, pre.id), 20_000))
    assert r.status_code == 200, r.text

    # Every simulator step, by card id.
    for c in (pre, deb):
        bought = await simulate(f"{c.id}/purchase", buy(100))
        assert bought["code"] == "APPROVED", bought
        auth = (await simulate(f"{c.id}/authorise", buy(300)))["authorisationId"]
        settled = await simulate(
            f"{c.id}/authorisations/{auth}/settle",
            {"transactionAmount": {"currency": "EUR", "amount": 200}},
        )
        assert settled["code"] == "COMPLETED", settled
        auth = (await simulate(f"{c.id}/authorise", buy(50)))["authorisationId"]
        await simulate(f"{c.id}/authorisations/{auth}/reverse")
        auth = (await simulate(f"{c.id}/authorise", buy(40)))["authorisationId"]
        await simulate(f"{c.id}/authorisations/{auth}/expire")
        refunded = await simulate(
            f"{c.id}/refund", buy(60, relatedSettlementId=bought["settlementId"])
        )
        assert refunded["code"] == "COMPLETED", refunded
        await simulate(f"{c.id}/merchant_refund", buy(25))

    # By card details: approved, declined (wrong CVV, wrong expiry), and malformed bodies.
    cvv = next(iter(pre.cvvs))
    wrong_cvv = f"{(int(cvv) + 1) % 1000:03d}"
    details = {"cardNumber": pre.number, "cvv": cvv, "expiryDate": pre.expiry}
    assert (await simulate("purchase", buy(100, **details)))["code"] == "APPROVED"
    spaced = " ".join(pre.number[i : i + 4] for i in range(0, 16, 4))
    assert (await simulate("purchase", buy(10, **{**details, "cardNumber": spaced})))[
        "code"
    ] == "APPROVED"
    assert (await simulate("merchant_refund", buy(30, **details)))["code"] == "APPROVED"
    declined = await simulate("purchase", buy(100, **{**details, "cvv": wrong_cvv}))
    assert declined["code"] == "DENIED_INCORRECT_CVV", declined
    declined = await simulate("purchase", buy(100, **{**details, "expiryDate": "0101"}))
    assert declined["code"] == "DENIED_CARD_EXPIRY", declined
    for bad in (
        {"cvv": "12345"},
        {"expiryDate": "13/99"},
        {"cardNumber": pre.number + "X"},
        {"cardNumber": pre.number + "1"},
        {"transactionAmount": {"currency": "EUR", "amount": "lots"}},
    ):
        r = await call(
            "POST", f"{SIM}/cards/purchase", buy(5, **{**details, **bad}), (200, 400), headers=sim
        )
        assert r.status_code == 400 or r.json()["code"].startswith("DENIED"), r.text
    r = await call("POST", f"{SIM}/cards/purchase", [details], 400, headers=sim)

    # Statements, as JSON, CSV and PDF.
    for c in (pre, deb):
        for accept in ("application/json", "text/csv", "application/pdf"):
            r = await call(
                "GET", f"{cards}/{c.id}/statement", headers={**ident.headers, "accept": accept}
            )
            if accept == "application/pdf":
                drawn = pdf_text(r.content)
                assert "Settlement" in drawn and c.id in drawn, drawn[:500]
                recorder.answers.append(
                    httpx.Response(200, content=drawn.encode("latin-1"), request=r.request)
                )

    # A physical card: upgrade with a PIN of the owner's, activate, read and reveal the PIN,
    # block the PIN by the simulator, unblock it, reset contactless, replace as damaged.
    secrets.pins.add(PIN)
    pin_token = await tokenize(client, ident, PIN)
    await call("POST", f"{cards}/{pre.id}/physical", upgrade_body(pin={"value": pin_token}))
    await call("POST", f"{cards}/{pre.id}/physical/activate", {"activationCode": CODE})
    token = (await call("GET", f"{cards}/{pre.id}/physical/pin")).json()["pin"]["value"]
    assert await reveal(token, "PIN") == PIN
    # Card-present purchases with the PIN entered at the terminal: right, wrong, by details.
    wrong_pin = f"{(int(PIN) + 1) % 10000:04d}"
    assert (await simulate(f"{pre.id}/purchase", buy(20, cardPresent=True, pin=PIN)))[
        "code"
    ] == "APPROVED"
    denied = await simulate(f"{pre.id}/purchase", buy(20, cardPresent=True, pin=wrong_pin))
    assert denied["code"] == "DENIED_OTHER", denied
    present = buy(15, cardPresent=True, pin=PIN, **details)
    assert (await simulate("purchase", present))["code"] == "APPROVED"
    await call("POST", f"{SIM}/cards/purchase", {**present, "pin": "12a4"}, 400, headers=sim)
    await call("POST", f"{SIM}/cards/{pre.id}/pin_block", headers=sim)
    await call("PATCH", f"{cards}/{pre.id}/physical/pin/unblock")
    await call("POST", f"{cards}/{pre.id}/physical/contactless_limit/reset", ok=(204, 409))
    await call("POST", f"{cards}/{pre.id}/physical/replace_damaged", {"activationCode": "654321"})
    await call(
        "POST", f"{cards}/{pre.id}/physical/activate", {"activationCode": "654321"}, (200, 409)
    )
    await learn(pre.id)

    # The debit card goes physical, is lost, and is replaced by a card of a new number.
    once = {**ident.headers, "idempotency-ref": "upgrade-1"}
    for _ in range(2):
        await call(
            "POST",
            f"{cards}/{deb.id}/physical",
            upgrade_body(pin={"value": pin_token}),
            headers=once,
        )
    await call("POST", f"{cards}/{deb.id}/physical/activate", {"activationCode": CODE})
    await call("POST", f"{cards}/{deb.id}/physical/report_lost")
    old = (
        await call(
            "POST", f"{cards}/{deb.id}/physical/replace_lost_stolen", {"activationCode": "777777"}
        )
    ).json()
    new_id = old["physicalCardDetails"]["replacement"]["replacementId"]
    replacement = await learn(new_id)
    assert replacement.number != deb.number
    await call("POST", f"{cards}/{new_id}/physical/activate", {"activationCode": "777777"})
    token = (await call("GET", f"{cards}/{new_id}/physical/pin")).json()["pin"]["value"]
    assert await reveal(token, "PIN") == PIN

    # Pool cards, virtual and physical (a random PIN), made through the operator API, assigned.
    made = await make_pool(client, admin_headers, p)
    r = await assign(client, ident, made[0])
    assert r.status_code == 200, r.text
    pooled = await learn(r.json()["id"])
    r = await call(
        "POST",
        f"{portal}/card_pool",
        headers=admin_headers,
        ok=201,
        json_body={
            "profileId": p.profiles["corporatePrepaidManagedCard"],
            "count": 1,
            "physical": True,
        },
    )
    r = await assign(client, ident, r.json()["cards"][0])
    assert r.status_code == 200, r.text
    physical_pooled = await learn(r.json()["id"])
    token = (await call("GET", f"{cards}/{physical_pooled.id}/physical/pin")).json()["pin"]["value"]
    secrets.pins.add(await reveal(token, "PIN"))
    await pool_state(client, admin_headers, p)
    for action in ("about_to_expire", "renew", "expire"):
        await call("POST", f"{SIM}/cards/{pooled.id}/{action}", headers=sim, ok=(200, 204, 409))

    # Expiry and renewal on the programme clock: the prepaid card renews (a new CVV), the
    # replacement card, not renewing, expires.
    await advance_to(client, p, month_start(pre.expiry, 1))
    await relogin(client, ident)
    renewed = await learn(pre.id)
    assert renewed.expiry != prepaid["expiryMmyy"]
    await call("GET", f"{cards}/{new_id}")
    await call("GET", cards)

    # Emptied by a transfer back to the account; then block, unblock, remove.
    left = (await get(client, ident, pre.id))["balances"]["actualBalance"]
    r = await move(client, ident, body(p, ref(CARDS, pre.id), ref(ACCOUNTS, account), left))
    assert r.status_code == 200, r.text
    for action in ("block", "unblock"):
        await call("POST", f"{cards}/{pre.id}/{action}")

    # The webhooks, delivered; the operator's listing of them.
    await deliver(container)
    # Every card event kind of this journey was delivered, so each is searched (no
    # adjustment: the lost card was a debit card).
    got = {w.path.removeprefix("/hooks") for w in receiver.received}
    assert {
        AUTHORISATIONS,
        SETTLEMENTS,
        STATE_CHANGE,
        EXPIRIES,
        PHYSICAL_UPGRADE,
        REPLACEMENT,
    } <= got, got
    listing = await deliveries(client, admin_headers, p, limit=100)
    assert listing, listing
    for path in (f"{portal}/card_pool", f"{portal}/webhooks/deliveries"):
        await call("GET", path, headers=admin_headers)

    # The operator's card routes (API) and pages (web portal), SYSTEM block and unblock.
    every = [c.id for c in secrets.cards]
    for path in (
        "card_profiles",
        "card_fees",
        "managed_cards",
        f"managed_cards?identityId={ident.id}",
    ):
        await call("GET", f"{portal}/{path}", headers=admin_headers)
    for cid in every:
        await call("GET", f"{portal}/managed_cards/{cid}", headers=admin_headers)
        await call("GET", f"{portal}/managed_cards/{cid}/authorisations", headers=admin_headers)
    for action in ("block", "unblock"):
        await call(
            "POST",
            f"{portal}/managed_cards/{pre.id}/{action}",
            headers=admin_headers,
            ok=(200, 204),
        )
    web = f"/portal/programmes/{p.id}"
    pages = [
        web,
        f"{web}/cards",
        f"{web}/cards?identity={ident.id}",
        f"{web}/customers/{ident.id}",
        f"{web}/webhooks",
        f"{web}/payments",
        f"{web}/ledger",
    ]
    pages += [f"{web}/cards/{cid}" for cid in every]
    for url in pages:
        r = await browser.get(url)
        assert r.status_code == 200, (url, r.text[:300])
    assert f"{pre.number[:6]}******{pre.number[-4:]}" in (await browser.get(f"{web}/cards")).text
    for action in ("block", "unblock"):
        url = f"{web}/cards/{pre.id}"
        r = await submit(browser, f"{url}/{action}", url)
        assert r.status_code == 303, r.text[:300]
    # Removed at last; its events delivered and listed too.
    await call("POST", f"{cards}/{pre.id}/remove")
    await call("GET", f"{cards}/{pre.id}/statement", ok=(200, 409))
    await deliver(container)
    await call("GET", f"{portal}/webhooks/deliveries", headers=admin_headers, params={"limit": 100})
    client.event_hooks["response"].remove(recorder.hook)
    browser.event_hooks["response"].remove(recorder.hook)

    # The search.
    assert (
        len(secrets.cards) == 5
        and len(secrets.pins) in (1, 2)
        and all(len(c.cvvs) >= 1 for c in secrets.cards)
    )
    assert len(pre.cvvs) >= 2  # the renewal drew a new CVV
    # A drawn PIN that happens to be a card's MMYY would be found by `"expiryMmyy": "MMYY"`.
    secrets.pins -= {m for c in secrets.cards for m in c.mmyy}
    assert PIN in secrets.pins
    found: list[str] = []
    searched = recorder.texts()
    searched += [
        (f"webhook {w.path}", w.body.decode("latin-1") + json.dumps(w.headers))
        for w in receiver.received
    ]
    formatter = logging.Formatter()
    for rec in caplog.records:
        text = rec.getMessage() + repr(rec.__dict__)
        if rec.exc_info:
            text += formatter.formatException(rec.exc_info)
        # An object's memory address (SQLAlchemy's mapper-path records print many) is not data:
        # its hex digits once held a CVV's three digits next to a column named `pin_...`.
        text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
        searched.append((f"log {rec.name}", text))
    assert any(rec.name == "multibank.access" for rec in caplog.records)
    load_all()
    encrypted = 0
    async with container.db.transaction() as session:
        for table in Base.metadata.sorted_tables:
            for row in (await session.execute(select(table))).mappings():
                for column, value in row.items():
                    if column.endswith("_encrypted"):
                        encrypted += value is not None
                        continue
                    if isinstance(value, bytes | bytearray | memoryview):
                        texts = decoded(bytes(value))
                    elif isinstance(value, dict | list):
                        texts = [json.dumps(value)]
                    else:
                        texts = [str(value)]
                    searched += [(f"{table.name}.{column}", t) for t in texts]
    assert encrypted >= 4
    # The walk reads blobs: the stored first answer of the idempotent create is among them.
    assert any(w == "idempotency_records.body" and prepaid["id"] in t for w, t in searched)
    for where, text in searched:
        found += [f"{leak} in {where}" for leak in secrets.leaks(text)]
    assert not found, "\n".join(sorted(set(found)))
    # The search finds what it looks for.
    n = pre.number
    assert secrets.leaks(f"card {n[:4]} {n[4:8]} {n[8:12]} {n[12:]}")
    assert secrets.leaks(f"{n[:8]}-{n[8:]}")
    assert secrets.leaks(json.dumps({"cvv": cvv})) and secrets.leaks(f"{pre.expiry} {cvv}")
    assert secrets.leaks(json.dumps({"pin": {"value": PIN}}))


def test_a_deflated_stream_ending_in_a_carriage_return_is_read_whole() -> None:
    """The PDF reader above can fail: the stream is found by its `/Length`, not by searching
    for `endstream`, which cut one whose last byte is a CR and left it compressed."""
    text, packed = next(
        (t, zlib.compress(t))
        for i in range(100_000)
        for t in [b"(Settlement %d) Tj" % i]
        if zlib.compress(t).endswith(b"\r")
    )
    pdf = (
        b"%PDF-1.3\n4 0 obj\n<<\n/Filter /FlateDecode\n/Length "
        + str(len(packed)).encode()
        + b"\n>>\nstream\n"
        + packed
        + b"\nendstream\nendobj\n"
    )
    assert pdf_text(pdf) == text[1:-4].decode()
