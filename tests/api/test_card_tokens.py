"""The sandbox's secure session (D20, D21, cards.md §2.4): the card's owner turns the API's
tokens back into the card number, CVV and PIN; a string that is not a token of the caller's
identity is a 400, another identity's token included; `tokenize` makes the PIN token of an
upgrade. Sandbox only."""

from __future__ import annotations

import httpx
import pytest

from multibank.kernel.carddata import CardKeyring
from tests.api.test_managed_cards import BASES, LATEST, SIM, create, debit_card, get, luhn_ok
from tests.api.test_physical_cards import CODE, phys, tokenize, upgrade_body
from tests.factories import Identity, verified

DETOKENIZE = f"{SIM}/secure_session/detokenize"


def sim_headers(ident: Identity) -> dict[str, str]:
    return {"programme-key": ident.p.api_key, "Authorization": ident.headers["Authorization"]}


async def reveal(
    client: httpx.AsyncClient, ident: Identity, token: str, field: str
) -> httpx.Response:
    return await client.post(
        DETOKENIZE, headers=sim_headers(ident), json={"token": token, "field": field}
    )


async def test_the_owner_sees_the_number_and_cvv(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    r = await reveal(client, ident, card["cardNumber"]["value"], "CARD_NUMBER")
    assert r.status_code == 200, r.text
    number = r.json()["value"]
    assert len(number) == 16 and number.isdigit() and luhn_ok(number)
    assert number[:6] == card["cardNumberFirstSix"] and number[-4:] == card["cardNumberLastFour"]
    r = await reveal(client, ident, card["cvv"]["value"], "CVV")
    assert r.status_code == 200, r.text
    cvv = r.json()["value"]
    assert len(cvv) == 3 and cvv.isdigit()
    # The same again: tokens and values are stable.
    assert (await reveal(client, ident, card["cvv"]["value"], "CVV")).json()["value"] == cvv
    # A token read as another field is not a token of that field.
    r = await reveal(client, ident, card["cardNumber"]["value"], "CVV")
    assert r.status_code == 400, r.text


async def test_nothing_but_the_owners_tokens_is_revealed(client, programme):
    p = await programme()
    ident = await verified(client, p)
    intruder = await verified(client, p)
    card = await create(client, ident)
    token = card["cardNumber"]["value"]
    for who, value, field in (
        (intruder, token, "CARD_NUMBER"),
        (intruder, card["cvv"]["value"], "CVV"),
        (ident, "A" * 24, "CARD_NUMBER"),
        (ident, "not a token", "PIN"),
    ):
        r = await reveal(client, who, value, field)
        assert r.status_code == 400, r.text
    # A PIN token made by one identity is not another's.
    pin = await tokenize(client, ident, "2468")
    assert (await reveal(client, intruder, pin, "PIN")).status_code == 400
    r = await reveal(client, ident, pin, "PIN")
    assert r.status_code == 200 and r.json()["value"] == "2468"
    # Nor can the intruder upgrade with it (404, as an unknown token).
    other = await create(client, intruder)
    r = await phys(client, intruder, other["id"], "", upgrade_body(pin={"value": pin}))
    assert r.status_code == 404, r.text


async def test_refused_callers_of_the_secure_session(client, programme):
    p = await programme()
    other = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    body = {"token": card["cardNumber"]["value"], "field": "CARD_NUMBER"}
    bearer = ident.headers["Authorization"]
    for headers, status in (
        ({"Authorization": bearer}, 400),
        ({"programme-key": "not-a-key", "Authorization": bearer}, 401),
        ({"programme-key": p.api_key}, 401),
        ({"programme-key": p.api_key, "Authorization": "Bearer garbage.token.here"}, 401),
        ({"programme-key": other.api_key, "Authorization": bearer}, 403),
    ):
        r = await client.post(DETOKENIZE, headers=headers, json=body)
        assert r.status_code == status, (headers, r.text)
    for bad in (
        {"token": "x"},
        {"token": "x", "field": "IBAN"},
        {"field": "PIN"},
    ):
        r = await client.post(DETOKENIZE, headers=sim_headers(ident), json=bad)
        assert r.status_code == 400, (bad, r.text)
    r = await client.post(
        f"{SIM}/secure_session/tokenize",
        headers={"programme-key": p.api_key},
        json={"values": {}},
    )
    assert r.status_code == 400, r.text
    # Live programmes have no secure session (D29).
    live = await programme(mode="live")
    for path, payload in (
        ("tokenize", {"values": {"pin": {"value": "1234", "field": "PIN"}}}),
        ("detokenize", body),
    ):
        r = await client.post(
            f"{SIM}/secure_session/{path}",
            headers={"programme-key": live.api_key, "Authorization": bearer},
            json=payload,
        )
        assert r.status_code == 404, (path, r.text)


async def test_a_programme_wide_pin_token_upgrades_and_reads_back(client, programme):
    """A PIN tokenised with the programme key alone serves any of the programme's identities."""
    p = await programme()
    ident = await verified(client, p, "consumers")
    r = await client.post(
        f"{SIM}/secure_session/tokenize",
        headers={"programme-key": p.api_key},
        json={
            "values": {
                "pin": {"value": "0042", "field": "PIN"},
                "other": {"value": "9999", "field": "PIN"},
            }
        },
    )
    assert r.status_code == 200, r.text
    made = r.json()["tokens"]
    assert set(made) == {"pin", "other"} and made["pin"] != made["other"]
    card = await create(client, ident)
    r = await phys(client, ident, card["id"], "", upgrade_body(pin={"value": made["pin"]}))
    assert r.status_code == 200, r.text
    r = await phys(client, ident, card["id"], "activate", {"activationCode": CODE})
    assert r.status_code == 200, r.text
    r = await client.get(f"{LATEST}/managed_cards/{card['id']}/physical/pin", headers=ident.headers)
    assert (await reveal(client, ident, r.json()["pin"]["value"], "PIN")).json()["value"] == "0042"


def fits(card: dict[str, object]) -> None:
    """D21a: the tokens fit `maxLength` 16 and 3 and are never a number or a CVV."""
    number, cvv = card["cardNumber"], card["cvv"]
    assert isinstance(number, dict) and isinstance(cvv, dict)
    assert len(number["value"]) == 16 and number["value"].isalnum(), number
    assert len(cvv["value"]) == 3 and cvv["value"].isalnum(), cvv
    assert not number["value"].isdigit() and not cvv["value"].isdigit()


@pytest.mark.parametrize("base", BASES)
async def test_tokens_fit_the_descriptions_lengths_and_old_ones_still_work(
    client, programme, container, base
):
    p = await programme()
    ident = await verified(client, p, base=base)
    prepaid = await create(client, ident, base)
    debit = await debit_card(client, ident, base)
    listed = await client.get(f"{base}/managed_cards", headers=ident.headers)
    assert listed.status_code == 200, listed.text
    keys = container.card_keys()
    for card in (prepaid, debit, await get(client, ident, prepaid["id"], base)):
        fits(card)
        r = await reveal(client, ident, card["cardNumber"]["value"], "CARD_NUMBER")
        assert r.status_code == 200, r.text
        number = r.json()["value"]
        assert len(number) == 16 and luhn_ok(number) and number[-4:] == card["cardNumberLastFour"]
        r = await reveal(client, ident, card["cvv"]["value"], "CVV")
        assert r.status_code == 200 and len(r.json()["value"]) == 3, r.text
        cvv = r.json()["value"]
        # The 24-character tokens answered before D21a still reveal the same values.
        old_number = keys.token(int(card["id"]), "CARD_NUMBER", 0)
        old_cvv = keys.token(int(card["id"]), "CVV", 1)
        assert (await reveal(client, ident, old_number, "CARD_NUMBER")).json() == {"value": number}
        assert (await reveal(client, ident, old_cvv, "CVV")).json() == {"value": cvv}
    for card in listed.json()["cards"]:
        fits(card)


async def test_a_cvv_token_of_another_card_of_the_identity_is_drawn_again(
    client, programme, monkeypatch
):
    """Three characters can collide: a new card whose CVV token another card of its identity
    has gets a new CVV and token (D21a), so detokenize still names one card's CVV."""
    real = CardKeyring.cvv_token

    def colliding(self: CardKeyring, card_id: int, version: int) -> str:
        return "Aa1" if version == 1 else real(self, card_id, version)

    monkeypatch.setattr(CardKeyring, "cvv_token", colliding)
    p = await programme()
    ident = await verified(client, p)
    first = await create(client, ident)
    second = await create(client, ident)
    assert first["cvv"]["value"] == "Aa1" and second["cvv"]["value"] != "Aa1"
    fits(second)
    for card in (first, second):
        r = await reveal(client, ident, card["cvv"]["value"], "CVV")
        assert r.status_code == 200, r.text
        assert len(r.json()["value"]) == 3 and r.json()["value"].isdigit()
    # Another identity's card may have the same token: tokens are resolved per identity.
    other = await verified(client, p)
    assert (await create(client, other))["cvv"]["value"] == "Aa1"
