"""Time to first byte of a recorded SSE stream: direct, through effect-broker as a new
effect, and as a replay of a recorded one, in one run.

The upstream answers ``POST /pay/stream`` with 20 SSE events 5 ms apart, the first at
once (``bench.upstream``); the route records it as an effect (``bench/routes.yaml``).
Each round sends one request of each kind, interleaved so the machine's drift hits all
three alike, each on a keep-alive session of its own; time to first byte is from just
before the request to the first body bytes read, and every stream is read to its end
before the next request. The medians are compared with the direct one: the goal is a
recorded stream's first byte within 3 ms of the direct one's.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from bench import ledger
from bench.procs import python_module, start_server
from bench.serving import READY_PATTERN
from bench.upstream import EVENT_GAP, STREAM_EVENTS

STREAM_PATH = "/pay/stream"
KINDS = ("direct", "new", "replay")


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


async def _measure(upstream: str, proxy: str, samples: int) -> dict[str, Any]:
    url = upstream.rstrip("/") + STREAM_PATH
    replay_key = f"stream-replay-{uuid.uuid4()}"
    timings: dict[str, list[float]] = {kind: [] for kind in KINDS}
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
    p50 = {kind: statistics.median(values) * 1000 for kind, values in timings.items()}
    return {
        "samples": samples,
        "events": STREAM_EVENTS,
        "event_gap_ms": EVENT_GAP * 1000,
        "ttfb_p50_ms": p50,
        "new_vs_direct": p50["new"] / p50["direct"],
        "replay_vs_direct": p50["replay"] / p50["direct"],
        "added_ms": p50["new"] - p50["direct"],
    }


def measure(
    postgres: ledger.PostgresInfo,
    workdir: Path,
    samples: int,
    broker_command: list[str] | None = None,
) -> dict[str, Any]:
    """The whole section, on an upstream, a ledger and an effect-broker of its own."""
    upstream = start_server(
        "stream upstream",
        python_module("bench.upstream"),
        log=workdir / "stream-upstream.log",
        ready=re.compile(READY_PATTERN),
    )
    try:
        with ledger.bench_database(postgres) as dsn:
            routes = ledger.write_routes(
                upstream.match.group(1), workdir / "stream-routes.yaml"
            )
            broker = ledger.start_broker(
                dsn, routes, workdir / "effect-broker-streams.log", broker_command
            )
            try:
                return asyncio.run(
                    _measure(upstream.match.group(1), broker.proxy_url, samples)
                )
            finally:
                broker.server.stop()
    finally:
        upstream.stop()
