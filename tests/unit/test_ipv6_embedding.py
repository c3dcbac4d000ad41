"""IPv4 addresses inside IPv6 ones, and the egress defaults refusing metadata in each."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from effect_broker.config.egress import EgressPolicy, default_rules
from effect_broker.config.hosts import canonical_host, host_of_address
from effect_broker.config.ipv6_embedding import embedded_ipv4

METADATA = IPv4Address("169.254.169.254")

# 169.254.169.254 is a9fe:a9fe; Teredo obscures its client address as 5601:5601.
METADATA_SPELLINGS = [
    pytest.param("::ffff:a9fe:a9fe", id="ipv4-mapped"),
    pytest.param("::ffff:0:a9fe:a9fe", id="ipv4-translated"),
    pytest.param("::a9fe:a9fe", id="ipv4-compatible"),
    pytest.param("64:ff9b::a9fe:a9fe", id="nat64-well-known"),
    pytest.param("64:ff9b:1::a9fe:a9fe", id="nat64-local-use-96"),
    pytest.param("64:ff9b:1:0:a9:fea9:fe00:0", id="nat64-local-use-64"),
    pytest.param("64:ff9b:1:a9fe:a9:fe00::", id="nat64-local-use-48"),
    pytest.param("64:ff9b:1:a9:fe:a9fe::", id="nat64-local-use-56"),
    pytest.param("2002:a9fe:a9fe::", id="6to4"),
    pytest.param("2002:a9fe:a9fe:1::42", id="6to4-subnet-host"),
    pytest.param("2001:0:a9fe:a9fe::1", id="teredo-server"),
    pytest.param("2001:0:4136:e378:8000:63bf:5601:5601", id="teredo-client"),
    pytest.param("2001:db8::5efe:a9fe:a9fe", id="isatap"),
    pytest.param("2001:db8::200:5efe:a9fe:a9fe", id="isatap-global-id"),
]

SIDECAR = EgressPolicy.from_lists([], [], default_rules(listen=["127.0.0.1:8080"]))
GATEWAY = EgressPolicy.from_lists([], [], default_rules(gateway=True))


@pytest.mark.parametrize("spelling", METADATA_SPELLINGS)
def test_each_embedding_yields_the_ipv4_address(spelling: str) -> None:
    assert METADATA in embedded_ipv4(IPv6Address(spelling))


@pytest.mark.parametrize("spelling", METADATA_SPELLINGS)
def test_metadata_is_refused_written_in_any_embedding(spelling: str) -> None:
    found = SIDECAR.refusal(80, canonical_host(f"[{spelling}]"))
    assert found is not None and "metadata" in found


@pytest.mark.parametrize("spelling", METADATA_SPELLINGS)
def test_metadata_is_refused_when_a_name_resolves_to_an_embedding(spelling: str) -> None:
    resolved = host_of_address(ip_address(spelling))
    found = SIDECAR.refusal(80, canonical_host("innocent.example"), resolved)
    assert found is not None and "metadata" in found


@pytest.mark.parametrize(
    "spelling",
    ["64:ff9b::a00:1", "2002:c0a8:101::1", "64:ff9b::7f00:1", "::ffff:0:ac10:1"],
)
def test_a_gateway_refuses_private_ranges_in_an_embedding(spelling: str) -> None:
    assert GATEWAY.refusal(443, canonical_host(f"[{spelling}]")) is not None


@pytest.mark.parametrize(
    "spelling", ["2606:4700:4700::1111", "2a00:1450:4001:82b::200e", "fd00:ec2::1"]
)
def test_ordinary_ipv6_embeds_nothing_and_passes(spelling: str) -> None:
    assert embedded_ipv4(IPv6Address(spelling)) == ()
    assert SIDECAR.refusal(443, canonical_host(f"[{spelling}]")) is None


def test_a_nat64_address_of_a_public_host_passes() -> None:
    """Embedding alone refuses nothing: only what the embedded address is."""
    assert embedded_ipv4(IPv6Address("64:ff9b::5db8:d822")) == (
        IPv4Address("93.184.216.34"),
    )
    assert SIDECAR.refusal(443, canonical_host("[64:ff9b::5db8:d822]")) is None
    assert GATEWAY.refusal(443, canonical_host("[64:ff9b::5db8:d822]")) is None


def test_the_ipv6_metadata_address_is_refused_in_every_spelling() -> None:
    for spelling in ("fd00:ec2::254", "FD00:0EC2:0:0:0:0:0:254", "fd00:ec2::254%eth0"):
        found = SIDECAR.refusal(80, canonical_host(f"[{spelling}]"))
        assert found is not None and "metadata" in found, spelling
