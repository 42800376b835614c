"""The customer page's trusted beneficiaries and linked accounts (issue 43 §7), over HTTP: made
through the 3.63 line's API, then read on the signed-in operator's page: each beneficiary's name,
what it pays (an instrument linked to its account's page, an IBAN), its state and an invalid
one's validation failure; each linked account's name, state and IBAN; one line for none."""

from __future__ import annotations

from tests.api.payments_support import customer
from tests.api.test_portal_payment_detail import text
from tests.api.test_portal_web import page, signed_in_client
from tests.api.test_v3_63_beneficiaries import IBAN, add, company, confirm, instrument, sepa
from tests.api.test_v3_63_linked_accounts import made

OTHER_IBAN = "GB82WEST12345698765432"


def rows(shown: str, attribute: str) -> list[str]:
    """The cells of each table row with `attribute` (`data-beneficiary`, …), in page order."""
    return [
        part.split(">", 1)[1].split("</tr>", 1)[0] for part in shown.split(f'{attribute}="')[1:]
    ]


async def test_the_customer_page_lists_beneficiaries_and_linked_accounts(app, client, programme):
    p = await programme()
    me, _mine = await customer(client, p)
    payee, theirs = await customer(client, p, sms=False)
    batch = await add(
        client,
        me,
        instrument(theirs, company(payee), group="suppliers"),
        sepa(),
        instrument("999999", "Nobody Ltd"),
    )
    await confirm(client, me, batch["operationBatchId"]["batchId"])
    linked = await made(client, me, name="Savings Co", accountReference={"iban": OTHER_IBAN})
    base = f"/portal/programmes/{p.id}"
    operator = await signed_in_client(app)
    try:
        shown = await page(operator, f"{base}/customers/{me.id}")
        empty = text(await page(operator, f"{base}/customers/{payee.id}"))
    finally:
        await operator.aclose()
    by_name = {text(row).strip(): row for row in rows(shown, "data-beneficiary")}
    assert len(by_name) == 3
    payee_row = next(r for w, r in by_name.items() if w.startswith(company(payee)))
    assert f'href="{base}/accounts/{theirs}"' in payee_row  # an instrument of the programme
    assert "ACTIVE" in text(payee_row) and "suppliers" in text(payee_row)
    sepa_row = next(r for w, r in by_name.items() if w.startswith("Ada Lovelace"))
    assert IBAN in text(sepa_row) and "ACTIVE" in text(sepa_row)
    nobody = next(r for w, r in by_name.items() if w.startswith("Nobody Ltd"))
    assert "INVALID (INSTRUMENT_DETAILS_NOT_FOUND)" in text(nobody)
    assert "href" not in nobody.split('data-label="Pays"', 1)[1]  # no such account: no link
    [row] = rows(shown, "data-linked-account")
    assert linked["id"] in row
    assert "Savings Co" in text(row) and OTHER_IBAN in text(row)
    assert "PENDING_VERIFICATION" in text(row)
    words = text(shown)
    assert "No trusted beneficiaries." not in words and "No linked accounts." not in words
    # The payee has neither: one line each.
    assert "No trusted beneficiaries." in empty and "No linked accounts." in empty
