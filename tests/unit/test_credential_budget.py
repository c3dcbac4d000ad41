"""CredentialBudget: a token bucket of wrong credentials per peer (pure, fake clock)."""

from __future__ import annotations

import pytest

from effect_broker.credential_budget import CredentialBudget, peer_key


def test_a_peer_may_be_wrong_burst_times_then_waits_for_a_refill() -> None:
    now = [0.0]
    budget = CredentialBudget(burst=3, per_second=0.5, clock=lambda: now[0])

    for _ in range(3):
        assert budget.wait("10.0.0.1") is None
        budget.spend("10.0.0.1")

    assert budget.wait("10.0.0.1") == pytest.approx(2.0)
    assert budget.wait("10.0.0.2") is None  # another peer has its own bucket
    now[0] += 1.0
    assert budget.wait("10.0.0.1") == pytest.approx(1.0)
    now[0] += 1.0
    assert budget.wait("10.0.0.1") is None  # one attempt's worth came back
    budget.spend("10.0.0.1")
    assert budget.wait("10.0.0.1") == pytest.approx(2.0)


def test_a_bucket_never_fills_beyond_its_burst() -> None:
    now = [0.0]
    budget = CredentialBudget(burst=2, per_second=1.0, clock=lambda: now[0])
    budget.spend("p")
    now[0] += 1000.0
    budget.spend("p")
    budget.spend("p")
    assert budget.wait("p") is not None


def test_the_peers_remembered_are_capped() -> None:
    budget = CredentialBudget(burst=1, per_second=0.001, max_peers=100)
    for n in range(1500):
        budget.spend(f"10.0.{n // 256}.{n % 256}")
    assert len(budget) == 100
    assert budget.wait("10.0.5.219") is not None  # the last one seen is kept


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:fffe", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        (None, "unknown"),
        ("", "unknown"),
    ],
)
def test_an_ipv6_client_spends_its_64s_budget(address: str | None, key: str) -> None:
    assert peer_key(address) == key
