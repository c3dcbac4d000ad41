"""Pass-through is unrecorded, but its answers must still be truthful about sending.

A request no route claims is forwarded untouched; the proxy keeps no ledger for it, so
its error answers are all the client has. ``upstream-unreachable`` says nothing was
sent and a retry is safe: that holds for a target that refuses the connection, but not
for one that took the whole request and then dropped the connection without an answer
(it may have acted on it). Both kinds of target run here, side by side, under the real
``effect-broker serve``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from tests.faults.load import PROBLEMS
from tests.faults.scenario import scenario

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

REQUESTS = 20
BODY = b'{"amount": 100, "currency": "usd", "order_id": "passthrough"}'


class Dropper:
    """An upstream that reads each whole request, counts it, and hangs up unanswered:
    the target may have acted on it, and only it knows."""

    def __init__(self) -> None:
        self.received = 0

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            self.received += 1
        finally:
            writer.close()


async def closed_port() -> int:
    """A loopback port nobody listens on: bound, then released."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


async def post_through(proxy_url: str, url: str) -> str:
    """One pass-through POST; its status and problem type, e.g. ``502 upstream-...``."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session,
        session.post(url, data=BODY, proxy=proxy_url) as answer,
    ):
        body = await answer.read()
        kind = ""
        if answer.content_type == "application/problem+json":
            kind = " " + str(json.loads(body)["type"]).removeprefix(PROBLEMS)
        return f"{answer.status}{kind}"


async def test_a_passed_through_request_that_was_sent_is_not_called_unsent(
    database_url: str, tmp_path: Path
) -> None:
    dropper = Dropper()
    server = await asyncio.start_server(dropper.handle, "127.0.0.1", 0)
    try:
        dropping = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/charges"
        refusing = f"http://127.0.0.1:{await closed_port()}/v1/charges"
        async with scenario("pass-through", tmp_path, database_url) as run:
            dropped, refused = await asyncio.gather(
                asyncio.gather(
                    *(post_through(run.proxy.url, dropping) for _ in range(REQUESTS))
                ),
                asyncio.gather(
                    *(post_through(run.proxy.url, refusing) for _ in range(REQUESTS))
                ),
            )
    finally:
        server.close()
        await server.wait_closed()
    print(
        f"\n== pass-through: {REQUESTS} POSTs to a target that hangs up after reading, "
        f"{REQUESTS} to a closed port\n  hung up: {dict(Counter(dropped))} "
        f"(target received {dropper.received})\n  refused: {dict(Counter(refused))}"
    )
    assert refused == ["502 upstream-unreachable"] * REQUESTS
    assert dropper.received == REQUESTS
    assert "502 upstream-unreachable" not in dropped, Counter(dropped)
    assert all(kind.startswith("502 outcome-unknown") for kind in dropped), Counter(
        dropped
    )
