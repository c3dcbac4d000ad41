"""Contract presets (``contract: stripe@1`` names a packaged contract), and the
duplicate guard as the loader reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from effect_broker.config.contracts import DuplicateGuard
from effect_broker.config.presets import PRESETS
from effect_broker.config.routes_file import parse_routes
from effect_broker.errors import ConfigError
from effect_broker.models import SafetyClass

ROUTE = """
  - name: {name}
    match: {{method: POST, host: api.stripe.com, path: {path}}}
    contract: {contract}"""


def routes(*entries: tuple[str, str, str], contracts: str = "") -> str:
    body = "".join(
        ROUTE.format(name=name, path=path, contract=contract)
        for name, path, contract in entries
    )
    return f"version: 1\n{contracts}routes:{body}\n"


def test_a_route_naming_a_preset_gets_its_contract() -> None:
    config = parse_routes(
        routes(
            ("intents", "/v1/payment_intents", "stripe@1"),
            ("refunds", "/v1/refunds", "stripe@1"),
        ),
        source="routes.yaml",
    )
    contract = config.routes[0].contract
    assert contract.ref == "stripe@1"
    assert contract.safety is SafetyClass.IDEMPOTENT
    assert contract.idempotency_header == "Idempotency-Key"
    assert contract.key_retention == timedelta(hours=24)
    assert config.routes[1].contract is contract or config.routes[1].contract == contract
    assert list(config.contracts) == ["stripe"]


def test_an_unknown_preset_is_one_issue_at_its_line() -> None:
    text = routes(("refunds", "/v1/refunds", "paypal@3"))
    with pytest.raises(ConfigError) as raised:
        parse_routes(text, source="routes.yaml")
    (issue,) = [i for i in raised.value.issues if i.field == "routes[0].contract"]
    assert issue.line == 5
    assert "no contract preset named 'paypal@3'" in issue.message
    assert "stripe@1" in issue.message


def test_a_preset_beside_a_contract_of_the_same_name_is_refused() -> None:
    own = """contracts:
  - name: stripe
    version: "9"
    safety: unsafe
"""
    with pytest.raises(ConfigError) as raised:
        parse_routes(
            routes(("intents", "/v1/payment_intents", "stripe@1"), contracts=own),
            source="routes.yaml",
        )
    assert any("already defined" in issue.message for issue in raised.value.issues)


def test_presets_are_valid_contract_sections() -> None:
    for ref, preset in PRESETS.items():
        assert ref == f"{preset.section['name']}@{preset.section['version']}"


def test_an_mcp_tool_cannot_have_the_duplicate_guard() -> None:
    """The guard compares HTTP requests; an MCP tool call would silently go unchecked."""
    text = """version: 1
contracts:
  - name: guarded
    version: "1"
    safety: unsafe
    duplicate_payload_window: {mode: hold, window: 10m}
routes:
  - name: m
    match: {path: /mcp}
    upstream: http://127.0.0.1:9
    mcp: {tools: {charge: {contract: guarded}}}
"""
    with pytest.raises(ConfigError, match="HTTP routes only"):
        parse_routes(text, source="routes.yaml")


def test_the_duplicate_guard_is_read_into_the_contract() -> None:
    text = """version: 1
contracts:
  - name: guarded
    version: "1"
    safety: unsafe
    duplicate_payload_window: {mode: warn, window: 90s}
  - name: quiet
    version: "1"
    safety: unsafe
    duplicate_payload_window: {mode: "off"}
routes:
  - name: a
    match: {method: POST, path: /a}
    upstream: http://127.0.0.1:9
    contract: guarded
  - name: b
    match: {method: POST, path: /b}
    upstream: http://127.0.0.1:9
    contract: quiet
"""
    first, second = parse_routes(text, source="routes.yaml").routes
    assert first.contract.duplicate_guard == DuplicateGuard("warn", timedelta(seconds=90))
    assert second.contract.duplicate_guard is None
