"""Confirmation of Payee in the sandbox (v3.63.md §6, D41): what the payee's bank would answer
when asked whether the name the payer typed is the name on the account.

Only GBP wire transfers (Faster Payments, within the UK) are checked, and only those made through
the 3.63 line in a sandbox programme: the last four digits of the account number choose the
answer, so that a client can be driven through every branch of its confirmation screen. A live
programme has no Confirmation of Payee provider in this build, and its wire transfers skip the
check (decision 0084)."""

from __future__ import annotations

from typing import Any

UK_CONFIRMATION_OF_PAYEE = "UK_CONFIRMATION_OF_PAYEE"
EXACT_MATCH, CLOSE_MATCH, NO_MATCH = "EXACT_MATCH", "CLOSE_MATCH", "NO_MATCH"

# The last four digits of an account number that name the sandbox's other answers (D41), with
# the Pay.UK reason code each carries.
CLOSE_MATCH_ENDING = "9991"  # MBAM: the name is close; the account's own name is answered
NAME_NO_MATCH_ENDING = "9992"  # ANNM: the name does not match
NO_ACCOUNT_ENDING = "9993"  # AC01: no such account
SANDBOX_ANSWERS: dict[str, dict[str, str]] = {
    CLOSE_MATCH_ENDING: {"match": CLOSE_MATCH, "reasonCode": "MBAM"},
    NAME_NO_MATCH_ENDING: {"match": NO_MATCH, "reasonCode": "ANNM"},
    NO_ACCOUNT_ENDING: {"match": NO_MATCH, "reasonCode": "AC01"},
}


def sandbox_outcomes(beneficiary: dict[str, Any]) -> list[dict[str, Any]]:
    """The `validationOutcomes` of a Faster Payments beneficiary (`{name, bankAccountDetails:
    {accountNumber, sortCode}}` as the create stored it)."""
    name = str(beneficiary.get("name", ""))
    number = str((beneficiary.get("bankAccountDetails") or {}).get("accountNumber", ""))
    answer = SANDBOX_ANSWERS.get(number[-4:])
    if answer is None:
        result: dict[str, Any] = {"match": EXACT_MATCH, "accountName": name}
    elif answer["match"] == CLOSE_MATCH:
        result = {**answer, "accountName": f"{name} Ltd"}
    else:
        result = dict(answer)
    return [{"category": UK_CONFIRMATION_OF_PAYEE, "categoryResult": result}]
