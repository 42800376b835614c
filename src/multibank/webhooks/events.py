"""The events of D16, in the payload shapes of money-movement.md §2.2, written in the transaction
of the change that causes them (`emit`), only for a programme with a webhook URL.

Webhook payloads are the reference's legacy shapes, not the REST ones: amounts are strings, ids
nest as `{type, id}` with lower-case plural types (`send` is singular), `publishedTimestamp` is a
string of epoch ms. Each builder here is the one place a payload's shape is decided.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from multibank.accounts.models import ManagedAccount
from multibank.identities.models import Identity
from multibank.kernel.ids import new_id
from multibank.ledger.models import LedgerAccount
from multibank.payments.models import OWT, SEND, TRANSFER, Payment
from multibank.programmes.context import Ctx
from multibank.users.models import User
from multibank.webhooks.models import PENDING, WebhookEvent

# The event paths (`{url}{path}`) this server emits.
LOGIN = "/login/watch"
STEPUP = "/stepup/watch"
FACTORS = "/authentication_factors/watch"
KYB = "/corporates/kyb/watch"
KYC = "/consumers/kyc/watch"
ACCOUNTS = "/managed_accounts/watch"
IBANS = "/ibans/watch"
DEPOSITS = "/managed_accounts/deposits/watch"
FEES = "/fees/watch"
TRANSFERS = "/transfers/watch"
SENDS = "/send/watch"
OWTS = "/outgoing_wire_transfers/watch"
PATHS = (LOGIN, STEPUP, FACTORS, KYB, KYC, ACCOUNTS, IBANS, DEPOSITS, FEES, TRANSFERS, SENDS, OWTS)


# While set, `emit` records nothing: `multibank webhooks trigger` sets the stage (a customer,
# an account, a card) without events, so the developer's receiver gets the event asked for and
# what that event cannot happen without, no more (decision 0068). Set in one task's context
# only: the requests of every other task record as always.
_staging: ContextVar[bool] = ContextVar("multibank_webhooks_staging", default=False)


@contextmanager
def staging(on: bool = True) -> Iterator[None]:
    """Within it, this task's changes record no event (`on`), or record them again (not `on`)."""
    token = _staging.set(on)
    try:
        yield
    finally:
        _staging.reset(token)


def topic(path: str) -> str:
    """`/managed_accounts/deposits/watch` → `managed_accounts/deposits`."""
    return path.removesuffix("/watch").lstrip("/")


async def emit(ctx: Ctx, path: str, kind: str, resource: str, body: dict[str, Any]) -> None:
    """Records one event of `path` for delivery after commit; nothing without a webhook URL.
    `resource` names what the event is about: its events are delivered in the order written."""
    if not ctx.programme.webhook_url or _staging.get():
        return
    ctx.db.add(
        WebhookEvent(
            id=new_id(),
            programme_id=ctx.programme.id,
            path=path,
            event_type=f"{topic(path)}.{kind}",
            resource=resource[:80],
            call_ref=secrets.token_hex(16),
            payload=json.dumps(body, separators=(",", ":"), ensure_ascii=False),
            state=PENDING,
            attempts=0,
            next_attempt_at=ctx.now,
            created_at=ctx.now,
        )
    )


def _ms(value: int) -> str:
    return str(value)


def _money(currency: str, amount: int) -> dict[str, str]:
    # Legacy amounts are unsigned digit strings.
    return {"currency": currency, "amount": str(abs(amount))}


def _identity(kind: str, identity_id: int) -> dict[str, str]:
    return {"type": kind, "id": str(identity_id)}


def _credential(user: User) -> dict[str, str]:
    return {"type": "ROOT" if user.role == "ROOT" else "USER", "id": str(user.id)}


# Access


async def login(ctx: Ctx, user: User, status: str) -> None:
    """A password login: VERIFIED, or DECLINED for a wrong password."""
    await emit(
        ctx,
        LOGIN,
        status,
        f"users:{user.id}",
        {
            "credential": _credential(user),
            "identity": _identity(user.identity_type, user.identity_id),
            "type": "PASSWORD",
            "status": status,
            "publishedTimestamp": _ms(ctx.now),
        },
    )


async def stepup(ctx: Ctx, user: User, challenge_id: int | str, channel: str, status: str) -> None:
    """A step-up challenge's end: VERIFIED, DECLINED or EXPIRED."""
    await emit(
        ctx,
        STEPUP,
        status,
        f"users:{user.id}",
        {
            "credential": _credential(user),
            "identity": _identity(user.identity_type, user.identity_id),
            "challengeId": str(challenge_id),
            "type": "SMS_OTP" if channel == "SMS" else channel,
            "status": status,
            "publishedTimestamp": _ms(ctx.now),
        },
    )


async def factor(ctx: Ctx, user_id: int, channel: str, status: str) -> None:
    """An authentication factor became ACTIVE or INACTIVE."""
    await emit(
        ctx,
        FACTORS,
        status,
        f"users:{user_id}",
        {
            "credentialId": str(user_id),
            "type": "SMS_OTP" if channel == "SMS" else channel,
            "status": status,
            "publishedTimestamp": _ms(ctx.now),
        },
    )


