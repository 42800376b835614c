"""Version 3.1.0: the 3.29.1 operations minus those 3.1.0 lacks, plus what differs (D2, §7)."""

from __future__ import annotations

from fastapi import APIRouter

from multibank.api.v3_1 import (
    access,
    consumers,
    corporates,
    fees,
    managed_accounts,
    statements,
    users,
)

# Operation ids of 3.29.1 that 3.1.0 does not have (D2).
REMOVED: set[str] = {
    "authorisedUserEmailVerificationCodeSend",
    "authorisedUserEmailVerify",
    "userKyc",
    "consumerKycStartSumsubMobile",
    # Multi-identity login (3.29): identities and delegated access.
    "userIdentities",
    "requestAccessToken",
    # Additional factors and step-up arrived after 3.1.0.
    "authFactorsGet",
    "enrolDeviceUsingOtpStepOne",
    "enrolDeviceUsingOtpStepTwo",
    "enrolDeviceUsingPush",
    "unlinkDeviceUsingPush",
    "stepupSCAChallenge",
    "stepupSCAVerify",
    "stepupSCAChallengePush",
    # Money movement (D12) is built on the 3.29.1 base URLs only.
    "transferCreate",
    "transfersGet",
    "transferGet",
    "sendCreate",
    "sendsGet",
    "sendGet",
    "sendSCAChallenge",
    "sendSCAVerify",
    "sendSCAChallengePush",
    "outgoingWireTransferCreate",
    "outgoingWireTransfersGet",
    "outgoingWireTransferGet",
    "outgoingWireTransferSCAChallenge",
    "outgoingWireTransferSCAVerify",
    "outgoingWireTransferSCAChallengePush",
    # Managed cards (D18) are built on the 3.29.1 base URLs only.
    "managedCardsGet",
    "managedCardCreate",
    "managedCardGet",
    "managedCardUpdate",
    "managedCardBlock",
    "managedCardUnblock",
    "managedCardRemove",
    "managedCardSpendRulesGet",
    "managedCardSpendRulesCreate",
    "managedCardSpendRulesUpdate",
    "managedCardSpendRulesSet",
    "managedCardSpendRulesDelete",
    "managedCardStatement",
    "managedCardPhysicalUpgrade",
    "managedCardPhysicalActivate",
    "managedCardPhysicalPinGet",
    "managedCardPhysicalPinUnBlock",
    "managedCardPhysicalReplaceDamaged",
    "managedCardPhysicalReportLost",
    "managedCardPhysicalReportStolen",
    "managedCardPhysicalReplaceLostOrStolen",
    "managedCardPhysicalContactlessLimitReset",
    "managedCardAssign",
}
# Routers whose routes replace the 3.29.1 route of the same method and path, or add 3.1.0-only ones.
OVERRIDES: list[APIRouter] = [
    access.router,
    corporates.router,
    consumers.router,
    users.router,
    managed_accounts.router,
    statements.router,
    fees.router,
]
