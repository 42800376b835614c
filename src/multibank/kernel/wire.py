"""Wire vocabulary shared by every domain and both interface versions."""

from __future__ import annotations

import re
from contextvars import ContextVar
from enum import StrEnum
from typing import Any, Self, cast

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, model_validator
from pydantic_core import core_schema


class WireEnum(StrEnum):
    """An enumeration of the wire. Request bodies are validated strictly (a JSON `1` is not a
    `true`), and FastAPI hands pydantic the decoded JSON, in which an enumeration is still its
    string: so the enumeration itself accepts its values, whatever the model's strictness."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        schema = dict(handler(source))
        schema["strict"] = False
        return cast(core_schema.CoreSchema, schema)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> bool:
    """Text every database stores and every answer can encode: no NUL (PostgreSQL refuses it)
    and no unpaired UTF-16 surrogate (`"\\ud800"` is valid JSON but not Unicode text)."""
    return _UNSTORABLE.search(text) is None


# Set while a request whose JSON body passed `plain_json` is handled (api/routebase.py): every
# string of that body is `storable` and none of its numbers is a float, so `StrictBody`'s walks
# of it would find nothing (decision 0033). What else a request validates as a `StrictBody` is
# the server's own values (answers), already storable text and integer numbers.
PLAIN_BODY: ContextVar[bool] = ContextVar("plain_body", default=False)
_FLOAT_LIKE = re.compile(rb"[0-9][.eE]")


def plain_json(body: bytes) -> bool:
    """Whether the JSON text `body` decodes to strings that are all `storable` and to no float:
    it is ASCII without a `\\u` escape (JSON refuses raw control characters, so a NUL, like a
    surrogate, can only be written as such an escape), and no digit in it is followed by `.`,
    `e` or `E` (as in every float; text that merely looks so only costs the walks). Without a
    NUL byte: JSON in UTF-16 or UTF-32 (which `json.loads` reads too) is not plain."""
    return (
        body.isascii()
        and b"\\u" not in body
        and b"\x00" not in body
        and _FLOAT_LIKE.search(body) is None
    )


def _json_values(value: Any) -> Any:
    """Throughout a decoded JSON body: `5.0` becomes `5` (JSON Schema counts it as an integer,
    and no request field of this server is a float: money is integers of minor units)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _json_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_values(v) for v in value]
    return value


def _has_integral_float(value: Any) -> bool:
    """Whether `_json_values` would change anything: most bodies hold no float at all, and
    looking costs a third of rebuilding them (decision 0029)."""
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False


def _refuse_unstorable(value: Any, top: bool = True) -> None:
    """Text this body keeps (its known fields, however deep) that could not be stored is
    refused. Fields a body does not know are ignored whatever they hold: they are never kept.
    A `StrictBody` nested in it checked its own text when it was validated."""
    if isinstance(value, str):
        if not storable(value):
            raise ValueError("text must not contain NUL or unpaired surrogate characters")
    elif isinstance(value, BaseModel):
        if not top and isinstance(value, StrictBody):
            return
        for name in type(value).model_fields:
            _refuse_unstorable(getattr(value, name), False)
    elif isinstance(value, dict):
        for k, v in value.items():
            _refuse_unstorable(k, False)
            _refuse_unstorable(v, False)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            _refuse_unstorable(v, False)


class StrictBody(BaseModel):
    """A request body validated as its JSON types say: a string is not a number, a number is not
    a boolean (`"amount": false` and `"stepUpRequired": 0` are 400s), an integral number is an
    integer whichever way it is written."""

    model_config = ConfigDict(strict=True)

    @model_validator(mode="before")
    @classmethod
    def _json_numbers(cls, data: Any) -> Any:
        if PLAIN_BODY.get():
            return data
        return _json_values(data) if _has_integral_float(data) else data

    @model_validator(mode="after")
    def _storable_text(self) -> Self:
        if not PLAIN_BODY.get():
            _refuse_unstorable(self)
        return self
