"""The due-diligence provider seam. The sandbox provider hands out references that open the
tester's page at `/kyc/{reference}`; a live deployment plugs a real provider in here."""

from __future__ import annotations

import secrets


def new_reference() -> str:
    """An unguessable digits-only reference (the contract's `^[0-9]+$`): the page it opens
    needs no other credential, so it must not be derivable from ids or time."""
    return str(10**17 + secrets.randbelow(9 * 10**17))
