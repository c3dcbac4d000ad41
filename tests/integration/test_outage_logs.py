"""A ledger outage is one log line per cause per interval, not a traceback a second.

The ledger is reached through a TCP relay of the test's own, which the test cuts: the
system PostgreSQL is never stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from effect_broker import reconciler
from effect_broker.admin import app as admin_app
from effect_broker.proxy import app as proxy_app
from effect_broker.ratelimited_log import RateLimitedLog
from effect_broker.reconciler import Reconciler
from effect_broker.store import pool_log
from effect_broker.store.pool_log import (
    POOL_LOGGER,
    PoolReconnectFilter,
    quiet_pool_reconnects,
)
from tests.integration.harness import request, running_broker

TOKEN = "outage-admin-token"


class Relay:
    """A TCP relay to the database that can be cut: open connections are closed and
    new ones are closed as soon as they arrive."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self.cut:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def cut_off(self) -> None:
        self.cut = True
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()


@asynccontextmanager
async def relayed(dsn: str) -> AsyncIterator[tuple[str, Relay]]:
    parts = urlsplit(dsn)
    if parts.hostname is None:  # the embedded server: a Unix socket, nothing to relay
        pytest.skip("the ledger listens on a Unix socket here; CI's second run uses TCP")
    relay = Relay(parts.hostname, parts.port or 5432)
    server = await asyncio.start_server(relay._serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    netloc = parts.netloc.rpartition("@")
    userinfo = netloc[0] + netloc[1]
    try:
        yield urlunsplit(parts._replace(netloc=f"{userinfo}127.0.0.1:{port}")), relay
    finally:
        relay.cut_off()
        server.close()


class CountingReconciler(Reconciler):
    """Counts its passes, so the test knows how many failed ones it has seen."""

    passes = 0

    async def run_once(self) -> int:
        self.passes += 1
        return await super().run_once()


@pytest.fixture
def fresh_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every limiter this test counts lines of, as a new process has it: they are
    module-wide, and another test's outage within the interval would hide lines."""
    monkeypatch.setattr(proxy_app, "store_log", RateLimitedLog(proxy_app.log))
    monkeypatch.setattr(reconciler, "quiet", RateLimitedLog(reconciler.log))
    monkeypatch.setattr(admin_app, "quiet", RateLimitedLog(admin_app.log))
    quiet_pool_reconnects()
    for found in logging.getLogger(POOL_LOGGER).filters:
        if isinstance(found, PoolReconnectFilter):
            monkeypatch.setattr(found, "limiter", RateLimitedLog(pool_log.log))


@pytest.mark.usefixtures("fresh_limiters")
async def test_a_ledger_outage_logs_one_line_per_cause_and_no_traceback(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        relayed(database_url) as (dsn, relay),
        running_broker(dsn, tmp_path, admin_token=TOKEN) as broker,
    ):
        counting = CountingReconciler(broker.state.engine, idle_seconds=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(counting.run(stop))
        try:
            relay.cut_off()
            for attempt in range(5):
                answer = await request(
                    "POST",
                    f"{broker.proxy_url}/payments/v1/charges",
                    headers={
                        "Operation-Key": f"outage-{attempt}",
                        "Content-Type": "application/json",
                    },
                    data=b'{"amount": 1, "currency": "usd", "order_id": "o"}',
                )
                assert answer.status == 503, answer
                listed = await request(
                    "GET",
                    f"{broker.admin_url}/v1/effects",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
                assert listed.status == 503, listed
            # Dozens of failed passes, and the pool's own reconnects failing.
            async with asyncio.timeout(15):
                while counting.passes < 40 or not pool_retried(caplog):
                    await asyncio.sleep(0.02)
        finally:
            stop.set()
            await task

    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r for r in loud if r.exc_info] == [], "a traceback above DEBUG"
    assert [r for r in loud if r.name == "asyncpg.pool"] == []
    assert all("\n" not in r.getMessage() for r in loud)
    passes = [r for r in loud if "reconciler pass failed" in r.getMessage()]
    assert len(passes) == 1, [r.getMessage() for r in passes]
    assert "unreachable" in passes[0].getMessage()
    [pool] = pool_lines(caplog, logging.WARNING)
    assert "unreachable" in pool.getMessage()
    assert "Error" in pool.getMessage()  # the cause, in one line
    proxy = [r for r in loud if "ledger unavailable" in r.getMessage()]
    assert len(proxy) == 1
    admin = [r for r in loud if "/v1/effects failed" in r.getMessage()]
    assert len(admin) == 1
    # The whole story stays available at DEBUG.
    assert [r for r in pool_lines(caplog, logging.DEBUG) if r.exc_info]


def pool_retried(caplog: pytest.LogCaptureFixture) -> bool:
    """asyncpg's pool has failed to reconnect at least once (said by it or by us)."""
    return bool(pool_lines(caplog, logging.DEBUG)) or any(
        r.name == "asyncpg.pool" for r in caplog.records
    )


def pool_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    """Records about the ledger pool's failed reconnects at exactly ``level``."""
    return [
        r
        for r in caplog.records
        if r.levelno == level
        and r.name == "effect_broker.store"
        and "reconnect" in r.getMessage()
    ]
