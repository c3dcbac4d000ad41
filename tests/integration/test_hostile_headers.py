"""Undecodable or odd bytes in every header the proxy and the admin API read.

aiohttp hands a header's undecodable bytes over as lone surrogates; code that then
encodes, base64-decodes or hashes the value raised, and the client got a 500 with a
traceback in the log. Each case is written on a raw socket (no well-behaved client can
send most of them) and must get a 4xx problem document, with nothing recorded or sent,
and the proxy must serve a normal request afterwards.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from effect_broker.crypto import MasterKey
from effect_broker.tenancy import new_api_key
from tests.integration.gateway_support import basic
from tests.integration.harness import (
    PROBLEM_JSON,
    address,
    ledger_rows,
    request,
    running_broker,
)
from tests.integration.mcp_support import ToolStore, mcp_routes, serve_mcp
from tests.integration.tls_support import TlsWorld

BODY = b'{"amount": 100, "currency": "usd", "order_id": "hostile-1"}'
ADMIN_TOKEN = "admin-token-for-tests"


def post(
    *extra: bytes,
    key: bytes = b"hostile-1",
    length: bytes | None = None,
) -> bytes:
    """A recorded-route POST with ``extra`` header lines (each without CRLF)."""
    lines = [b"POST /payments/v1/charges HTTP/1.1", b"Host: sidecar"]
    lines.append(b"Operation-Key: " + key)
    lines.append(b"Content-Type: application/json")
    lines.append(b"Content-Length: " + (length or str(len(BODY)).encode()))
    lines += [*extra, b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n" + BODY


def pass_through(target: str, *extra: bytes) -> bytes:
    """An unmatched forward-mode GET to ``target`` (the demo target's base URL)."""
    host = target.removeprefix("http://").encode()
    lines = [b"GET " + target.encode() + b"/healthz HTTP/1.1", b"Host: " + host]
    lines += [*extra, b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def exchange(url: str, data: bytes) -> tuple[int, bytes, bytes]:
    """Status, head and body of the one answer to ``data`` on a fresh connection."""
    reader, writer = await asyncio.open_connection(*address(url))
    try:
        async with asyncio.timeout(10):
            writer.write(data)
            await writer.drain()
            answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), answer
    return int(head.split(b" ", 2)[1]), head, body


def wrong_answer(status: int, head: bytes, body: bytes, *, must_refuse: bool) -> object:
    """What is wrong with an answer to odd bytes, or None: never a 5xx, and a refusal
    is a problem document (``must_refuse``: the proxy interprets this header itself)."""
    if status >= 500 or (must_refuse and status < 400):
        return (status, body[:200])
    if status >= 400:
        if PROBLEM_JSON.encode() not in head.lower():
            return (status, head)
        problem = json.loads(body)
        if problem["status"] != status or "Traceback" in problem["detail"]:
            return problem
    return None


# Headers the proxy interprets: odd bytes in them are refused. Each case has its own
# operation key, so a case that is recorded cannot hide behind an earlier one's replay.
READ_BY_THE_PROXY = {
    "operation-key": post(key=b"order-\xff\xfe"),
    "operation-key-latin1": post(key=b"caf\xe9"),
    "content-type": post(b"Content-Type: application/\xffjson", key=b"c-type"),
    "expect": post(b"Expect: \xff", key=b"c-expect"),
    "host": post(b"Host: \xff\xfe", key=b"c-host"),
    "header-name": post(b"X-\xff: 1", key=b"c-name"),
    "content-length-bytes": post(length=b"\xff", key=b"c-len-1"),
    "content-length-negative": post(length=b"-1", key=b"c-len-2"),
    "content-length-plus": post(length=b"+59", key=b"c-len-3"),
    "content-length-huge": post(length=b"9" * 40, key=b"c-len-4"),
    "content-length-two": post(b"Content-Length: 3", key=b"c-len-5"),
    "content-length-hex": post(length=b"0x3b", key=b"c-len-6"),
    "transfer-encoding": post(b"Transfer-Encoding: \xff", key=b"c-te"),
}
# Headers the proxy only carries to the target: forwarded or refused, never a 5xx.
CARRIED = {
    "idempotency-key": post(b"Idempotency-Key: \xff\xfe", key=b"f-idem"),
    "custom-header": post(b"X-Custom: \xff\xfe", key=b"f-custom"),
    "traceparent": post(b"traceparent: 00-\xff\xfe-01", key=b"f-trace"),
    "tracestate": post(
        b"traceparent: 00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01",
        b"tracestate: a=\xff",
        key=b"f-state",
    ),
    "prefer": post(b"Prefer: respond-async, wait=\xff", key=b"f-prefer"),
    "prefer-superscript-digit": post(b"Prefer: wait=\xc2\xb2", key=b"f-prefer-2"),
    "prefer-arabic-digit": post(b"Prefer: wait=\xd9\xa3", key=b"f-prefer-3"),
    "prefer-huge": post(b"Prefer: wait=" + b"9" * 400, key=b"f-prefer-4"),
    "connection": post(b"Connection: \xff", key=b"f-conn"),
}


async def test_odd_bytes_in_any_header_are_never_a_5xx(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path) as broker:
        wrong = {}
        cases = {
            **{name: (data, True) for name, data in READ_BY_THE_PROXY.items()},
            **{name: (data, False) for name, data in CARRIED.items()},
            "pass-through-custom": (
                pass_through(broker.target_url, b"X-Custom: \xff\xfe"),
                False,
            ),
            "pass-through-keyed": (
                pass_through(broker.target_url, b"Operation-Key: \xff\xfe"),
                False,
            ),
        }
        for name, (data, must_refuse) in cases.items():
            answer = await exchange(broker.proxy_url, data)
            problem = wrong_answer(*answer, must_refuse=must_refuse)
            if problem is not None:
                wrong[name] = problem
        assert wrong == {}
        recorded = {row["operation_key"] for row in await ledger_rows(database_url)}
        assert not recorded & {"c-type", "c-expect", "c-host", "c-name", "c-te"}
        assert not any(key.startswith("c-len") for key in recorded)
        normal = await request(
            "POST",
            f"{broker.proxy_url}/payments/v1/charges",
            headers={"Content-Type": "application/json", "Operation-Key": "fine"},
            data=BODY,
        )
        assert normal.status == 201, normal


async def refused_cases(url: str, cases: dict[str, bytes]) -> dict[str, object]:
    """Each case that did not get a 4xx problem document, with what it got instead."""
    wrong: dict[str, object] = {}
    for name, data in cases.items():
        problem = wrong_answer(*await exchange(url, data), must_refuse=True)
        if problem is not None:
            wrong[name] = problem
    return wrong


GATEWAY_CASES = {
    "basic-undecodable": post(b"Proxy-Authorization: Basic \xff"),
    "basic-undecodable-long": post(b"Proxy-Authorization: Basic \xff\xfe\xfd\xfc"),
    "scheme-undecodable": post(b"Proxy-Authorization: \xff\xfe abc"),
    "basic-not-utf8": post(b"Proxy-Authorization: Basic //79/A=="),
    "basic-no-colon": post(b"Proxy-Authorization: Basic YWNtZQ=="),
    "basic-key-undecodable": post(b"Proxy-Authorization: Basic YWNtZTplYmtf/w=="),
}


async def test_gateway_proxy_authorization_with_odd_bytes_is_a_407(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, gateway=True) as broker:
        statuses, wrong = {}, {}
        for name, data in GATEWAY_CASES.items():
            answer = await exchange(broker.proxy_url, data)
            statuses[name] = answer[0]
            if (problem := wrong_answer(*answer, must_refuse=True)) is not None:
                wrong[name] = problem
        assert wrong == {}
        assert set(statuses.values()) == {407}, statuses
        key = new_api_key()
        await broker.state.store.add_api_key("acme", key.key_id, key.secret_hash)
        assert await ledger_rows(database_url) == []
        normal = await request(
            "POST",
            f"{broker.proxy_url}/payments/v1/charges",
            headers={
                "Content-Type": "application/json",
                "Operation-Key": "fine",
                "Proxy-Authorization": basic("acme", key.api_key),
            },
            data=BODY,
        )
        assert normal.status == 201, normal


def admin_get(*extra: bytes) -> bytes:
    return (
        b"\r\n".join(
            [b"GET /v1/effects HTTP/1.1", b"Host: admin", *extra, b"Connection: close"]
        )
        + b"\r\n\r\n"
    )


ADMIN_CASES = {
    "bearer-undecodable": admin_get(b"Authorization: Bearer \xff\xfe"),
    "scheme-undecodable": admin_get(b"Authorization: \xff\xfe x"),
    "bearer-key-undecodable": admin_get(b"Authorization: Bearer ebk_\xff_\xfe"),
    "bearer-key-id-undecodable": admin_get(b"Authorization: Bearer ebk_a\xff_secret"),
}


async def test_admin_authorization_with_odd_bytes_is_a_401(
    database_url: str, tmp_path: Path
) -> None:
    master_key = MasterKey.generate().to_base64()  # one ledger, two brokers in turn
    for settings in ({"admin_token": ADMIN_TOKEN}, {"gateway": True}):
        async with running_broker(
            database_url, tmp_path, master_key=master_key, **settings
        ) as broker:
            assert await refused_cases(broker.admin_url, ADMIN_CASES) == {}, settings
            for name, data in ADMIN_CASES.items():
                status, _, _ = await exchange(broker.admin_url, data)
                assert status == 401, (settings, name, status)


async def test_a_gateway_connect_with_odd_proxy_authorization_is_a_407(
    database_url: str, tmp_path: Path
) -> None:
    world = TlsWorld(tmp_path)
    async with running_broker(
        database_url, tmp_path, gateway=True, **world.settings()
    ) as broker:
        for value in (b"Basic \xff", b"Basic \xff\xfe\xfd\xfc", b"\xff\xfe x"):
            status, head, body = await exchange(
                broker.proxy_url,
                b"CONNECT payments.internal:443 HTTP/1.1\r\n"
                b"Host: payments.internal:443\r\nProxy-Authorization: "
                + value
                + b"\r\n\r\n",
            )
            assert status == 407, (value, head, body)
            assert json.loads(body)["status"] == 407


def mcp_post(*extra: bytes, body: bytes) -> bytes:
    lines = [
        b"POST /mcp HTTP/1.1",
        b"Host: sidecar",
        b"Content-Type: application/json",
        b"Accept: application/json, text/event-stream",
        b"Content-Length: " + str(len(body)).encode(),
        *extra,
        b"Connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def test_odd_bytes_in_the_headers_an_mcp_route_reads_are_never_a_5xx(
    database_url: str, tmp_path: Path
) -> None:
    store = ToolStore()
    charge = {"amount": 1, "currency": "eur", "operation_key": "h-1"}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "create_charge", "arguments": charge},
    }
    body = json.dumps(call).encode()
    async with (
        serve_mcp(store) as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: mcp_routes(upstream)
        ) as broker,
    ):
        wrong = {}
        for name, header in {
            "mcp-session-id": b"Mcp-Session-Id: \xff\xfe",
            "mcp-method": b"Mcp-Method: tools/\xffcall",
            "mcp-name": b"Mcp-Name: create_\xffcharge",
            "operation-key": b"Operation-Key: \xff\xfe",
            "content-type": b"Content-Type: application/\xffjson",
        }.items():
            answer = await exchange(broker.proxy_url, mcp_post(header, body=body))
            if answer[0] >= 500:
                wrong[name] = (answer[0], answer[2][:300])
        assert wrong == {}
