"""The single-value rules of routes.yaml: patterns, parsers and the field types built
from them, shared by the models of every section (``routes_models``, the MCP block)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from effect_broker.config.durations import (
    DURATION_PATTERN,
    parse_duration,
)
from effect_broker.config.routing import parse_path_pattern
from effect_broker.config.secret_refs import env_references
from effect_broker.config.yaml_lines import describe

SUPPORTED_VERSION = 1
SCHEMA_TITLE = "effect-broker routes.yaml, version 1"

TOKEN_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # RFC 9110 token: a header name
# The same token spelled apart, so that its hint below can say "method".
METHOD_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# A route's contract: a name in the file, or a packaged preset such as stripe@1.
CONTRACT_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._-]+)?$"
JSON_POINTER_PATTERN = r"^(/([^~/]|~[01])*)*$"
PROBE_PATH_PATTERN = r"^/[^{}]*(\{downstream_key\}[^{}]*)+$"
ROUTE_PATH_PATTERN = r"^/[^?#]*$"
PREFIX_PATTERN = r"^/[^?#{}]*$"
UPSTREAM_PATTERN = r"^https?://[^\s/?#]+[^\s?#]*$"
HEADER_VALUE_PATTERN = r"^[^\r\n]*$"

# --- single values: each checks itself and carries its JSON Schema -------------------


def _one_or_many(value: object) -> object:
    """``method: POST`` and ``status: 404`` are shorthand for a one-item list."""
    return value if isinstance(value, list) else [value]


def _file_version(value: object) -> object:
    if type(value) is not int or value != SUPPORTED_VERSION:
        raise ValueError(
            f"unsupported version {describe(value)}; this build reads version: "
            f"{SUPPORTED_VERSION}"
        )
    return value


def _contract_version(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f'expected a version such as "1", got {describe(value)}')
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        raise ValueError(
            f"quote the version: it reads as the number {value!r} (an unquoted 1.10 "
            'is 1.1); write a string such as "1.10"'
        )
    return value


def _duration(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as 2s or 24h, got {describe(value)}")
    return parse_duration(value)


def _method(value: str) -> str:
    if value.upper() == "CONNECT":
        raise ValueError("CONNECT opens a tunnel the proxy cannot inspect")
    return value.upper()


def check_route_path(value: str) -> str:
    parse_path_pattern(value)
    return value


def check_upstream(url: str) -> str:
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if not port_ok:
        raise ValueError("the port is not a number between 1 and 65535")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "credentials do not belong in the URL; use inject_headers with ${env:NAME}"
        )
    return url.rstrip("/")


def _header_template(value: str) -> str:
    env_references(value)
    return value


def _not_null(value: object) -> object:
    if value is None:
        raise ValueError("expected a value, got nothing (null); remove the key instead")
    return value


T = TypeVar("T")
# An optional field: absent means the default, but an explicit null is refused (a bare
# "upstream:" is more likely a mistake than a wish for the default), and the published
# schema does not offer null.
Optional = Annotated[T | None, BeforeValidator(_not_null)]

HeaderName = Annotated[str, StringConstraints(pattern=TOKEN_PATTERN)]
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
ContractRef = Annotated[str, StringConstraints(pattern=CONTRACT_REF_PATTERN)]
DurationText = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]
Duration = Annotated[
    timedelta,
    BeforeValidator(_duration, json_schema_input_type=DurationText),
]
StatusCode = Annotated[int, Field(ge=100, le=599)]
StatusList = Annotated[list[StatusCode], Field(min_length=1)]
Statuses = Annotated[
    StatusList,
    BeforeValidator(_one_or_many, json_schema_input_type=StatusCode | StatusList),
]
Method = Annotated[
    str, StringConstraints(pattern=METHOD_PATTERN), AfterValidator(_method)
]
MethodList = Annotated[list[Method], Field(min_length=1)]
Methods = Annotated[
    MethodList, BeforeValidator(_one_or_many, json_schema_input_type=Method | MethodList)
]
VersionText = Annotated[str, StringConstraints(min_length=1)]
ContractVersion = Annotated[
    VersionText,
    BeforeValidator(_contract_version, json_schema_input_type=VersionText | int),
]
FileVersion = Annotated[Literal[1], BeforeValidator(_file_version)]
HeaderTemplate = Annotated[
    str,
    StringConstraints(pattern=HEADER_VALUE_PATTERN),
    AfterValidator(_header_template),
]


class Section(BaseModel):
    """Strict: no type coercion ("5" is not 5) and no key the model does not name."""

    model_config = ConfigDict(extra="forbid", strict=True)
