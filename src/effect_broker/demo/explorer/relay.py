"""A small TCP relay between the proxies and PostgreSQL that can make the ledger late.

The proxies reach the ledger only through it. Client-to-server bytes pass at once; the
server's replies can be delayed (each chunk held ``delay`` seconds), stalled (held until
``resume``) or dropped (every connection cut, with whatever was in flight). That is a
slow disk, a network partition and a failover as the proxy sees them, without touching
the server. The upstream is the server's TCP port or its Unix socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Upstream:
    """Where the relay connects: ``host:port``, or a Unix socket path."""

    host: str | None = None
    port: int = 5432
    socket: str | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.socket is not None:
            return await asyncio.open_unix_connection(self.socket)
        return await asyncio.open_connection(self.host, self.port)


def upstream_of(dsn: str) -> Upstream:
    """The server a PostgreSQL DSN points at (``?host=/dir`` is a socket directory)."""
    parts = urlsplit(dsn)
    host = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
    port = parts.port or int(parse_qs(parts.query).get("port", ["5432"])[0])
    if host.startswith("/"):
        return Upstream(socket=str(Path(host) / f".s.PGSQL.{port}"), port=port)
    return Upstream(host=host, port=port)


def through(dsn: str, relay_port: int) -> str:
    """``dsn`` rewritten to reach the same user and database through the relay."""
    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    password = f":{parts.password}" if parts.password else ""
    query = "&".join(
        f"{name}={value}"
        for name, values in parse_qs(parts.query).items()
        if name not in ("host", "port")
        for value in values
    )
    netloc = f"{user}{password}@127.0.0.1:{relay_port}"
    return urlunsplit(("postgresql", netloc, parts.path, query, ""))


@dataclass
class LedgerRelay:
    upstream: Upstream
    delay: float = 0.0
    port: int = 0
    _flowing: asyncio.Event = field(default_factory=asyncio.Event)
    _pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = field(
        default_factory=set
    )
    _server: asyncio.Server | None = None
    _stalls: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> int:
        """Listen on a free local port; returns it."""
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def stall(self) -> None:
        """Hold every server reply back until ``resume`` (stalls overlap: replies flow
        again only once every stall has been resumed)."""
        self._stalls += 1
        self._flowing.clear()

    def resume(self) -> None:
        self._stalls = max(0, self._stalls - 1)
        if not self._stalls:
            self._flowing.set()

    def drop(self) -> int:
        """Cut every open connection, both ways; how many there were."""
        pairs = list(self._pairs)
        for client, server in pairs:
            client.transport.abort()
            server.transport.abort()
        return len(pairs)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._stalls = 0
        self._flowing.set()
        self.drop()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            server_reader, server_writer = await self.upstream.open()
        except OSError:
            client_writer.transport.abort()  # the server is down: so is this connection
            return
        pair = (client_writer, server_writer)
        self._pairs.add(pair)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await asyncio.gather(
                self._pump(client_reader, server_writer, late=False),
                self._pump(server_reader, client_writer, late=True),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._pairs.discard(pair)
            self._tasks.discard(task)
            client_writer.transport.abort()
            server_writer.transport.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, late: bool
    ) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                if late:
                    if self.delay:
                        await asyncio.sleep(self.delay)  # the fault itself: a late reply
                    await self._flowing.wait()
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.transport.abort()  # one side closed: the connection is over
