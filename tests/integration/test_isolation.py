"""One slow target cannot starve another, and queueing is never mistaken for a loss.

A route's budget of concurrent requests is its own; a request that finds no free slot
within the queue bound is answered 503 with nothing sent and the effect retryable,
never ``outcome_unknown``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from aiohttp import web

from tests.integration.harness import (
    PROBLEMS,
    ledger_rows,
    running_broker,
    serve_handler,
)
from tests.integration.proxy_support import charge, post
from tests.support import poll

ROUTES = """\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 10s
  - name: email.send
    version: "1"
    safety: unsafe
    timeout: 10s
routes:
  - name: slow
    match: {{method: POST, path: /slow/v1/charges}}
    upstream: {upstream}
    contract: payments.charge
  - name: fast
    match: {{method: POST, path: /fast/v1/send}}
    upstream: {upstream}
    contract: email.send
"""


class GatedUpstream:
    """Answers /fast at once and holds /slow until the gate opens."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seen: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.path)
        if request.path.startswith("/slow"):
            await self.gate.wait()
        return web.json_response({"ok": True}, status=201)

    async def until_seen(self, path: str, count: int, *, within: float = 5.0) -> None:
        await poll(
            lambda: self.seen.count(path) >= count,
            within=within,
            every=0.01,
            what=lambda: f"{path} {count} times; seen {self.seen.count(path)}",
        )


async def test_a_saturated_route_queues_then_refuses_and_other_routes_flow(
    database_url: str, tmp_path: Path
) -> None:
    upstream = GatedUpstream()
    async with (
        serve_handler(upstream.handle) as upstream_url,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: ROUTES.format(upstream=upstream_url),
            upstream_connections=2,
            upstream_queue_timeout=timedelta(milliseconds=200),
        ) as broker,
    ):
        slow = f"{broker.proxy_url}/slow/v1/charges"
        held = [
            asyncio.create_task(post(slow, key=f"held-{n}", body=charge(f"held-{n}")))
            for n in range(2)
        ]
        await upstream.until_seen("/slow/v1/charges", 2)

        refused = await post(slow, key="third", body=charge("third"))
        other = await post(
            f"{broker.proxy_url}/fast/v1/send", key="mail-1", body={"to": "a@b.c"}
        )

        assert refused.status == 503
        assert refused.problem["type"] == PROBLEMS + "upstream-busy"
        assert refused.headers["Effect-Status"] == "retryable"
        assert "Retry-After" in refused.headers
        assert upstream.seen.count("/slow/v1/charges") == 2
        assert (other.status, other.headers["Effect-Status"]) == (201, "succeeded")

        upstream.gate.set()
        assert [answer.status for answer in await asyncio.gather(*held)] == [201, 201]
        retry = await post(slow, key="third", body=charge("third"))
        assert (retry.status, retry.headers["Effect-Status"]) == (201, "succeeded")
        assert retry.headers["Effect-Id"] == refused.headers["Effect-Id"]
        assert upstream.seen.count("/slow/v1/charges") == 3
        statuses = {
            row["operation_key"]: row["status"] for row in await ledger_rows(database_url)
        }
        assert set(statuses.values()) == {"succeeded"}
