"""A card statement read by a session that has not stepped up (cards.md §8.1, D28;
docs/decisions/0059), black-box over HTTP: with the programme's `stepUpRequired` on, a later
session of the same user reads the entries posted while a step-up of the last minute was in force
(from the step-up to the end of its session) and is refused 403 STEP_UP_REQUIRED as soon as the
page holds an older one, in every form (JSON, CSV, PDF). The reference's
`GetManagedCardsStatement_StepUpValidEntryLimit_SuccessLastEntry` and `…_ForbiddenAllEntries`,
`…_StepUpActive_Success` and `…_StepUpExpired_Forbidden`; another user's step-up does not count,
a logged-out session's window ends at its logout, and a push step-up counts as an OTP one."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.payments_support import advance, settings
from tests.api.test_card_funding import ACCOUNTS, CARDS, body, move, ref
from tests.api.test_card_statement import buy, simulated, statement
from tests.api.test_factors import assert_step_up_required, enrol_sms, invited_user
from tests.api.test_managed_cards import create
from tests.api.test_stepup import challenge, settle, stepped_up_programme
from tests.conftest import Prog
from tests.factories import Identity, deposit, login, open_account, otp_step_up, verified

LATEST = "/multi"
RECENT = 60  # seconds a step-up stays recent for a later session (decision 0059)
FORMS = ("application/json", "text/csv", "application/pdf")


async def new_session(client: httpx.AsyncClient, p: Prog, email: str) -> dict[str, str]:
    r = await login(client, p, email)
    assert r.status_code == 200, r.text
    return {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}


async def logout(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    assert (await client.post(f"{LATEST}/logout", headers=headers)).status_code == 204


async def read(
    client: httpx.AsyncClient,
    ident: Identity,
    card: dict[str, str],
    headers: dict[str, str],
    accept: str = "application/json",
    **params: Any,
) -> httpx.Response:
    return await statement(
        client, ident, card["id"], headers={**headers, "accept": accept}, **params
    )


def ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    got: dict[str, Any] = r.json()
    return got


async def stepped_up_card(
    client: httpx.AsyncClient, programme: Any
) -> tuple[Prog, Identity, dict[str, str], dict[str, str], str]:
    """A programme that demands step-up; an identity whose first session stepped up, opened an
    account with 1000 and a card, and moved 100 onto the card (its first entry, posted while
    that step-up was in force). The transfer's id last."""
    p = await programme(stepUpRequired=True)
    ident = await verified(client, p, "corporates")
    await enrol_sms(client, ident.headers)
    await otp_step_up(client, ident.headers)
    acc = (await open_account(client, ident, "EUR"))["id"]
    assert await deposit(client, p, acc, 1000) == "COMPLETED"
    card = (await create(client, ident))["id"]
    r = await move(client, ident, body(p, ref(ACCOUNTS, acc), ref(CARDS, card), 100))
    assert r.status_code == 200, r.text
    return p, ident, ref(ACCOUNTS, acc), ref(CARDS, card), r.json()["id"]


async def second_step_up_and_third_session(
    client: httpx.AsyncClient, programme: Any
) -> tuple[Identity, dict[str, str], dict[str, str], str]:
    """The reference's three sessions: the first steps up and funds the card, and logs out; a
    minute later the second is refused, steps up, funds the card again, and logs out; the third
    has not stepped up. Answers the identity, the card, the third session's headers and the id
    of the second transfer."""
    p, ident, acc, card, _ = await stepped_up_card(client, programme)
    await logout(client, ident.headers)
    await advance(client, p, RECENT + 1)
    second = await new_session(client, p, ident.email)
    assert_step_up_required(await read(client, ident, card, second))
    await otp_step_up(client, second)
    r = await move(client, ident, body(p, acc, card, 50), headers=second)
    assert r.status_code == 200, r.text
    assert ok(await read(client, ident, card, second))["count"] == 2
    await logout(client, second)
    third = await new_session(client, p, ident.email)
    return ident, card, third, r.json()["id"]


async def test_a_later_session_reads_the_last_entry_of_a_recent_step_up(client, programme):
    """`GetManagedCardsStatement_StepUpValidEntryLimit_SuccessLastEntry`."""
    ident, card, third, last = await second_step_up_and_third_session(client, programme)
    got = ok(await read(client, ident, card, third, limit=1))
    assert (got["count"], got["responseCount"]) == (2, 1)
    assert got["entry"][0]["transactionId"] == {"type": "TRANSFER", "id": last}
    for accept in ("text/csv", "application/pdf"):
        r = await read(client, ident, card, third, accept, limit=1)
        assert r.status_code == 200, (accept, r.text)
        assert r.headers["content-type"].startswith(accept)
    csv_rows = (await read(client, ident, card, third, "text/csv", limit=1)).text.splitlines()
    assert len(csv_rows) == 2 and last in csv_rows[1]


async def test_a_later_session_is_refused_a_page_with_older_entries(client, programme):
    """`GetManagedCardsStatement_StepUpValidEntryLimit_ForbiddenAllEntries`: the first entry was
    posted under a step-up that is no longer recent."""
    ident, card, third, _ = await second_step_up_and_third_session(client, programme)
    for accept in FORMS:
        assert_step_up_required(await read(client, ident, card, third, accept, limit=4))
        assert_step_up_required(await read(client, ident, card, third, accept))
        # The older entry alone, by paging or by time, is refused too.
        assert_step_up_required(await read(client, ident, card, third, accept, offset=1))
        asc = {"orderByTimestamp": "ASC", "limit": 1}
        assert_step_up_required(await read(client, ident, card, third, accept, **asc))
    # Once the third session steps up itself, it reads everything.
    await otp_step_up(client, third)
    assert ok(await read(client, ident, card, third))["responseCount"] == 2


