"""Hostile bytes in an operation key or a path: a 4xx, nothing forwarded, nothing kept.

Each case is sent on a raw socket (most cannot be produced by a well-behaved client) to
a route whose upstream records every request it receives. A 500 here once meant that the
bytes reached code that could not encode them: the tracing digest, or PostgreSQL's jsonb
for the request preview.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.harness import (
    PROBLEM_JSON,
    Broker,
    address,
    ledger_rows,
    running_broker,
    serve_handler,
)

ROUTES = """\
version: 1
contracts:
  - name: items.create
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
routes:
  - name: items
    match: {{method: POST, path: "/rec/v1/items/{{id}}"}}
    strip_prefix: /rec
    upstream: {upstream}
    contract: items.create
"""

BODY = b'{"name": "widget"}'


def raw_post(path: bytes = b"/rec/v1/items/1", key: bytes = b"item-1") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: sidecar\r\n"
        b"Operation-Key: " + key + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n" + BODY
    )


async def exchange(url: str, data: bytes) -> tuple[int, bytes, bytes]:
    """Status, head and body of the one answer to ``data`` on a fresh connection."""
    host, port = address(url)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(10):
            writer.write(data)
            await writer.drain()
            answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


@asynccontextmanager
async def recording_broker(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, list[str]]]:
    received: list[str] = []

    async def record(request: web.Request) -> web.Response:
        received.append(request.raw_path)
        await request.read()
        return web.json_response({"id": "it_1"}, status=201)

    async with serve_handler(record) as upstream:
        routes = ROUTES.format(upstream=upstream)
        async with running_broker(
            database_url, tmp_path, routes=lambda _: routes
        ) as broker:
            yield broker, received


HOSTILE = [
    pytest.param(raw_post(key=b"order-\xff"), id="key-raw-0xff"),
    pytest.param(raw_post(key=b"order-\xc2\x85"), id="key-U+0085-NEL"),
    pytest.param(raw_post(key=b"order-\xc2\x9f"), id="key-U+009F"),
    pytest.param(raw_post(key=b"order-\xc2\x80"), id="key-U+0080"),
    pytest.param(raw_post(key=b"order\x7f1"), id="key-DEL"),
    pytest.param(raw_post(key=b"order\t1"), id="key-tab"),
    pytest.param(raw_post(key=b"order-\xed\xa0\x80"), id="key-encoded-surrogate"),
    pytest.param(raw_post(key=b"a" * 256), id="key-too-long"),
    pytest.param(raw_post(path=b"/rec/v1/items/a%00b"), id="path-%00"),
    pytest.param(raw_post(path=b"/rec/v1/items/a\xffb"), id="path-raw-0xff"),
]


@pytest.mark.parametrize("data", HOSTILE)
async def test_hostile_input_is_a_4xx_problem_with_nothing_forwarded_or_recorded(
    database_url: str, tmp_path: Path, data: bytes
) -> None:
    async with recording_broker(database_url, tmp_path) as (broker, received):
        status, head, body = await exchange(broker.proxy_url, data)

        assert 400 <= status < 500, (status, head, body)
        assert PROBLEM_JSON.encode() in head.lower(), head
        problem = json.loads(body)
        assert problem["status"] == status
        assert "Traceback" not in problem["detail"]
        assert received == []
        assert await ledger_rows(database_url) == []

        ok_status, _, _ = await exchange(broker.proxy_url, raw_post(key=b"fine-1"))
        assert ok_status == 201
        assert received == ["/v1/items/1"]
        assert len(await ledger_rows(database_url)) == 1
