"""Once an attempt's outcome is unknown, no later attempt can make the effect "never
sent": a resend refused before processing or never sent leaves it unknown, and the
retry limit ends in manual review, not in ``failed_final`` ("it did not happen").
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.integration.harness import ledger_rows, running_broker
from tests.integration.proxy_support import charge, post
from tests.routes_yaml import one_idempotent_route

UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)


async def test_refusals_after_an_unknown_attempt_never_settle_it_as_not_done(
    database_url: str, tmp_path: Path
) -> None:
    seen: list[bytes] = []

    async def target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The first request is taken and never answered (it may have charged); every
        later one is turned away with a 503."""
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        if len(seen) == 1:
            await reader.read()  # hold the connection until the proxy gives up
        else:
            writer.write(UNAVAILABLE)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(target, "127.0.0.1", 0)
    upstream = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with running_broker(
            database_url,
            tmp_path,
            routes=lambda _: one_idempotent_route(
                upstream, timeout="300ms", retry_limit=3
            ),
            reconciler=False,
        ) as broker:
            url = f"{broker.proxy_url}/payments/v1/charges"
            lost = await post(url, key="k-1", body=charge("order-1"))
            assert lost.headers["Effect-Status"] == "outcome_unknown"

            answers = [
                await post(url, key="k-1", body=charge("order-1")) for _ in range(4)
            ]

            statuses = [answer.headers["Effect-Status"] for answer in answers]
            assert "failed_final" not in statuses and "retryable" not in statuses
            assert statuses[-1] == "manual_review", statuses
            [effect] = await ledger_rows(database_url)
            assert (effect["status"], effect["attempts"]) == ("manual_review", 3)
            assert len(seen) == 3
    finally:
        server.close()
