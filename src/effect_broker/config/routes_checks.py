"""The rules of routes.yaml that relate two places in the file.

A field model can say that ``contract`` is a well-formed name; only the whole file can
say that such a contract exists, that no two routes claim one request (which contract
would govern it?), or that a route does not inject the header its contract's key travels
in. These checks run even when other parts of the file are invalid, on whatever parts do
validate on their own, so that an operator sees every problem in one pass; a part that
is itself invalid is skipped here (pydantic has already reported it), which keeps one
mistake from cascading into several messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from effect_broker.config.contracts import DEFAULT_OPERATION_KEY_HEADER
from effect_broker.config.routes_contract_models import (
    ContractSection,
    IdempotentContract,
    ProbeSection,
    ReconcilableContract,
    TransactionalContract,
)
from effect_broker.config.routes_fields import (
    NAME_PATTERN,
    TOKEN_PATTERN,
)
from effect_broker.config.routes_models import (
    MatchSection,
    ProxySection,
    RouteSection,
)
from effect_broker.config.routing import overlap_witness, parse_path_pattern
from effect_broker.config.yaml_lines import DataPath, YamlDocument, field_label
from effect_broker.errors import ConfigIssue
from effect_broker.headers import HOP_BY_HOP
from effect_broker.target.protocol import ATTEMPT_KEY_HEADER, SECRET_HEADER

# Headers the proxy or the connection owns: an injected value would be dropped or clash.
NOT_INJECTABLE = HOP_BY_HOP | {"content-length", "host"}

_NAME = re.compile(NAME_PATTERN)
_TOKEN = re.compile(TOKEN_PATTERN)
_CONTRACT = TypeAdapter[ContractSection](ContractSection)
M = TypeVar("M", bound=BaseModel)

Contracts = Mapping[str, ContractSection | None]  # None: declared, but itself invalid


@dataclass(frozen=True, slots=True)
class _Claim:
    """A route's valid match, kept to compare every pair of routes."""

    label: str
    line: int | None
    match: MatchSection
    path: DataPath


def cross_field_issues(document: YamlDocument) -> list[ConfigIssue]:
    """Every cross-field problem in the file, each at the line that should change."""
    checks = _Checks(document)
    top = document.data if isinstance(document.data, dict) else {}
    contracts = checks.contracts(_items(top.get("contracts")))
    proxy = top.get("proxy")
    header = _valid_field(ProxySection, "operation_key_header", proxy)
    checks.routes(
        _items(top.get("routes")),
        contracts,
        header if isinstance(header, str) else DEFAULT_OPERATION_KEY_HEADER,
    )
    return checks.issues


