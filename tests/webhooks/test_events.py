"""The registry of event paths (issue 42 §1): each slice owns its payloads and registers the
paths it emits; `webhooks.events.emit` records only a registered path."""

from __future__ import annotations

from typing import Any

import pytest

from multibank import app  # noqa: F401  (every slice, as the server loads them)
from multibank.access import events as access
from multibank.accounts import events as accounts
from multibank.beneficiaries import events as beneficiaries
from multibank.cards import events as cards
from multibank.factors import events as factors
from multibank.fees import events as fees
from multibank.identities import events as identities
from multibank.linked_accounts import events as linked_accounts
from multibank.payments import events as payments
from multibank.webhooks import events

pytestmark = pytest.mark.any_database


def test_the_slices_register_every_path_the_server_emits() -> None:
    owned = [
        access,
        accounts,
        beneficiaries,
        cards,
        factors,
        fees,
        identities,
        linked_accounts,
        payments,
    ]
    assert events.paths() == {path for slice_ in owned for path in slice_.PATHS}
    assert events.paths() == {
        "/login/watch",
        "/stepup/watch",
        "/authentication_factors/watch",
        "/corporates/kyb/watch",
        "/consumers/kyc/watch",
        "/managed_accounts/watch",
        "/ibans/watch",
        "/managed_accounts/deposits/watch",
        "/fees/watch",
        "/transfers/watch",
        "/send/watch",
        "/outgoing_wire_transfers/watch",
        "/managed_cards/authorisations/watch",
        "/managed_cards/settlements/watch",
        "/managed_cards/adjustments/watch",
        "/managed_cards/state_change/watch",
        "/managed_cards/expiries/watch",
        "/managed_cards/physical_cards_upgrade/watch",
        "/managed_cards/replacement/watch",
        "/linked_accounts/watch",
        "/beneficiaries/batch/watch",
    }


async def test_emit_refuses_a_path_no_slice_registered() -> None:
    nobody: Any = None  # refused before the context is read
    with pytest.raises(ValueError, match="not registered"):
        await events.emit(nobody, "/managed_accounts/nothing/watch", "CREATED", "r", {})
