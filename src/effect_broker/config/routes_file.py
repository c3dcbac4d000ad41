"""Read routes.yaml into a ``RoutesConfig``, or refuse it with every problem at once.

A routes file decides whether a charge can happen twice, so the loader is strict: unknown
keys, fields a safety class does not use and routes that could claim the same request are
errors, not warnings. It walks the YAML node tree (not plain dicts) so that every issue
names the file, the line and the dotted field, and it collects all issues before raising
one ``ConfigError``: an operator fixes the file in one pass.

Credentials are referenced as ``${env:NAME}`` and stay unresolved here, so validating a
file needs no secrets; ``resolve_inject_headers`` resolves them when the proxy starts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import cast, overload
from urllib.parse import urlsplit

import yaml
from yaml.constructor import SafeConstructor

from effect_broker.config.contracts import (
    DEFAULT_OPERATION_KEY_HEADER,
    DEFAULT_RETRY_LIMIT,
    DEFAULT_TIMEOUT,
    DOWNSTREAM_KEY_PLACEHOLDER,
    ConnectPolicy,
    Contract,
    Probe,
    Route,
    RouteMatch,
    UnmatchedPolicy,
)
from effect_broker.config.durations import parse_duration
from effect_broker.config.routes_config import ProxyPolicy, RoutesConfig
from effect_broker.config.routing import (
    overlap_witness,
    parse_path_pattern,
    parse_route_host,
)
from effect_broker.errors import ConfigError, ConfigIssue
from effect_broker.headers import HOP_BY_HOP
from effect_broker.models import SafetyClass

SUPPORTED_VERSION = 1
FILE_FIELD = "(file)"

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: header and method
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_JSON_POINTER = re.compile(r"(/([^~/]|~[01])*)*")
# Headers the proxy or the connection owns: an injected value would be dropped or clash.
_NOT_INJECTABLE = HOP_BY_HOP | {"content-length", "host"}

# Fields that only one safety class uses, and why that class needs them.
_CLASS_FIELDS: dict[str, tuple[SafetyClass, str]] = {
    "idempotency_header": (
        SafetyClass.IDEMPOTENT,
        "the header that carries the stable key the target deduplicates on",
    ),
    "key_retention": (
        SafetyClass.IDEMPOTENT,
        "how long the target keeps a key's result; a redispatch is safe only inside it",
    ),
    "correlation_header": (
        SafetyClass.RECONCILABLE,
        "the header the target records and the probe looks the effect up by",
    ),
    "probe": (
        SafetyClass.RECONCILABLE,
        "the authoritative lookup that decides committed or not after a lost response",
    ),
    "settlement_bound": (
        SafetyClass.RECONCILABLE,
        "only after it is a negative lookup conclusive; without it absence is unprovable",
    ),
}
_SAFETY_CHOICES = ("idempotent", "reconcilable", "unsafe")


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
    checker = _Checker(source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context, context_mark = (
            getattr(exc, "context", None),
            getattr(exc, "context_mark", None),
        )
        if context and context_mark is not None:
            problem += f" ({context} started at line {context_mark.line + 1})"
        if "'{'" in problem or "'}'" in problem:
            problem += '; quote values that contain { or }, e.g. path: "/v1/charges/{id}"'
        issue = ConfigIssue(source, line, FILE_FIELD, f"invalid YAML: {problem}")
        raise ConfigError([issue]) from None
    if root is None:
        raise ConfigError([ConfigIssue(source, None, FILE_FIELD, "the file is empty")])
    config = _read_document(checker, root)
    if checker.issues or config is None:
        raise ConfigError(sorted(checker.issues, key=lambda issue: issue.line or 0))
    return config


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

    def substitute(ref: re.Match[str]) -> str:
        name = ref.group(1)
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

    return _ENV_REF.sub(substitute, template)


def env_references(template: str) -> tuple[str, ...]:
    """The variable names a header template uses; ``ValueError`` if one is malformed."""
    leftover = _ENV_REF.sub("", template)
    start = leftover.find("${")
    if start >= 0:
        end = leftover.find("}", start)
        fragment = leftover[start : end + 1] if end >= 0 else leftover[start:]
        raise ValueError(
            f"malformed reference {fragment!r}: write ${{env:NAME}}, NAME made of "
            "letters, digits and underscores (only env: references are supported)"
        )
    return tuple(_ENV_REF.findall(template))


class _Checker:
    """Typed reads of YAML nodes that record an issue instead of raising."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.issues: list[ConfigIssue] = []
        self._constructor = SafeConstructor()

    def report(self, node: yaml.Node, field: str, message: str) -> None:
        where = field or "(top level)"
        self.issues.append(ConfigIssue(self.source, line_of(node), where, message))

    def mapping(
        self,
        node: yaml.Node,
        field: str,
        *,
        required: Sequence[str] = (),
        optional: Sequence[str] = (),
        free_keys: bool = False,
    ) -> dict[str, yaml.Node] | None:
        """Keys to value nodes; reports duplicates, unknown keys and missing ones."""
        if not isinstance(node, yaml.MappingNode):
            self.report(node, field, f"expected a mapping, got {self.describe(node)}")
            return None
        allowed = [*required, *optional]
        seen: dict[str, int | None] = {}
        found: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            if not isinstance(key, str):
                self.report(
                    key_node, field, f"keys are strings, got {self.describe(key_node)}"
                )
                continue
            where = join(field, key)
            if key in seen:
                self.report(key_node, where, f"duplicate key (first at line {seen[key]})")
                continue
            seen[key] = line_of(key_node)
            if not free_keys and key not in allowed:
                self.report(key_node, where, unknown_key_message(key, allowed))
                continue
            found[key] = value_node
        for key in required:
            if key not in seen:
                self.report(node, join(field, key), "required field is missing")
        return found

    def sequence(self, node: yaml.Node, field: str) -> list[yaml.Node] | None:
        if not isinstance(node, yaml.SequenceNode):
            self.report(node, field, f"expected a list, got {self.describe(node)}")
            return None
        return list(node.value)

    def scalar(self, node: yaml.Node) -> object:
        """The Python value of a scalar node, or the node itself for collections."""
        if not isinstance(node, yaml.ScalarNode):
            return node
        try:
            return cast(object, self._constructor.construct_object(node, deep=True))
        except yaml.YAMLError:
            return node

    def describe(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        value = self.scalar(node)
        if value is None:
            return "nothing (null)"
        if isinstance(value, bool):
            return f"the boolean {str(value).lower()}"
        if isinstance(value, int | float):
            return f"the number {node.value}"
        if isinstance(value, str):
            return "an empty string" if not value.strip() else f"the string {value!r}"
        return f"{node.value!r} ({node.tag})"

    def string(self, node: yaml.Node, field: str) -> str | None:
        value = self.scalar(node)
        if isinstance(value, str) and value.strip():
            return value.strip()
        self.report(
            node, field, f"expected a non-empty string, got {self.describe(node)}"
        )
        return None

    def matching(
        self, node: yaml.Node, field: str, pattern: re.Pattern[str], what: str
    ) -> str | None:
        value = self.string(node, field)
        if value is not None and pattern.fullmatch(value) is None:
            self.report(node, field, f"{value!r} is not {what}")
            return None
        return value

    def header(self, node: yaml.Node, field: str) -> str | None:
        return self.matching(node, field, _TOKEN, "a valid header name")

    def name(self, node: yaml.Node, field: str) -> str | None:
        what = "a valid name (letters, digits, '.', '_', '-'; starting alphanumeric)"
        return self.matching(node, field, _NAME, what)

    def integer(self, node: yaml.Node, field: str, *, minimum: int) -> int | None:
        value = self.scalar(node)
        if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
            return value
        self.report(
            node, field, f"expected an integer >= {minimum}, got {self.describe(node)}"
        )
        return None

    def duration(self, node: yaml.Node, field: str) -> timedelta | None:
        value = self.scalar(node)
        if not isinstance(value, str):
            self.report(
                node,
                field,
                f"expected a duration such as 2s or 24h, got {self.describe(node)}",
            )
            return None
        try:
            return parse_duration(value.strip())
        except ValueError as exc:
            self.report(node, field, str(exc))
            return None

    def choice(self, node: yaml.Node, field: str, choices: Sequence[str]) -> str | None:
        value = self.string(node, field)
        if value is not None and value not in choices:
            self.report(node, field, f"{value!r} is not one of {' | '.join(choices)}")
            return None
        return value

    def statuses(self, node: yaml.Node, field: str) -> frozenset[int] | None:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        found: set[int] = set()
        for item in items:
            value = self.scalar(item)
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and 100 <= value <= 599
            ):
                found.add(value)
            else:
                message = (
                    f"expected HTTP status codes (100-599), got {self.describe(item)}"
                )
                self.report(item, field, message)
                return None
        if not found:
            self.report(node, field, "list at least one status code")
            return None
        return frozenset(found)


