"""Passwords tag."""

from __future__ import annotations

from fastapi import APIRouter, Response

from multibank.access.passwords import check_complexity
from multibank.api.deps import CurrentProgramme, Idempotent
from multibank.api.routing import UnitOfWorkRoute
from multibank.api.schemas import PasswordValidateRequest

router = APIRouter(tags=["Passwords"], route_class=UnitOfWorkRoute)


@router.post(
    "/passwords/validate",
    operation_id="passwordValidate",
    status_code=204,
    response_class=Response,
    dependencies=[Idempotent],
    responses={409: {"description": "PASSWORD_TOO_SHORT, PASSWORD_TOO_LONG, PASSWORD_TOO_SIMPLE"}},
)
async def password_validate(body: PasswordValidateRequest, _: CurrentProgramme) -> Response:
    """Checks a password against the complexity rules without storing it."""
    check_complexity(body.password.value)
    return Response(status_code=204)
