"""A failure inside the proxy never burns an operation key.

The target's certificate failing the proxy's own trust (before
``EFFECT_BROKER_UPSTREAM_CA_FILE`` was set) says nothing about the target: every retry
with the same key is tried again under the configuration of the moment, answered with
the same ``upstream-tls`` problem however often it happens, never with a replayed
"gave up" receipt, and the history keeps the reason. Once the proxy trusts the target,
the same key goes through.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg

from effect_broker.config.contracts import DEFAULT_RETRY_LIMIT
from effect_broker.crypto import MasterKey
from tests.integration.harness import PROBLEMS, Broker, request, running_broker
from tests.integration.tls_support import (
    CHARGE,
    ChargeTarget,
    TlsWorld,
    routes,
    serve_tls,
)


@asynccontextmanager
async def proxy_for(
    database_url: str, tmp_path: Path, untrusted_port: int, **settings: Any
) -> AsyncIterator[Broker]:
    """A proxy whose ``untrusted`` route goes to ``untrusted_port`` over TLS, trusting
    only its own test CA unless ``upstream_ca_file`` says otherwise."""
    world = TlsWorld(tmp_path)
    async with serve_tls(ChargeTarget().handle, world.server_context()) as port:
        text = routes(port).replace("{untrusted}", str(untrusted_port))
        options = {**world.settings(), **settings}
        async with running_broker(
            database_url, tmp_path, routes=lambda _: text, **options
        ) as broker:
            yield broker


async def charge(
    proxy_url: str, key: str
) -> tuple[int, dict[str, str], dict[str, object]]:
    answer = await request(
        "POST",
        "http://untrusted.test/v1/charges",
        proxy=proxy_url,
        headers={"Operation-Key": key, "Content-Type": "application/json"},
        data=CHARGE,
    )
    return answer.status, answer.headers, answer.json


async def test_an_untrusted_upstream_certificate_never_burns_the_key(
    database_url: str, tmp_path: Path
) -> None:
    stranger = TlsWorld(tmp_path / "stranger")
    target = ChargeTarget()
    master_key = MasterKey.generate().to_base64()  # one ledger, two proxy runs
    async with serve_tls(target.handle, stranger.server_context()) as port:
        async with proxy_for(
            database_url, tmp_path / "before", port, master_key=master_key
        ) as broker:
            answers = [
                await charge(broker.proxy_url, "order-7:charge")
                for _ in range(DEFAULT_RETRY_LIMIT + 2)
            ]
        # The operator trusts the target's CA and restarts the proxy.
        async with proxy_for(
            database_url,
            tmp_path / "after",
            port,
            upstream_ca_file=stranger.target_ca_file,
            master_key=master_key,
        ) as broker:
            fixed = await charge(broker.proxy_url, "order-7:charge")

    for status, headers, problem in answers:
        assert status == 502, problem
        assert headers["Content-Type"].startswith("application/problem+json")
        assert problem["type"] == PROBLEMS + "upstream-tls"
        assert "does not use up the effect's retries" in str(problem["detail"])
        assert headers["Effect-Status"] == "retryable"
    status, headers, body = fixed
    assert status == 200, body
    assert headers["Effect-Status"] == "succeeded"
    assert len(target.seen) == 1  # sent exactly once: when the proxy trusted it
    conn = await asyncpg.connect(database_url)
    try:
        events = await conn.fetch(
            "SELECT kind, details FROM effect_events ORDER BY effect_id, seq"
        )
    finally:
        await conn.close()
    not_sent = [e for e in events if e["kind"] == "not_sent"]
    assert len(not_sent) == DEFAULT_RETRY_LIMIT + 2
    for event in not_sent:
        details = json.loads(event["details"])
        assert details["cause"] == "upstream_tls"
        assert details["counts_against_retry_limit"] is False
        assert "certificate" in details["reason"]
