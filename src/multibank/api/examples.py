"""Request examples in each version's OpenAPI description (issue 14) that succeed as written on
this server: the `default` sandbox programme's profile ids are filled in when the server starts
(`load`), one-time codes are the sandbox's 123456, and each step's example follows the last (sign
up, verify the e-mail, create the password, log in, open an account). Every example is valid
against its operation's schema (tests/api/test_openapi_examples.py): an id the client fills in
(an account, for a transfer; a profile, on a server without the `default` programme) is written
as `0`, an id of the right shape that names nothing, and the request body's description says
which fields to fill."""

from __future__ import annotations

import copy
import secrets
from typing import Any

from sqlalchemy import select

from multibank.identities.samples import consumer_signup, corporate_signup
from multibank.kernel.db import Database
from multibank.programmes.models import Profile, Programme

# The default programme's profile id of each kind, once the server has started.
PROFILES: dict[str, str] = {}
# The sign-up examples' e-mails: new at each start, so the examples also work on a server whose
# database already holds the last start's (an e-mail signs up once).
EMAIL = "ada.lovelace@example.com"
CONSUMER_EMAIL = "grace.hopper@example.com"
PASSWORD = "Sandbox-Pa55"
CODE = "123456"


def renew_emails() -> None:
    global EMAIL, CONSUMER_EMAIL
    tag = secrets.token_hex(3)
    EMAIL = f"ada.lovelace.{tag}@example.com"
    CONSUMER_EMAIL = f"grace.hopper.{tag}@example.com"


async def load(db: Database) -> None:
    """Reads the `default` sandbox programme's profile ids (nothing when there is none), and
    picks the sign-up examples' e-mails."""
    renew_emails()
    async with db.read_sessionmaker() as session:
        stmt = (
            select(Profile.kind, Profile.id)
            .join(Programme, Programme.id == Profile.programme_id)
            .where(Programme.name == "default", Programme.mode == "sandbox")
            .order_by(Profile.created_at, Profile.id)
        )
        found: dict[str, str] = {}
        for kind, profile_id in (await session.execute(stmt)).all():
            found.setdefault(str(kind), str(profile_id))  # the oldest of each kind
    # This database's ids replace any read before (another database in the same process).
    PROFILES.clear()
    PROFILES.update(found)


# An id the client fills in: digits, as every id is, naming nothing.
PLACEHOLDER = "0"


def _profile(kind: str) -> str:
    return PROFILES.get(kind, PLACEHOLDER)


# What the client fills in before sending an operation's example.
FILL_IN = {
    "transferCreate": "`source.id` and `destination.id`: two of your accounts",
    "sendCreate": "`source.id`: your account; `destination.id`: another identity's account",
    "outgoingWireTransferCreate": "`sourceInstrument.id`: your account, with its IBAN",
}


def bodies() -> dict[str, dict[str, Any]]:
    money = {"currency": "EUR", "amount": 500}
    account = {"type": "managed_accounts", "id": PLACEHOLDER}
    return {
        "corporateCreate": corporate_signup(
            _profile("corporate"), EMAIL, company="Analytical Engines Ltd"
        ),
        "consumerCreate": consumer_signup(_profile("consumer"), CONSUMER_EMAIL),
        "corporateRootUserEmailVerificationCodeSend": {"email": EMAIL},
        "corporateRootUserEmailVerify": {"email": EMAIL, "verificationCode": CODE},
        "consumerRootUserEmailVerificationCodeSend": {"email": CONSUMER_EMAIL},
        "consumerRootUserEmailVerify": {
            "email": CONSUMER_EMAIL,
            "verificationCode": CODE,
        },
        "passwordCreate": {"password": {"value": PASSWORD}},
        "passwordValidate": {"password": {"value": PASSWORD}},
        "loginWithPassword": {"email": EMAIL, "password": {"value": PASSWORD}},
        "enrolDeviceUsingOtpStepTwo": {"verificationCode": CODE},
        "stepupSCAVerify": {"verificationCode": CODE},
        "sendSCAVerify": {"verificationCode": CODE},
        "outgoingWireTransferSCAVerify": {"verificationCode": CODE},
        "managedAccountCreate": {
            "profileId": _profile("corporateManagedAccount"),
            "friendlyName": "Main",
            "currency": "EUR",
        },
        "managedCardCreate": {
            "profileId": _profile("corporatePrepaidManagedCard"),
            "friendlyName": "Travel",
            "nameOnCard": "Ada Lovelace",
            "cardholderMobileNumber": "+35699123456",
            "billingAddress": {
                "addressLine1": "1 Analytical Street",
                "city": "Valletta",
                "postCode": "VLT 1000",
                "country": "MT",
            },
            "mode": "PREPAID_MODE",
            "currency": "EUR",
        },
        "transferCreate": {
            "profileId": _profile("transfers"),
            "source": account,
            "destination": {"type": "managed_accounts", "id": PLACEHOLDER},
            "destinationAmount": money,
        },
        "sendCreate": {
            "profileId": _profile("sends"),
            "source": account,
            "destination": {"type": "managed_accounts", "id": PLACEHOLDER},
            "destinationAmount": money,
        },
        "outgoingWireTransferCreate": {
            "profileId": _profile("outgoingWireTransfers"),
            "sourceInstrument": account,
            "transferAmount": money,
            "description": "Invoice 42",
            "destinationBeneficiary": {
                "name": "Ada Lovelace",
                "bankAccountDetails": {
                    "iban": "DE89370400440532013000",
                    "bankIdentifierCode": "COBADEFFXXX",
                },
            },
        },
    }


def inject(schema: dict[str, Any]) -> dict[str, Any]:
    """The description with each known operation's request example (a copy: the cached one is
    left as it is, and the examples follow the profile ids known now)."""
    out = copy.deepcopy(schema)
    examples = bodies()
    for item in out.get("paths", {}).values():
        for op in item.values():
            if not isinstance(op, dict):
                continue
            operation_id = str(op.get("operationId", ""))
            body = examples.get(operation_id)
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and content is not None:
                content["example"] = body
                ids: list[str] = []
                if operation_id in FILL_IN:
                    ids.append(FILL_IN[operation_id])
                if not PROFILES and "profileId" in body:
                    ids.append("`profileId`: a profile of your programme")
                if ids:
                    op["requestBody"]["description"] = (
                        f"The example's ids `{PLACEHOLDER}` name nothing; fill in "
                        + "; ".join(ids)
                        + "."
                    )
    return out
