"""Card-data tokens in the sandbox (D20, D21, D21a): `secure_session/tokenize` keeps a chosen value
(a PIN for an upgrade) encrypted behind a random token; `detokenize` gives the card's owner the
value behind a token of the API (the number, the CVV, the PIN of one of its cards) or of
`tokenize`. A string that is not a token of that identity is refused alike, whatever it is, so
nothing tells another identity's token from a made-up one."""

from __future__ import annotations

import hmac

from sqlalchemy import select

from multibank.cards.models import CardDataToken, ManagedCard
from multibank.cards.physical import PIN_FIELD, PIN_LABEL, TOKEN_LABEL
from multibank.cards.service import CVV_FIELD, NUMBER_FIELD
from multibank.kernel.carddata import CardKeyring
from multibank.kernel.errors import BadRequest
from multibank.kernel.ids import new_id
from multibank.programmes.context import Ctx

FIELDS = (NUMBER_FIELD, CVV_FIELD, PIN_FIELD, "PASSWORD")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


async def tokenize(
    ctx: Ctx, keys: CardKeyring, identity_id: int | None, values: dict[str, tuple[str, str]]
) -> dict[str, str]:
    """A token for each named (value, field); the identity's when a Bearer token came."""
    out: dict[str, str] = {}
    for name, (value, field) in values.items():
        row_id = new_id()
        token = keys.random_token()
        ctx.db.add(
            CardDataToken(
                id=row_id,
                programme_id=ctx.programme.id,
                identity_id=identity_id,
                token=token,
                field=field,
                value_encrypted=keys.encrypt(value, row_id, TOKEN_LABEL),
                created_at=ctx.now,
            )
        )
        out[name] = token
    await ctx.db.flush()
    return out


async def detokenize(ctx: Ctx, keys: CardKeyring, identity_id: int, token: str, field: str) -> str:
    cards = (
        await ctx.db.execute(
            select(ManagedCard).where(
                ManagedCard.programme_id == ctx.programme.id,
                ManagedCard.identity_id == identity_id,
            )
        )
    ).scalars()
    for card in cards:
        # A card's tokens of D21a, or the longer ones answered before it (still honoured).
        if field == NUMBER_FIELD and (
            _same(keys.number_token(card.id), token)
            or _same(keys.token(card.id, NUMBER_FIELD, 0), token)
        ):
            return keys.decrypt(card.number_encrypted, card.id)
        if field == CVV_FIELD and (
            _same(keys.cvv_token(card.id, card.version), token)
            or _same(keys.token(card.id, CVV_FIELD, card.version), token)
        ):
            number = keys.decrypt(card.number_encrypted, card.id)
            return keys.cvv(number, card.expiry_mmyy, card.version)
        if (
            field == PIN_FIELD
            and card.pin_encrypted is not None
            and _same(keys.token(card.id, PIN_FIELD, 0), token)
        ):
            return keys.decrypt(card.pin_encrypted, card.id, PIN_LABEL)
    row = (
        await ctx.db.execute(
            select(CardDataToken).where(
                CardDataToken.programme_id == ctx.programme.id,
                CardDataToken.token == token,
                CardDataToken.field == field,
            )
        )
    ).scalar_one_or_none()
    if row is not None and row.identity_id in (None, identity_id):
        return keys.decrypt(row.value_encrypted, row.id, TOKEN_LABEL)
    raise BadRequest("The value is not a token of this identity")
