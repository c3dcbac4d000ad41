"""Hostile or broken input on the proxy port: refused clearly, recorded nowhere.

Every case asserts a clear 4xx, no row in the ledger, no charge at the target, and that
the proxy still serves a normal request afterwards. It also covers traffic the proxy
must not record or must refuse: unmatched requests pass through untouched (or, in
strict mode, unmatched mutating ones are refused), and CONNECT to a host with mutating
routes is refused, because the ledger cannot see inside a tunnel.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from yarl import URL

from effect_broker.proxy import app as proxy_app
from effect_broker.ratelimited_log import RateLimitedLog
from tests.integration.harness import (
    PROBLEM_JSON,
    PROBLEMS,
    Broker,
    address,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)

CHARGE = {"amount": 1000, "currency": "usd", "order_id": "order-1"}


async def assert_nothing_happened_and_still_serving(
    broker: Broker, database_url: str
) -> None:
    """Nothing recorded, nothing charged, and a normal request still goes through."""
    assert await ledger_rows(database_url) == []
    assert broker.charges() == []
    normal = await request(
        "POST",
        f"{broker.proxy_url}/payments/v1/charges",
        headers={"Content-Type": "application/json", "Operation-Key": "normal"},
        data=json.dumps({**CHARGE, "order_id": "normal"}),
    )
    assert normal.status == 201, normal
    assert len(broker.charges("normal")) == 1
    assert len(await ledger_rows(database_url)) == 1


# --------------------------------------------------------------------- raw sockets


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


async def read_answer(reader: asyncio.StreamReader) -> RawAnswer:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").strip().split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, value in (line.split(":", 1) for line in lines)
    }
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return RawAnswer(int(status_line.split()[1]), headers, body)


async def raw_exchange(url: str, data: bytes) -> RawAnswer:
    """Write ``data`` as is on a fresh connection and read one answer."""
    host, port = address(url)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(10):
            writer.write(data)
            await writer.drain()
            return await read_answer(reader)
    finally:
        writer.close()


# --------------------------------------------------------------------- malformed HTTP


async def test_a_garbage_request_line_is_refused(
    broker: Broker, database_url: str
) -> None:
    answer = await raw_exchange(broker.proxy_url, b"\x00\x01GARBAGE \xff\r\n\r\n")

    assert answer.status == 400
    await assert_nothing_happened_and_still_serving(broker, database_url)


async def test_a_200_kb_header_is_refused(broker: Broker, database_url: str) -> None:
    body = json.dumps(CHARGE).encode()
    data = (
        b"POST /payments/v1/charges HTTP/1.1\r\n"
        b"Host: sidecar\r\n"
        b"Operation-Key: huge\r\n"
        b"Content-Type: application/json\r\n"
        b"X-Huge: " + b"a" * 200_000 + b"\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )

    answer = await raw_exchange(broker.proxy_url, data)

    assert answer.status in (400, 431), answer
    await assert_nothing_happened_and_still_serving(broker, database_url)


async def test_a_client_that_disconnects_mid_body_leaves_nothing(
    broker: Broker, database_url: str
) -> None:
    host, port = address(broker.proxy_url)
    _, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /payments/v1/charges HTTP/1.1\r\n"
        b"Host: sidecar\r\n"
        b"Operation-Key: cut-short\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n"
        b'{"a":1234}'  # 10 bytes of valid JSON: taken as the whole body, it would pass
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    await assert_nothing_happened_and_still_serving(broker, database_url)


# --------------------------------------------------------------------- bodies


async def test_a_body_over_the_limit_is_413(database_url: str, tmp_path: Path) -> None:
    async with running_broker(database_url, tmp_path, max_request_bytes=1024) as broker:
        padded = json.dumps({**CHARGE, "note": "x" * 2000}).encode()

        answer = await request(
            "POST",
            f"{broker.proxy_url}/payments/v1/charges",
            headers={"Content-Type": "application/json", "Operation-Key": "big"},
            data=padded,
        )

        assert answer.status == 413
        assert answer.problem["type"] == PROBLEMS + "body-too-large"
        await assert_nothing_happened_and_still_serving(broker, database_url)


async def test_a_chunked_body_over_the_limit_is_413(
    database_url: str, tmp_path: Path
) -> None:
    """No Content-Length to trust: the limit holds while the body streams in."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b" " * 512

    async with running_broker(database_url, tmp_path, max_request_bytes=1024) as broker:
        answer = await request(
            "POST",
            f"{broker.proxy_url}/payments/v1/charges",
            headers={"Content-Type": "application/json", "Operation-Key": "big"},
            data=chunks(),
        )

        assert answer.status == 413
        assert answer.problem["type"] == PROBLEMS + "body-too-large"
        await assert_nothing_happened_and_still_serving(broker, database_url)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"amount": 1000, "currency": "usd",', id="invalid-json"),
        pytest.param(
            b'{"amount": NaN, "currency": "usd", "order_id": "order-1"}', id="nan"
        ),
        pytest.param(
            b'{"amount": 1000, "amount": 1, "currency": "usd", "order_id": "order-1"}',
            id="duplicate-keys",
        ),
        pytest.param(
            b'{"amount": 1000, "currency": "usd", "order_id": "order-\xff\xfe"}',
            id="invalid-utf8",
        ),
    ],
)
async def test_an_uncanonicalizable_json_body_is_refused(
    broker: Broker, database_url: str, body: bytes
) -> None:
    answer = await request(
        "POST",
        f"{broker.proxy_url}/payments/v1/charges",
        headers={"Content-Type": "application/json", "Operation-Key": "bad-body"},
        data=body,
    )

    assert answer.status == 400
    assert answer.problem["type"] == PROBLEMS + "invalid-body"
    await assert_nothing_happened_and_still_serving(broker, database_url)