async def test_a_step_up_counts_for_a_minute_after_it(client, programme):
    """`…_StepUpActive_Success` then `…_StepUpExpired_Forbidden`: the next login reads what the
    stepped-up session posted; a minute after that step-up, the same session is refused."""
    p, ident, _, card, transfer = await stepped_up_card(client, programme)
    await logout(client, ident.headers)
    second = await new_session(client, p, ident.email)
    for accept in FORMS:
        assert (await read(client, ident, card, second, accept)).status_code == 200, accept
    got = ok(await read(client, ident, card, second))
    assert (got["count"], got["responseCount"]) == (1, 1)
    assert got["entry"][0]["transactionId"] == {"type": "TRANSFER", "id": transfer}
    await advance(client, p, RECENT + 1)
    for accept in FORMS:
        assert_step_up_required(await read(client, ident, card, second, accept))


async def test_a_user_who_never_stepped_up_is_refused(client, programme, admin_headers):
    """`…_OneSessionStepUpFalse_Forbidden` and a second session with no step-up anywhere."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    acc = (await open_account(client, ident, "EUR"))["id"]
    assert await deposit(client, p, acc, 1000) == "COMPLETED"
    card = ref(CARDS, (await create(client, ident))["id"])
    r = await move(client, ident, body(p, ref(ACCOUNTS, acc), card, 100))
    assert r.status_code == 200, r.text
    assert ok(await read(client, ident, card, ident.headers))["count"] == 1
    await settings(client, admin_headers, p, stepUpRequired=True)
    second = await new_session(client, p, ident.email)
    for headers in (ident.headers, second):
        for accept in FORMS:
            assert_step_up_required(await read(client, ident, card, headers, accept))
    await settings(client, admin_headers, p, stepUpRequired=False)
    assert ok(await read(client, ident, card, second))["count"] == 1


async def test_with_the_setting_off_any_session_reads_every_entry(client, programme):
    p = await programme()
    ident = await verified(client, p, "corporates")
    acc = (await open_account(client, ident, "EUR"))["id"]
    assert await deposit(client, p, acc, 1000) == "COMPLETED"
    card = ref(CARDS, (await create(client, ident))["id"])
    assert (await move(client, ident, body(p, ref(ACCOUNTS, acc), card, 100))).status_code == 200
    await logout(client, ident.headers)
    await advance(client, p, 3600)
    second = await new_session(client, p, ident.email)
    await simulated(client, p, f"{card['id']}/purchase", buy(10))
    for accept in FORMS:
        assert (await read(client, ident, card, second, accept)).status_code == 200, accept
    assert ok(await read(client, ident, card, second))["count"] == 3


async def test_another_users_step_up_does_not_count(client, programme):
    """Authentication is per user (PSD2): the root user's recent step-up lets a later session of
    the root user read, not an authorised user of the same identity."""
    p, ident, _, card, _ = await stepped_up_card(client, programme)
    user = await invited_user(client, ident, mobile={"countryCode": "+44", "number": "7700900555"})
    for accept in FORMS:
        assert_step_up_required(await read(client, ident, card, user, accept))
    root_again = await new_session(client, p, ident.email)
    assert ok(await read(client, ident, card, root_again))["count"] == 1
    # The authorised user's own step-up opens it for them.
    await enrol_sms(client, user)
    await otp_step_up(client, user)
    assert ok(await read(client, ident, card, user))["count"] == 1


async def test_a_logged_out_sessions_window_ends_at_its_logout(client, programme):
    """While the stepped-up session lives, what is posted meanwhile (a purchase) is readable by a
    later session; what is posted after its logout is not, while what it covered still is."""
    p, ident, _, card, transfer = await stepped_up_card(client, programme)
    second = await new_session(client, p, ident.email)
    assert (await simulated(client, p, f"{card['id']}/purchase", buy(10)))["code"] == "APPROVED"
    got = ok(await read(client, ident, card, second))
    assert (got["count"], got["responseCount"]) == (3, 3)  # settlement, authorisation, transfer

    await logout(client, ident.headers)
    assert (await simulated(client, p, f"{card['id']}/purchase", buy(20)))["code"] == "APPROVED"
    for accept in FORMS:
        assert_step_up_required(await read(client, ident, card, second, accept))
        assert_step_up_required(await read(client, ident, card, second, accept, limit=1))
    # The page without the second purchase's two entries was all posted before the logout.
    got = ok(await read(client, ident, card, second, offset=2))
    assert (got["count"], got["responseCount"]) == (5, 3)
    assert got["entry"][-1]["transactionId"] == {"type": "TRANSFER", "id": transfer}


async def test_a_push_step_up_counts_as_an_otp_one(client, programme):
    """The step-up's time is recorded when the device's answer completes the challenge."""
    p, ident = await stepped_up_programme(client, programme, "AUTHY")
    r = await client.post(
        f"/simulate/api/corporates/{ident.id}/verify", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204, r.text
    await advance(client, p, RECENT + 1)  # the SMS step-up of the enrolment is no longer recent
    cid = await challenge(client, ident.headers, "AUTHY")
    assert (await settle(client, p, ident.root_id, cid, "verify_success")).status_code == 200
    acc = (await open_account(client, ident, "EUR"))["id"]
    assert await deposit(client, p, acc, 1000) == "COMPLETED"
    card = ref(CARDS, (await create(client, ident))["id"])
    assert (await move(client, ident, body(p, ref(ACCOUNTS, acc), card, 100))).status_code == 200
    await logout(client, ident.headers)
    later = await new_session(client, p, ident.email)
    assert ok(await read(client, ident, card, later))["count"] == 1
    await advance(client, p, RECENT + 1)
    assert_step_up_required(await read(client, ident, card, later))
