"""Hourly log lines are keyed by their reason, never by a host the client writes.

"Once per host an hour" let a client that varies the host (1,500 hosts) write 1,500
lines and leave 1,500 entries in memory. Now a reason is one line an hour, with a
count of the lines held back, and the limiter's memory holds a handful of causes.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from effect_broker.proxy import app, connect
from effect_broker.ratelimited_log import RateLimitedLog
from tests.integration.harness import ROUTES, address, request, running_broker

HOSTS = 150


def refusing_routes(target: str) -> str:
    text = ROUTES.format(
        target=target,
        timeout="2s",
        key_retention="1h",
        settlement_bound="300ms",
        unmatched="pass",
    )
    return text.replace("  unmatched: pass\n", "  unmatched: pass\n  connect: refuse\n")


async def connect_to(proxy: str, authority: str) -> bytes:
    reader, writer = await asyncio.open_connection(*address(proxy))
    try:
        writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@pytest.fixture
def fresh_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy's hourly limiters as a new process has them (they are module-wide)."""
    monkeypatch.setattr(connect, "refusals", RateLimitedLog(connect.log, 3600.0))
    monkeypatch.setattr(app, "unrecorded_log", RateLimitedLog(app.log, 3600.0))


@pytest.mark.usefixtures("fresh_limiters")
async def test_many_refused_connect_hosts_are_one_line_and_a_count(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effect_broker")
    async with running_broker(database_url, tmp_path, routes=refusing_routes) as broker:
        for n in range(HOSTS):
            answer = await connect_to(broker.proxy_url, f"host-{n}.example:443")
            assert answer.startswith(b"HTTP/1.1 403"), answer
        # A watched host keeps its own line: its reason is the route's, not the name's.
        watched = await connect_to(broker.proxy_url, "PAYMENTS.internal.:443")
        assert watched.startswith(b"HTTP/1.1 403"), watched

    refused = lines(caplog, "refused: proxy.connect is refuse")
    assert len(refused) == 1, refused[:3]
    assert len(lines(caplog, "has routes that record effects")) == 1
    assert len(connect.refusals) <= 2


@pytest.mark.usefixtures("fresh_limiters")
async def test_many_unrecorded_hosts_are_one_line_and_a_count(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effect_broker")
    async with running_broker(database_url, tmp_path) as broker:
        for n in range(HOSTS):
            # Each a different loopback address, on a closed port: refused at once.
            answer = await request(
                "POST",
                f"http://127.0.0.{n + 2}:1/v1/unrouted",
                proxy=broker.proxy_url,
                headers={"Operation-Key": f"k-{n}"},
                data=b"{}",
            )
            assert answer.status == 502, answer

    unrecorded = lines(caplog, "passed through unrecorded")
    assert len(unrecorded) == 1, unrecorded[:3]
    assert len(app.unrecorded_log) == 1
