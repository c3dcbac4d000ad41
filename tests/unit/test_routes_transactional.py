"""routes.yaml for ``safety: transactional``: what it takes, and each refusal at its line.

A transactional contract carries only what every class has (timeout, retry limit,
ledger retention, operation key header): the attempt key header is the kit's protocol,
not configuration, and the kit's lookup needs neither a probe nor a settlement bound.
Its route must inject the kit's shared secret, and an MCP tool cannot be transactional.
"""

from __future__ import annotations

import textwrap
from datetime import timedelta

import pytest

from effect_broker.config.routes_config import RoutesConfig
from effect_broker.config.routes_file import parse_routes
from effect_broker.errors import ConfigError, ConfigIssue
from effect_broker.models import SafetyClass
from effect_broker.target.protocol import ATTEMPT_KEY_HEADER

# The contract is at line 3; a route starts at line 11, its inject_headers at line 16.
FILE = """\
version: 1
contracts:
  - name: ledger.post
    version: "1"
    safety: transactional
    timeout: 3s
    retry_limit: 4
    ledger_retention: 30d
    operation_key_header: X-Intent
routes:
  - name: post
    match: {{method: POST, path: /ledger/v1/entries}}
    strip_prefix: /ledger
    upstream: http://ledger.internal:8000
    contract: ledger.post
    inject_headers: {{Effect-Broker-Secret: "${{env:LEDGER_KIT_SECRET}}"}}
"""


def parse(text: str) -> RoutesConfig:
    return parse_routes(text, source="r.yaml")


def issues_of(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    return caught.value.issues


def only_issue(text: str) -> ConfigIssue:
    found = issues_of(text)
    assert len(found) == 1, [str(issue) for issue in found]
    assert found[0].file == "r.yaml"
    return found[0]


def test_a_transactional_contract_loads_with_the_fields_every_class_has() -> None:
    config = parse(FILE.format())
    contract = config.contracts["ledger.post"]
    assert contract.safety is SafetyClass.TRANSACTIONAL
    assert contract.timeout == timedelta(seconds=3)
    assert contract.retry_limit == 4
    assert contract.ledger_retention == timedelta(days=30)
    assert contract.downstream_header == ATTEMPT_KEY_HEADER
    assert (contract.key_retention, contract.settlement_bound, contract.probe) == (
        None,
        None,
        None,
    )
    [route] = config.routes
    assert route.operation_key_header == "X-Intent"
    assert dict(route.inject_headers) == {
        "Effect-Broker-Secret": "${env:LEDGER_KIT_SECRET}"
    }


@pytest.mark.parametrize(
    ("line", "owner"),
    [
        ("idempotency_header: Idempotency-Key", "idempotent"),
        ("idempotency_argument: key", "idempotent"),
        ("key_retention: 24h", "idempotent"),
        ("correlation_header: X-Correlation-Id", "reconcilable"),
        ("settlement_bound: 2s", "reconcilable"),
        ("probe: {path: '/t?c={downstream_key}', found: {status: 200}, "
         "absent: {status: 404}}", "reconcilable"),
    ],
)  # fmt: skip
def test_fields_of_other_classes_are_refused_at_their_line(line: str, owner: str) -> None:
    text = FILE.format().replace(
        "    operation_key_header: X-Intent\n",
        f"    operation_key_header: X-Intent\n    {line}\n",
    )
    issue = only_issue(text)
    key = line.split(":")[0]
    assert (issue.line, issue.field) == (10, f"contracts[0].{key}")
    assert f"only used by {owner} contracts and this one is transactional" in (
        issue.message
    )
    assert str(issue).startswith(f"r.yaml:10: contracts[0].{key}: ")


def test_a_transactional_route_must_inject_the_kit_secret() -> None:
    text = FILE.format().replace(
        '    inject_headers: {Effect-Broker-Secret: "${env:LEDGER_KIT_SECRET}"}\n', ""
    )
    issue = only_issue(text)
    assert (issue.line, issue.field) == (15, "routes[0].contract")
    assert "Effect-Broker-Secret" in issue.message
    assert "transactional" in issue.message


def test_injected_headers_without_the_secret_are_named_where_they_are() -> None:
    text = FILE.format().replace(
        'Effect-Broker-Secret: "${env:LEDGER_KIT_SECRET}"', "Authorization: Bearer x"
    )
    issue = only_issue(text)
    assert (issue.line, issue.field) == (16, "routes[0].inject_headers")
    assert "shared secret" in issue.message


def test_the_secret_header_name_is_case_insensitive() -> None:
    parse(FILE.format().replace("Effect-Broker-Secret", "effect-broker-secret"))


def test_the_attempt_key_header_is_the_proxys_and_cannot_be_injected() -> None:
    text = FILE.format().replace(
        '{Effect-Broker-Secret: "${env:LEDGER_KIT_SECRET}"}',
        '{Effect-Broker-Secret: "${env:LEDGER_KIT_SECRET}", Effect-Attempt-Key: x}',
    )
    issue = only_issue(text)
    assert (issue.line, issue.field) == (
        16,
        "routes[0].inject_headers.Effect-Attempt-Key",
    )
    assert "cannot be injected" in issue.message


def test_an_mcp_tool_cannot_be_transactional() -> None:
    mcp_route = textwrap.dedent("""\
          - name: tools
            match: {path: /mcp}
            upstream: http://127.0.0.1:9
            mcp: {tools: {post_entry: {contract: ledger.post}}}
        """)
    issue = only_issue(FILE.format() + textwrap.indent(mcp_route, "  "))
    assert issue.field == "routes[1].mcp.tools.post_entry.contract"
    assert issue.line == 20
    assert "an MCP tool cannot be" in issue.message
