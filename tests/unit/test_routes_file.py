"""routes.yaml refusals: each names the file, the exact line and the dotted field."""

from __future__ import annotations

import dataclasses
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from effect_broker.config.routes_file import (
    load_routes,
    resolve_inject_headers,
)
from effect_broker.config.secret_refs import env_references
from effect_broker.errors import ConfigError, ConfigIssue
from effect_broker.models import SafetyClass
from tests.unit.routes_support import CONTRACTS, issues_of, only_issue, parse

ROOT_ROUTES = Path(__file__).resolve().parents[2] / "routes.yaml"


def located(found: list[ConfigIssue]) -> set[tuple[int | None, str]]:
    return {(issue.line, issue.field) for issue in found}


def with_routes(routes: str) -> str:
    return CONTRACTS + "routes:\n" + textwrap.dedent(routes)


# --- the files that load ---


def test_root_routes_yaml_loads() -> None:
    config = load_routes(ROOT_ROUTES)
    assert set(config.contracts) == {"payments.charge", "tickets.create", "email.send"}
    assert [route.name for route in config.routes] == [
        "charge",
        "payments",
        "tickets",
        "email",
    ]
    safeties = {route.name: route.contract.safety for route in config.routes}
    assert safeties["tickets"] is SafetyClass.RECONCILABLE
    assert safeties["email"] is SafetyClass.UNSAFE
    assert config.routes[1].strip_prefix == "/payments"
    assert config.routes[0].match.host == "payments.internal"
    assert config.routes[0].upstream == "http://127.0.0.1:9000/idempotent"


def test_the_stripe_example_loads_without_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STRIPE_SECRET_KEY", raising=False)
    config = load_routes(ROOT_ROUTES.parent / "examples" / "stripe-routes.yaml")
    [stripe] = config.routes
    assert stripe.inject_headers == {"Authorization": "Bearer ${env:STRIPE_SECRET_KEY}"}
    assert stripe.strip_prefix == "/stripe"
    assert stripe.upstream == "https://api.stripe.com"


def test_the_stripe_sdk_example_takes_the_sdks_idempotency_key() -> None:
    config = load_routes(ROOT_ROUTES.parent / "examples" / "stripe-sdk-routes.yaml")
    [stripe] = config.routes
    assert stripe.match.host == "api.stripe.com"
    assert stripe.operation_key_header == "Idempotency-Key"
    assert config.table.is_guarded_host("api.stripe.com:443")


def test_a_valid_file_builds_resolved_frozen_values() -> None:
    config = parse(
        with_routes("""\
          - name: charge
            match: {method: [post, PUT], host: Payments.Internal:80, path: /v1/charges}
            contract: pay
        """)
    )
    assert config.version == 1
    assert config.proxy.operation_key_header == "Operation-Key"
    assert config.proxy.unmatched == "pass"
    assert config.proxy.connect == "tunnel"
    pay = config.contracts["pay"]
    assert pay.key_retention == timedelta(hours=24)
    assert pay.timeout == timedelta(seconds=10)
    assert pay.retry_limit == 5
    assert pay.downstream_header == "Idempotency-Key"
    tickets = config.contracts["tickets"]
    assert tickets.downstream_header == "X-Correlation-Id"
    assert tickets.probe is not None
    assert tickets.probe.method == "GET"
    assert tickets.probe.found_statuses == {200}
    assert tickets.probe.absent_statuses == {404}
    assert tickets.probe.external_id == "/id"
    assert tickets.probe.path_for("a/b") == "/v1/tickets?correlation_id=a%2Fb"
    assert config.contracts["email"].downstream_header is None
    route = config.routes[0]
    assert route.contract is pay
    assert route.match.methods == {"POST", "PUT"}
    assert route.match.host == "payments.internal"
    assert route.mode == "forward"
    assert route.line == 21
    with pytest.raises(TypeError):
        config.contracts["x"] = pay  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        route.name = "other"  # type: ignore[misc]
    assert isinstance(config.routes, tuple)


