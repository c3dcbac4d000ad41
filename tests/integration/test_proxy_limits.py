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
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from tests.integration.harness import (
    PROBLEMS,
    Answer,
    Broker,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)
from tests.integration.resolvers import Unresolvable
from tests.routes_yaml import one_idempotent_route

CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-1"}
BIG_BODY = (bytes(range(256)) * 20)[:5000]  # every byte value, 5000 bytes


async def send(method: str, url: str, *, proxy: str | None = None) -> Answer:
    """``method`` under the Operation-Key ``order-1:charge``; a POST carries CHARGE."""
    return await request(
        method,
        url,
        proxy=proxy,
        headers={"Content-Type": "application/json", "Operation-Key": "order-1:charge"},
        data=json.dumps(CHARGE) if method == "POST" else None,
    )


# --------------------------------------------------------------------- large receipts


@dataclass
class BigUpstream:
    """Answers every request with a 5000-byte body and a header worth keeping."""

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
async def broker_with_big_upstream(
    database_url: str, tmp_path: Path, *, max_receipt_bytes: int
) -> AsyncIterator[tuple[Broker, BigUpstream]]:
    """A broker whose only route leads to a ``BigUpstream``."""
    upstream = BigUpstream()
    async with serve_handler(upstream.handle) as url:
        routes = one_idempotent_route(
            url,
            timeout="2s",
            prefix="/reports",
            route="reports",
            contract="reports.create",
        )
        async with running_broker(
            database_url,
            tmp_path,
            max_receipt_bytes=max_receipt_bytes,
            routes=lambda _: routes,
        ) as broker:
            yield broker, upstream


async def test_a_response_over_max_receipt_bytes_is_streamed_then_replayed_truncated(
    database_url: str, tmp_path: Path
) -> None:
    assert len(BIG_BODY) == 5000
    async with broker_with_big_upstream(
        database_url, tmp_path, max_receipt_bytes=1000
    ) as (broker, upstream):
        url = f"{broker.proxy_url}/reports/v1/charges"

        first = await send("POST", url)
        replay = await send("POST", url)

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
    async with broker_with_big_upstream(
        database_url, tmp_path, max_receipt_bytes=5000
    ) as (broker, upstream):
        url = f"{broker.proxy_url}/reports/v1/charges"

        first = await send("POST", url)
        replay = await send("POST", url)

        assert first.body == replay.body == BIG_BODY
        assert "Effect-Receipt-Truncated" not in replay.headers
        assert upstream.calls == ["POST"]


# --------------------------------------------------------------------- unclaimed methods


async def test_a_get_on_a_reverse_route_path_is_not_recorded(
    broker: Broker, database_url: str
) -> None:
    """It passes through, unrecorded, to the route's upstream (which only takes POST)."""
    answer = await send("GET", f"{broker.proxy_url}/payments/v1/charges")

    assert answer.status == 405
    assert "Effect-Id" not in answer.headers
    assert await ledger_rows(database_url) == []
    assert broker.charges() == []


async def test_a_get_on_a_forward_route_path_is_passed_through_unrecorded(
    broker: Broker, database_url: str
) -> None:
    """The GET goes to payments.internal itself, which the test makes unresolvable
    (whatever this machine's hosts file says): 502."""
    resolver = Unresolvable({"payments.internal"})
    broker.state.egress.resolver = resolver
    answer = await send(
        "GET", "http://payments.internal/v1/charges", proxy=broker.proxy_url
    )

    assert resolver.asked == ["payments.internal"]

    assert answer.status == 502
    assert answer.problem["type"] == PROBLEMS + "upstream-unreachable"
    assert "Effect-Id" not in answer.headers
    assert await ledger_rows(database_url) == []
    assert broker.charges() == []
