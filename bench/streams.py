"""Time to first byte of a recorded SSE stream: direct, through effect-broker as a new
effect, and as a replay of a recorded one, in one run.

The upstream answers ``POST /pay/stream`` with 20 SSE events 5 ms apart, the first at
once (``bench.upstream``); the route records it as an effect (``bench/routes.yaml``).
Each round sends one request of each kind, interleaved so the machine's drift hits all
three alike, each on a keep-alive session of its own; time to first byte is from just
before the request to the first body bytes read, and every stream is read to its end
before the next request. The medians are compared with the direct one: the goal is a
recorded stream's first byte within 3 ms of the direct one's. Each round also times one
durable commit of a one-row insert on the bench database, straight from this process:
a new effect's first byte waits for exactly one commit (reserve and start), so the
added time minus that commit is what the proxy itself adds.

Then memory: ``MEMORY_STREAMS`` (``--stream-memory``) recorded streams of 1 MiB each
(``POST /pay/bigstream``, 64 chunks 30 ms apart) run at once under new keys, while
effect-broker's RSS is sampled against the bytes the clients have received so far.
The receipt keeps at most ``EFFECT_BROKER_MAX_RECEIPT_BYTES`` of a body (64 KiB here,
then only a digest), so once every stream is past that, RSS must stay flat however many
more bytes flow: the goal is RSS growth from a quarter of the bytes to all of them
within 10 %. The same streams then run through an effect-broker with the default limit
(10 MiB, so every 1 MiB body is kept for its receipt): the control that shows what
whole bodies in memory look like on this measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench import ledger
from bench.procs import Server, python_module, rss_kib, start_server
from bench.serving import READY_PATTERN
from bench.upstream import BIG_STREAM_BYTES, EVENT_GAP, STREAM_EVENTS

STREAM_PATH = "/pay/stream"
BIG_STREAM_PATH = "/pay/bigstream"
KINDS = ("direct", "new", "replay")
MEMORY_STREAMS = 200
RECEIPT_MAX_BYTES = 64 * 1024
DEFAULT_RECEIPT_MAX_BYTES = 10 * 1024 * 1024  # effect-broker's own default
RSS_EVERY = 0.05  # seconds between RSS samples while the streams run
COMMIT_PROBE = "CREATE TABLE IF NOT EXISTS bench_commit_probe (n int)"


async def _first_byte(
    session: aiohttp.ClientSession, url: str, proxy: str | None, key: str
) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with session.post(
        url, proxy=proxy, headers={"Operation-Key": key}, data=b"{}"
    ) as response:
        first = await response.content.readany()
        ttfb = time.perf_counter() - started
        body = first + await response.read()
        if response.status != 200:
            raise RuntimeError(f"stream bench: {url} answered {response.status}")
    return ttfb, body


async def _commit(conn: asyncpg.Connection) -> float:
    """Seconds one durable commit of a one-row insert takes right now."""
    started = time.perf_counter()
    await conn.execute("INSERT INTO bench_commit_probe VALUES (1)")
    return time.perf_counter() - started


async def _measure(upstream: str, proxy: str, samples: int, dsn: str) -> dict[str, Any]:
    url = upstream.rstrip("/") + STREAM_PATH
    replay_key = f"stream-replay-{uuid.uuid4()}"
    timings: dict[str, list[float]] = {kind: [] for kind in (*KINDS, "commit")}
    conn = await asyncpg.connect(dsn)
    await conn.execute(COMMIT_PROBE)
    async with (
        aiohttp.ClientSession() as direct,
        aiohttp.ClientSession() as new,
        aiohttp.ClientSession() as replay,
    ):
        _, recorded = await _first_byte(replay, url, proxy, replay_key)
        _, expected = await _first_byte(direct, url, None, "direct")
        if recorded != expected:
            raise RuntimeError("stream bench: the recorded stream differs from direct")
        for _ in range(2):  # warm-up: connections open, code paths hot
            await _first_byte(direct, url, None, "direct")
            await _first_byte(new, url, proxy, f"stream-{uuid.uuid4()}")
            await _first_byte(replay, url, proxy, replay_key)
        for _ in range(samples):
            ttfb, _ = await _first_byte(direct, url, None, "direct")
            timings["direct"].append(ttfb)
            ttfb, _ = await _first_byte(new, url, proxy, f"stream-{uuid.uuid4()}")
            timings["new"].append(ttfb)
            ttfb, body = await _first_byte(replay, url, proxy, replay_key)
            timings["replay"].append(ttfb)
            if body != recorded:
                raise RuntimeError("stream bench: a replay differs from the recording")
            timings["commit"].append(await _commit(conn))
    await conn.close()
    p50 = {kind: statistics.median(values) * 1000 for kind, values in timings.items()}
    commit = p50.pop("commit")
    return {
        "samples": samples,
        "events": STREAM_EVENTS,
        "event_gap_ms": EVENT_GAP * 1000,
        "ttfb_p50_ms": p50,
        "new_vs_direct": p50["new"] / p50["direct"],
        "replay_vs_direct": p50["replay"] / p50["direct"],
        "added_ms": p50["new"] - p50["direct"],
        "commit_p50_ms": commit,
        "added_beyond_commit_ms": p50["new"] - p50["direct"] - commit,
    }


async def _memory(
    upstream: str, proxy: str, server: Server, count: int, limit: int
) -> dict[str, Any]:
    """``count`` recorded 1 MiB streams at once, RSS sampled against the bytes
    received so far; each stream read to its end and checked whole."""
    url = upstream.rstrip("/") + BIG_STREAM_PATH
    total = count * BIG_STREAM_BYTES
    received = 0
    samples: list[tuple[int, int]] = []  # (bytes received by then, RSS KiB)
    idle = rss_kib(server.pid)

    async def one(session: aiohttp.ClientSession) -> int:
        nonlocal received
        got = 0
        async with session.post(
            url,
            proxy=proxy,
            headers={"Operation-Key": f"big-{uuid.uuid4()}"},
            data=b"{}",
        ) as response:
            if response.status != 200:
                raise RuntimeError(f"stream bench: {url} answered {response.status}")
            async for chunk in response.content.iter_any():
                got += len(chunk)
                received += len(chunk)
        return got

    async def sample(stop: asyncio.Event) -> None:
        while not stop.is_set():
            samples.append((received, rss_kib(server.pid)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RSS_EVERY)

    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=count)
    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector) as session:
        sampler = asyncio.create_task(sample(stop))
        try:
            lengths = await asyncio.gather(*(one(session) for _ in range(count)))
        finally:
            stop.set()
            await sampler
    took = time.perf_counter() - started
    samples.append((received, rss_kib(server.pid)))  # every byte in: the last sample
    if any(length != BIG_STREAM_BYTES for length in lengths):
        raise RuntimeError("stream bench: a recorded big stream came back short")
    after = rss_kib(server.pid)

    def at(share: float) -> int:
        """RSS when ``share`` of all the bytes had been received (first sample past)."""
        return next(rss for done, rss in samples if done >= share * total)

    quarter = at(0.25)
    peak = max(rss for _, rss in samples)
    return {
        "streams": count,
        "bytes_each": BIG_STREAM_BYTES,
        "receipt_max_bytes": limit,
        "seconds": took,
        "rss_idle_kib": idle,
        "rss_at_kib": {str(share): at(share) for share in (0.25, 0.5, 0.75, 1.0)},
        "rss_peak_kib": peak,
        "rss_after_kib": after,
        "growth_quarter_to_all_pct": (at(1.0) - quarter) / quarter * 100,
        "peak_growth_per_stream_kib": (peak - idle) / count,
        "samples": len(samples),
    }


def measure(
    postgres: ledger.PostgresInfo,
    workdir: Path,
    samples: int,
    broker_command: list[str] | None = None,
    *,
    memory_streams: int = MEMORY_STREAMS,
) -> dict[str, Any]:
    """The whole section, on an upstream, a ledger and an effect-broker of its own."""
    upstream = start_server(
        "stream upstream",
        python_module("bench.upstream"),
        log=workdir / "stream-upstream.log",
        ready=re.compile(READY_PATTERN),
    )
    url = upstream.match.group(1)
    connections = {"EFFECT_BROKER_UPSTREAM_CONNECTIONS": str(2 * max(memory_streams, 1))}
    try:
        with ledger.bench_database(postgres) as dsn:
            routes = ledger.write_routes(url, workdir / "stream-routes.yaml")
            broker = ledger.start_broker(
                dsn,
                routes,
                workdir / "effect-broker-streams.log",
                broker_command,
                # The small SSE answers are kept whole; the 1 MiB ones are not.
                settings={
                    "EFFECT_BROKER_MAX_RECEIPT_BYTES": str(RECEIPT_MAX_BYTES),
                    **connections,
                },
            )
            try:
                found = asyncio.run(_measure(url, broker.proxy_url, samples, dsn))
                if memory_streams > 0:
                    found["memory"] = asyncio.run(
                        _memory(
                            url,
                            broker.proxy_url,
                            broker.server,
                            memory_streams,
                            RECEIPT_MAX_BYTES,
                        )
                    )
            finally:
                broker.server.stop()
            if memory_streams > 0:
                whole = ledger.start_broker(
                    dsn,
                    routes,
                    workdir / "effect-broker-streams-whole.log",
                    broker_command,
                    settings=connections,
                )
                try:
                    found["memory_whole"] = asyncio.run(
                        _memory(
                            url,
                            whole.proxy_url,
                            whole.server,
                            memory_streams,
                            DEFAULT_RECEIPT_MAX_BYTES,
                        )
                    )
                finally:
                    whole.server.stop()
            return found
    finally:
        upstream.stop()
