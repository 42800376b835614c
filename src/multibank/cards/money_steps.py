"""Card authorisations that expire on the programme clock (D24): an open hold is released as an
expiry 7 days after its authorisation. Taken by the one scheduler of due work
(`programmes/due.py`), as payments' steps are: each authorisation in a transaction of its own,
its row claimed with `SKIP LOCKED`, so each expires once however many processes look, and a hold
a concurrent settlement holds is left to it."""

from __future__ import annotations

from sqlalchemy import String, literal_column, select

from multibank.cards import money
from multibank.cards.authorisations import CardAuthorisation
from multibank.programmes.due import BATCH, NOW, DueWork
from multibank.programmes.models import Programme

# A literal, so both planners match the partial index of open authorisations.
_OPEN = literal_column("'PENDING_SETTLEMENT'", String)
DUE = DueWork(
    "card authorisation expiry",
    CardAuthorisation,
    select(CardAuthorisation.id)
    .join(Programme, Programme.id == CardAuthorisation.programme_id)
    .where(
        CardAuthorisation.state == _OPEN,
        CardAuthorisation.expires_at <= NOW + Programme.clock_offset_ms,
    )
    .order_by(CardAuthorisation.expires_at)
    .limit(BATCH),
    lambda ctx, authorisation: money.expire_due(ctx, authorisation.id),
    still_due=CardAuthorisation.state == _OPEN,
)
