"""Connection hygiene on the proxy port, over real sockets.

An idle connection is closed, a connection that never finishes its request head is
closed, a client that connects and says nothing gets a 408 from the CONNECT front, and
beyond ``max_connections`` a new connection gets a 503 problem+json and is closed.
Running out of file descriptors (EMFILE on accept) costs a line, not a traceback each
time: that one runs the server in a child process with a small file limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from tests.integration.harness import PROBLEMS, Broker, address, running_broker
from tests.support import ROOT

GET = b"GET /nowhere HTTP/1.1\r\nHost: sidecar\r\n\r\n"
GET_ROOT = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sends until it closes, failing after ``seconds``."""
    async with asyncio.timeout(seconds):
        return await reader.read()


@asynccontextmanager
async def broker_with(
    database_url: str, tmp_path: Path, **settings: object
) -> AsyncIterator[Broker]:
    async with running_broker(database_url, tmp_path, **settings) as broker:
        yield broker


async def test_an_idle_keep_alive_connection_is_closed(
    database_url: str, tmp_path: Path
) -> None:
    async with broker_with(database_url, tmp_path, keepalive_timeout="300ms") as broker:
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            writer.write(GET)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 404"), head
            await closed_within(reader, 5)
        finally:
            writer.close()


async def test_a_request_head_that_never_completes_is_closed(
    database_url: str, tmp_path: Path
) -> None:
    async with broker_with(database_url, tmp_path, keepalive_timeout="300ms") as broker:
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            writer.write(b"GET /nowhere HTTP/1.1\r\nHost: sidecar\r\nX-Slow: ")
            await writer.drain()
            assert await closed_within(reader, 5) == b""
        finally:
            writer.close()


async def test_a_silent_connection_gets_408_from_the_front(
    database_url: str, tmp_path: Path
) -> None:
    async with broker_with(database_url, tmp_path, header_timeout="200ms") as broker:
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            answer = await closed_within(reader, 5)
        finally:
            writer.close()

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["type"] == PROBLEMS + "request-timeout"


async def test_a_partial_connect_head_gets_408(database_url: str, tmp_path: Path) -> None:
    async with broker_with(database_url, tmp_path, header_timeout="200ms") as broker:
        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            writer.write(b"CONNECT example.org:443 HTTP/1.1\r\n")
            answer = await closed_within(reader, 5)
        finally:
            writer.close()

    assert answer.startswith(b"HTTP/1.1 408"), answer


async def answer_status(broker: Broker) -> int:
    reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
    try:
        writer.write(GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        answer = await closed_within(reader, 5)
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1])


async def test_connections_beyond_the_cap_get_503_and_are_closed(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        broker_with(database_url, tmp_path, max_connections=4) as broker,
        AsyncExitStack() as held,
    ):
        writers = []
        for index in range(4):
            reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
            held.callback(writer.close)
            writers.append(writer)
            if index % 2:  # half of them handed over to aiohttp, half still in front
                writer.write(GET)
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)

        reader, writer = await asyncio.open_connection(*address(broker.proxy_url))
        try:
            answer = await closed_within(reader, 5)
        finally:
            writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), answer
        problem = json.loads(body)
        assert problem["type"] == PROBLEMS + "too-many-connections"
        assert "4" in problem["detail"]

        for writer in writers:  # the places come back, whoever held the connection
            writer.close()
        async with asyncio.timeout(5):
            while (status := await answer_status(broker)) == 503:
                await asyncio.sleep(0.05)
        assert status == 404
        statuses = await asyncio.gather(*(answer_status(broker) for _ in range(4)))
        assert statuses == [404] * 4


SERVER = """
import asyncio, logging, resource, sys
from contextlib import AsyncExitStack
from aiohttp import web
from effect_broker.proxy.connect import ConnectPolicy
from effect_broker.proxy.edge import EdgeLimits
from effect_broker.server import start_site

resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
logging.basicConfig(level=logging.INFO, stream=sys.stderr)

async def hello(request):
    return web.Response(text="hello")

async def main():
    app = web.Application()
    app.router.add_get("/", hello)
    async with AsyncExitStack() as stack:
        policy = ConnectPolicy(is_guarded=lambda _: False, tunnel=False)
        edge = EdgeLimits(max_connections=100_000)
        _, port = await start_site(stack, app, "127.0.0.1:0", connect=policy, edge=edge)
        print(port, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_running_out_of_file_descriptors_is_one_line_not_a_traceback_storm() -> (
    None
):
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert child.stdout is not None
        port = int(await asyncio.to_thread(child.stdout.readline))
        held = []
        for _ in range(150):  # well past the child's 64 descriptors
            held.append(await asyncio.open_connection("127.0.0.1", port))
        await asyncio.sleep(0)
        for _, writer in held:
            writer.close()
        # the child accepts again once descriptors are free (asyncio retries each 1 s)
        async with asyncio.timeout(10):
            while True:
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(
                        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    )
                    answer = await asyncio.wait_for(reader.read(), 3)
                    writer.close()
                    if answer.startswith(b"HTTP/1.1 200"):
                        break
                except (OSError, TimeoutError):
                    pass
                await asyncio.sleep(0.1)
    finally:
        child.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(child.communicate, timeout=10)

    log = err.decode()
    assert "Traceback" not in log, log
    accept_lines = [line for line in log.splitlines() if "accept" in line]
    assert 1 <= len(accept_lines) <= 3, log