def line_of(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def unknown_key_message(key: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; allowed keys: {', '.join(allowed)}"


def _read_document(checker: _Checker, root: yaml.Node) -> RoutesConfig | None:
    top = checker.mapping(
        root, "", required=("version", "contracts", "routes"), optional=("proxy",)
    )
    if top is None:
        return None
    if "version" in top:
        version = checker.scalar(top["version"])
        if type(version) is not int or version != SUPPORTED_VERSION:
            checker.report(
                top["version"],
                "version",
                f"unsupported version {checker.describe(top['version'])}; this build "
                f"reads version: {SUPPORTED_VERSION}",
            )
    proxy = _read_proxy(checker, top["proxy"]) if "proxy" in top else ProxyPolicy()
    contracts = _read_contracts(checker, top.get("contracts"))
    routes = _read_routes(checker, top.get("routes"), contracts, proxy)
    if checker.issues or proxy is None:
        return None
    resolved = {
        name: contract for name, contract in contracts.items() if contract is not None
    }
    return RoutesConfig(
        version=SUPPORTED_VERSION,
        proxy=proxy,
        contracts=resolved,
        routes=tuple(routes),
        source=checker.source,
    )


def _read_proxy(checker: _Checker, node: yaml.Node) -> ProxyPolicy | None:
    keys = checker.mapping(
        node, "proxy", optional=("operation_key_header", "unmatched", "connect")
    )
    if keys is None:
        return None
    header = DEFAULT_OPERATION_KEY_HEADER
    if "operation_key_header" in keys:
        header = (
            checker.header(keys["operation_key_header"], "proxy.operation_key_header")
            or ""
        )
    unmatched = "pass"
    if "unmatched" in keys:
        choices = ("pass", "reject-mutating")
        unmatched = checker.choice(keys["unmatched"], "proxy.unmatched", choices) or ""
    connect = "tunnel"
    if "connect" in keys:
        connect = (
            checker.choice(keys["connect"], "proxy.connect", ("tunnel", "refuse")) or ""
        )
    if not (header and unmatched and connect):
        return None
    return ProxyPolicy(
        operation_key_header=header,
        unmatched=cast(UnmatchedPolicy, unmatched),
        connect=cast(ConnectPolicy, connect),
    )


def _read_contracts(
    checker: _Checker, node: yaml.Node | None
) -> dict[str, Contract | None]:
    """Contracts by name; None marks a declared but invalid one (no cascade of errors)."""
    contracts: dict[str, Contract | None] = {}
    lines: dict[str, int] = {}
    items = checker.sequence(node, "contracts") if node is not None else None
    for index, item in enumerate(items or ()):
        field = f"contracts[{index}]"
        keys = checker.mapping(
            item,
            field,
            required=("name", "version", "safety"),
            optional=(*_CLASS_FIELDS, "timeout", "retry_limit"),
        )
        if keys is None:
            continue
        name = checker.name(keys["name"], f"{field}.name") if "name" in keys else None
        contract = _read_contract(checker, item, keys, field, name)
        if name is None:
            continue
        if name in contracts:
            checker.report(
                keys["name"],
                f"{field}.name",
                f"contract {name!r} is already defined at line {lines[name]}; names are "
                "unique (change a contract by bumping its version in place)",
            )
            continue
        contracts[name] = contract
        lines[name] = line_of(keys["name"])
    return contracts


def _read_contract(
    checker: _Checker,
    node: yaml.Node,
    keys: dict[str, yaml.Node],
    field: str,
    name: str | None,
) -> Contract | None:
    before = len(checker.issues)
    version = (
        _read_version(checker, keys["version"], f"{field}.version")
        if "version" in keys
        else None
    )
    safety = (
        _read_safety(checker, keys["safety"], f"{field}.safety")
        if "safety" in keys
        else None
    )
    headers = {
        key: checker.header(keys[key], f"{field}.{key}")
        for key in ("idempotency_header", "correlation_header")
        if key in keys
    }
    durations = {
        key: checker.duration(keys[key], f"{field}.{key}")
        for key in ("key_retention", "settlement_bound", "timeout")
        if key in keys
    }
    retry_limit = DEFAULT_RETRY_LIMIT
    if "retry_limit" in keys:
        retry_limit = (
            checker.integer(keys["retry_limit"], f"{field}.retry_limit", minimum=0) or 0
        )
    probe = (
        _read_probe(checker, keys["probe"], f"{field}.probe") if "probe" in keys else None
    )
    if safety is not None:
        _check_class_fields(checker, node, keys, field, safety)
    timeout = durations.get("timeout") or DEFAULT_TIMEOUT
    retention = durations.get("key_retention")
    if retention is not None and retention <= timeout:
        checker.report(
            keys["key_retention"],
            f"{field}.key_retention",
            "must be longer than timeout: a key the target forgets before the attempt "
            "times out can never make a redispatch safe",
        )
    if len(checker.issues) > before or name is None or version is None or safety is None:
        return None
    return Contract(
        name=name,
        version=version,
        safety=safety,
        idempotency_header=headers.get("idempotency_header"),
        correlation_header=headers.get("correlation_header"),
        key_retention=retention,
        settlement_bound=durations.get("settlement_bound"),
        timeout=timeout,
        retry_limit=retry_limit,
        probe=probe,
    )


def _read_version(checker: _Checker, node: yaml.Node, field: str) -> str | None:
    value = checker.scalar(node)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        checker.report(
            node,
            field,
            f"quote the version: {node.value!r} reads as a number (1.10 would be 1.1)",
        )
        return None
    return checker.string(node, field)


def _read_safety(checker: _Checker, node: yaml.Node, field: str) -> SafetyClass | None:
    value = checker.string(node, field)
    if value is None:
        return None
    if value == SafetyClass.TRANSACTIONAL.value:
        checker.report(
            node,
            field,
            "transactional is not supported by the proxy yet (it needs the target to "
            "share the ledger's Postgres); use idempotent, reconcilable or unsafe",
        )
        return None
    if value not in _SAFETY_CHOICES:
        checker.report(
            node, field, f"{value!r} is not one of {' | '.join(_SAFETY_CHOICES)}"
        )
        return None
    return SafetyClass(value)


def _check_class_fields(
    checker: _Checker,
    node: yaml.Node,
    keys: dict[str, yaml.Node],
    field: str,
    safety: SafetyClass,
) -> None:
    for key, (owner, why) in _CLASS_FIELDS.items():
        if owner is safety and key not in keys:
            checker.report(
                node, f"{field}.{key}", f"{safety} contracts need {key}: {why}"
            )
        elif owner is not safety and key in keys:
            checker.report(
                keys[key],
                f"{field}.{key}",
                f"{key} is only used by {owner} contracts and this one is {safety}; "
                "remove it, or change safety if the target really offers it",
            )


def _read_probe(checker: _Checker, node: yaml.Node, field: str) -> Probe | None:
    keys = checker.mapping(
        node, field, required=("path", "found", "absent"), optional=("method",)
    )
    if keys is None:
        return None
    before = len(checker.issues)
    method = "GET"
    if "method" in keys:
        method = (
            checker.choice(keys["method"], f"{field}.method", ("GET", "HEAD")) or "GET"
        )
    path = checker.string(keys["path"], f"{field}.path") if "path" in keys else None
    if path is not None:
        _check_probe_path(checker, keys["path"], f"{field}.path", path)
    found = absent = None
    external_id = None
    if "found" in keys:
        found_keys = checker.mapping(
            keys["found"],
            f"{field}.found",
            required=("status",),
            optional=("external_id",),
        )
        if found_keys is not None and "status" in found_keys:
            found = checker.statuses(found_keys["status"], f"{field}.found.status")
        if found_keys is not None and "external_id" in found_keys:
            pointer_field = f"{field}.found.external_id"
            external_id = checker.scalar(found_keys["external_id"])
            if not isinstance(external_id, str) or not _JSON_POINTER.fullmatch(
                external_id
            ):
                checker.report(
                    found_keys["external_id"],
                    pointer_field,
                    "expected a JSON pointer into the body, e.g. /id or /data/0/id",
                )
                external_id = None
    if "absent" in keys:
        absent_keys = checker.mapping(
            keys["absent"], f"{field}.absent", required=("status",)
        )
        if absent_keys is not None and "status" in absent_keys:
            absent = checker.statuses(absent_keys["status"], f"{field}.absent.status")
            if found and absent and found & absent:
                shared = ", ".join(str(code) for code in sorted(found & absent))
                checker.report(
                    absent_keys["status"],
                    f"{field}.absent.status",
                    f"status {shared} cannot mean both found and absent",
                )
    if len(checker.issues) > before or path is None or found is None or absent is None:
        return None
    return Probe(
        method=method,
        path=path,
        found_statuses=found,
        absent_statuses=absent,
        external_id=external_id if isinstance(external_id, str) else None,
    )


def _check_probe_path(checker: _Checker, node: yaml.Node, field: str, path: str) -> None:
    if not path.startswith("/"):
        checker.report(
            node, field, "must start with '/' (it is sent to the route's upstream)"
        )
    elif DOWNSTREAM_KEY_PLACEHOLDER not in path:
        checker.report(
            node,
            field,
            f"must contain {DOWNSTREAM_KEY_PLACEHOLDER}: the probe looks the effect up "
            "by the key the proxy sent, e.g. /v1/tickets?correlation_id={downstream_key}",
        )
    elif re.search(r"[{}]", path.replace(DOWNSTREAM_KEY_PLACEHOLDER, "")):
        checker.report(
            node, field, f"the only placeholder allowed is {DOWNSTREAM_KEY_PLACEHOLDER}"
        )


def _read_routes(
    checker: _Checker,
    node: yaml.Node | None,
    contracts: Mapping[str, Contract | None],
    proxy: ProxyPolicy | None,
) -> list[Route]:
    routes: list[Route] = []
    names: dict[str, int] = {}  # name -> line of its first definition
    # (label, line, match, match node, field) of every readable match, for overlaps
    claims: list[tuple[str, int, RouteMatch, yaml.Node, str]] = []
    items = checker.sequence(node, "routes") if node is not None else None
    for index, item in enumerate(items or ()):
        field = f"routes[{index}]"
        keys = checker.mapping(
            item,
            field,
            required=("name", "match", "contract"),
            optional=(
                "upstream",
                "strip_prefix",
                "inject_headers",
                "operation_key_header",
            ),
        )
        if keys is None:
            continue
        name = checker.name(keys["name"], f"{field}.name") if "name" in keys else None
        if name is not None and name in names:
            checker.report(
                keys["name"],
                f"{field}.name",
                f"route {name!r} already defined at line {names[name]}; names are unique",
            )
        elif name is not None:
            names[name] = line_of(keys["name"])
        match = None
        if "match" in keys:
            match = _read_match(checker, keys["match"], f"{field}.match")
        if match is not None:
            claims.append((name or field, line_of(item), match, keys["match"], field))
        route = _read_route(checker, item, keys, field, name, match, contracts, proxy)
        if route is not None:
            routes.append(route)
    _check_overlaps(checker, claims)
    return routes


def _read_route(
    checker: _Checker,
    node: yaml.Node,
    keys: dict[str, yaml.Node],
    field: str,
    name: str | None,
    match: RouteMatch | None,
    contracts: Mapping[str, Contract | None],
    proxy: ProxyPolicy | None,
) -> Route | None:
    before = len(checker.issues)
    contract = None
    if "contract" in keys:
        contract_name = checker.string(keys["contract"], f"{field}.contract")
        if contract_name is not None and contract_name not in contracts:
            known = ", ".join(sorted(contracts)) or "none"
            checker.report(
                keys["contract"],
                f"{field}.contract",
                f"no contract named {contract_name!r}; known contracts: {known}",
            )
        elif contract_name is not None:
            contract = contracts[contract_name]
    upstream = None
    if "upstream" in keys:
        upstream = _read_upstream(checker, keys["upstream"], f"{field}.upstream")
    elif match is not None and match.host is None:
        checker.report(
            node,
            f"{field}.upstream",
            "a reverse-mode route (no match.host) needs an upstream: the sidecar has "
            "nowhere else to send the request",
        )
    strip_prefix = None
    if "strip_prefix" in keys:
        strip_prefix = _read_strip_prefix(
            checker, keys["strip_prefix"], f"{field}.strip_prefix", match
        )
    key_header = proxy.operation_key_header if proxy is not None else ""
    if "operation_key_header" in keys:
        key_header = (
            checker.header(keys["operation_key_header"], f"{field}.operation_key_header")
            or ""
        )
    inject: dict[str, str] = {}
    if "inject_headers" in keys:
        reserved = {key_header, contract.downstream_header if contract else None}
        inject = _read_inject_headers(
            checker, keys["inject_headers"], f"{field}.inject_headers", reserved
        )
    if len(checker.issues) > before or not key_header:
        return None
    if name is None or match is None or contract is None:
        return None
    return Route(
        name=name,
        match=match,
        contract=contract,
        upstream=upstream,
        strip_prefix=strip_prefix,
        inject_headers=inject,
        operation_key_header=key_header,
        source=checker.source,
        line=line_of(node),
    )


def _check_overlaps(
    checker: _Checker, claims: list[tuple[str, int, RouteMatch, yaml.Node, str]]
) -> None:
    """Two routes must never claim one request: which contract would govern it?"""
    for later, (name, line, match, match_node, field) in enumerate(claims):
        for earlier_name, earlier_line, earlier_match, _, _ in claims[:later]:
            witness = overlap_witness(earlier_match, match)
            if witness is not None:
                method, host, path = witness
                checker.report(
                    match_node,
                    f"{field}.match",
                    f"routes {earlier_name!r} (line {earlier_line}) and {name!r} "
                    f"(line {line}) can both match {method} {host or '(reverse)'} "
                    f"{path}; make their method, host or path distinct",
                )


def _read_match(checker: _Checker, node: yaml.Node, field: str) -> RouteMatch | None:
    keys = checker.mapping(node, field, required=("method", "path"), optional=("host",))
    if keys is None:
        return None
    methods = (
        _read_methods(checker, keys["method"], f"{field}.method")
        if "method" in keys
        else None
    )
    path = checker.string(keys["path"], f"{field}.path") if "path" in keys else None
    if path is not None:
        try:
            parse_path_pattern(path)
        except ValueError as exc:
            checker.report(keys["path"], f"{field}.path", str(exc))
            path = None
    host: str | None = None
    if "host" in keys:
        text = checker.string(keys["host"], f"{field}.host")
        if text is None:
            return None
        try:
            host = parse_route_host(text)
        except ValueError as exc:
            checker.report(keys["host"], f"{field}.host", str(exc))
            return None
    if methods is None or path is None:
        return None
    return RouteMatch(methods=methods, host=host, path=path)


def _read_methods(
    checker: _Checker, node: yaml.Node, field: str
) -> frozenset[str] | None:
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    methods: set[str] = set()
    for item in items:
        method = checker.matching(item, field, _TOKEN, "an HTTP method")
        if method is None:
            return None
        if method.upper() == "CONNECT":
            checker.report(item, field, "CONNECT opens a tunnel the proxy cannot inspect")
            return None
        methods.add(method.upper())
    if not methods:
        checker.report(node, field, "list at least one method")
        return None
    return frozenset(methods)


def _read_upstream(checker: _Checker, node: yaml.Node, field: str) -> str | None:
    url = checker.string(node, field)
    if url is None:
        return None
    parts = urlsplit(url)
    problem = None
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problem = "expected an http:// or https:// URL with a host, e.g. https://api.example.com"
    elif not port_ok:
        problem = "the port is not a number between 1 and 65535"
    elif parts.username is not None or parts.password is not None:
        problem = (
            "credentials do not belong in the URL; use inject_headers with ${env:NAME}"
        )
    elif parts.query or parts.fragment:
        problem = "an upstream has no query or fragment"
    if problem is not None:
        checker.report(node, field, problem)
        return None
    return url.rstrip("/")


def _read_strip_prefix(
    checker: _Checker, node: yaml.Node, field: str, match: RouteMatch | None
) -> str | None:
    prefix = checker.string(node, field)
    if prefix is None or match is None:
        return None
    pattern = parse_path_pattern(match.path)
    segments = tuple(part for part in prefix.split("/") if part)
    if not prefix.startswith("/") or pattern[: len(segments)] != segments:
        checker.report(
            node,
            field,
            f"{prefix!r} is not a prefix of match.path {match.path!r}; it must be whole "
            "leading literal segments of it, e.g. /stripe for /stripe/v1/charges",
        )
        return None
    return "/" + "/".join(segments)


def _read_inject_headers(
    checker: _Checker, node: yaml.Node, field: str, reserved: set[str | None]
) -> dict[str, str]:
    keys = checker.mapping(node, field, free_keys=True)
    reserved_lower = {header.lower() for header in reserved if header}
    headers: dict[str, str] = {}
    lowered: set[str] = set()
    for header, value_node in (keys or {}).items():
        where = f"{field}.{header}"
        if _TOKEN.fullmatch(header) is None:
            checker.report(value_node, where, f"{header!r} is not a valid header name")
            continue
        if header.lower() in _NOT_INJECTABLE or header.lower() in reserved_lower:
            checker.report(
                value_node,
                where,
                f"{header} is set by the proxy or the connection and cannot be injected",
            )
            continue
        if header.lower() in lowered:
            message = "duplicate header (names are case-insensitive)"
            checker.report(value_node, where, message)
            continue
        lowered.add(header.lower())
        template = checker.scalar(value_node)
        if not isinstance(template, str):
            checker.report(
                value_node,
                where,
                f"expected a string, got {checker.describe(value_node)}",
            )
            continue
        if "\r" in template or "\n" in template:
            checker.report(
                value_node, where, "a header value cannot contain a line break"
            )
            continue
        try:
            env_references(template)
        except ValueError as exc:
            checker.report(value_node, where, str(exc))
            continue
        headers[header] = template
    return headers
