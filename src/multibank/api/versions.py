"""Builds one FastAPI application per base URL (D2), each with its own openapi.json and /docs."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from multibank.api import examples, v3_1, v3_29, v3_63
from multibank.api.errors import install_error_handlers
from multibank.api.openapi import DescribedApp
from multibank.api.routing import absent, compose

# Each interface base URL, as the home page and the portal list them: (base, version, note).
VERSIONS = (
    ("/multi", "3.29.1", "latest"),
    ("/3.29.1/multi", "3.29.1", ""),
    ("/3.1.0/multi", "3.1.0", ""),
    ("/3.63.4/multi", "3.63.4", "the 3.63 line, in progress"),
)

# The description of each version's document: `{version}` is replaced (not `str.format`: the
# text names paths such as `/passwords/{userId}/create`). Kept accurate to README.md.
DESCRIPTION = """Multi Product Banking Service interface {version}, served by multibank. Every \
operation needs the `api-key` header; most also need `Authorization: Bearer <token>` from login.

## How to start

1. **API key.** A programme's key, sent as the `api-key` header. `multibank serve` creates the \
sandbox programme `default` on first start and prints its key and profile ids; the server's home \
page (`/`) shows them too, and `multibank programme show default` prints them again. \
`multibank programme create --name NAME` (or the operator API, `POST /portal/api/programmes`, \
header `Authorization: Bearer <admin token>`) makes another programme.
2. **Sign up.** `POST /corporates` (or `POST /consumers`) with the programme's `corporate` (or \
`consumer`) profile id; verify the root user's e-mail (`POST /corporates/verification/email/send`, \
then `.../verify` with the code); create the root user's password \
(`POST /passwords/{userId}/create`).
3. **Token.** The password creation and `POST /login_with_password` \
(`{"email": ..., "password": {"value": ...}}`) answer a `token`: send it as \
`Authorization: Bearer <token>` with the `api-key`. A session lasts 5 minutes from its last call \
and 12 hours in all; `POST /logout` ends it.
4. **Sandbox.** In a sandbox programme every one-time code (e-mail, SMS, invites) is `123456`, \
and the simulator at `/simulate/api` (header `programme-key: <api key>`, docs at \
`/simulate/api/docs`) plays the outside world: `POST /simulate/api/corporates/{id}/verify` \
approves a KYB (`/consumers/{id}/verify` a KYC), `POST /simulate/api/managed_accounts/{id}/iban/\
allocate` finishes an IBAN upgrade (`POST /managed_accounts/{id}/iban`), and \
`POST /simulate/api/accounts/{id}/deposit` (`{"depositAmount": {"currency": "EUR", \
"amount": 10000}}`, minor units) funds an account whose IBAN is allocated.
"""
PAYMENTS = {
    "3.63.4": (
        "\n**Payments** (transfers, sends and outgoing wire transfers), additional factors and "
        "step-up are served here as on 3.29.1: this base is the 3.63 line, in progress. Every "
        "3.29.1 operation is served with 3.29.1's rules and answers, on the same objects and "
        "tokens as `/multi`; the per-resource send and wire transfer challenges are deprecated "
        "here, as in 3.63.4, and the spend rules `PUT` is gone. Payments show every state of "
        "the line (`INVALID`, `PENDING_CONFIRMATION`, `SCHEDULED`, `CANCELLED`), and a "
        "sandbox's GBP wire transfer waits for **Confirmation of Payee** "
        "(`POST /outgoing_wire_transfers/{id}/confirm` or `…/cancel`). Transfers, sends and "
        "wire transfers may be **scheduled** (`scheduledTimestamp`, programme clock) and "
        "cancelled before their time (`…/bulk/cancel`), and one **batch challenge** "
        "(`/challenges`) confirms several sends or wire transfers. **Trusted beneficiaries** "
        "(`/beneficiaries`) are added and removed in batches confirmed by one challenge, and "
        "sends and wire transfers to them need no SCA. **Linked accounts** "
        "(`/linked_accounts`): an identity's own accounts at other banks, verified (the root "
        "user's declaration by a batch challenge, a transfer instruction, internal checks; in "
        "the sandbox `/simulate/api/linked_accounts/{id}/verify` and `…/set`) before they are "
        "`ACTIVE`.\n"
    ),
    "3.29.1": "\n**Payments** (transfers, sends and outgoing wire transfers) exist on 3.29.1 only "
    "(`/multi` and `/3.29.1/multi`), as do additional factors and step-up.\n",
    "3.1.0": "\n**Payments** (transfers, sends and outgoing wire transfers), additional factors "
    "and step-up are not in 3.1.0: they are on 3.29.1 only (`/multi`).\n",
}


def description(version: str) -> str:
    """The OpenAPI `info.description` of `version`: how to start, and what it serves."""
    return DESCRIPTION.replace("{version}", version) + PAYMENTS.get(version, "")


class VersionApp(DescribedApp):
    """A version's application: its description carries request examples (`api.examples`), and
    marks `deprecated` the operations this version deprecates that another still serves as
    current (the same route objects serve both)."""

    deprecated: frozenset[str] = frozenset()

    def openapi(self) -> dict[str, Any]:
        document = super().openapi()  # built once and kept: marked in place, once
        for item in document.get("paths", {}).values():
            for operation in item.values():
                if isinstance(operation, dict) and operation.get("operationId") in self.deprecated:
                    operation["deprecated"] = True
        return examples.inject(document)


def _version_app(version: str, deprecated: frozenset[str] = frozenset()) -> FastAPI:
    app = VersionApp(
        title="Multi Product Banking Service",
        version=version,
        description=description(version),
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url="/redoc",
    )
    app.deprecated = deprecated
    install_error_handlers(app)
    return app


def build_v3_29() -> FastAPI:
    app = _version_app("3.29.1")
    app.router.routes.extend(compose(v3_29.ROUTERS).routes)
    app.router.routes.extend(absent([*v3_1.OVERRIDES, *v3_63.OVERRIDES], v3_29.ROUTERS).routes)
    return app


def build_v3_1() -> FastAPI:
    app = _version_app("3.1.0")
    app.router.routes.extend(compose(v3_29.ROUTERS, v3_1.OVERRIDES, v3_1.REMOVED).routes)
    app.router.routes.extend(absent(v3_63.OVERRIDES, [*v3_29.ROUTERS, *v3_1.OVERRIDES]).routes)
    return app


# 3.63.4 (D34-D36): the per-resource payment challenges are deprecated in favour of `/challenges`
# and served as on 3.29.1 meanwhile; the spend rules `PUT` is gone (cards.md §1).
DEPRECATED_IN_3_63 = frozenset(
    f"{kind}{operation}"
    for kind in ("send", "outgoingWireTransfer")
    for operation in ("SCAChallenge", "SCAVerify", "SCAChallengePush")
) | {"outgoingWireTransferCancel"}  # the bulk cancel, for the single one (v3.63.md §5.2)
REMOVED_IN_3_63 = ("managedCardSpendRulesSet",)


def build_v3_63() -> FastAPI:
    """`/3.63.4/multi`: the 3.63 line's base, on the same core and sessions as 3.29.1 (D35)."""
    app = _version_app("3.63.4", DEPRECATED_IN_3_63)
    app.router.routes.extend(
        compose(v3_29.ROUTERS, v3_63.OVERRIDES, removed=REMOVED_IN_3_63).routes
    )
    app.router.routes.extend(absent(v3_1.OVERRIDES, v3_29.ROUTERS).routes)
    return app