# Due diligence


async def due_diligence(ctx: Ctx, identity: Identity, email: str) -> None:
    """KYB of a corporate or KYC of a consumer changed status."""
    if identity.type == "CORPORATE":
        await emit(
            ctx,
            KYB,
            identity.dd_status,
            f"corporates:{identity.id}",
            {
                "corporateId": str(identity.id),
                "corporateEmail": email,
                "status": identity.dd_status,
                "details": [],
                "rejectionComment": "",
                "ongoingStatus": identity.dd_ongoing_status,
            },
        )
        return
    await emit(
        ctx,
        KYC,
        identity.dd_status,
        f"consumers:{identity.id}",
        {
            "consumerId": str(identity.id),
            "consumerEmail": email,
            "status": identity.dd_status,
            "details": [],
            "rejectionComment": "",
            "kycLevel": identity.dd_level or "",
            "ongoingStatus": identity.dd_ongoing_status,
            "ongoingKycLevel": identity.dd_level or "",
            "eventTimestamp": _ms(ctx.now),
        },
    )


# Managed accounts and their IBANs


def legacy_account(account: ManagedAccount, ledger_account: LedgerAccount) -> dict[str, Any]:
    block_types = [account.blocked_reason] if account.blocked_reason else []
    out: dict[str, Any] = {
        "id": {"id": str(account.id), "type": "managed_accounts"},
        "profileId": str(account.profile_id),
        "tag": account.tag or "",
        "owner": _identity(account.identity_type, account.identity_id),
        "friendlyName": account.friendly_name,
        "active": account.state == "ACTIVE",
        "currency": account.currency,
        "balances": {
            "availableBalance": str(ledger_account.available),
            "actualBalance": str(ledger_account.actual),
        },
        "state": {"blockTypes": block_types, "destroyType": account.destroyed_reason or ""},
        "creationTimestamp": _ms(account.created_at),
    }
    if account.iban:
        out["bankAccountDetails"] = {
            "iban": account.iban,
            "bankIdentifierCode": account.bic or "",
            "accountNumber": account.account_number or "",
            "sortCode": account.sort_code or "",
        }
    return out


async def account(
    ctx: Ctx, kind: str, account: ManagedAccount, ledger_account: LedgerAccount
) -> None:
    """CREATED, UPDATED, BLOCKED, UNBLOCKED or DESTROYED."""
    await emit(
        ctx,
        ACCOUNTS,
        kind,
        f"managed_accounts:{account.id}",
        {
            "account": legacy_account(account, ledger_account),
            "publishedTimestamp": _ms(ctx.now),
            "type": kind,
        },
    )


async def iban(ctx: Ctx, kind: str, account: ManagedAccount) -> None:
    """The account's IBAN was REQUESTED (state PENDING) or allocated (CREATED, state ACTIVE)."""
    details = []
    if account.iban:
        details.append(
            {
                "beneficiaryBank": "multibank sandbox bank",
                "details": {"iban": account.iban, "code": account.bic or ""},
            }
        )
    await emit(
        ctx,
        IBANS,
        kind,
        f"managed_accounts:{account.id}",
        {
            "iban": {
                "id": str(account.id),
                "managedAccountId": str(account.id),
                "profileId": str(account.profile_id),
                "tag": account.tag or "",
                "friendlyName": account.friendly_name,
                "currency": account.currency,
                "state": {"state": "ACTIVE" if account.iban else "PENDING"},
                "creationTimestamp": _ms(account.created_at),
                "bankAccountDetails": details,
            },
            "publishedTimestamp": _ms(ctx.now),
            "type": kind,
        },
    )


async def deposit(
    ctx: Ctx,
    account: ManagedAccount,
    transaction_id: int,
    amount: int,
    details: dict[str, Any],
) -> None:
    """Money arrived on the account from outside."""
    body: dict[str, Any] = {
        "id": {"id": str(account.id), "type": "managed_accounts"},
        "transactionId": str(transaction_id),
        "transactionAmount": _money(account.currency, amount),
        "transactionTimestamp": _ms(ctx.now),
        "owner": _identity(account.identity_type, account.identity_id),
        "state": "COMPLETED",
        "transactionFee": _money(account.currency, 0),
    }
    for ours, theirs in (
        ("sender", "senderName"),
        ("senderIban", "senderIban"),
        ("reference", "senderReference"),
        ("paymentNetwork", "paymentNetwork"),
    ):
        if details.get(ours):
            body[theirs] = str(details[ours])
    await emit(ctx, DEPOSITS, "COMPLETED", f"managed_accounts:{account.id}", body)


