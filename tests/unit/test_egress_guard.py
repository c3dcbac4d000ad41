"""The egress guard remembers hosts that passed, and forgets them when the policy grows.

``protect`` adds the proxy's own ports once they are bound; a host:port that passed
before must be refused after it, however often it was checked in between.
"""

from __future__ import annotations

import pytest

from effect_broker.config.egress import EgressPolicy
from effect_broker.errors import EgressRefused
from effect_broker.proxy.egress import PASSED_CACHE_SIZE, EgressGuard


async def test_a_passed_host_is_refused_once_protect_names_it() -> None:
    guard = EgressGuard(EgressPolicy(defaults=()))
    assert guard.check("127.0.0.1", 8081).name == "localhost"
    assert guard.check("127.0.0.1", 8081).name == "localhost"  # the remembered answer

    guard.protect(listen=("127.0.0.1", 8080), admin=("127.0.0.1", 8081))

    with pytest.raises(EgressRefused, match="8081"):
        guard.check("127.0.0.1", 8081)
    with pytest.raises(EgressRefused):  # and a refusal is never remembered as a pass
        guard.check("127.0.0.1", 8081)


async def test_the_memory_of_passed_hosts_is_bounded() -> None:
    guard = EgressGuard(EgressPolicy(defaults=()))
    for n in range(PASSED_CACHE_SIZE + 10):
        guard.check(f"host-{n}.example", 443)
    assert len(guard._passed) <= PASSED_CACHE_SIZE
    assert guard.check("HOST-1.example.", 443).name == "host-1.example"
