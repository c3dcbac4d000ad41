"""Read routes.yaml into a ``RoutesConfig``, or refuse it with every problem at once.

A routes file decides whether a charge can happen twice, so the loader is strict: unknown
keys, fields a safety class does not use and routes that could claim the same request are
errors, not warnings. The steps, each in its own module:

- ``yaml_lines`` parses the text, refuses duplicate keys and remembers every line;
- ``routes_models`` (pydantic) checks each value; ``routes_issues`` words its errors;
- ``routes_checks`` checks what relates two places in the file;

and every issue from all three is raised in one ``ConfigError``, sorted by line, each as
``FILE:LINE: field: message``, so an operator fixes the file in one pass. Only a file
without issues is turned into the frozen values in ``contracts`` and ``routes_config``.

Credentials are referenced as ``${env:NAME}`` and stay unresolved here, so validating a
file needs no secrets; ``resolve_inject_headers`` resolves them when the proxy starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import overload

from pydantic import ValidationError

from effect_broker.config.contracts import (
    DEFAULT_LEDGER_RETENTION,
    MCP_ROUTE_CONTRACT,
    Contract,
    DuplicateGuard,
    McpTools,
    Probe,
    Route,
)
from effect_broker.config.presets import expand_presets
from effect_broker.config.routes_checks import cross_field_issues
from effect_broker.config.routes_config import ProxyPolicy, RoutesConfig
from effect_broker.config.routes_contract_models import (
    ContractSection,
    IdempotentContract,
    ReconcilableContract,
)
from effect_broker.config.routes_fields import (
    SUPPORTED_VERSION,
)
from effect_broker.config.routes_issues import validation_issues
from effect_broker.config.routes_mcp_models import McpSection
from effect_broker.config.routes_models import (
    RouteSection,
    RoutesFile,
)
from effect_broker.config.secret_refs import substitute_env
from effect_broker.config.yaml_lines import FILE_FIELD, YamlDocument, read_yaml
from effect_broker.errors import ConfigError, ConfigIssue
from effect_broker.models import SafetyClass


def load_routes(path: str | Path) -> RoutesConfig:
    """Read and validate a routes file; an unreadable file is a ConfigError too."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            [ConfigIssue(source, None, FILE_FIELD, "no such file")]
        ) from None
    except OSError as exc:
        message = f"cannot read the file: {exc.strerror or exc}"
        raise ConfigError([ConfigIssue(source, None, FILE_FIELD, message)]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text (bad byte at offset {exc.start})"
        raise ConfigError([ConfigIssue(source, None, FILE_FIELD, message)]) from None
    return parse_routes(text, source=source)


def parse_routes(text: str, *, source: str) -> RoutesConfig:
    """Validate routes.yaml text; ``source`` names the file in every issue."""
    document, preset_issues = expand_presets(read_yaml(text, source=source))
    issues = list(document.issues) + preset_issues
    model: RoutesFile | None = None
    try:
        model = RoutesFile.model_validate(document.data)
    except ValidationError as exc:
        issues += validation_issues(exc, RoutesFile, document)
    issues += cross_field_issues(document)
    if issues or model is None:
        raise ConfigError(sorted(issues, key=lambda issue: issue.line or 0))
    return _build(model, document)


@overload
def resolve_inject_headers(
    target: Route, environ: Mapping[str, str]
) -> Mapping[str, str]: ...
@overload
def resolve_inject_headers(
    target: RoutesConfig, environ: Mapping[str, str]
) -> Mapping[str, Mapping[str, str]]: ...
def resolve_inject_headers(
    target: Route | RoutesConfig, environ: Mapping[str, str]
) -> Mapping[str, str] | Mapping[str, Mapping[str, str]]:
    """Substitute ``${env:NAME}`` in injected headers: per route, or by route name.

    Resolved once at start and held only in memory; every missing variable is reported.
    """
    routes = target.routes if isinstance(target, RoutesConfig) else (target,)
    issues: list[ConfigIssue] = []
    resolved: dict[str, Mapping[str, str]] = {}
    for route in routes:
        headers = {
            header: _resolve_template(route, header, template, environ, issues)
            for header, template in route.inject_headers.items()
        }
        resolved[route.name] = MappingProxyType(headers)
    if issues:
        raise ConfigError(issues)
    if isinstance(target, Route):
        return resolved[target.name]
    return MappingProxyType(resolved)


def _resolve_template(
    route: Route,
    header: str,
    template: str,
    environ: Mapping[str, str],
    issues: list[ConfigIssue],
) -> str:
    field = f"routes[{route.name}].inject_headers.{header}"

    def lookup(name: str) -> str:
        value = environ.get(name)
        problem = None
        if value is None:
            problem = f"environment variable {name} is not set; export it before start"
        elif not value:
            problem = f"environment variable {name} is empty"
        elif "\r" in value or "\n" in value:
            problem = f"environment variable {name} contains a line break"
        if value is None or problem is not None:
            issues.append(ConfigIssue(route.source, route.line, field, problem or ""))
            return ""
        return value

    return substitute_env(template, lookup)


def _build(model: RoutesFile, document: YamlDocument) -> RoutesConfig:
    proxy = ProxyPolicy(
        operation_key_header=model.proxy.operation_key_header,
        unmatched=model.proxy.unmatched,
        connect=model.proxy.connect,
        deny=tuple(model.proxy.deny),
        allow=tuple(model.proxy.allow),
    )
    contracts = {section.name: _contract(section) for section in model.contracts}
    routes = tuple(
        _route(section, document.line(("routes", index)), contracts, proxy, document)
        for index, section in enumerate(model.routes)
    )
    return RoutesConfig(
        version=SUPPORTED_VERSION,
        proxy=proxy,
        contracts=contracts,
        routes=routes,
        source=document.source,
    )


def _contract(section: ContractSection) -> Contract:
    common = Contract(
        name=section.name,
        version=section.version,
        safety=SafetyClass(section.safety),
        timeout=section.timeout,
        retry_limit=section.retry_limit,
        operation_key_header=section.operation_key_header,
        ledger_retention=section.ledger_retention or DEFAULT_LEDGER_RETENTION,
        lease_grace=section.lease_grace,
        in_flight_wait=section.in_flight_wait,
        duplicate_guard=_duplicate_guard(section),
        stream_idle_timeout=section.stream_idle_timeout,
        error_dialect=section.error_dialect,
    )
    if isinstance(section, IdempotentContract):
        if section.ledger_retention is None:  # the default never undercuts the key's
            common = replace(
                common,
                ledger_retention=max(DEFAULT_LEDGER_RETENTION, section.key_retention),
            )
        return replace(
            common,
            idempotency_header=section.idempotency_header,
            idempotency_argument=section.idempotency_argument,
            key_retention=section.key_retention,
        )
    if isinstance(section, ReconcilableContract):
        probe = section.probe
        return replace(
            common,
            correlation_header=section.correlation_header,
            settlement_bound=section.settlement_bound,
            probe=Probe(
                method=probe.method,
                path=probe.path,
                found_statuses=frozenset(probe.found.status),
                absent_statuses=frozenset(probe.absent.status),
                external_id=probe.found.external_id,
            ),
        )
    return common


def _duplicate_guard(section: ContractSection) -> DuplicateGuard | None:
    guard = section.duplicate_payload_window
    if guard is None or guard.mode == "off":
        return None
    return DuplicateGuard(action=guard.mode, window=guard.window)


def _route(
    section: RouteSection,
    line: int | None,
    contracts: Mapping[str, Contract],
    proxy: ProxyPolicy,
    document: YamlDocument,
) -> Route:
    strip_prefix = None
    if section.strip_prefix is not None:
        strip_prefix = "/" + "/".join(p for p in section.strip_prefix.split("/") if p)
    mcp = _mcp_tools(section.mcp, contracts) if section.mcp is not None else None
    contract = (
        contracts[section.contract]
        if section.contract is not None
        else MCP_ROUTE_CONTRACT
    )
    return Route(
        name=section.name,
        match=section.match.route_match(),
        contract=contract,
        mcp=mcp,
        upstream=section.upstream,
        strip_prefix=strip_prefix,
        inject_headers=dict(section.inject_headers),
        operation_key_header=(
            section.operation_key_header
            or contract.operation_key_header
            or proxy.operation_key_header
        ),
        source=document.source,
        line=line,
        passthrough=section.passthrough,
    )


def _mcp_tools(section: McpSection, contracts: Mapping[str, Contract]) -> McpTools:
    return McpTools(
        tools={name: contracts[tool.contract] for name, tool in section.tools.items()},
        read_only=frozenset(section.read_only),
        unclassified=section.unclassified,
        operation_key_argument=section.operation_key_argument,
    )
