"""Which Host a request addressed to the proxy itself may carry (pure)."""

from __future__ import annotations

import pytest

from effect_broker.proxy.host_check import HostCheck

CHECK = HostCheck.configured(
    listen="0.0.0.0:8080", allowed="broker.internal, .svc.cluster.local", hostname="pod-1"
)


@pytest.mark.parametrize(
    "host",
    [
        "localhost:8080",
        "LOCALHOST.",
        "app.localhost",
        "127.0.0.1:8080",
        "[::1]:8080",
        "10.1.2.3",
        "pod-1",
        "broker.internal:80",
        "effect-broker.default.svc.cluster.local:8080",
        None,
    ],
)
def test_the_proxys_own_names_pass(host: str | None) -> None:
    assert CHECK.refusal(host) is None


@pytest.mark.parametrize(
    "host", ["evil.example.com", "evil.example.com:8080", "localhost.evil.com", "svc"]
)
def test_other_names_are_refused_with_the_way_to_allow_them(host: str) -> None:
    refusal = CHECK.refusal(host)
    assert refusal is not None and "EFFECT_BROKER_ALLOWED_HOSTS" in refusal


def test_a_star_turns_the_check_off() -> None:
    check = HostCheck.configured(listen="127.0.0.1:8080", allowed="*", hostname="h")
    assert check.refusal("evil.example.com") is None


def test_a_named_listen_host_is_one_of_the_names() -> None:
    check = HostCheck.configured(listen="broker:8080", allowed="", hostname="h")
    assert check.refusal("broker:8080") is None
