"""Host identity: every spelling a resolver accepts names one host (pure, no DNS)."""

from __future__ import annotations

import socket
from ipaddress import IPv4Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effect_broker.config.hosts import (
    LOOPBACK,
    canonical_host,
    host_key,
    lookup_refusal,
    parse_ipv4,
    route_key,
    split_authority,
)

addresses = st.integers(min_value=0, max_value=2**32 - 1).map(IPv4Address)


def spellings(address: IPv4Address) -> list[str]:
    """Forms inet_aton accepts for ``address``: decimal, hex, octal, short forms."""
    number, parts = int(address), address.packed
    return [
        str(address),
        str(number),
        hex(number),
        ".".join(f"0{p:o}" if p else "0" for p in parts),
        ".".join(hex(p) for p in parts),
        f"{parts[0]}.{int.from_bytes(parts[1:], 'big')}",
        f"{parts[0]}.{parts[1]}.{int.from_bytes(parts[2:], 'big')}",
        f"[::ffff:{address}]",
        f"{address}.".upper(),
    ]


@given(addresses)
def test_every_ipv4_spelling_is_one_host(address: IPv4Address) -> None:
    names = {canonical_host(text).name for text in spellings(address)}
    expected = LOOPBACK if address.is_loopback or int(address) == 0 else str(address)
    assert names == {expected}


@given(addresses)
def test_parse_ipv4_agrees_with_inet_aton(address: IPv4Address) -> None:
    for text in spellings(address)[:7]:
        assert parse_ipv4(text) == IPv4Address(socket.inet_aton(text))


@pytest.mark.parametrize(
    "text", ["256.1.1.1", "1.2.3.4.5", "0x1g", "08.1.1.1", "1..1", "", "1.2.3.256", "a.b"]
)
def test_what_inet_aton_refuses_is_not_an_ipv4(text: str) -> None:
    assert parse_ipv4(text) is None
    with pytest.raises(OSError):
        socket.inet_aton(text)


@pytest.mark.parametrize(
    "text",
    [
        "localhost",
        "LOCALHOST.",
        "app.localhost",
        "127.0.0.1",
        "127.255.0.9",
        "0x7f000001",
        "2130706433",
        "127.1",
        "[::1]",
        "::1",
        "[::ffff:127.0.0.1]",
        "0.0.0.0",
        "[::]",
        "ｌｏｃａｌｈｏｓｔ",  # noqa: RUF001 - full-width letters on purpose
    ],
)
def test_the_loopback_range_and_localhost_are_one_host(text: str) -> None:
    assert canonical_host(text).is_loopback


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Payments.Internal.", "payments.internal"),
        ("[2001:DB8:0::1]", "2001:db8::1"),
        ("[::ffff:169.254.169.254]", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("localhost.example", "localhost.example"),
    ],
)
def test_canonical_names(text: str, name: str) -> None:
    assert canonical_host(text).name == name


def test_route_and_guard_keys() -> None:
    assert route_key("LOCALHOST.:443") == "localhost"
    assert route_key("[::1]:19000") == "localhost:19000"
    assert route_key("[2001:db8::1]:8443") == "[2001:db8::1]:8443"
    assert host_key("[::ffff:127.0.0.1]:5432") == "localhost"


def test_split_authority() -> None:
    assert split_authority("[::1]:80") == ("[::1]", 80)
    assert split_authority("::1") == ("::1", None)
    assert split_authority("h") == ("h", None)
    for bad in ("h:99999", "h:x", "[::1", "[::1]x"):
        with pytest.raises(ValueError):
            split_authority(bad)


@pytest.mark.parametrize(
    "host", ["a..test", ".test", "x" * 64 + ".test", "a" + "é" * 64 + ".test"]
)
def test_a_name_the_resolver_cannot_encode_has_a_lookup_refusal(host: str) -> None:
    refusal = lookup_refusal(host)
    assert refusal is not None
    assert "DNS name" in refusal


@pytest.mark.parametrize(
    "host", ["api.test", "bücher.test", "127.0.0.1", "::1", "fe80::1%eth0", "x.test."]
)
def test_names_and_addresses_a_resolver_takes_have_none(host: str) -> None:
    assert lookup_refusal(host) is None