def test_proxy_section_and_per_route_operation_key_header() -> None:
    config = parse("""\
        version: 1
        proxy: {operation_key_header: X-Op, unmatched: reject-mutating, connect: refuse}
        contracts:
          - {name: email, version: 1, safety: unsafe, timeout: 500ms, retry_limit: 0}
        routes:
          - name: a
            match: {method: POST, path: /a}
            upstream: https://a.example/base/
            contract: email
          - name: b
            match: {method: POST, path: /b}
            upstream: https://b.example
            contract: email
            operation_key_header: X-Other
        """)
    assert config.proxy.unmatched == "reject-mutating"
    assert config.proxy.connect == "refuse"
    assert config.contracts["email"].version == "1"
    assert config.contracts["email"].retry_limit == 0
    assert config.routes[0].operation_key_header == "X-Op"
    assert config.routes[0].upstream == "https://a.example/base"
    assert config.routes[1].operation_key_header == "X-Other"


def test_contract_operation_key_header_beats_the_proxy_and_yields_to_a_route() -> None:
    config = parse("""\
        version: 1
        proxy: {operation_key_header: X-Op}
        contracts:
          - name: stripe.charge
            version: "1"
            safety: idempotent
            idempotency_header: Idempotency-Key
            key_retention: 24h
            operation_key_header: Idempotency-Key
        routes:
          - name: a
            match: {method: POST, host: api.stripe.com, path: /v1/charges}
            contract: stripe.charge
          - name: b
            match: {method: POST, host: api.stripe.com, path: /v1/refunds}
            contract: stripe.charge
            operation_key_header: X-Mine
        """)
    assert config.routes[0].operation_key_header == "Idempotency-Key"
    assert config.routes[0].contract.downstream_header == "Idempotency-Key"
    assert config.routes[1].operation_key_header == "X-Mine"


# --- file-level refusals ---


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_routes(tmp_path / "absent.yaml")
    (issue,) = caught.value.issues
    assert issue.file == str(tmp_path / "absent.yaml")
    assert issue.line is None
    assert "no such file" in issue.message


def test_empty_file_is_refused() -> None:
    assert "empty" in only_issue("").message


def test_yaml_syntax_error_names_its_line() -> None:
    issue = only_issue("""\
        version: 1
        contracts: [
        routes: []
        """)
    assert issue.line == 4
    assert "invalid YAML" in issue.message


def test_version_missing() -> None:
    issue = only_issue("""\
        contracts: []
        routes: []
        """)
    assert (issue.line, issue.field) == (1, "version")
    assert "missing" in issue.message


@pytest.mark.parametrize("value", ["2", '"1"', "true", "1.0"])
def test_version_other_than_1(value: str) -> None:
    issue = only_issue(f"contracts: []\nroutes: []\nversion: {value}\n")
    assert (issue.line, issue.field) == (3, "version")
    assert "version: 1" in issue.message


def test_top_level_must_be_a_mapping() -> None:
    issue = only_issue("- version: 1\n")
    assert (issue.line, issue.field) == (1, "(top level)")
    assert "expected a mapping, got a list" in issue.message


def test_unknown_top_level_key_lists_allowed_keys() -> None:
    issue = only_issue("""\
        version: 1
        contracts: []
        route: []
        routes: []
        """)
    assert (issue.line, issue.field) == (3, "route")
    assert "did you mean 'routes'" in issue.message
    assert "allowed keys: version, contracts, routes, proxy" in issue.message


def test_unknown_nested_key_names_its_dotted_field() -> None:
    found = issues_of(
        with_routes("""\
          - name: charge
            match: {method: POST, path: /c, verb: POST}
            upstream: http://127.0.0.1:9000
            contract: pay
        """)
    )
    assert located(found) == {(22, "routes[0].match.verb")}
    # method is optional now (an MCP route has none), so it follows the required path
    assert "allowed keys: path, method, host" in found[0].message


def test_duplicate_yaml_keys_are_refused() -> None:
    issue = only_issue("""\
        version: 1
        contracts:
          - name: pay
            version: "1"
            safety: unsafe
            name: pay2
        routes: []
        """)
    assert (issue.line, issue.field) == (6, "contracts[0].name")
    assert "duplicate key (first at line 3)" in issue.message


def test_every_issue_is_collected_before_raising() -> None:
    found = issues_of("""\
        version: 3
        contracts:
          - name: pay
            version: "1"
            safety: sometimes
            timeout: soon
        routes:
          - name: charge
            match: {method: POST, path: /c}
            contract: nope
        """)
    assert located(found) == {
        (1, "version"),
        (5, "contracts[0].safety"),
        (6, "contracts[0].timeout"),
        (8, "routes[0].upstream"),
        (10, "routes[0].contract"),
    }


