"""Limits of what the ledger keeps, and of what it claims.

A response larger than ``max_receipt_bytes`` is streamed whole to the client that caused
it, the effect still counts as succeeded, and a replay gives back status and headers
with ``Effect-Receipt-Truncated: true`` and an empty body (the documented behaviour: the
receipt never pretends to hold bytes it does not have). A method that no route claims is
not recorded, even on a path a route matches for another method.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from effect_broker.server import start_site
from tests.integration.harness import Broker, running_broker

PROBLEMS = "https://effect-broker.dev/problems/"
CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-1"}
BIG_BODY = (bytes(range(256)) * 20)[:5000]  # every byte value, 5000 bytes


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def problem(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.body)
        return document


async def request(
    method: str,
    url: str,
    *,
    key: str | None = "order-1:charge",
    proxy: str | None = None,
    body: object = CHARGE,
) -> Answer:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Operation-Key"] = key
    data = json.dumps(body) if method == "POST" else None
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers, data=data, proxy=proxy) as response,
    ):
        return Answer(response.status, dict(response.headers), await response.read())


async def ledger_rows(database_url: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch("SELECT status, attempts FROM effects")
    finally:
        await conn.close()


# --------------------------------------------------------------------- large receipts


@dataclass
class BigUpstream:
    """Answers every request with a 5000-byte body and a header worth keeping."""

    url: str = ""
    calls: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.calls.append(request.method)
        await request.read()
        return web.Response(
            status=201,
            body=BIG_BODY,
            content_type="application/octet-stream",
            headers={"X-Charge-Id": "ch_big"},
        )


@asynccontextmanager
async def big_upstream() -> AsyncIterator[BigUpstream]:
    upstream = BigUpstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    async with AsyncExitStack() as stack:
        host, port = await start_site(stack, app, "127.0.0.1:0")
        upstream.url = f"http://{host}:{port}"
        yield upstream


BIG_ROUTES = """\
version: 1
contracts:
  - name: reports.create
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
routes:
  - name: reports
    match: {{method: POST, path: /reports/v1/charges}}
    strip_prefix: /reports
    upstream: {upstream}
    contract: reports.create
"""


async def test_a_response_over_max_receipt_bytes_is_streamed_then_replayed_truncated(
    database_url: str, tmp_path: Path
) -> None:
    assert len(BIG_BODY) == 5000
    async with (
        big_upstream() as upstream,
        running_broker(
            database_url,
            tmp_path,
            max_receipt_bytes=1000,
            routes=lambda _: BIG_ROUTES.format(upstream=upstream.url),
        ) as broker,
    ):
        url = f"{broker.proxy_url}/reports/v1/charges"

        first = await request("POST", url)
        replay = await request("POST", url)

        assert first.status == 201
        assert first.body == BIG_BODY
        assert first.headers["X-Charge-Id"] == "ch_big"
        assert first.headers["Effect-Status"] == "succeeded"
        assert "Effect-Receipt-Truncated" not in first.headers
        [effect] = await ledger_rows(database_url)
        assert (effect["status"], effect["attempts"]) == ("succeeded", 1)

        assert replay.status == 201
        assert replay.body == b""
        assert replay.headers["Effect-Receipt-Truncated"] == "true"
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert replay.headers["X-Charge-Id"] == "ch_big"
        assert replay.headers["Content-Type"] == "application/octet-stream"
        assert replay.headers["Effect-Id"] == first.headers["Effect-Id"]
        assert upstream.calls == ["POST"]


async def test_a_response_of_exactly_max_receipt_bytes_is_kept_whole(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        big_upstream() as upstream,
        running_broker(
            database_url,
            tmp_path,
            max_receipt_bytes=5000,
            routes=lambda _: BIG_ROUTES.format(upstream=upstream.url),
        ) as broker,
    ):
        url = f"{broker.proxy_url}/reports/v1/charges"

        first = await request("POST", url)
        replay = await request("POST", url)

        assert first.body == replay.body == BIG_BODY
        assert "Effect-Receipt-Truncated" not in replay.headers
        assert upstream.calls == ["POST"]


# --------------------------------------------------------------------- unclaimed methods


async def test_a_get_on_a_reverse_route_path_is_not_recorded(
    broker: Broker, database_url: str
) -> None:
    answer = await request("GET", f"{broker.proxy_url}/payments/v1/charges")

    assert answer.status == 404
    assert answer.problem["type"] == PROBLEMS + "route-not-found"
    assert "Effect-Id" not in answer.headers
    assert await ledger_rows(database_url) == []
    assert broker.charges() == []


async def test_a_get_on_a_forward_route_path_is_passed_through_unrecorded(
    broker: Broker, database_url: str
) -> None:
    """The GET goes to payments.internal itself, which does not resolve here: 502."""
    answer = await request(
        "GET", "http://payments.internal/v1/charges", proxy=broker.proxy_url
    )

    assert answer.status == 502
    assert answer.problem["type"] == PROBLEMS + "upstream-unreachable"
    assert "Effect-Id" not in answer.headers
    assert await ledger_rows(database_url) == []
    assert broker.charges() == []
