"""The payment operations of every kind (D12, D13), from one skeleton: create, list and get, and
the three SCA challenge operations of sends and outgoing wire transfers. Each kind's router
describes its wire shape, create service, 409 codes and list filters (`PaymentOperations`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, StringConstraints

from multibank.api.deps import (
    STEP_UP_RESPONSES,
    CallerIdempotent,
    LoggedIn,
    Session,
    StepUpRequired,
    conflicts,
)
from multibank.api.limits import CallerCodeSendLimited, CallerCodeVerifyLimited
from multibank.api.query_filters import ObjectFilter, QueryFilters
from multibank.factors.schemas import SCAOtpChannel, SCAPushChannel
from multibank.kernel.errors import BadRequest
from multibank.kernel.validation import parse_id
from multibank.payments import repository, sca, service
from multibank.payments.models import HIDDEN_FROM_3_29, Payment
from multibank.payments.schemas import VerificationCodeBody
from multibank.programmes.context import Ctx

PaymentId = Annotated[str, Path(pattern=r"^[0-9]+$")]
START_CONFLICTS = (
    "STATE_INVALID",
    "CHANNEL_NOT_SUPPORTED",
    "CHANNEL_NOT_REGISTERED",
    "SCA_EXEMPTION_APPLIED",
)
VERIFY_CONFLICTS = (
    *START_CONFLICTS,
    "VERIFICATION_CODE_EXPIRED",
    "VERIFICATION_CODE_INVALID",
    "ONE_CHALLENGE_LIMIT_REMAINING",
    "CHALLENGE_LIMIT_EXCEEDED",
)


def owner(session: Session) -> service.Owner:
    auth = session.auth
    return service.Owner(auth.identity_id, auth.identity_type, auth.user_id)


def instrument_object(name: str, types: Any, description: str) -> ObjectFilter:
    """An instrument filter (`{name}[type]`, `{name}[id]`, or the dotted names): the type alone
    keeps that type's instruments; an id needs its type."""
    return ObjectFilter(
        name,
        {"id": Annotated[str, StringConstraints(pattern=r"^[0-9]+$")], "type": types},
        description=description,
        requires={"id": ["type"]},
    )


def instrument_filter(given: dict[str, Any] | None, name: str) -> tuple[str, int | None] | None:
    """(type, id or None) of an instrument filter; an id without its type is a 400."""
    if not given:
        return None
    kind, id_ = given.get("type"), given.get("id")
    if kind is None:
        raise BadRequest(
            f"request.{name}.type: required with {name}.id",
            [{"fieldName": f"{name}.type", "error": "REQUIRED", "params": []}],
        )
    # An id no row can have (over int64) matches nothing.
    return str(kind), None if id_ is None else (parse_id(id_) or 0)


def profile_filter(profile_id: str | None) -> int | None:
    """A `profileId` filter; one no profile can have (over int64) matches nothing."""
    return None if profile_id is None else (parse_id(profile_id) or 0)


def known_states(states: list[str] | None, known: tuple[str, ...]) -> list[str]:
    """A state the interface does not know filters nothing (the reference answers every
    payment then); known ones filter as a set."""
    given = states or []
    return [] if any(s not in known for s in given) else given


def page_body(key: str, total: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: items, "count": total, "responseCount": len(items)}


def add_challenges(
    router: APIRouter,
    path: str,
    kind: str,
    prefix: str,
    what: str,
    hidden: tuple[str, ...] = HIDDEN_FROM_3_29,
) -> None:
    """`{path}/{id}/challenges/otp/{channel}`, its `/verify`, and `…/push/{channel}`; a payment
    in a state of `hidden` is 404 to them, as to the version's get."""

    async def otp_start(id: PaymentId, channel: SCAOtpChannel, session: LoggedIn) -> Response:
        payment = await service.load(session.ctx, owner(session), kind, id, True, hidden)
        await sca.start_otp(session.ctx, session.auth, payment)
        return Response(status_code=204)

    otp_start.__doc__ = (
        f"Sends an SMS code to the user's enrolled mobile to confirm the {what}; its amount and "
        "payee are in the message. The payment waits 5 minutes for the answer."
    )
    router.add_api_route(
        f"{path}/{{id}}/challenges/otp/{{channel}}",
        otp_start,
        methods=["POST"],
        operation_id=f"{prefix}SCAChallenge",
        status_code=204,
        response_class=Response,
        dependencies=[*CallerCodeSendLimited, CallerIdempotent],
        responses=conflicts(*START_CONFLICTS),
    )

    async def otp_verify(
        id: PaymentId, channel: SCAOtpChannel, body: VerificationCodeBody, session: LoggedIn
    ) -> Response:
        payment = await service.load(session.ctx, owner(session), kind, id, True, hidden)
        await sca.verify_otp(session.ctx, session.auth, payment, body.verificationCode)
        return Response(status_code=204)

    otp_verify.__doc__ = (
        f"The SMS code of the {what}'s challenge, from the user who started it. Wrong codes "
        "count down to ONE_CHALLENGE_LIMIT_REMAINING, then CHALLENGE_LIMIT_EXCEEDED ends the "
        "payment."
    )
    router.add_api_route(
        f"{path}/{{id}}/challenges/otp/{{channel}}/verify",
        otp_verify,
        methods=["POST"],
        operation_id=f"{prefix}SCAVerify",
        status_code=204,
        response_class=Response,
        dependencies=[*CallerCodeVerifyLimited, CallerIdempotent],
        responses=conflicts(*VERIFY_CONFLICTS),
    )

    async def push_start(id: PaymentId, channel: SCAPushChannel, session: LoggedIn) -> Response:
        payment = await service.load(session.ctx, owner(session), kind, id, True, hidden)
        await sca.start_push(session.ctx, session.auth, payment, channel.value)
        return Response(status_code=204)

    push_start.__doc__ = (
        f"Sends a push challenge for the {what} to the user's enrolled device. In the sandbox "
        "the simulator's `factors/{credentials_id}/challenges/{challenge_id}/verify_success` "
        f"(or verify_invalid, verify_expired) answers it, with the {what}'s id as challenge_id."
    )
    router.add_api_route(
        f"{path}/{{id}}/challenges/push/{{channel}}",
        push_start,
        methods=["POST"],
        operation_id=f"{prefix}SCAChallengePush",
        status_code=204,
        response_class=Response,
        dependencies=[*CallerCodeSendLimited, CallerIdempotent],
        responses=conflicts(*START_CONFLICTS, "CHALLENGE_LIMIT_EXCEEDED"),
    )


