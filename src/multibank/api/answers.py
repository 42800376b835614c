"""Hot reads' answers encoded once (issue 40 §5, decision 0061).

A route with a `response_model` has FastAPI validate the endpoint's dict into the model (every
field, nested models, string constraints) and then dump the model to JSON. For the hottest reads
the endpoint builds the answer's dict itself, from rows it has just read, so the validation only
restates it. `Answer(model).response(body)` writes the JSON as that route would send it, straight
from the dict with pydantic's `TypeAdapter.dump_json`, into a `Response` that FastAPI sends
as-is; the route keeps its `response_model=` for its OpenAPI document.

What the model's serialisation would change is done here, from the model's public description
(`model_fields`), planned once per model: the fields in the model's order, a field whose value is
None left out (the routes' `response_model_exclude_none=True`), keys the model does not have
dropped, nested models (alone, optional or in a list) shaped the same way. Leaf values are
written as they are: the builders give the JSON types the model declares (str, int, bool, a
`StrEnum` member), which validation would keep. A model this plan cannot reproduce (aliases,
serialisers, computed fields, defaults other than None, a model inside another container) is
refused when the plan is made. `tests/api/test_answers.py` checks, on answers read from the
database, that the bytes equal what the route's `response_model` path produces.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Union

from fastapi import Response
from pydantic import BaseModel, TypeAdapter

JSON = TypeAdapter(Any)  # serialises dicts, lists, str, int, bool and enums by what they are

# (key, the nested model's plan or None for a leaf, whether the value is a list of them)
Plan = tuple[tuple[str, "Plan | None", bool], ...]


class Answer:
    """The answer of a route whose `response_model` is `model`, with `exclude_none`."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        self.plan = plan_of(model)

    def encode(self, body: Mapping[str, Any]) -> bytes:
        return JSON.dump_json(shaped(self.plan, body))

    def response(self, body: Mapping[str, Any]) -> Response:
        return Response(self.encode(body), media_type="application/json")


def plan_of(model: type[BaseModel]) -> Plan:
    config = model.model_config
    if config.get("alias_generator") or model.model_computed_fields:
        raise ValueError(f"{model.__name__}: aliases or computed fields are not planned")
    decorators = model.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers:
        raise ValueError(f"{model.__name__}: serialisers are not planned")
    steps: list[tuple[str, Plan | None, bool]] = []
    for name, field in model.model_fields.items():
        if field.alias or field.serialization_alias or field.exclude:
            raise ValueError(f"{model.__name__}.{name}: aliases and exclusions are not planned")
        if not field.is_required() and field.get_default() is not None:
            raise ValueError(f"{model.__name__}.{name}: only None defaults are planned")
        nested, many = nested_model(field.annotation)
        steps.append((name, None if nested is None else plan_of(nested), many))
    return tuple(steps)


def nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (alone, optional, or as the items of a list) and whether it is a
    list; (None, False) for a leaf. A model anywhere else in the annotation is refused."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        if len(kept) == 1:
            return nested_model(kept[0])
    elif origin is list and len(args) == 1:
        inner, many = nested_model(args[0])
        if inner is not None and not many:
            return inner, True
    elif origin is typing.Annotated:
        return nested_model(args[0])
    if any(holds_model(a) for a in args):
        raise ValueError(f"{annotation}: a model inside it is not planned")
    return None, False


def holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(holds_model(a) for a in typing.get_args(annotation))


def shaped(plan: Plan, data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, nested, many in plan:
        value = data.get(key)
        if value is None:
            continue  # exclude_none; a missing field has no default but None (plan_of)
        if nested is not None:
            value = [shaped(nested, item) for item in value] if many else shaped(nested, value)
        out[key] = value
    return out
