"""Wire types shared by both versions (contract §6)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

DigitsId = Annotated[str, StringConstraints(pattern=r"^[0-9]+$", max_length=19)]


class Wire(BaseModel):
    """Request bodies ignore unknown fields, as the reference service does."""

    model_config = ConfigDict(extra="ignore")


class SensitivePassword(Wire):
    value: Annotated[str, Field(max_length=100, json_schema_extra={"format": "password"})]


class PasswordValidateRequest(Wire):
    password: SensitivePassword
