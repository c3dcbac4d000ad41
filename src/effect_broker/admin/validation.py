"""Requests through the models, and pydantic's refusals as problems a person can act on.

Handlers never read a query parameter or a body field themselves: they call these, so
the rules that apply are exactly the ones the published schema states. A refusal names
the parameter (``invalid-parameter``) or body field (``invalid-resolution``) at fault,
with a sentence saying what would be accepted, rather than pydantic's own wording.
"""

from __future__ import annotations

from typing import Any, TypeVar
from uuid import UUID

from multidict import MultiMapping
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from effect_broker.admin.requests import (
    MAX_EXTERNAL_ID,
    MAX_LIMIT,
    MAX_OLDER_THAN,
    MAX_REASON,
    RESOLUTION_FIELDS,
    RESOLVE_BODY,
    EffectPath,
    InspectQuery,
    ListQuery,
    Query,
)
from effect_broker.engine.resolution import (
    DEPRECATED_ALIASES,
    Resolution,
    ResolutionRequest,
    resolution_named,
)
from effect_broker.errors import (
    EffectNotFound,
    InvalidParameter,
    InvalidResolution,
)
from effect_broker.models import EffectStatus

Q = TypeVar("Q", bound=Query)
_NUL = "must not contain NUL (\\u0000): the ledger cannot store it"

# What each query parameter accepts, said once for every way a value can be wrong.
_PARAMETER_RULES = {
    "status": "must be one of " + ", ".join(status.value for status in EffectStatus),
    "limit": f"must be an integer from 1 to {MAX_LIMIT}",
    "older_than": (
        f"must be a finite number of seconds from 0 to {MAX_OLDER_THAN} (100 years)"
    ),
    "cursor": "is not a cursor this API returned (use next_cursor as is)",
    "at_sequence": "must be an event sequence number, 1 or more",
}

_RESOLUTIONS = ", ".join(resolution.value for resolution in Resolution)
_EVIDENCE_REQUIRED = (
    "is required to resolve as succeeded or did_not_happen: say where you checked "
    'and what you saw, e.g. {"external_id": "ch_1", "checked_in": "stripe dashboard"}'
)
_TAGS = {resolution.value for resolution in Resolution} | set(DEPRECATED_ALIASES)


class NoSuchEvent(InvalidParameter):
    """The effect has no event with that sequence number."""

    problem_type = "no-such-event"
    status = 404


def _single(query: MultiMapping[str], model: type[Query]) -> dict[str, Any]:
    """The query as a dict for ``model``: lists where the model takes several values."""
    data: dict[str, Any] = {}
    for name in dict.fromkeys(query):
        values = query.getall(name)
        if name in model.repeatable:
            data[name] = values
        elif len(values) > 1:
            raise InvalidParameter(name, "may be given only once")
        else:
            data[name] = values[0]
    return data


def _parameter_problem(error: ErrorDetails, model: type[Query]) -> InvalidParameter:
    name = str(error["loc"][0]) if error["loc"] else "query"
    if error["type"] == "extra_forbidden":
        known = ", ".join(sorted(model.model_fields))
        return InvalidParameter(name, f"is not known; use {known}")
    if "\x00" in str(error.get("input", "")):
        return InvalidParameter(name, _NUL)
    return InvalidParameter(name, _PARAMETER_RULES.get(name, error["msg"]))


def _validate_query(query: MultiMapping[str], model: type[Q]) -> Q:
    try:
        return model.model_validate(_single(query, model))
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise _parameter_problem(errors[0], model) from None


def parse_list_query(query: MultiMapping[str]) -> ListQuery:
    """``GET /v1/effects``; empty ``route`` or prefix means no filter, as before."""
    return _validate_query(query, ListQuery)


def parse_inspect_query(query: MultiMapping[str]) -> InspectQuery:
    return _validate_query(query, InspectQuery)


def parse_effect_id(text: str) -> UUID:
    """Not a UUID cannot name an effect: the same answer as an unknown one (404)."""
    try:
        return EffectPath.model_validate({"effect_id": text}).effect_id
    except ValidationError:
        raise EffectNotFound(f"no effect {text!r} for this tenant") from None


# -- the resolve body -------------------------------------------------------------------


def _field_and_rest(error: ErrorDetails) -> tuple[str, tuple[int | str, ...]]:
    """The top-level field an error is about; the discriminator tag is not a field."""
    loc = error["loc"]
    if loc and loc[0] in _TAGS:
        loc = loc[1:]
    return (str(loc[0]), loc[1:]) if loc else ("body", ())


def _resolution_message(field: str, rest: tuple[int | str, ...], error: Any) -> str:
    kind = error["type"]
    if field == "body":
        if kind == "json_invalid":
            return "is not valid JSON"
        return "must be a JSON object"
    if kind == "extra_forbidden":
        return f"is not known; use {', '.join(RESOLUTION_FIELDS)}"
    if "\x00" in str(error.get("input", "")):
        return _NUL
    if field == "resolution":
        return f"must be one of {_RESOLUTIONS}"
    if field == "reason":
        if kind == "string_too_long":
            return f"is longer than {MAX_REASON} characters"
        return "is required: say why, for whoever reads this history next"
    if field == "external_id":
        return f"must be a non-blank string of at most {MAX_EXTERNAL_ID}"
    if field == "evidence":
        if kind in {"missing", "too_short"}:
            return _EVIDENCE_REQUIRED
        if kind == "evidence_too_large":
            return str(error["msg"])
        if rest:
            return "must hold only JSON values, with no NUL (\\u0000) in any text"
        return "must be a JSON object"
    return str(error["msg"])


def _order(error: ErrorDetails) -> tuple[int, int]:
    """Report unknown fields first, then fields in the order a person reads them."""
    field, _ = _field_and_rest(error)
    order = ("body", "resolution", "reason", "evidence", "external_id")
    rank = order.index(field) if field in order else -1
    return (error["type"] != "extra_forbidden", rank)


def parse_resolution_body(raw: bytes) -> ResolutionRequest:
    """Validate ``POST .../resolve`` from its raw bytes and convert to the engine's type.

    Parsed by pydantic straight from bytes, so a JSON document Python's own parser
    would turn into something the ledger cannot store (lone surrogates) is refused.
    """
    try:
        body = RESOLVE_BODY.validate_json(raw)
    except ValidationError as exc:
        error = min(exc.errors(), key=_order)
        if error["type"].startswith("union_tag") or (
            error["type"] == "missing" and error["loc"] == ("resolution",)
        ):
            raise InvalidResolution(
                "resolution", f"must be one of {_RESOLUTIONS}"
            ) from None
        field, rest = _field_and_rest(error)
        raise InvalidResolution(field, _resolution_message(field, rest, error)) from None
    # The engine's own request type; the reason is kept without its outer blanks.
    return ResolutionRequest(
        resolution_named(body.resolution),
        body.reason.strip(),
        body.evidence,
        body.external_id,
    )
