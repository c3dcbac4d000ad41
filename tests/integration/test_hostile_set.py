"""The hostile-input set: every spelling a client might use to slip past the ledger.

One broker, one recording target that two routes share: ``echo`` (reverse mode, a
prefix stripped, a credential injected) and ``watched`` (forward mode, the target's own
loopback authority). Each case is written on a raw socket, because most of them cannot
be produced by a well-behaved client, and ends one of two ways:

- refused: a 4xx problem+json, nothing reached the target, nothing in the ledger;
- recorded: the spelling legitimately names a watched route (a loopback alias of the
  watched host, an empty segment, a percent-encoded unreserved letter), so the effect IS
  recorded and the target sees the normalised path with the derived key, never the
  request passed through unrecorded.
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

from tests.integration.harness import (
    PROBLEM_JSON,
    Broker,
    address,
    ledger_rows,
    running_broker,
    serve_handler,
)
from tests.integration.outside import outside_attempts

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
  - name: echo
    match: {{method: POST, path: "/echo/api/{{item}}"}}
    strip_prefix: /echo
    upstream: {upstream}/inner
    contract: items.create
    inject_headers: {{Authorization: "Bearer injected-secret"}}
  - name: watched
    match: {{method: POST, host: "127.0.0.1:{port}", path: /v1/charges}}
    upstream: {upstream}
    contract: items.create
"""

BODY = b'{"name": "widget"}'
LIMIT = 4096  # max_request_bytes for this broker


def post(
    target: str = "/echo/api/1",
    *,
    key: bytes = b"item-1",
    framing: bytes | None = None,
    body: bytes = BODY,
    extra: bytes = b"",
) -> bytes:
    """A POST on the raw wire; ``framing`` replaces the Content-Length line."""
    if framing is None:
        framing = b"Content-Length: " + str(len(body)).encode() + b"\r\n"
    return (
        b"POST " + target.encode("latin-1") + b" HTTP/1.1\r\nHost: sidecar\r\n"
        b"Operation-Key: "
        + key
        + b"\r\nContent-Type: application/json\r\n"
        + extra
        + framing
        + b"Connection: close\r\n\r\n"
        + body
    )


def forward(host: str) -> bytes:
    """An absolute-form POST to the watched path on ``host`` ({port}: the target's)."""
    return post("http://" + host + "/v1/charges")


def connect(host: str) -> bytes:
    """CONNECT, then a POST inside the would-be tunnel."""
    return f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() + post(
        "/v1/charges"
    )


def chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


@dataclass(frozen=True)
class Case:
    wire: bytes
    recorded_as: str | None = None  # the upstream path when the spelling is an alias


REFUSED = {
    # --- request smuggling
    "cl-and-te": Case(
        post(
            framing=b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            body=chunked(BODY),
        )
    ),
    "duplicate-cl-differing": Case(
        post(framing=b"Content-Length: 18\r\nContent-Length: 5\r\n")
    ),
    "duplicate-cl-same": Case(
        post(framing=b"Content-Length: 18\r\nContent-Length: 18\r\n")
    ),
    "cl-list": Case(post(framing=b"Content-Length: 18, 18\r\n")),
    "te-xchunked": Case(
        post(framing=b"Transfer-Encoding: xchunked\r\n", body=chunked(BODY))
    ),
    "te-chunked-not-last": Case(
        post(framing=b"Transfer-Encoding: chunked, identity\r\n", body=chunked(BODY))
    ),
    "te-space-before-colon": Case(
        post(framing=b"Transfer-Encoding : chunked\r\n", body=chunked(BODY))
    ),
    "te-obs-fold": Case(
        post(framing=b"Transfer-Encoding:\r\n chunked\r\n", body=chunked(BODY))
    ),
    "te-twice": Case(
        post(
            framing=b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            body=chunked(BODY),
        )
    ),
    # --- traversal
    "dot-dot": Case(post("/echo/../echo/api/1")),
    "dot-dot-placeholder": Case(post("/echo/api/..")),
    "dot-placeholder": Case(post("/echo/api/.")),
    "encoded-dot-dot": Case(post("/echo/api/%2e%2e")),
    "mixed-case-encoded-dot-dot": Case(post("/echo/api/%2E%2e")),
    "half-encoded-dot-dot": Case(post("/echo/api/.%2e")),
    "encoded-dot-dot-prefix": Case(post("/echo/%2e%2e/echo/api/1")),
    "dot-dot-semicolon": Case(post("/echo/api/..;x")),
    "encoded-slash": Case(post("/echo/api%2f1")),
    "encoded-slash-lower": Case(post("/echo/api/a%2fb")),
    "backslashes": Case(post("/echo\\api\\1")),
    "encoded-backslash": Case(post("/echo/api/a%5cb")),
    # --- control bytes in headers and keys
    "key-ctl-01": Case(post(key=b"item\x011")),
    "key-nul": Case(post(key=b"item\x001")),
    "key-bare-cr": Case(post(key=b"item\r1")),
    "header-value-nul": Case(post(extra=b"X-Note: a\x00b\r\n")),
    "header-name-ctl": Case(post(extra=b"X-No\x01te: a\r\n")),
    "header-name-space": Case(post(extra=b"X Note: a\r\n")),
    # --- oversize bodies and heads
    "body-over-limit": Case(post(body=b"x" * (LIMIT + 1))),
    "chunked-body-over-limit": Case(
        post(
            framing=b"Transfer-Encoding: chunked\r\n",
            body=chunked(b"x" * (LIMIT + 1)),
        )
    ),
    "huge-header": Case(post(extra=b"X-Big: " + b"a" * 200_000 + b"\r\n")),
    "huge-request-line": Case(post("/echo/api/" + "a" * 200_000)),
    # --- CONNECT to spellings of the watched host: a tunnel would hide the effect
    "connect-localhost": Case(connect("localhost:{port}")),
    "connect-hex": Case(connect("0x7f000001:{port}")),
    "connect-decimal": Case(connect("2130706433:{port}")),
    "connect-short": Case(connect("127.1:{port}")),
    "connect-mapped": Case(connect("[::ffff:127.0.0.1]:{port}")),
    "connect-upper-dot": Case(connect("LOCALHOST.:{port}")),
    "connect-ipv6-loopback": Case(connect("[::1]:{port}")),
}

