"""pydantic's validation errors, reworded for the person fixing routes.yaml.

pydantic says where (a location tuple) and what (an error type with context); the
operator needs ``FILE:LINE: field: message`` with a message that says what to write
instead. The location is mapped to a line by ``yaml_lines``; the wording comes from the
error type plus what the models declare about the field (its bounds, its choices, what
its pattern means, which contract class uses it), so a new field gets a useful message
without a new special case here.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from effect_broker.config.routes_contract_models import (
    SAFETY_CHOICES,
    ContractBase,
    class_field_owner,
    safety_of,
)
from effect_broker.config.routes_fields import (
    HEADER_VALUE_PATTERN,
    JSON_POINTER_PATTERN,
    METHOD_PATTERN,
    NAME_PATTERN,
    PREFIX_PATTERN,
    PROBE_PATH_PATTERN,
    ROUTE_PATH_PATTERN,
    TOKEN_PATTERN,
    UPSTREAM_PATTERN,
)
from effect_broker.config.yaml_lines import DataPath, YamlDocument, describe, field_label
from effect_broker.errors import ConfigIssue

# What a pattern means, for the person whose value did not match it ({value} is quoted).
PATTERN_HINTS: dict[str, str] = {
    TOKEN_PATTERN: "{value} is not a valid header name (an RFC 9110 token: letters, "
    "digits and !#$%&'*+.^_`|~-)",
    METHOD_PATTERN: "{value} is not an HTTP method (an RFC 9110 token, e.g. POST)",
    NAME_PATTERN: "{value} is not a valid name (letters, digits, '.', '_', '-'; "
    "starting alphanumeric)",
    JSON_POINTER_PATTERN: "expected a JSON pointer into the body, e.g. /id or "
    "/data/0/id, got {value}",
    PROBE_PATH_PATTERN: "{value} must start with '/' and contain {downstream_key}, and "
    "no other placeholder: the probe looks the effect up by the key the proxy sent, "
    "e.g. /v1/tickets?correlation_id={downstream_key}",
    ROUTE_PATH_PATTERN: "{value} must start with '/' and contain no '?' or '#': the "
    "query is not matched",
    PREFIX_PATTERN: "{value} is not a prefix of match.path: it must start with '/' and "
    "be whole leading literal segments of it, e.g. /stripe for /stripe/v1/charges",
    UPSTREAM_PATTERN: "expected an http:// or https:// URL with a host and no query or "
    "fragment, e.g. https://api.example.com, got {value}",
    HEADER_VALUE_PATTERN: "a header value cannot contain a line break",
}


def validation_issues(
    error: ValidationError, root: type[BaseModel], document: YamlDocument
) -> list[ConfigIssue]:
    """One located, reworded issue per pydantic error."""
    issues: list[ConfigIssue] = []
    for details in error.errors():
        issues.append(_issue(details, root, document))
        if details["type"].startswith("union_tag"):
            issues += _common_contract_issues(details, document)
    return issues


def _common_contract_issues(
    details: ErrorDetails, document: YamlDocument
) -> list[ConfigIssue]:
    """With no valid safety pydantic checks nothing else; check what all classes share."""
    raw = details["input"]
    if not isinstance(raw, Mapping):
        return []
    shared = {
        key: value
        for key, value in raw.items()
        if key in ContractBase.model_fields and key != "safety"
    }
    try:
        ContractBase.model_validate({**shared, "safety": "(checked apart)"})
    except ValidationError as exc:
        prefix = tuple(details["loc"])
        return [_issue(sub, ContractBase, document, prefix) for sub in exc.errors()]
    return []


@dataclass(slots=True)
class _Target:
    """What a pydantic location points at, in terms of the file and of the models."""

    path: DataPath = ()  # into the data: discriminator tags and "[key]" dropped
    model: type[BaseModel] | None = None  # the model whose field the path ends in
    annotation: object = None  # the type expected there, Annotated layers removed
    metadata: list[object] = field(default_factory=list)  # constraints found on the way


def _issue(
    details: ErrorDetails,
    root: type[BaseModel],
    document: YamlDocument,
    prefix: DataPath = (),
) -> ConfigIssue:
    target = _resolve(root, details["loc"])
    kind = details["type"]
    path = (*prefix, *target.path)
    if kind.startswith("union_tag"):  # the discriminator: point at the safety key
        path = (*path, "safety")
    elif path and isinstance(path[-1], int) and not document.has(path):
        path = path[:-1]  # "status: 404" is read as [404]: no [0] in the file
    if kind in ("extra_forbidden", "union_tag_invalid"):
        line = document.key_line(path)
    else:
        line = document.line(path)
    message = _message(details, target)
    return ConfigIssue(document.source, line, field_label(path), message)


def _message(details: ErrorDetails, target: _Target) -> str:
    kind, value = details["type"], details["input"]
    context: Mapping[str, object] = details.get("ctx") or {}
    key = str(target.path[-1]) if target.path else ""
    if kind == "missing":
        return _missing(target.model, key)
    if kind == "extra_forbidden":
        return _unknown_key(target.model, key)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _bad_safety(value, kind)
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {describe(value)}"
    if kind == "list_type":
        return f"expected a list, got {describe(value)}"
    if kind == "string_type":
        return f"expected a string, got {describe(value)}"
    if kind == "string_too_short":
        return f"expected a non-empty string, got {describe(value)}"
    if kind == "too_short":
        return "list at least one value"
    if kind in ("int_type", "greater_than_equal", "less_than_equal"):
        return f"expected {_integer(target.metadata)}, got {describe(value)}"
    if kind == "literal_error":
        return _not_a_choice(value, _choices(target.annotation))
    if kind == "string_pattern_mismatch":
        hint = PATTERN_HINTS.get(str(context.get("pattern")))
        if hint is not None:
            return hint.replace("{value}", repr(value))
    if kind in ("value_error", "assertion_error") and "error" in context:
        return str(context["error"])
    return details["msg"]


def _missing(model: type[BaseModel] | None, key: str) -> str:
    owner = class_field_owner(key)
    if owner is not None and owner is model:
        why = owner.model_fields[key].description or ""
        return f"{safety_of(owner)} contracts need {key}: {why}"
    return "required field is missing"


def _unknown_key(model: type[BaseModel] | None, key: str) -> str:
    safety = safety_of(model) if model is not None else None
    owner = class_field_owner(key)
    if safety is not None and owner is not None:
        return (
            f"{key} is only used by {safety_of(owner)} contracts and this one is "
            f"{safety}; remove it, or change safety if the target really offers it"
        )
    fields = model.model_fields if model is not None else {}
    # Required keys first: they are the ones a reader is most likely to have misspelled.
    allowed = [name for name, info in fields.items() if info.is_required()]
    allowed += [name for name, info in fields.items() if not info.is_required()]
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; allowed keys: {', '.join(allowed)}"


def _bad_safety(value: object, kind: str) -> str:
    choices = " | ".join(SAFETY_CHOICES)
    if kind == "union_tag_not_found" or not isinstance(value, Mapping):
        return f"required field is missing; say what the target can prove: {choices}"
    return _not_a_choice(value.get("safety"), SAFETY_CHOICES)


def _not_a_choice(value: object, choices: Sequence[object]) -> str:
    listed = " | ".join(str(choice) for choice in choices)
    if isinstance(value, str):
        return f"{value!r} is not one of {listed}"
    return f"expected one of {listed}, got {describe(value)}"


def _choices(annotation: object) -> tuple[object, ...]:
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def _integer(metadata: Sequence[object]) -> str:
    # pydantic keeps Field(ge=..., le=...) as annotated-types Ge and Le objects
    low = next((m.ge for m in metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in metadata if hasattr(m, "le")), None)
    if low is not None and high is not None:
        return f"an integer from {low} to {high}"
    if low is not None:
        return f"an integer >= {low}"
    return "an integer"


def _resolve(root: type[BaseModel], loc: Sequence[str | int]) -> _Target:
    """Follow ``loc`` through the model types, as pydantic did through the data."""
    target = _Target(annotation=root)
    for index, part in enumerate(loc):
        if part == "[key]":  # an invalid dict key: handled at the dict, one step back
            continue
        current = _unwrap(target.annotation, target.metadata)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            target.model = current
            target.path = (*target.path, part)
            target.metadata = []
            target.annotation = _field_type(info, target.metadata)
            continue
        variants = _variants(current)
        if variants:  # a discriminated union: pydantic puts the tag in the location
            target.annotation = next(
                (model for model in variants if safety_of(model) == part), None
            )
            continue
        args = get_args(current)
        about_key = tuple(loc[index + 1 : index + 2]) == ("[key]",)
        target.path = (*target.path, part)
        target.metadata = []
        # a list's item, a dict's value, or a dict's key when the key is at fault
        target.annotation = (args[0] if about_key else args[-1]) if args else None
    target.annotation = _unwrap(target.annotation, target.metadata)
    return target


def _field_type(info: FieldInfo | None, metadata: list[object]) -> object:
    if info is None:
        return None
    metadata.extend(info.metadata)
    return info.annotation


def _unwrap(annotation: object, metadata: list[object]) -> object:
    """Strip Annotated and Optional layers, collecting the constraints they carry."""
    while True:
        if get_origin(annotation) is Annotated:
            inner, *extra = get_args(annotation)
            for item in extra:
                metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
            annotation = inner
            continue
        if _is_union(annotation):
            members = [
                arg for arg in get_args(annotation) if _unwrap(arg, []) is not type(None)
            ]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _variants(annotation: object) -> list[type[BaseModel]]:
    if not _is_union(annotation):
        return []
    return [
        arg
        for arg in get_args(annotation)
        if isinstance(arg, type) and issubclass(arg, BaseModel)
    ]


def _is_union(annotation: object) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)
