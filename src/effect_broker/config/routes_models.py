"""The shape of routes.yaml as pydantic models: one source for validation and the schema.

Every rule that concerns a single value lives on its field (a pattern, a range, an enum,
a duration), so ``routes.schema.json``, generated from these models, lets an editor refuse
what the loader refuses. Rules that relate two places in the file (a route's contract
exists, two routes never claim one request, ...) need the whole file and live in
``routes_checks``. The contract sections, one class per safety class, live in
``routes_contract_models`` and the MCP block in ``routes_mcp_models``.

These models only validate; the loader turns them into the frozen dataclasses in
``contracts`` and ``routes_config`` that the rest of the proxy uses.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from effect_broker.config.contracts import (
    DEFAULT_OPERATION_KEY_HEADER,
    MCP_METHODS,
    ConnectPolicy,
    RouteMatch,
    UnmatchedPolicy,
)
from effect_broker.config.egress import EgressRuleText
from effect_broker.config.routes_contract_models import (
    ContractSection,
)
from effect_broker.config.routes_fields import (
    PREFIX_PATTERN,
    ROUTE_PATH_PATTERN,
    SCHEMA_TITLE,
    UPSTREAM_PATTERN,
    ContractRef,
    FileVersion,
    HeaderName,
    HeaderTemplate,
    Methods,
    Name,
    Optional,
    Section,
    check_route_path,
    check_upstream,
)
from effect_broker.config.routes_mcp_models import McpSection
from effect_broker.config.routing import parse_route_host

# --- proxy -------------------------------------------------------------------------


class ProxySection(Section):
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


# --- routes ------------------------------------------------------------------------


class MatchSection(Section):
    """Which requests the route owns; without host it is a reverse-mode path prefix."""

    method: Optional[Methods] = Field(
        None,
        description="One method or a list, e.g. POST or [POST, PUT]. Required, except "
        "on an MCP route, which carries the transport's POST, GET and DELETE.",
    )
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
        AfterValidator(check_route_path),
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
            methods=frozenset(self.method) if self.method else MCP_METHODS,
            host=self.host,
            path=self.path,
            aliases=frozenset(self.aliases),
        )


class RouteSection(Section):
    """One family of requests, bound to a contract."""

    name: Name = Field(description="Unique in the file.")
    match: MatchSection
    upstream: Optional[
        Annotated[
            str,
            StringConstraints(pattern=UPSTREAM_PATTERN),
            AfterValidator(check_upstream),
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
    contract: Optional[ContractRef] = Field(
        None,
        description="The name of a contract in this file, or a packaged preset such as "
        "stripe@1 (required unless mcp is set).",
    )
    mcp: Optional[McpSection] = Field(
        None,
        description="An MCP endpoint: each listed tool has its own contract, so the "
        "route names no contract and no method.",
    )
    inject_headers: dict[HeaderName, HeaderTemplate] = Field(
        default_factory=dict,
        description="Headers added upstream; reference secrets as ${env:NAME}, which "
        "is read from the environment when the proxy starts.",
    )
    operation_key_header: Optional[HeaderName] = Field(
        None, description="Overrides proxy.operation_key_header for this route."
    )
    passthrough: bool = Field(
        True,
        description="Whether requests no route records go on unrecorded: in reverse "
        "mode those under strip_prefix (to this route's upstream), in forward mode "
        "those to match.host. false refuses them with a problem naming the routes.",
    )

    @model_validator(mode="after")
    def _kind(self) -> RouteSection:
        if self.mcp is not None:
            if self.contract is not None or self.match.method is not None:
                raise ValueError(
                    "an MCP route names neither contract nor match.method: each tool "
                    "in mcp.tools has its contract, and the transport uses POST, GET "
                    "and DELETE on the path"
                )
            return self
        if self.contract is None or self.match.method is None:
            raise ValueError(
                "a route needs match.method and contract (or an mcp block instead)"
            )
        return self


class RoutesFile(Section):
    """effect-broker routes.yaml: which outbound requests are effects, and what each
    target promises. Check a file with `effect-broker routes validate FILE`."""

    model_config = ConfigDict(title=SCHEMA_TITLE)

    version: FileVersion = Field(description="The file format; this build reads 1.")
    proxy: ProxySection = Field(default_factory=ProxySection)
    contracts: list[ContractSection]
    routes: list[RouteSection]