# --------------------------------------------------------------------- unmatched traffic


@dataclass
class Echo:
    """A plain upstream no route claims; records what it received."""

    url: str = ""
    received: list[tuple[str, str, list[tuple[str, str]], bytes]] = field(
        default_factory=list
    )

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(
            (
                request.method,
                request.raw_path,
                list(request.headers.items()),
                await request.read(),
            )
        )
        return web.Response(
            status=200, body=b"plain answer", headers={"X-Echo": "untouched"}
        )


@asynccontextmanager
async def echo_upstream() -> AsyncIterator[Echo]:
    echo = Echo()
    async with serve_handler(echo.handle) as url:
        echo.url = url
        yield echo


async def test_an_unmatched_get_passes_through_untouched_and_unrecorded(
    broker: Broker, database_url: str
) -> None:
    async with echo_upstream() as echo:
        answer = await request(
            "GET",
            URL(f"{echo.url}/status?verbose=1&a=%2F", encoded=True),
            proxy=broker.proxy_url,
            headers={"X-Client": "agent"},
        )

        assert (answer.status, answer.body) == (200, b"plain answer")
        assert answer.headers["X-Echo"] == "untouched"
        assert "Effect-Id" not in answer.headers
        [(method, raw_path, headers, _)] = echo.received
        assert (method, raw_path) == ("GET", "/status?verbose=1&a=%2F")
        assert ("X-Client", "agent") in headers
        await assert_nothing_happened_and_still_serving(broker, database_url)


async def test_an_operation_key_on_an_unmatched_request_is_said_to_be_unrecorded(
    broker: Broker,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client meant it to be recorded: the answer and the log say it was not.

    The limiter is module-wide and keyed by cause: a fresh one, as a new process has,
    so another test's unrecorded request within the hour cannot hide this line."""
    monkeypatch.setattr(proxy_app, "unrecorded_log", RateLimitedLog(proxy_app.log))
    async with echo_upstream() as echo:
        answers = [
            await request(
                "POST",
                f"{echo.url}/v1/unrouted",
                proxy=broker.proxy_url,
                headers={"Operation-Key": f"order-{n}:charge"},
                data=b"{}",
            )
            for n in range(2)
        ]

    assert [answer.headers["Effect-Status"] for answer in answers] == ["unrecorded"] * 2
    assert len(echo.received) == 2
    warnings = [r for r in caplog.records if "passed through unrecorded" in r.message]
    assert len(warnings) == 1  # once per host, not once per request
    await assert_nothing_happened_and_still_serving(broker, database_url)


async def test_strict_mode_refuses_an_unmatched_post_but_passes_a_get(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        echo_upstream() as echo,
        running_broker(database_url, tmp_path, unmatched="reject-mutating") as broker,
    ):
        refused = await request(
            "POST",
            f"{echo.url}/v1/anything",
            proxy=broker.proxy_url,
            headers={"Content-Type": "application/json", "Operation-Key": "k"},
            data=json.dumps(CHARGE),
        )
        passed = await request("GET", f"{echo.url}/v1/anything", proxy=broker.proxy_url)

        assert refused.status == 403
        assert refused.problem["type"] == PROBLEMS + "route-refused"
        assert passed.status == 200
        assert [(method, path) for method, path, _, _ in echo.received] == [
            ("GET", "/v1/anything")
        ]
        await assert_nothing_happened_and_still_serving(broker, database_url)


@pytest.mark.parametrize("authority", ["payments.internal:443", "PAYMENTS.internal:8443"])
async def test_connect_to_a_host_with_routes_is_refused_with_an_explanation(
    broker: Broker, database_url: str, authority: str
) -> None:
    answer = await raw_exchange(
        broker.proxy_url,
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode(),
    )

    assert answer.status == 403
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    problem = json.loads(answer.body)
    assert problem["type"] == PROBLEMS + "route-refused"
    assert "ledger" in problem["detail"]
    assert "tunnel" in problem["detail"]
    await assert_nothing_happened_and_still_serving(broker, database_url)


PORTED_ROUTES = """\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
routes:
  - name: ported
    match: {{method: POST, host: "{authority}", path: /v1/charges}}
    upstream: {upstream}
    contract: payments.charge
"""


async def test_a_forward_route_on_a_non_default_port_records_the_effect(
    database_url: str, tmp_path: Path
) -> None:
    async with echo_upstream() as echo:
        authority = URL(echo.url).raw_authority
        routes = PORTED_ROUTES.format(authority=authority, upstream=echo.url)
        async with running_broker(
            database_url, tmp_path, routes=lambda _: routes
        ) as broker:
            answer = await request(
                "POST",
                f"{echo.url}/v1/charges",
                proxy=broker.proxy_url,
                headers={"Content-Type": "application/json", "Operation-Key": "port"},
                data=json.dumps(CHARGE),
            )

            [(_, _, headers, _)] = echo.received
            assert "Operation-Key" not in dict(headers)
            assert "Effect-Id" in answer.headers
            assert len(await ledger_rows(database_url)) == 1
