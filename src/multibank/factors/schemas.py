"""Wire shapes of additional factors and step-up (contract §5.1 stepup*, §5.3, §6 SCAFactor)."""

from __future__ import annotations

from pydantic import BaseModel

from multibank.kernel.vocabulary import DigitsId, Nonce, Wire
from multibank.kernel.wire import WireEnum


class SCAChallengeType(WireEnum):
    OTP = "OTP"
    PUSH = "PUSH"
    BIOMETRIC = "BIOMETRIC"


class SCAFactorStatus(WireEnum):
    PENDING_VERIFICATION = "PENDING_VERIFICATION"
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"


class SCAChannel(WireEnum):
    SMS = "SMS"
    AUTHY = "AUTHY"
    BIOMETRIC = "BIOMETRIC"


class SCAOtpChannel(WireEnum):
    SMS = "SMS"


class SCAPushChannel(WireEnum):
    """The interface's AUTHENTICATOR_APP travels as the product's name in capitals: AUTHY."""

    AUTHY = "AUTHY"
    BIOMETRIC = "BIOMETRIC"


class SCAFactor(BaseModel):
    type: SCAChallengeType
    status: SCAFactorStatus
    channel: SCAChannel


class FactorsResponse(BaseModel):
    factors: list[SCAFactor] | None = None


class SCAVerifyRequest(Wire):
    """`stepupSCAVerify_request`: the code is a Nonce here (interface and contract), not the
    6-digit VerificationCode of e-mail verification, so a well-formed code of another length is
    a wrong code (409), not a malformed request."""

    verificationCode: Nonce


class LinkingCodeResponse(BaseModel):
    linkingCode: str


class ChallengeIdResponse(BaseModel):
    id: DigitsId
