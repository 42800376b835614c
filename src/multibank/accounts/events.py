"""The managed-account webhooks of D16 (money-movement.md §2.2): an account's changes, its IBAN
and the deposits arriving on it, written in the transaction of the change
(`webhooks.events.emit`). The one place their payloads' shapes are decided."""

from __future__ import annotations

from typing import Any

from multibank.accounts.models import ManagedAccount
from multibank.ledger.models import LedgerAccount
from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, ms, ref, register, unsigned_money

ACCOUNTS = "/managed_accounts/watch"
IBANS = "/ibans/watch"
DEPOSITS = "/managed_accounts/deposits/watch"
PATHS = register(ACCOUNTS, IBANS, DEPOSITS)


def legacy_account(account: ManagedAccount, ledger_account: LedgerAccount) -> dict[str, Any]:
    block_types = [account.blocked_reason] if account.blocked_reason else []
    out: dict[str, Any] = {
        "id": {"id": str(account.id), "type": "managed_accounts"},
        "profileId": str(account.profile_id),
        "tag": account.tag or "",
        "owner": ref(account.identity_type, account.identity_id),
        "friendlyName": account.friendly_name,
        "active": account.state == "ACTIVE",
        "currency": account.currency,
        "balances": {
            "availableBalance": str(ledger_account.available),
            "actualBalance": str(ledger_account.actual),
        },
        "state": {"blockTypes": block_types, "destroyType": account.destroyed_reason or ""},
        "creationTimestamp": ms(account.created_at),
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
            "publishedTimestamp": ms(ctx.now),
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
                "creationTimestamp": ms(account.created_at),
                "bankAccountDetails": details,
            },
            "publishedTimestamp": ms(ctx.now),
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
        "transactionAmount": unsigned_money(account.currency, amount),
        "transactionTimestamp": ms(ctx.now),
        "owner": ref(account.identity_type, account.identity_id),
        "state": "COMPLETED",
        "transactionFee": unsigned_money(account.currency, 0),
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
