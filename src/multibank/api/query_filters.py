"""List filters on an object's fields, in both spellings clients send, and a 400 for every other
query key shaped like such a filter (decision 0041).

The interface's clients and tests name a filter on an object's field with a dotted parameter
(`instrumentId.id`, `state.blockedReason`); a client generated from a description that declares
the object as a `deepObject` parameter, and axios given an object, spell it `instrumentId[id]`.
Both spellings are the same filter. A key shaped like a filter that the operation does not know
(`instrumentId[foo]`, `foo[bar]`, `foo.bar`), or an object filter's bare name (`instrumentId=1`),
is a 400: a filter the server ignored would widen the answer. Other unknown keys (a
cache-buster's `_=…`) stay ignored, as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request

UNKNOWN: Literal["unknown"] = "unknown"
# `head.sub` or `head[sub]`: the only shapes of an object filter's key.
_KEY = re.compile(r"([^.\[\]]+)(?:\.([^.\[\]]+)|\[([^.\[\]]+)\])")


@dataclass(frozen=True)
class ObjectFilter:
    """The filters on one object's fields: `name` is the object (`instrumentId`), `fields` each
    field's type as a query value (`list[...]` for a field that takes repeated keys)."""

    name: str
    fields: Mapping[str, Any]
    description: str = ""
    # The field that needs another to mean anything (`id` needs `type`): OpenAPI's
    # `dependentRequired`; the route says what it answers when one comes alone.
    requires: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # The dotted spelling is a declared parameter of the route (its framework reads it, and the
    # description names it as it is): only the bracket spelling is read here.
    dotted_declared: bool = False

    def adapters(self) -> dict[str, TypeAdapter[Any]]:
        return {name: TypeAdapter(kind) for name, kind in self.fields.items()}


class QueryFilters:
    """One list operation's object filters. `read` answers `{object: {field: value}}` for what
    the query names, and raises a 400 for a filter-shaped key it does not know."""

    def __init__(self, *objects: ObjectFilter) -> None:
        self.objects = {o.name: o for o in objects}
        self._adapters = {o.name: o.adapters() for o in objects}
        self._many = {
            (o.name, f): adapter.json_schema().get("type") == "array"
            for o in objects
            for f, adapter in self._adapters[o.name].items()
        }
        self._bare = frozenset(o.name for o in objects if not o.dotted_declared)
        heads = "|".join(re.escape(name) for name in sorted(self._bare))
        # A query string without any of these bytes names no filter-shaped key: the common
        # page request (`offset`, `limit`, plain filters) is not parsed again here. `%` is in
        # it because a key may be percent-encoded.
        suspect = rb"[.\[\]%]"
        if heads:
            suspect += rb"|(?:^|&)(?:" + heads.encode() + rb")(?:[=&]|$)"
        self._suspect = re.compile(suspect)

    def read(self, request: Request) -> dict[str, dict[str, Any]]:
        raw: bytes = request.scope.get("query_string", b"")
        if not raw or self._suspect.search(raw) is None:
            return {}
        given: dict[tuple[str, str], list[tuple[str, str]]] = {}
        errors: list[dict[str, Any]] = []
        for key, value in request.query_params.multi_items():
            found = self._place(key)
            if found is None:
                continue
            if found == UNKNOWN:
                errors.append(_error("extra_forbidden", key, value, "not a filter of this list"))
                continue
            given.setdefault(found, []).append((key, value))
        out: dict[str, dict[str, Any]] = {}
        for (name, sub), values in given.items():
            validated = self._validated(name, sub, values, errors)
            if validated is not None:
                out.setdefault(name, {})[sub] = validated
        if errors:
            raise RequestValidationError(errors)
        return out

    def _place(self, key: str) -> tuple[str, str] | Literal["unknown"] | None:
        """(object, field) the key names; `UNKNOWN` for a filter-shaped key the operation
        does not know; None for a key left to the route (or ignored)."""
        m = _KEY.fullmatch(key)
        if m is None:
            if key in self._bare or any(c in key for c in ".[]"):
                return UNKNOWN
            return None
        name, dotted, bracketed = m.groups()
        found = self.objects.get(name)
        sub = dotted or bracketed
        if found is None or sub not in found.fields:
            return UNKNOWN
        if dotted is not None and found.dotted_declared:
            return None
        return name, sub

    def _validated(
        self, name: str, sub: str, values: list[tuple[str, str]], errors: list[dict[str, Any]]
    ) -> Any:
        """The field's value from every key that named it: a list field takes them all, a
        scalar one value (both spellings may say it, alike; two different values are a 400)."""
        key = values[0][0]
        if self._many[(name, sub)]:
            raw: Any = [v for _, v in values]
        else:
            distinct = {v for _, v in values}
            if len(distinct) > 1:
                errors.append(
                    {
                        "type": "less_than_equal",
                        "loc": ("query", key),
                        "msg": "Input should have at most 1 value",
                        "input": sorted(distinct),
                        "ctx": {"le": 1},
                    }
                )
                return None
            raw = values[0][1]
        try:
            return self._adapters[name][sub].validate_python(raw)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ("query", key, *err["loc"])
                errors.append({**err, "loc": loc})
            return None

    def openapi(self) -> list[dict[str, Any]]:
        """The description's parameter for each object whose dotted spelling is not declared:
        a `deepObject` (`name[field]=…`), its fields as properties, and the dotted spelling in
        its description."""
        out = []
        for o in self.objects.values():
            if o.dotted_declared:
                continue
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {f: a.json_schema() for f, a in self._adapters[o.name].items()},
                "additionalProperties": False,
            }
            if o.requires:
                schema["dependentRequired"] = {k: list(v) for k, v in o.requires.items()}
            spelled = ", ".join(f"`{o.name}.{f}`" for f in o.fields)
            out.append(
                {
                    "name": o.name,
                    "in": "query",
                    "required": False,
                    "style": "deepObject",
                    "explode": True,
                    "description": (
                        f"{o.description} Also read as dotted names ({spelled}). Any other "
                        f"`{o.name}[…]` or `{o.name}.…` key, or `{o.name}` alone, is a 400."
                    ).strip(),
                    "schema": schema,
                }
            )
        return out


def _error(kind: str, key: str, value: str, msg: str) -> dict[str, Any]:
    return {"type": kind, "loc": ("query", key), "msg": msg, "input": value}
