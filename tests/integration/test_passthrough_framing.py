"""Pass-through keeps a request's framing: a Content-Length body arrives with its length.

The target here is Python's ``http.server``, which reads ``Content-Length`` bodies and
nothing else: a body re-framed as ``Transfer-Encoding: chunked`` reaches it empty. That
is what an unmatched POST once did.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiohttp import web

from effect_broker.proxy import passthrough
from tests.integration.harness import (
    PROBLEMS,
    Broker,
    address,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)


@dataclass
class PlainTarget:
    """``http.server`` recording each request's headers and the body it could read."""

    url: str = ""
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@contextmanager
def plain_target() -> Iterator[PlainTarget]:
    target = PlainTarget()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            target.received.append((dict(self.headers.items()), body))
            answer = json.dumps({"received": len(body)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    target.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield target
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


BODY = json.dumps({"text": "x" * 3000}).encode()


async def test_a_content_length_post_reaches_a_plain_target_whole(
    broker: Broker, database_url: str
) -> None:
    with plain_target() as target:
        answer = await request(
            "POST",
            f"{target.url}/v1/notes",
            proxy=broker.proxy_url,
            headers={"Content-Type": "application/json"},
            data=BODY,
        )

    assert answer.status == 200, answer
    assert answer.json == {"received": len(BODY)}
    [(headers, body)] = target.received
    assert body == BODY
    assert headers["Content-Length"] == str(len(BODY))
    assert "Transfer-Encoding" not in headers
    assert await ledger_rows(database_url) == []


async def test_a_content_length_body_over_the_pass_through_limit_is_413(
    database_url: str, tmp_path: Path
) -> None:
    with plain_target() as target:
        async with running_broker(
            database_url, tmp_path, max_passthrough_bytes=1000
        ) as broker:
            answer = await request(
                "POST",
                f"{target.url}/v1/notes",
                proxy=broker.proxy_url,
                headers={"Content-Type": "application/json"},
                data=BODY,
            )
            small = await request(
                "POST", f"{target.url}/v1/notes", proxy=broker.proxy_url, data=b"ok"
            )

    assert answer.status == 413
    assert answer.problem["type"] == PROBLEMS + "body-too-large"
    assert "1000" in answer.problem["detail"]
    assert small.status == 200
    assert [body for _, body in target.received] == [b"ok"]


async def test_a_chunked_body_is_passed_through_chunked(broker: Broker) -> None:
    seen: list[tuple[str | None, bytes]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Transfer-Encoding"), await request.read()))
        return web.Response(text="ok")

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"first,", b"second,", b"third"):
            yield part

    async with serve_handler(echo) as url:
        answer = await request(
            "POST", f"{url}/v1/stream", proxy=broker.proxy_url, data=chunks()
        )

    assert answer.status == 200
    assert seen == [("chunked", b"first,second,third")]


async def test_userinfo_in_a_pass_through_url_is_not_sent_upstream(
    broker: Broker,
) -> None:
    seen: list[dict[str, str]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text="ok")

    async with serve_handler(echo) as url:
        host, port = address(broker.proxy_url)
        target = url.removeprefix("http://")
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(
                f"GET http://user:secret@{target}/v1/x HTTP/1.1\r\n"
                f"Host: {target}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    assert answer.startswith(b"HTTP/1.1 200"), answer
    [headers] = seen
    assert "Authorization" not in headers


async def test_pass_through_answers_keep_their_headers_bodies_and_lengths(
    broker: Broker,
) -> None:
    """Small answers leave in one write, large ones are streamed: both arrive whole,
    repeated headers stay repeated, and a HEAD answer keeps its length and no body."""
    small, large = b"s" * 100, b"L" * (passthrough.BUFFER_AT_MOST + 1)

    async def answer(request: web.Request) -> web.StreamResponse:
        body = large if request.path == "/large" else small
        response = web.Response(body=body)  # aiohttp leaves a HEAD answer's body out
        response.headers.add("Set-Cookie", "a=1")
        response.headers.add("Set-Cookie", "b=2")
        return response

    async with serve_handler(answer) as url:
        host, port = address(broker.proxy_url)
        target = url.removeprefix("http://")
        seen = {}
        for method, path in (("GET", "/small"), ("GET", "/large"), ("HEAD", "/small")):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(
                    f"{method} http://{target}{path} HTTP/1.1\r\n"
                    f"Host: {target}\r\nConnection: close\r\n\r\n".encode()
                )
                seen[method, path] = await asyncio.wait_for(reader.read(), 10)
            finally:
                writer.close()

    for (method, path), raw in seen.items():
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), raw[:200]
        assert head.count(b"\r\nSet-Cookie: ") == 2, head
        expected = large if path == "/large" else small
        assert f"\r\nContent-Length: {len(expected)}".encode() in head, head
        assert body == (b"" if method == "HEAD" else expected), (method, path)


async def test_an_answer_that_breaks_off_is_an_unknown_outcome(broker: Broker) -> None:
    async def truncated(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(truncated, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        answer = await request(
            "POST",
            f"http://127.0.0.1:{port}/v1/x",
            proxy=broker.proxy_url,
            data=b"{}",
        )
    finally:
        server.close()
        await server.wait_closed()

    assert answer.status == 502
    problem = json.loads(answer.body)
    assert problem["type"] == PROBLEMS + "outcome-unknown"
    assert "broke off" in problem["detail"]
