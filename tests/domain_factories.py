"""Builders for the service-level tests: a programme, its customers and their funded accounts,
and their cards, made directly in one database session through the domain's own services (the
same rules an HTTP request applies), so a test can call `ledger`, `payments`, `fees` or
`cards.money` as a route would and roll everything back at the end.

Everything is flushed, never committed: `rolled_back` gives the session and rolls it back
whatever the test did, so nothing a test builds outlives it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.accounts.schemas import ManagedAccountCreate
from multibank.cards import service as cards
from multibank.cards import spend_rules
from multibank.cards.models import ManagedCard
from multibank.cards.schemas import CardLevelSpendRules, ManagedCardCreate
from multibank.container import Container
from multibank.factors import service as factors
from multibank.identities import service as identities
from multibank.identities.models import CORPORATE, Identity
from multibank.identities.samples import consumer_signup, corporate_signup
from multibank.identities.schemas import ConsumerCreate, CorporateCreate
from multibank.kernel.codes import SANDBOX_CODE
from multibank.kernel.tokens import AuthSession, open_session
from multibank.ledger import service as ledger
from multibank.ledger.models import SETTLEMENT
from multibank.payments.service import Owner
from multibank.programmes import repository as programme_repo
from multibank.programmes import service as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.models import Profile
from multibank.programmes.schemas import ProgrammeCreate
from multibank.users import service as users
from multibank.users.models import User
from multibank.users.schemas import UserCreate


@contextlib.asynccontextmanager
async def rolled_back(container: Container) -> AsyncIterator[AsyncSession]:
    """A session of the server's database whose transaction is rolled back at the end."""
    async with container.db.sessionmaker() as db:
        try:
            yield db
        finally:
            await db.rollback()


async def new_programme(db: AsyncSession, container: Container, **settings: Any) -> Ctx:
    """A new sandbox programme (its profiles, fee types and API key, as the operator API makes
    them), with `settings` in the interface's names (`sendsScaRequired=False`, ...); answers the
    context a request of the programme's has."""
    data = ProgrammeCreate(name=f"svc{secrets.token_hex(6)}", **settings)
    programme, _ = await programmes.create_programme(db, container.clock, data)
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


def later(ctx: Ctx, ms: int) -> Ctx:
    """The same request context `ms` later on the programme's clock."""
    return dataclasses.replace(ctx, now=ctx.now + ms)


async def profile(ctx: Ctx, kind: str) -> Profile:
    """The programme's profile of `kind` (`transfers`, `sends`, `corporate`, ...)."""
    found = [p for p in await programme_repo.list_profiles(ctx.db, ctx.programme.id)]
    mine = [p for p in found if p.kind == kind]
    assert len(mine) == 1, kind
    return mine[0]


async def set_payment_fee(ctx: Ctx, kind: str, currency: str, amount: int) -> None:
    """The fee of one payment kind (`transfers`, `sends`, `outgoingWireTransfers`)."""
    await programmes.set_movement_fee(ctx.db, ctx.programme, kind, currency, amount)


@dataclass
class Customer:
    """An identity with its root user and a live login session of that user."""

    identity: Identity
    root: User
    auth: AuthSession

    @property
    def owner(self) -> Owner:
        """Who a payment belongs to (the root user makes it)."""
        return Owner(self.identity.id, self.identity.type, self.root.id)

    @property
    def account_owner(self) -> accounts.Owner:
        return accounts.Owner(self.identity.id, self.identity.type)


async def customer(
    ctx: Ctx,
    kind: str = CORPORATE,
    *,
    verified: bool = True,
    sms: bool = False,
    fee_group: str | None = None,
) -> Customer:
    """A corporate or consumer signed up with the sample body; `verified`: e-mail, mobile and
    due diligence approved (the simulator's verify); `sms`: an active SMS factor."""
    email = f"svc{secrets.token_hex(6)}@example.com"
    if kind == CORPORATE:
        body = corporate_signup(str((await profile(ctx, "corporate")).id), email)
        if fee_group is not None:
            body["feeGroup"] = fee_group
        identity, root = await identities.create_corporate(ctx, CorporateCreate(**body))
    else:
        body = consumer_signup(str((await profile(ctx, "consumer")).id), email)
        if fee_group is not None:
            body["feeGroup"] = fee_group
        identity, root = await identities.create_consumer(ctx, ConsumerCreate(**body))
    if verified:
        await identities.simulate_verify(ctx, identity.id, identity.type)
    auth = await open_session(
        ctx.db,
        programme_id=ctx.programme.id,
        user_id=root.id,
        credential_type="ROOT",
        identity_type=identity.type,
        identity_id=identity.id,
        token_type="AUTH",
        now_ms=ctx.now,
    )
    made = Customer(identity, root, auth)
    if sms:
        await factors.enrol_sms_start(ctx, auth)
        await factors.enrol_sms_verify(ctx, auth, SANDBOX_CODE)
    return made