def test_keys_must_be_strings() -> None:
    issue = only_issue("version: 1\ncontracts: []\nroutes: []\n1: x\n")
    assert (issue.line, issue.field) == (4, "(top level)")
    assert "keys are strings, got the number 1" in issue.message


def test_merge_keys_are_refused_rather_than_read_without_lines() -> None:
    found = issues_of("""\
        version: 1
        contracts:
          - &base {name: email, version: "1", safety: unsafe}
          - <<: *base
            name: email2
        routes: []
        """)
    assert (4, "contracts[1].<<") in located(found)
    assert any("merge keys (<<) are not supported" in issue.message for issue in found)


def test_an_explicit_null_is_refused_not_read_as_absent() -> None:
    issue = only_issue(
        with_routes("""\
          - name: charge
            match: {method: POST, host: pay.internal, path: /c}
            upstream:
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (23, "routes[0].upstream")
    assert "got nothing (null)" in issue.message


# --- contract refusals ---


def test_missing_required_contract_field() -> None:
    issue = only_issue("""\
        version: 1
        contracts:
          - name: pay
            safety: unsafe
        routes: []
        """)
    assert (issue.line, issue.field) == (3, "contracts[0].version")
    assert "required field is missing" in issue.message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("retry_limit: five", "expected an integer >= 0, got the string 'five'"),
        ("retry_limit: -1", "expected an integer >= 0, got the number -1"),
        ("retry_limit: true", "got the boolean true"),
        ("timeout: 10", "expected a duration such as 2s or 24h, got the number 10"),
        ("timeout: [1s]", "got a list"),
        ("timeout: 1.5h", "positive integer and one unit"),
        ("version: 1.10", "quote the version"),
    ],
)
def test_wrong_types_name_line_and_field(line: str, expected: str) -> None:
    key = line.split(":")[0]
    text = "version: 1\ncontracts:\n  - name: email\n    safety: unsafe\n"
    if key != "version":
        text += '    version: "1"\n'
    text += f"    {line}\nroutes: []\n"
    issue = only_issue(text)
    assert issue.field == f"contracts[0].{key}"
    assert issue.line == (4 if key == "version" else 5) + 1
    assert expected in issue.message


def test_missing_safety_lists_the_classes_and_other_fields_are_still_checked() -> None:
    found = issues_of("""\
        version: 1
        contracts:
          - name: pay
            timeout: soon
        routes: []
        """)
    assert located(found) == {
        (3, "contracts[0].safety"),
        (3, "contracts[0].version"),
        (4, "contracts[0].timeout"),
    }
    [safety] = [issue for issue in found if issue.field.endswith("safety")]
    assert "idempotent | reconcilable | unsafe | transactional" in safety.message


def test_unknown_contract_key_suggests_and_lists_that_class_keys() -> None:
    issue = only_issue("""\
        version: 1
        contracts:
          - {name: email, version: "1", safety: unsafe, timout: 1s}
        routes: []
        """)
    assert (issue.line, issue.field) == (3, "contracts[0].timout")
    assert "did you mean 'timeout'" in issue.message
    assert "allowed keys: name, version, safety, timeout, retry_limit" in issue.message


@pytest.mark.parametrize(
    ("status", "field"),
    [("700", "found.status"), ("[200, 700]", "found.status[1]")],
)
def test_probe_status_errors_name_the_code(status: str, field: str) -> None:
    issue = only_issue(
        CONTRACTS.replace("{status: [200]", f"{{status: {status}") + "routes: []\n"
    )
    assert (issue.line, issue.field) == (15, f"contracts[1].probe.{field}")
    assert "expected an integer from 100 to 599, got the number 700" in issue.message


def test_contracts_must_be_a_list() -> None:
    issue = only_issue("version: 1\ncontracts: {name: pay}\nroutes: []\n")
    assert (issue.line, issue.field) == (2, "contracts")
    assert "expected a list, got a mapping" in issue.message


def test_bad_duration_names_the_field() -> None:
    issue = only_issue(
        CONTRACTS.replace("settlement_bound: 2s", "settlement_bound: 2 seconds")
        + "routes: []\n"
    )
    assert (issue.line, issue.field) == (12, "contracts[1].settlement_bound")
    assert "'2 seconds' is not a duration" in issue.message


def test_unknown_safety_class() -> None:
    issue = only_issue("""\
        version: 1
        contracts:
          - {name: x, version: "1", safety: maybe}
        routes: []
        """)
    assert (issue.line, issue.field) == (3, "contracts[0].safety")
    assert "idempotent | reconcilable | unsafe | transactional" in issue.message


def test_idempotent_needs_header_and_retention() -> None:
    found = issues_of("""\
        version: 1
        contracts:
          - name: pay
            version: "1"
            safety: idempotent
        routes: []
        """)
    assert located(found) == {
        (3, "contracts[0].idempotency_header"),
        (3, "contracts[0].key_retention"),
    }
    assert all("idempotent contracts need" in issue.message for issue in found)


def test_reconcilable_needs_header_probe_and_settlement_bound() -> None:
    found = issues_of("""\
        version: 1
        contracts:
          - name: email
            version: "1"
            safety: unsafe
          - name: tickets
            version: "1"
            safety: reconcilable
        routes: []
        """)
    assert located(found) == {
        (6, "contracts[1].correlation_header"),
        (6, "contracts[1].probe"),
        (6, "contracts[1].settlement_bound"),
    }


def test_probe_path_needs_the_downstream_key() -> None:
    issue = only_issue(
        CONTRACTS.replace("correlation_id={downstream_key}", "correlation_id={key}")
        + "routes: []\n"
    )
    assert (issue.line, issue.field) == (14, "contracts[1].probe.path")
    assert "{downstream_key}" in issue.message


def test_probe_statuses_cannot_be_both_found_and_absent() -> None:
    issue = only_issue(
        CONTRACTS.replace("absent: {status: 404}", "absent: {status: [404, 200]}")
        + "routes: []\n"
    )
    assert (issue.line, issue.field) == (16, "contracts[1].probe.absent.status")
    assert "200 cannot mean both" in issue.message


def test_probe_must_be_side_effect_free() -> None:
    text = CONTRACTS.replace("    probe:\n", "    probe:\n      method: POST\n")
    issue = only_issue(text + "routes: []\n")
    assert (issue.line, issue.field) == (14, "contracts[1].probe.method")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("idempotency_header: Idempotency-Key", "idempotency_header"),
        ("correlation_header: X-Correlation-Id", "correlation_header"),
        ("key_retention: 1d", "key_retention"),
        ("settlement_bound: 2s", "settlement_bound"),
    ],
)
def test_fields_an_unsafe_contract_does_not_use_are_refused(
    extra: str, field: str
) -> None:
    issue = only_issue(
        CONTRACTS.replace("safety: unsafe\n", f"safety: unsafe\n    {extra}\n")
        + "routes: []\n"
    )
    assert (issue.line, issue.field) == (20, f"contracts[2].{field}")
    assert "this one is unsafe" in issue.message


def test_reconcilable_field_on_an_idempotent_contract_is_refused() -> None:
    text = CONTRACTS.replace(
        "    key_retention: 24h\n", "    key_retention: 24h\n    settlement_bound: 2s\n"
    )
    issue = only_issue(text + "routes: []\n")
    assert (issue.line, issue.field) == (8, "contracts[0].settlement_bound")
    assert "only used by reconcilable contracts" in issue.message


def test_key_retention_must_outlast_the_timeout() -> None:
    text = CONTRACTS.replace("key_retention: 24h", "key_retention: 5s")
    issue = only_issue(text + "routes: []\n")
    assert (issue.line, issue.field) == (7, "contracts[0].key_retention")
    assert "longer than timeout" in issue.message


def test_duplicate_contract_names() -> None:
    issue = only_issue("""\
        version: 1
        contracts:
          - {name: email, version: "1", safety: unsafe}
          - {name: email, version: "2", safety: unsafe}
        routes: []
        """)
    assert (issue.line, issue.field) == (4, "contracts[1].name")
    assert "already defined at line 3" in issue.message


def test_header_names_must_be_tokens() -> None:
    text = CONTRACTS.replace("Idempotency-Key", "Idempotency Key")
    issue = only_issue(text + "routes: []\n")
    assert (issue.line, issue.field) == (6, "contracts[0].idempotency_header")
    assert "not a valid header name" in issue.message


# --- route refusals ---


def test_route_naming_a_missing_contract_lists_known_ones() -> None:
    issue = only_issue(
        with_routes("""\
          - name: charge
            match: {method: POST, host: payments.internal, path: /v1/charges}
            contract: payments
        """)
    )
    assert (issue.line, issue.field) == (23, "routes[0].contract")
    assert "no contract named 'payments'; known contracts: email, pay, tickets" in (
        issue.message
    )


def test_duplicate_route_names() -> None:
    issue = only_issue(
        with_routes("""\
          - name: charge
            match: {method: POST, host: a.internal, path: /c}
            contract: pay
          - name: charge
            match: {method: POST, host: b.internal, path: /c}
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (24, "routes[1].name")
    assert "already defined at line 21" in issue.message


def test_overlapping_routes_name_both_routes_and_lines() -> None:
    issue = only_issue(
        with_routes("""\
          - name: by-id
            match: {method: [POST, PUT], host: pay.internal, path: "/v1/charges/{id}"}
            contract: pay
          - name: other-host
            match: {method: POST, host: other.internal, path: /v1/charges/refund}
            contract: pay
          - name: refund
            match: {method: POST, host: PAY.internal:80, path: /v1/charges/refund}
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (28, "routes[2].match")
    assert "'by-id' (line 21) and 'refund' (line 27)" in issue.message
    assert "POST pay.internal /v1/charges/refund" in issue.message


def test_forward_and_reverse_routes_with_the_same_path_do_not_overlap() -> None:
    config = parse(
        with_routes("""\
          - name: forward
            match: {method: POST, host: pay.internal, path: /v1/charges}
            contract: pay
          - name: reverse
            match: {method: POST, path: /v1/charges}
            upstream: http://127.0.0.1:9000
            contract: pay
        """)
    )
    assert [route.mode for route in config.routes] == ["forward", "reverse"]


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [
        ("ftp://files.example", "http:// or https:// URL"),
        ("api.stripe.com", "http:// or https:// URL"),
        ("https://user:pw@api.example", "credentials do not belong"),
        ("https://api.example?x=1", "no query"),
        ("http://127.0.0.1:99999", "port"),
    ],
)
def test_upstream_must_be_an_http_url(upstream: str, expected: str) -> None:
    issue = only_issue(
        with_routes(f"""\
          - name: charge
            match: {{method: POST, path: /c}}
            upstream: "{upstream}"
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (23, "routes[0].upstream")
    assert expected in issue.message


def test_reverse_route_needs_an_upstream() -> None:
    issue = only_issue(
        with_routes("""\
          - name: stripe
            match: {method: POST, path: /stripe/v1/charges}
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (21, "routes[0].upstream")
    assert "reverse-mode route" in issue.message


@pytest.mark.parametrize("prefix", ["/str", "/v1", "stripe", "/stripe/v1/charges/x"])
def test_strip_prefix_must_be_leading_segments_of_the_path(prefix: str) -> None:
    issue = only_issue(
        with_routes(f"""\
          - name: stripe
            match: {{method: POST, path: /stripe/v1/charges}}
            strip_prefix: {prefix}
            upstream: https://api.stripe.com
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (23, "routes[0].strip_prefix")
    assert f"{prefix!r} is not a prefix of match.path" in issue.message
    if prefix.startswith("/"):  # well-formed, so compared with this route's path
        assert "match.path '/stripe/v1/charges'" in issue.message


@pytest.mark.parametrize(
    ("host", "expected"),
    [("http://payments.internal", "not a host name"), ("pay.internal:70000", "range")],
)
def test_route_host_must_be_a_bare_host(host: str, expected: str) -> None:
    issue = only_issue(
        with_routes(f"""\
          - name: charge
            match: {{method: POST, host: "{host}", path: /c}}
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (22, "routes[0].match.host")
    assert expected in issue.message


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("v1/charges", "must start with '/'"),
        ("/v1/charges/ch_{id}", "placeholder is a whole segment"),
        ("/v1/{id}/{id}", "appears twice"),
        ("/v1/charges?x=1", "query is not matched"),
    ],
)
def test_route_path_pattern_errors(path: str, expected: str) -> None:
    issue = only_issue(
        with_routes(f"""\
          - name: charge
            match:
              method: POST
              host: pay.internal
              path: "{path}"
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (25, "routes[0].match.path")
    assert expected in issue.message


def test_connect_cannot_be_routed() -> None:
    issue = only_issue(
        with_routes("""\
          - name: tunnel
            match: {method: CONNECT, host: pay.internal, path: /}
            contract: pay
        """)
    )
    assert (issue.line, issue.field) == (22, "routes[0].match.method")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("Bearer ${STRIPE_SECRET_KEY}", "'${STRIPE_SECRET_KEY}'"),
        ("Bearer ${env:}", "'${env:}'"),
        ("Bearer ${env:STRIPE_SECRET_KEY", "'${env:STRIPE_SECRET_KEY'"),
        ("Bearer ${env:9KEY}", "'${env:9KEY}'"),
        ("Bearer ${file:/run/secret}", "'${file:/run/secret}'"),
    ],
)
def test_malformed_env_references_in_inject_headers(value: str, fragment: str) -> None:
    issue = only_issue(
        with_routes(f"""\
          - name: stripe
            match: {{method: POST, path: /stripe/v1/charges}}
            upstream: https://api.stripe.com
            contract: pay
            inject_headers:
              Authorization: "{value}"
        """)
    )
    assert (issue.line, issue.field) == (26, "routes[0].inject_headers.Authorization")
    assert f"malformed reference {fragment}" in issue.message


@pytest.mark.parametrize(
    "header", ["Idempotency-Key", "operation-key", "Host", "Connection"]
)
def test_headers_the_proxy_owns_cannot_be_injected(header: str) -> None:
    issue = only_issue(
        with_routes(f"""\
          - name: stripe
            match: {{method: POST, path: /stripe/v1/charges}}
            upstream: https://api.stripe.com
            contract: pay
            inject_headers: {{{header}: x}}
        """)
    )
    assert (issue.line, issue.field) == (25, f"routes[0].inject_headers.{header}")
    assert "cannot be injected" in issue.message


def test_env_references_lists_names() -> None:
    assert env_references("${env:A}:${env:B_2} $literal") == ("A", "B_2")


# --- resolving injected headers ---

STRIPE = """\
  - name: stripe
    match: {method: POST, path: /stripe/v1/charges}
    upstream: https://api.stripe.com
    contract: pay
    inject_headers:
      Authorization: "Bearer ${env:KEY}"
      X-Account: "${env:ACCT}-${env:KEY}"
  - name: plain
    match: {method: POST, path: /plain}
    upstream: https://plain.example
    contract: email
"""


def test_resolve_inject_headers_substitutes_the_environment() -> None:
    config = parse(with_routes(STRIPE))
    environ = {"KEY": "sk_test", "ACCT": "acct_1"}
    by_route = resolve_inject_headers(config, environ)
    assert by_route["stripe"] == {
        "Authorization": "Bearer sk_test",
        "X-Account": "acct_1-sk_test",
    }
    assert by_route["plain"] == {}
    assert (
        resolve_inject_headers(config.routes[0], environ)["Authorization"]
        == "Bearer sk_test"
    )
    assert config.routes[0].inject_headers["Authorization"] == "Bearer ${env:KEY}"


def test_resolve_inject_headers_names_route_header_and_every_missing_variable() -> None:
    config = parse(with_routes(STRIPE))
    with pytest.raises(ConfigError) as caught:
        resolve_inject_headers(config, {"ACCT": ""})
    found = caught.value.issues
    assert [(issue.file, issue.line) for issue in found] == [("r.yaml", 21)] * 3
    messages = {(issue.field, issue.message.split(";")[0]) for issue in found}
    assert messages == {
        (
            "routes[stripe].inject_headers.Authorization",
            "environment variable KEY is not set",
        ),
        ("routes[stripe].inject_headers.X-Account", "environment variable ACCT is empty"),
        (
            "routes[stripe].inject_headers.X-Account",
            "environment variable KEY is not set",
        ),
    }


def test_resolve_inject_headers_refuses_line_breaks_in_values() -> None:
    config = parse(with_routes(STRIPE))
    with pytest.raises(ConfigError, match="KEY contains a line break"):
        resolve_inject_headers(config.routes[0], {"KEY": "a\r\nEvil: 1", "ACCT": "x"})