def _items(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _valid_model(model: type[M], raw: object) -> M | None:
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def _valid_contract(raw: object) -> ContractSection | None:
    try:
        return _CONTRACT.validate_python(raw)
    except ValidationError:
        return None


@cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[object]:
    info = model.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    return TypeAdapter(annotation, config=ConfigDict(strict=True))


def _valid_field(model: type[BaseModel], name: str, raw: object) -> object:
    """One field of a section, validated alone; None if absent or invalid."""
    if not isinstance(raw, dict) or raw.get(name) is None:
        return None
    try:
        return _field_adapter(model, name).validate_python(raw[name])
    except ValidationError:
        return None


def _name(raw: Mapping[str, object]) -> str | None:
    name = raw.get("name")
    return name if isinstance(name, str) and _NAME.fullmatch(name) else None


def _downstream_header(contract: ContractSection | None) -> str | None:
    if isinstance(contract, IdempotentContract):
        return contract.idempotency_header
    if isinstance(contract, ReconcilableContract):
        return contract.correlation_header
    if isinstance(contract, TransactionalContract):
        return ATTEMPT_KEY_HEADER
    return None


class _Checks:
    """Collects issues; each method checks one section against the rest of the file."""

    def __init__(self, document: YamlDocument) -> None:
        self.document = document
        self.issues: list[ConfigIssue] = []

    def report(self, path: DataPath, message: str) -> None:
        line = self.document.line(path)
        self.issues.append(
            ConfigIssue(self.document.source, line, field_label(path), message)
        )

    def contracts(self, items: Sequence[object]) -> Contracts:
        found: dict[str, ContractSection | None] = {}
        lines: dict[str, int | None] = {}
        for index, raw in enumerate(items):
            if not isinstance(raw, dict):
                continue
            path: DataPath = ("contracts", index)
            contract = _valid_contract(raw)
            if isinstance(contract, IdempotentContract):
                self._retention(path, contract)
            if raw.get("safety") == "idempotent" and not (
                raw.get("idempotency_header") or raw.get("idempotency_argument")
            ):
                self.report(
                    (*path, "idempotency_header"),
                    "idempotent contracts need idempotency_header: the header that "
                    "carries the stable key the target deduplicates on (an MCP tool "
                    "may use idempotency_argument instead)",
                )
            if raw.get("safety") == "reconcilable":
                self._probe((*path, "probe"), raw.get("probe"))
            name = _name(raw)
            if name is None:
                continue
            if name in found:
                self.report(
                    (*path, "name"),
                    f"contract {name!r} is already defined at line {lines[name]}; names "
                    "are unique (change a contract by bumping its version in place)",
                )
                continue
            found[name] = contract
            lines[name] = self.document.line((*path, "name"))
        return found

    def _retention(self, path: DataPath, contract: IdempotentContract) -> None:
        if contract.key_retention <= contract.timeout:
            self.report(
                (*path, "key_retention"),
                "must be longer than timeout: a key the target forgets before the "
                "attempt times out can never make a redispatch safe",
            )
        kept = contract.ledger_retention
        if kept is not None and kept < contract.key_retention:
            self.report(
                (*path, "ledger_retention"),
                f"must not be shorter than key_retention ({contract.key_retention}): a "
                "replay after the ledger forgot the effect is sent again, and only the "
                "target's key retention could still catch it",
            )

    def _probe(self, path: DataPath, raw: object) -> None:
        probe = _valid_model(ProbeSection, raw)
        if probe is None:
            return
        shared = set(probe.found.status) & set(probe.absent.status)
        if shared:
            codes = ", ".join(str(code) for code in sorted(shared))
            self.report(
                (*path, "absent", "status"),
                f"status {codes} cannot mean both found and absent",
            )

    def routes(
        self, items: Sequence[object], contracts: Contracts, proxy_header: str
    ) -> None:
        lines: dict[str, int | None] = {}
        claims: list[_Claim] = []
        for index, raw in enumerate(items):
            if not isinstance(raw, dict):
                continue
            path: DataPath = ("routes", index)
            name = _name(raw)
            if name is not None and name in lines:
                self.report(
                    (*path, "name"),
                    f"route {name!r} already defined at line {lines[name]}; names are "
                    "unique",
                )
            elif name is not None:
                lines[name] = self.document.line((*path, "name"))
            contract = self._contract_reference(path, raw, contracts)
            self._mcp_tools(path, raw.get("mcp"), contracts)
            if isinstance(contract, IdempotentContract) and contract.idempotency_argument:
                self.report(
                    (*path, "contract"),
                    f"contract {contract.name!r} puts its key in a tool argument "
                    "(idempotency_argument), which only an MCP tool has; use "
                    "idempotency_header for an HTTP route",
                )
            if isinstance(contract, TransactionalContract):
                self._kit_secret(path, raw, contract)
            match = _valid_model(MatchSection, raw.get("match"))
            if match is not None:
                label = name or field_label(path)
                line = self.document.line(path)
                claims.append(_Claim(label, line, match, (*path, "match")))
                self._upstream(path, raw, match)
                self._strip_prefix(path, raw, match)
            header = _valid_field(RouteSection, "operation_key_header", raw)
            contract_header = (
                contract.operation_key_header if contract is not None else None
            )
            reserved = {
                str(header) if header is not None else contract_header or proxy_header,
                _downstream_header(contract),
            }
            self._inject_headers((*path, "inject_headers"), raw, reserved)
        self._overlaps(claims)

    def _contract_reference(
        self, path: DataPath, raw: Mapping[str, object], contracts: Contracts
    ) -> ContractSection | None:
        name = raw.get("contract")
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            return None  # absent or malformed: pydantic said so
        if name not in contracts:
            known = ", ".join(sorted(contracts)) or "none"
            self.report(
                (*path, "contract"),
                f"no contract named {name!r}; known contracts: {known}",
            )
            return None
        return contracts[name]

    def _mcp_tools(self, path: DataPath, raw: object, contracts: Contracts) -> None:
        """Each mutating tool names a contract that exists, and one a tool can keep."""
        tools = raw.get("tools") if isinstance(raw, dict) else None
        if not isinstance(tools, dict):
            return
        for tool, spec in tools.items():
            if isinstance(spec, dict):
                where: DataPath = (*path, "mcp", "tools", str(tool))
                contract = self._contract_reference(where, spec, contracts)
                guard = contract.duplicate_payload_window if contract else None
                if contract is not None and guard is not None and guard.mode != "off":
                    self.report(
                        (*where, "contract"),
                        f"contract {contract.name!r} has duplicate_payload_window, "
                        "which applies to HTTP routes only: an MCP tool call is not "
                        "compared with earlier ones. Use a contract without it here",
                    )
                if isinstance(contract, TransactionalContract):
                    self.report(
                        (*where, "contract"),
                        f"contract {contract.name!r} is transactional, which an MCP "
                        "tool cannot be: the attempt key travels in a header of a "
                        "plain HTTP request, and the kit's lookup and tombstone sit "
                        "beside an HTTP route's upstream; use an HTTP route for a "
                        "target that runs the kit, or idempotent or unsafe here",
                    )

    def _kit_secret(
        self, path: DataPath, raw: Mapping[str, object], contract: TransactionalContract
    ) -> None:
        """The kit answers lookup and tombstone only with its shared secret: without
        it every lost answer would stay unknown, so refuse the route up front."""
        headers = raw.get("inject_headers")
        names = (
            {str(name).lower() for name in headers}
            if isinstance(headers, dict)
            else set()
        )
        if SECRET_HEADER.lower() in names:
            return
        where: DataPath = (
            (*path, "inject_headers")
            if "inject_headers" in raw
            else (
                *path,
                "contract",
            )
        )
        self.report(
            where,
            f"contract {contract.name!r} is transactional: the target kit answers its "
            f"lookup and tombstone only with the shared secret, so inject it, e.g. "
            f'inject_headers: {{{SECRET_HEADER}: "${{env:EFFECT_BROKER_KIT_SECRET}}"}}',
        )

    def _upstream(
        self, path: DataPath, raw: Mapping[str, object], match: MatchSection
    ) -> None:
        if match.host is None and "upstream" not in raw:
            self.report(
                (*path, "upstream"),
                "a reverse-mode route (no match.host) needs an upstream: the sidecar "
                "has nowhere else to send the request",
            )

    def _strip_prefix(
        self, path: DataPath, raw: Mapping[str, object], match: MatchSection
    ) -> None:
        prefix = _valid_field(RouteSection, "strip_prefix", raw)
        if not isinstance(prefix, str):
            return
        segments = tuple(part for part in prefix.split("/") if part)
        if parse_path_pattern(match.path)[: len(segments)] != segments:
            self.report(
                (*path, "strip_prefix"),
                f"{prefix!r} is not a prefix of match.path {match.path!r}; it must be "
                "whole leading literal segments of it, e.g. /stripe for "
                "/stripe/v1/charges",
            )

    def _inject_headers(
        self, path: DataPath, raw: Mapping[str, object], reserved: set[str | None]
    ) -> None:
        headers = raw.get("inject_headers")
        if not isinstance(headers, dict):
            return
        owned = NOT_INJECTABLE | {header.lower() for header in reserved if header}
        seen: set[str] = set()
        for header in headers:
            if not isinstance(header, str) or _TOKEN.fullmatch(header) is None:
                continue  # pydantic reported the name
            where = (*path, header)
            if header.lower() in owned:
                self.report(
                    where,
                    f"{header} is set by the proxy or the connection and cannot be "
                    "injected",
                )
            elif header.lower() in seen:
                self.report(where, "duplicate header (names are case-insensitive)")
            seen.add(header.lower())

    def _overlaps(self, claims: Sequence[_Claim]) -> None:
        """Two routes must never claim one request: which contract would govern it?"""
        for later, claim in enumerate(claims):
            for earlier in claims[:later]:
                witness = overlap_witness(
                    earlier.match.route_match(), claim.match.route_match()
                )
                if witness is None:
                    continue
                method, host, request_path = witness
                self.report(
                    claim.path,
                    f"routes {earlier.label!r} (line {earlier.line}) and {claim.label!r} "
                    f"(line {claim.line}) can both match {method} {host or '(reverse)'} "
                    f"{request_path}; make their method, host or path distinct",
                )
