"""The due-diligence webhooks of D16 (money-movement.md §2.2): KYB of a corporate and KYC of a
consumer, written in the transaction of the change (`webhooks.events.emit`). The one place their
payloads' shapes are decided."""

from __future__ import annotations

from multibank.identities.models import Identity
from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, ms, register

KYB = "/corporates/kyb/watch"
KYC = "/consumers/kyc/watch"
PATHS = register(KYB, KYC)


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
            "eventTimestamp": ms(ctx.now),
        },
    )
