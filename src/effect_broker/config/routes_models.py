"""The shape of routes.yaml as pydantic models: one source for validation and the schema.

Every rule that concerns a single value lives on its field (a pattern, a range, an enum,
a duration), so ``routes.schema.json``, generated from these models, lets an editor refuse
what the loader refuses. Rules that relate two places in the file (a route's contract
exists, two routes never claim one request, ...) need the whole file and live in
``routes_checks``. Contracts are discriminated on ``safety``: each class has exactly the
fields it uses, so a field of another class is an unknown key, not a silent no-op.

These models only validate; the loader turns them into the frozen dataclasses in
``contracts`` and ``routes_config`` that the rest of the proxy uses.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal, TypeVar, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from effect_broker.config.contracts import (
    DEFAULT_OPERATION_KEY_HEADER,
    DEFAULT_RETRY_LIMIT,
    DEFAULT_TIMEOUT,
    ConnectPolicy,
    RouteMatch,
    UnmatchedPolicy,
)
from effect_broker.config.durations import (
    DURATION_PATTERN,
    parse_duration,
)
from effect_broker.config.egress import EgressRuleText
from effect_broker.config.routing import parse_path_pattern, parse_route_host
from effect_broker.config.secret_refs import env_references
from effect_broker.config.yaml_lines import describe

SUPPORTED_VERSION = 1
SCHEMA_TITLE = "effect-broker routes.yaml, version 1"

TOKEN_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # RFC 9110 token: a header name
# The same token spelled apart, so that its hint below can say "method".
METHOD_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
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


def _route_path(value: str) -> str:
    parse_path_pattern(value)
    return value


def _upstream(url: str) -> str:
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


class _Section(BaseModel):
    """Strict: no type coercion ("5" is not 5) and no key the model does not name."""

    model_config = ConfigDict(extra="forbid", strict=True)


# --- proxy -------------------------------------------------------------------------


class ProxySection(_Section):
    """Proxy-wide behaviour for requests that no route claims."""

    operation_key_header: HeaderName = Field(
        DEFAULT_OPERATION_KEY_HEADER,
        description="The request header that names the business intent of an effect.",
    )
    unmatched: UnmatchedPolicy = Field(
        "pass",
        description="pass: forward unmatched requests untouched; reject-mutating: "
        "strict mode, refuse unmatched requests with a mutating method.",
    )
    connect: ConnectPolicy = Field(
        "tunnel",
        description="tunnel or refuse CONNECT to hosts no route watches; CONNECT to a "
        "host a route watches is always refused (or intercepted with a local CA).",
    )
    deny: list[EgressRuleText] = Field(
        default_factory=list,
        description="Hosts, host:port or CIDRs that pass-through requests and tunnels "
        "may never reach, e.g. [10.0.0.0/8, metadata.internal]. Route traffic is not "
        "subject to it.",
    )
    allow: list[EgressRuleText] = Field(
        default_factory=list,
        description="Hosts, host:port or CIDRs exempt from the built-in refusals (the "
        "proxy's own ports, the ledger, link-local and metadata addresses, and in a "
        "shared gateway loopback and private ranges); proxy.deny still wins.",
    )


# --- contracts ---------------------------------------------------------------------


class ContractBase(_Section):
    """What every contract has, whatever its safety class."""

    name: Name = Field(description="Unique in the file; routes refer to it.")
    version: ContractVersion = Field(
        description='Pinned into every effect; bump it (a string, e.g. "2") when what '
        "the target promises changes."
    )
    safety: str = Field(description="What the target can prove after a lost response.")
    timeout: Duration = Field(
        DEFAULT_TIMEOUT, description="How long one attempt may take, e.g. 10s."
    )
    retry_limit: int = Field(
        DEFAULT_RETRY_LIMIT, ge=0, description="Attempts the reconciler may add."
    )
    ledger_retention: Optional[Duration] = Field(
        None,
        description="How long a settled effect stays in the ledger before it is pruned "
        "(default: 7d, or key_retention when longer); never shorter than key_retention.",
    )
    operation_key_header: Optional[HeaderName] = Field(
        None,
        description="Overrides proxy.operation_key_header for this contract's routes; "
        "may be the idempotency header itself (Idempotency-Key), so an SDK's own key "
        "becomes the operation key while the target still gets the derived key.",
    )


class IdempotentContract(ContractBase):
    """The target deduplicates on a stable key and keeps results for key_retention."""

    safety: Literal["idempotent"]
    idempotency_header: HeaderName = Field(
        description="the header that carries the stable key the target deduplicates on"
    )
    key_retention: Duration = Field(
        description="how long the target keeps a key's result; a redispatch is safe "
        "only inside it"
    )


class FoundAnswer(_Section):
    """Probe answers that prove the effect committed."""

    status: Statuses = Field(description="HTTP status codes, e.g. [200].")
    external_id: Optional[
        Annotated[str, StringConstraints(pattern=JSON_POINTER_PATTERN)]
    ] = Field(
        None, description="A JSON pointer to the target's id in the body, e.g. /id."
    )


class AbsentAnswer(_Section):
    """Probe answers that prove the effect did not commit (after settlement_bound)."""

    status: Statuses = Field(description="HTTP status codes, e.g. [404].")


class ProbeSection(_Section):
    """An authoritative lookup by correlation key; any other answer means unknown."""

    method: Literal["GET", "HEAD"] = Field(
        "GET", description="GET or HEAD: a probe must not change anything."
    )
    path: Annotated[str, StringConstraints(pattern=PROBE_PATH_PATTERN)] = Field(
        description="Sent to the route's upstream, with {downstream_key} replaced."
    )
    found: FoundAnswer
    absent: AbsentAnswer


class ReconcilableContract(ContractBase):
    """The target records a correlation key and answers a lookup by it."""

    safety: Literal["reconcilable"]
    correlation_header: HeaderName = Field(
        description="the header the target records and the probe looks the effect up by"
    )
    settlement_bound: Duration = Field(
        description="only after it is a negative lookup conclusive; without it absence "
        "is unprovable"
    )
    probe: ProbeSection = Field(
        description="the authoritative lookup that decides committed or not after a "
        "lost response"
    )


class UnsafeContract(ContractBase):
    """The target offers nothing: dispatch at most once, a lost response stays unknown."""

    safety: Literal["unsafe"]


ContractSection = Annotated[
    IdempotentContract | ReconcilableContract | UnsafeContract,
    Field(discriminator="safety"),
]
CONTRACT_CLASSES: tuple[type[ContractBase], ...] = (
    IdempotentContract,
    ReconcilableContract,
    UnsafeContract,
)
SAFETY_CHOICES = ("idempotent", "reconcilable", "unsafe")


def safety_of(model: type[BaseModel]) -> str | None:
    """The safety tag of a contract class, or None for any other model."""
    if not issubclass(model, ContractBase) or model is ContractBase:
        return None
    return str(get_args(model.model_fields["safety"].annotation)[0])


def class_field_owner(key: str) -> type[ContractBase] | None:
    """The one contract class that uses ``key``, if ``key`` is class-specific."""
    for model in CONTRACT_CLASSES:
        if key in model.model_fields and key not in ContractBase.model_fields:
            return model
    return None


# --- routes ------------------------------------------------------------------------


class MatchSection(_Section):
    """Which requests the route owns; without host it is a reverse-mode path prefix."""

    method: Methods = Field(description="One method or a list, e.g. POST or [POST, PUT].")
    host: Optional[Annotated[str, AfterValidator(parse_route_host)]] = Field(
        None,
        description="Forward mode: the bare host (and port) of absolute-form requests, "
        "e.g. payments.internal. Without it the route is reverse mode.",
    )
    aliases: list[Annotated[str, AfterValidator(parse_route_host)]] = Field(
        default_factory=list,
        description="Forward mode: other names of the same target, also watched, e.g. "
        "[pay.internal, 10.0.0.7:8443]; spellings of one host are already one host.",
    )
    path: Annotated[
        str,
        StringConstraints(pattern=ROUTE_PATH_PATTERN),
        AfterValidator(_route_path),
    ] = Field(description='Segments; a whole segment "{id}" matches any one segment.')

    @model_validator(mode="after")
    def _aliases_need_a_host(self) -> MatchSection:
        if self.aliases and self.host is None:
            raise ValueError(
                "aliases are extra host names of a forward route; set match.host too"
            )
        return self

    def route_match(self) -> RouteMatch:
        return RouteMatch(
            methods=frozenset(self.method),
            host=self.host,
            path=self.path,
            aliases=frozenset(self.aliases),
        )


class RouteSection(_Section):
    """One family of requests, bound to a contract."""

    name: Name = Field(description="Unique in the file.")
    match: MatchSection
    upstream: Optional[
        Annotated[
            str, StringConstraints(pattern=UPSTREAM_PATTERN), AfterValidator(_upstream)
        ]
    ] = Field(
        None,
        description="Where the request goes: an http:// or https:// base URL. Required "
        "in reverse mode (no match.host).",
    )
    strip_prefix: Optional[Annotated[str, StringConstraints(pattern=PREFIX_PATTERN)]] = (
        Field(
            None, description="Leading segments of match.path removed before forwarding."
        )
    )
    contract: Name = Field(description="The name of a contract in this file.")
    inject_headers: dict[HeaderName, HeaderTemplate] = Field(
        default_factory=dict,
        description="Headers added upstream; reference secrets as ${env:NAME}, which "
        "is read from the environment when the proxy starts.",
    )
    operation_key_header: Optional[HeaderName] = Field(
        None, description="Overrides proxy.operation_key_header for this route."
    )


class RoutesFile(_Section):
    """effect-broker routes.yaml: which outbound requests are effects, and what each
    target promises. Check a file with `effect-broker routes validate FILE`."""

    model_config = ConfigDict(title=SCHEMA_TITLE)

    version: FileVersion = Field(description="The file format; this build reads 1.")
    proxy: ProxySection = Field(default_factory=ProxySection)
    contracts: list[ContractSection]
    routes: list[RouteSection]
