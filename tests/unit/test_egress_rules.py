"""The egress policy's decision: pure, over canonical hosts and resolved addresses."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from effect_broker.config.egress import (
    EgressPolicy,
    default_rules,
    parse_rule,
)
from effect_broker.config.hosts import canonical_host, host_of_address
from effect_broker.config.routes_file import parse_routes
from effect_broker.errors import ConfigError

SIDECAR = EgressPolicy.from_lists(
    [],
    [],
    default_rules(
        listen=["127.0.0.1:8080"],
        admin=["127.0.0.1:8081"],
        ledger=["db.internal:5432"],
    ),
)
GATEWAY = EgressPolicy.from_lists(
    ["evil.example"], ["10.1.2.3", "127.0.0.1:9000"], default_rules(gateway=True)
)


def refusal(policy: EgressPolicy, host: str, port: int, *resolved: str) -> str | None:
    addresses = [host_of_address(ip_address(a)) for a in resolved]
    return policy.refusal(port, canonical_host(host), *addresses)


@pytest.mark.parametrize(
    ("host", "port", "why"),
    [
        ("localhost", 8081, "admin"),
        ("0x7f000001", 8080, "own listen"),
        ("[::1]", 8081, "admin"),
        ("DB.internal.", 5432, "ledger"),
        ("169.254.169.254", 80, "metadata"),
        ("2852039166", 80, "metadata"),
        ("[::ffff:169.254.169.254]", 80, "metadata"),
        ("[fd00:ec2::254]", 80, "metadata"),
        ("[fe80::1]", 80, "link-local"),
    ],
)
def test_the_sidecar_defaults_refuse_its_own_ports_ledger_and_metadata(
    host: str, port: int, why: str
) -> None:
    found = refusal(SIDECAR, host, port)
    assert found is not None and why in found


@pytest.mark.parametrize(
    ("host", "port"),
    [("localhost", 9000), ("db.internal", 5433), ("10.0.0.1", 80), ("example.com", 443)],
)
def test_the_sidecar_passes_everything_else(host: str, port: int) -> None:
    assert refusal(SIDECAR, host, port) is None


def test_a_name_is_refused_by_what_it_resolves_to() -> None:
    found = refusal(SIDECAR, "innocent.example", 80, "93.184.216.34", "169.254.169.254")
    assert found is not None and "resolves to 169.254.169.254" in found
    assert refusal(SIDECAR, "innocent.example", 8081, "127.0.0.5") is not None
    assert refusal(SIDECAR, "innocent.example", 80, "93.184.216.34") is None


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "127.0.0.2",
        "0.0.0.0",
        "10.9.9.9",
        "172.20.0.1",
        "192.168.1.1",
        "[fc00::1]",
        "100.64.0.1",
    ],
)
def test_the_gateway_refuses_internal_hosts(host: str) -> None:
    found = refusal(GATEWAY, host, 80)
    assert found is not None and "EFFECT_BROKER_GATEWAY" in found


def test_allow_opens_defaults_and_deny_always_wins() -> None:
    assert refusal(GATEWAY, "10.1.2.3", 80) is None
    assert refusal(GATEWAY, "localhost", 9000) is None
    assert refusal(GATEWAY, "localhost", 9001) is not None
    assert refusal(GATEWAY, "8.8.8.8", 53) is None
    denied = refusal(GATEWAY, "EVIL.example.", 443)
    assert denied is not None and "proxy.deny" in denied


def test_rules_parse_hosts_ports_and_networks() -> None:
    assert parse_rule("0x7f000001:80", "t").host == "localhost"
    rule = parse_rule("[fd00::/8]:443", "t")
    assert rule.network is not None and rule.port == 443
    assert parse_rule("127.0.0.0/8", "t").matches(canonical_host("localhost"), 1)
    for bad in ("", "10.0.0.0/33", "a b", "h:99999"):
        with pytest.raises(ValueError):
            parse_rule(bad, "t")


def routes_text(proxy: str, match_extra: str = "") -> str:
    return f"""\
version: 1
proxy:
{proxy}
contracts:
  - name: c
    version: "1"
    safety: unsafe
routes:
  - name: r
    match: {{method: POST, path: /x{match_extra}}}
    upstream: http://127.0.0.1:9
    contract: c
"""


def test_routes_yaml_carries_deny_allow_and_aliases() -> None:
    config = parse_routes(
        routes_text('  deny: ["10.0.0.0/8"]\n  allow: [metadata.internal]'),
        source="r.yaml",
    )
    assert config.proxy.deny == ("10.0.0.0/8",)
    assert config.proxy.allow == ("metadata.internal",)
    with_aliases = parse_routes(
        routes_text("  unmatched: pass", ", host: a.internal, aliases: [B.internal.]"),
        source="r.yaml",
    )
    assert with_aliases.routes[0].match.aliases == frozenset({"b.internal"})


@pytest.mark.parametrize(
    ("proxy", "extra", "words"),
    [
        ('  deny: ["10.0.0.0/33"]', "", "not a network"),
        ('  allow: ["h:99999"]', "", "port"),
        ("  unmatched: pass", ", aliases: [b.internal]", "set match.host"),
    ],
)
def test_routes_yaml_refuses_bad_egress_rules_and_hostless_aliases(
    proxy: str, extra: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_routes(routes_text(proxy, extra), source="r.yaml")