# One skeleton for the three payment kinds: create, list and get (and, for sends and wire
# transfers, the challenge operations) registered from a description of the kind.

Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]
Limit = Annotated[int | None, Query(ge=1, le=2**31 - 1)]


@dataclass(frozen=True)
class PaymentOperations:
    kind: str  # payments.models kind
    path: str  # "/transfers"
    key: str  # the list envelope's key: "transfer"
    prefix: str  # operationIds: {prefix}Create, {prefix}sGet, {prefix}Get
    what: str  # "transfer", in descriptions
    body: Callable[[Payment], dict[str, Any]]
    read_model: type[BaseModel]
    page_model: type[BaseModel]
    create_model: type[BaseModel]
    create: Callable[[Ctx, service.Owner, Any], Awaitable[Payment]]
    create_doc: str
    create_responses: dict[int | str, dict[str, Any]]
    # A dependency reading the kind's list filters from the query string, and the object
    # filters it reads itself (declared here as the description's deepObject parameters).
    filters: Callable[..., Awaitable[repository.Filters]]
    query: QueryFilters
    list_doc: str
    challenges: bool
    # The states this version does not show (payments.models.HIDDEN_FROM_3_29, or () on the
    # 3.63 line, which has them all).
    hidden: tuple[str, ...] = HIDDEN_FROM_3_29
    # What a get does with the payment it read before answering it (the 3.63 line: a scheduled
    # payment whose time has come goes first, D40).
    on_read: Callable[[Request, Session, Payment], Awaitable[Payment]] | None = None


def _typed(fn: Callable[..., Any], **annotations: Any) -> None:
    """Gives `fn` the parameter types of this kind, for FastAPI to read."""
    signature = inspect.signature(fn)
    fn.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(annotation=annotations.get(p.name, p.annotation))
            for p in signature.parameters.values()
        ]
    )


def add_payment_operations(router: APIRouter, k: PaymentOperations) -> None:
    async def create(data: Any, session: LoggedIn) -> dict[str, Any]:
        return k.body(await k.create(session.ctx, owner(session), data))

    _typed(create, data=k.create_model)
    create.__doc__ = k.create_doc
    router.add_api_route(
        k.path,
        create,
        methods=["POST"],
        operation_id=f"{k.prefix}Create",
        response_model=k.read_model,
        response_model_exclude_none=True,
        dependencies=[CallerIdempotent],
        responses=k.create_responses,
    )

    async def list_(
        session: StepUpRequired, filters: Any, offset: Offset = 0, limit: Limit = None
    ) -> dict[str, Any]:
        total, rows = await service.page(
            session.ctx, owner(session), k.kind, filters, offset, limit, k.hidden
        )
        return page_body(k.key, total, [k.body(p) for p in rows])

    _typed(list_, filters=Annotated[repository.Filters, Depends(k.filters)])
    list_.__doc__ = k.list_doc
    router.add_api_route(
        k.path,
        list_,
        methods=["GET"],
        operation_id=f"{k.prefix}sGet",
        response_model=k.page_model,
        response_model_exclude_none=True,
        responses=STEP_UP_RESPONSES,
        openapi_extra={"parameters": k.query.openapi()},
    )

    async def get(request: Request, id: PaymentId, session: StepUpRequired) -> dict[str, Any]:
        payment = await service.load(session.ctx, owner(session), k.kind, id, False, k.hidden)
        if k.on_read is not None:
            payment = await k.on_read(request, session, payment)
        return k.body(payment)

    get.__doc__ = f"One of the logged-in identity's {k.what}s; another identity's is 404."
    router.add_api_route(
        f"{k.path}/{{id}}",
        get,
        methods=["GET"],
        operation_id=f"{k.prefix}Get",
        response_model=k.read_model,
        response_model_exclude_none=True,
        responses=STEP_UP_RESPONSES,
    )
    if k.challenges:
        add_challenges(router, k.path, k.kind, k.prefix, k.what, k.hidden)
