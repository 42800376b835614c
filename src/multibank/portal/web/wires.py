"""The bank's side of a sandbox wire transfer, from the payments list or the payment's page:
settled, rejected or returned as the simulator's owt_accept, _reject and _return would (the same
service and refusals); rejecting and returning cannot be undone, so each asks first."""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.responses import RedirectResponse

from multibank.kernel.validation import parse_id
from multibank.payments import owt
from multibank.payments import repository as payments_repo
from multibank.payments.models import OWT, Payment
from multibank.portal import sessions
from multibank.portal.web.actions import Flash, act, confirm_page, confirmed
from multibank.portal.web.common import (
    db_of,
    find_programme,
    money,
    not_found,
    portal_router,
    posted_form,
    programme_ctx,
    signed_in,
    to_login,
)
from multibank.portal.web.forms import Refused
from multibank.programmes.models import Programme

pages = portal_router()


async def _wire(
    request: Request, programme_id: str, payment_id: str, posted: bool
) -> tuple[sessions.Signed, dict[str, str], Programme, Payment] | Response:
    if posted:
        signed, form, refused = await posted_form(request)
        if refused is not None or signed is None:
            return refused or to_login()
    else:
        signed, form = await signed_in(request), {}
        if signed is None:
            return to_login()
    programme = await find_programme(request, programme_id)
    number = parse_id(payment_id)
    if programme is None or number is None or programme.mode != "sandbox":
        return not_found("wire transfer")
    payment = await payments_repo.by_id(db_of(request), programme.id, number, lock=posted)
    if payment is None or payment.kind != OWT:  # the simulator's rule: wire transfers only
        return not_found("wire transfer")
    return signed, form, programme, payment


def _wire_back(request: Request, programme: Programme, payment: Payment) -> str:
    """Where a wire transfer's action goes back to: the payment's page when it was started
    there (`?from=detail`), else the payments list."""
    base = f"/portal/programmes/{programme.id}/payments"
    return f"{base}/{payment.id}" if request.query_params.get("from") == "detail" else base


def _wire_confirm(request: Request, programme: Programme, payment: Payment, action: str) -> str:
    suffix = "?from=detail" if request.query_params.get("from") == "detail" else ""
    return f"/portal/programmes/{programme.id}/wire/{payment.id}/{action}{suffix}"


# What the confirmation page of each irreversible wire action says, and its button.
WIRE_CONFIRM = {
    "reject": (
        "Reject the wire transfer {id} of {amount}? It ends REJECTED and its amount and fee go "
        "back to the account; it cannot be undone.",
        "Reject the wire transfer",
    ),
    "return": (
        "Return the wire transfer {id} of {amount}, as the beneficiary's bank would? It ends "
        "RETURNED: the amount comes back to the source account (and the fee too when the wire "
        "transfer profile refunds it on a return); it cannot be undone.",
        "Return the wire transfer",
    ),
}


@pages.get("/programmes/{programme_id}/wire/{payment_id}/{action}")
async def wire_confirm(
    request: Request, programme_id: str, payment_id: str, action: str
) -> Response:
    opened = await _wire(request, programme_id, payment_id, posted=False)
    if isinstance(opened, Response):
        return opened
    if action not in WIRE_CONFIRM:
        return not_found("action")
    signed, _, programme, payment = opened
    text, button = WIRE_CONFIRM[action]
    amount = money(payment.amount, payment.currency)
    return confirm_page(
        signed,
        programme,
        text.format(id=payment.id, amount=amount),
        _wire_confirm(request, programme, payment, action),
        button,
        _wire_back(request, programme, payment),
    )


def _wire_refusal(action: str, code: str, state: str) -> str:
    """Why the bank's simulator refused a wire action, in plain words."""
    if action == "return":
        return (
            f"Not returned: only a COMPLETED wire transfer can be returned, and this one is "
            f"{state}. Nothing changed."
        )
    said = "settled" if action == "accept" else "rejected"
    if code == "DENIED_WIRE_TRANSFER_ALREADY_COMPLETED":
        return f"Not {said}: the wire transfer has already ended {state}. Nothing changed."
    return (
        f"Not {said}: the wire transfer is {state}; only one waiting at the bank (SUBMITTED "
        "or APPROVED) can be settled or rejected. Nothing changed."
    )


WIRE_DONE = {
    "accept": "Settled: the wire transfer has left the account.",
    "reject": "Rejected: its money is back on the account.",
    "return": "Returned: the bank sent its money back to the account.",
}


@pages.post("/programmes/{programme_id}/wire/{payment_id}/{action}")
async def wire_action(
    request: Request, programme_id: str, payment_id: str, action: str
) -> Response:
    opened = await _wire(request, programme_id, payment_id, posted=True)
    if isinstance(opened, Response):
        return opened
    signed, form, programme, payment = opened
    if action not in ("accept", "reject", "return"):
        return not_found("action")
    if action in WIRE_CONFIRM and not confirmed(form):
        return RedirectResponse(_wire_confirm(request, programme, payment, action), 303)
    ctx = programme_ctx(request, programme)
    state = payment.state

    async def work() -> Flash:
        # The simulator's own service (simulator/router.py owt_accept, _reject, _return).
        code = await owt.simulate(ctx, payment, action)
        if code != "COMPLETED":
            raise Refused(_wire_refusal(action, code, state), code)
        return Flash(WIRE_DONE[action])

    return await act(request, signed, _wire_back(request, programme, payment), work)