async def fee(
    ctx: Ctx,
    transaction_id: int,
    fee_type: str,
    source_id: int,
    currency: str,
    amount: int,
    profile_id: int,
    source_type: str = "managed_accounts",
) -> None:
    """A fee charged to an account or a prepaid card (`fees/charge`)."""
    if not ctx.programme.webhook_url:  # nothing recorded (`emit`): the body is not built
        return
    await emit(
        ctx,
        FEES,
        "COMPLETED",
        f"{source_type}:{source_id}",
        {
            "chargeFee": {
                "id": {"type": "fees", "id": str(transaction_id)},
                "feeType": "CUSTOM",
                "feeSubType": fee_type,
                "note": "",
                "source": {"type": source_type, "id": str(source_id)},
                "feeSpec": {"type": "FLAT", "flatAmount": [_money(currency, amount)]},
                "profileId": str(profile_id),
            },
            "publishedTimestamp": _ms(ctx.now),
            "type": "COMPLETED",
        },
    )


# Payments


def _instrument(kind: str | None, instrument_id: int | None) -> dict[str, str]:
    return {"type": kind or "managed_accounts", "id": str(instrument_id)}


def _conflict(p: Payment) -> str:
    """The reference's internal `conflict` code: why a payment did not go through."""
    if p.failure is None:
        return "NO_ERROR"
    return "INSUFFICIENT_FUNDS" if p.failure == "INSUFFICIENT_FUNDS" else "UNDEFINED"


async def payment(ctx: Ctx, p: Payment, event: str | None = None) -> None:
    """The payment's state now: one event per state step (eventType = the state, as observed;
    a send's end other than COMPLETED is eventType FAILED with its state, and a send waiting
    for SCA is eventType PENDING_CHALLENGE with state PENDING)."""
    if p.kind == TRANSFER:
        await emit(
            ctx,
            TRANSFERS,
            p.state,
            f"transfers:{p.id}",
            {
                "eventType": p.state,
                "transfer": {
                    "id": {"type": "transfers", "id": str(p.id)},
                    "profileId": str(p.profile_id),
                    "tag": p.tag or "",
                    "source": _instrument(p.source_type, p.source_id),
                    "destination": _instrument(p.destination_type, p.destination_id),
                    "destinationAmount": _money(p.currency, p.amount),
                    "state": p.state,
                    "creationTimestamp": _ms(p.created_at),
                    "conflict": _conflict(p),
                },
                "publishedTimestamp": _ms(ctx.now),
            },
        )
    elif p.kind == SEND:
        if event is None:
            waiting = ("PENDING", "PENDING_CHALLENGE", "COMPLETED")
            event = p.state if p.state in waiting else "FAILED"
        await emit(
            ctx,
            SENDS,
            event,
            f"send:{p.id}",
            {
                "eventType": event,
                "send": {
                    "id": {"type": "send", "id": str(p.id)},
                    "profileId": str(p.profile_id),
                    "tag": p.tag or "",
                    "source": _instrument(p.source_type, p.source_id),
                    "destination": _instrument(p.destination_type, p.destination_id),
                    "destinationAmount": _money(p.currency, p.amount),
                    "transactionAmount": _money(p.currency, p.amount),
                    "sourceFee": _money(p.currency, p.fee),
                    "state": p.state,
                    "challengeExemptionReason": p.exemption or "NO_EXEMPTION",
                    "conflict": _conflict(p),
                    "creationTimestamp": _ms(p.created_at),
                },
                "publishedTimestamp": _ms(ctx.now),
            },
        )
    elif p.kind == OWT:
        await emit(ctx, OWTS, p.state, f"outgoing_wire_transfers:{p.id}", _owt(ctx, p))


def _owt(ctx: Ctx, p: Payment) -> dict[str, Any]:
    b = p.beneficiary or {}
    bank = b.get("bankAccountDetails") or {}
    destination: dict[str, Any] = {"beneficiaryName": b.get("name", "")}
    for ours, theirs in (
        ("address", "beneficiaryAddress"),
        ("bankName", "beneficiaryBankName"),
        ("bankAddress", "beneficiaryBankAddress"),
        ("bankCountry", "beneficiaryBankCountry"),
    ):
        if b.get(ours) is not None:
            value = b[ours]
            destination[theirs] = value if isinstance(value, str) else json.dumps(value)
    if "iban" in bank:
        destination["sepa"] = {"iban": bank["iban"], "bic": bank.get("bankIdentifierCode", "")}
    else:
        destination["fasterPayments"] = {
            "accountNumber": bank.get("accountNumber", ""),
            "sortCode": bank.get("sortCode", ""),
        }
    return {
        "eventType": p.state,
        "owner": _identity(p.identity_type, p.identity_id),
        "transfer": {
            "id": {"type": "outgoing_wire_transfers", "id": str(p.id)},
            "profileId": str(p.profile_id),
            "tag": p.tag or "",
            "source": _instrument(p.source_type, p.source_id),
            "transferAmount": _money(p.currency, p.amount),
            "description": p.description or "",
            "type": p.scheme or "",
            "destination": destination,
            "state": p.state,
            "challengeExemptionReason": p.exemption or "NO_EXEMPTION",
            "creationTimestamp": _ms(p.created_at),
            "transactionAmount": _money(p.currency, p.amount),
            "transactionFee": _money(p.currency, p.fee),
            "conflict": _conflict(p),
        },
        "publishedTimestamp": _ms(ctx.now),
    }
