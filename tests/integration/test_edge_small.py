"""Smaller edge defects: tenant names that can never log in, ``100 Continue`` before a
413, credentials in malformed-request logs, and one ERROR line per request in an outage.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from effect_broker.proxy import edge
from effect_broker.ratelimited_log import RateLimitedLog
from tests.integration.harness import (
    PROBLEMS,
    Broker,
    address,
    ledger_rows,
    request,
    running_broker,
)


@pytest.mark.parametrize("tenant", ["al:ice", ":x", "x:"])
async def test_tenants_add_refuses_a_name_basic_auth_cannot_carry(
    database_url: str, tenant: str
) -> None:
    _register()
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["tenants", "add", tenant, "--database-url", database_url],
    )

    assert result.exit_code != 0, result.output
    assert "ebk_" not in result.output
    assert "colon" in result.output
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetch("SELECT tenant_id FROM tenants") == []
    finally:
        await conn.close()


async def test_an_oversized_body_gets_413_before_any_100_continue(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, max_request_bytes=1024) as broker:
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            writer.write(
                b"POST /payments/v1/charges HTTP/1.1\r\nHost: sidecar\r\n"
                b"Operation-Key: big\r\nContent-Type: application/json\r\n"
                b"Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n"
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        finally:
            writer.close()

    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"problem+json" in head
    assert await ledger_rows(database_url) == []


async def test_a_small_body_still_gets_100_continue(broker: Broker) -> None:
    body = json.dumps({"amount": 5, "currency": "usd", "order_id": "c-1"}).encode()
    reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
    try:
        writer.write(
            b"POST /payments/v1/charges HTTP/1.1\r\nHost: sidecar\r\n"
            b"Operation-Key: c-1\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(body)
        final = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()

    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert final.startswith(b"HTTP/1.1 201")


SECRET = "Bearer sk_live_do_not_log_me"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            b"POST /payments/v1/charges HTTP/1.1\r\nHost: sidecar\r\n"
            b"Authorization: " + SECRET.encode() + b"\x01\r\n\r\n",
            id="control-byte-in-header",
        ),
        pytest.param(
            b"POST /payments/v1/charges HTTP/1.1\r\nHost: sidecar\r\n"
            b"Authorization: " + SECRET.encode() + b"\r\nBad Header: x\r\n\r\n",
            id="space-in-header-name",
        ),
        pytest.param(
            b"POST /payments/v1/charges HTTP/1.1\r\nHost: sidecar\r\n"
            b"Authorization: " + SECRET.encode() + b"\r\n"
            b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
            id="two-lengths",
        ),
    ],
)
async def test_a_malformed_request_is_a_problem_and_its_header_values_are_not_logged(
    broker: Broker,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
) -> None:
    # a fresh rate limit, so this case's line is not held back by an earlier case's
    monkeypatch.setattr(edge, "quiet", RateLimitedLog(edge.log))
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
    try:
        writer.write(data)
        answer = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()

    logged = caplog.text + "".join(
        str(record.exc_info[1]) for record in caplog.records if record.exc_info
    )
    assert "sk_live" not in logged
    assert "malformed" in logged
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0], answer
    assert json.loads(body)["type"] == PROBLEMS + "malformed-request"
    assert b"sk_live" not in body


async def test_a_database_outage_logs_one_error_line_not_one_per_request(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_broker(database_url, tmp_path) as broker:
        await broker.state.store.close()  # the ledger is gone from here on
        caplog.set_level(logging.INFO)

        answers = [
            await request(
                "POST",
                f"{broker.proxy_url}/payments/v1/charges",
                headers={"Content-Type": "application/json", "Operation-Key": f"o-{i}"},
                data=json.dumps({"amount": 1, "currency": "usd", "order_id": f"o-{i}"}),
            )
            for i in range(20)
        ]

    assert {answer.status for answer in answers} == {503}
    assert {answer.problem["type"] for answer in answers} == {
        PROBLEMS + "store-unavailable"
    }
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert broker.charges() == []