async def account(
    ctx: Ctx,
    owner: Customer,
    currency: str = "EUR",
    *,
    funds: int = 0,
    iban: bool = False,
    name: str = "Main",
) -> ManagedAccount:
    """A managed account of `owner` (its ledger account with it), holding `funds` deposited
    from the programme's settlement account; with `iban`, its IBAN allocated."""
    corporate = owner.identity.type == CORPORATE
    kind = "corporateManagedAccount" if corporate else "consumerManagedAccount"
    data = ManagedAccountCreate(
        profileId=str((await profile(ctx, kind)).id), friendlyName=name, currency=currency
    )
    made = await accounts.create(ctx, owner.account_owner, data)
    if iban:
        await accounts.upgrade_iban(ctx, owner.account_owner, str(made.id))
        if made.iban_state != "ALLOCATED":
            await accounts.allocate_pending_iban(ctx, made)
        assert made.iban_state == "ALLOCATED"
    if funds:
        await deposit(ctx, made.id, currency, funds)
    return made


async def settlement(ctx: Ctx, currency: str = "EUR") -> int:
    """The programme's settlement account in `currency` (made on first use)."""
    return await ledger.system_account(ctx.db, ctx.programme.id, SETTLEMENT, currency, ctx.now)


async def deposit(ctx: Ctx, account_id: int, currency: str, amount: int) -> ledger.Movement:
    """Money from outside: the settlement account pays `amount` into the account."""
    return await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_="DEPOSIT",
        legs=[
            ledger.Leg(account_id, currency, amount, amount),
            ledger.Leg(await settlement(ctx, currency), currency, -amount, -amount, False),
        ],
        now_ms=ctx.now,
    )


async def revenue(ctx: Ctx, currency: str = "EUR") -> tuple[int, int]:
    """The programme's revenue in `currency` (available, actual), all shards together."""
    return await ledger.revenue_balance(ctx.db, ctx.programme.id, currency)


async def balances(ctx: Ctx, account_id: int) -> tuple[int, int]:
    """(available, actual) of a ledger account, as the database has it now."""
    return await ledger.balances(ctx.db, account_id)


async def authorised_user(
    ctx: Ctx,
    of: Customer,
    *,
    email: str | None = None,
    mobile: tuple[str, str] | None = None,
    name: str = "Mary",
) -> User:
    """An authorised user of `of`'s identity, made by its root user as `POST /users` makes one
    (no password yet: its invite sets it); `mobile` is (country code, number)."""
    body: dict[str, Any] = {
        "name": name,
        "surname": "Jackson",
        "email": email or f"svc{secrets.token_hex(6)}@example.com",
    }
    if mobile is not None:
        body["mobile"] = {"countryCode": mobile[0], "number": mobile[1]}
    return await users.create(ctx, of.auth, UserCreate.model_validate(body))


async def card(
    ctx: Ctx,
    container: Container,
    owner: Customer,
    *,
    parent: ManagedAccount | None = None,
    currency: str = "EUR",
    funds: int = 0,
    **rules: Any,
) -> ManagedCard:
    """A virtual card of `owner`, made as `POST /managed_cards` makes it: a debit card spending
    from `parent`, else a prepaid card in `currency` holding `funds` (deposited from the
    programme's settlement account). `rules`: the card's own spend rules in the interface's
    names (`spendLimit=[...]`, `allowAtm=False`, ...), set as the spend-rules route sets them."""
    mode = cards.PREPAID if parent is None else cards.DEBIT
    kind = cards.CARD_PROFILES[(owner.identity.type, mode)]
    data = ManagedCardCreate.model_validate(
        {
            "profileId": str((await profile(ctx, kind)).id),
            "friendlyName": "Travel",
            "nameOnCard": "Ada Lovelace",
            "cardholderMobileNumber": "+35699123456",
            "billingAddress": {
                "addressLine1": "1 Analytical Street",
                "city": "Valletta",
                "postCode": "VLT 1000",
                "country": "MT",
            },
            "mode": mode,
            "currency": currency if parent is None else None,
            "parentManagedAccountId": None if parent is None else str(parent.id),
        }
    )
    made = await cards.create(ctx, container.card_keys(), owner.account_owner, data)
    if funds:
        assert parent is None, "a debit card spends its parent account's money"
        await deposit(ctx, made.id, currency, funds)
    if rules:
        await spend_rules.create(
            ctx, owner.account_owner, str(made.id), CardLevelSpendRules.model_validate(rules)
        )
    return made


def limit(amount: int, interval: str = "ALWAYS", currency: str = "EUR") -> dict[str, Any]:
    """One spend limit of a debit card, as `spendLimit` lists them."""
    return {"value": {"currency": currency, "amount": amount}, "interval": interval}