RECORDED = {
    # --- path spellings that legitimately name the echo route
    "double-slash-prefix": Case(post("//echo/api/1"), "/inner/api/1"),
    "double-slash-inside": Case(post("/echo//api/1"), "/inner/api/1"),
    "encoded-unreserved": Case(post("/%65cho/api/1"), "/inner/api/1"),
    "encoded-unreserved-item": Case(post("/echo/api/%31"), "/inner/api/1"),
    # --- host spellings that are the watched 127.0.0.1:{port}
    "host-canonical": Case(forward("127.0.0.1:{port}"), "/v1/charges"),
    "host-localhost": Case(forward("localhost:{port}"), "/v1/charges"),
    "host-upper-dot": Case(forward("LOCALHOST.:{port}"), "/v1/charges"),
    "host-hex": Case(forward("0x7f000001:{port}"), "/v1/charges"),
    "host-decimal": Case(forward("2130706433:{port}"), "/v1/charges"),
    "host-short": Case(forward("127.1:{port}"), "/v1/charges"),
    "host-octal": Case(forward("0177.0.0.1:{port}"), "/v1/charges"),
    "host-mapped": Case(forward("[::ffff:127.0.0.1]:{port}"), "/v1/charges"),
    "host-ipv6-loopback": Case(forward("[::1]:{port}"), "/v1/charges"),
    "host-other-loopback": Case(forward("127.0.0.2:{port}"), "/v1/charges"),
}


@dataclass
class Target:
    url: str = ""
    received: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    async def record(self, request: web.Request) -> web.Response:
        self.received.append((request.raw_path, dict(request.headers)))
        await request.read()
        return web.json_response({"id": "it_1"}, status=201)


@asynccontextmanager
async def hostile_broker(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, Target]]:
    target = Target()
    async with serve_handler(target.record) as upstream:
        target.url = upstream
        _, port = address(upstream)
        routes = ROUTES.format(upstream=upstream, port=port)
        async with running_broker(
            database_url, tmp_path, routes=lambda _: routes, max_request_bytes=LIMIT
        ) as broker:
            yield broker, target


async def exchange(url: str, data: bytes) -> tuple[int, bytes, bytes]:
    """Status, head and body of the one answer to ``data`` on a fresh connection."""
    reader, writer = await asyncio.open_connection(*address(url))
    try:
        async with asyncio.timeout(10):
            try:
                writer.write(data)
                await writer.drain()
            except ConnectionError:
                pass  # the proxy answered and closed before reading everything
            answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=name) for name, case in {**REFUSED, **RECORDED}.items()],
)
async def test_hostile_input_is_refused_or_recorded_never_passed_through(
    database_url: str,
    tmp_path: Path,
    case: Case,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with outside_attempts(monkeypatch) as outside:
        async with hostile_broker(database_url, tmp_path) as (broker, target):
            _, port = address(target.url)
            wire = case.wire.replace(b"{port}", str(port).encode())
            status, head, body = await exchange(broker.proxy_url, wire)
            rows = await ledger_rows(database_url)

    assert outside == []
    if case.recorded_as is None:
        assert 400 <= status < 500, (status, head, body)
        assert PROBLEM_JSON.encode() in head.lower(), head
        problem = json.loads(body)
        assert problem["status"] == status
        assert target.received == []
        assert rows == []
    else:
        assert status == 201, (status, head, body)
        [(path, headers)] = target.received
        assert path == case.recorded_as
        assert "Idempotency-Key" in headers
        assert "Operation-Key" not in headers
        assert len(rows) == 1
