"""The first byte a client sends in a tunnel, read without consuming it.

A CONNECT tunnel to a watched host usually carries TLS, but not always: Node's
``EnvHttpProxyAgent`` (undici) tunnels plain ``http://`` too (``CONNECT host:80``). The
proxy must decide between a TLS handshake and plain HTTP/1.1 before either starts, and
``loop.start_tls`` cannot be handed bytes already read. So the byte is peeked
(``MSG_PEEK``) on a duplicate of the socket while the transport is paused: it stays in
the kernel's buffer for whichever protocol takes the connection next. The duplicate has
its own descriptor, so waiting for it to become readable does not disturb the event
loop's bookkeeping of the transport's own descriptor (asyncio and uvloop alike).
"""

from __future__ import annotations

import asyncio
import os
import socket

#: The first byte of every TLS record that opens a handshake (a ClientHello).
TLS_HANDSHAKE = 0x16


def looks_like_tls(first: bytes) -> bool:
    """Whether a tunnel's first byte opens a TLS handshake record."""
    return first[:1] == bytes([TLS_HANDSHAKE])


async def peek_first_byte(transport: asyncio.Transport, *, timeout: float) -> bytes:
    """The client's first byte, left unread; ``b""`` when the client closed first.

    ``TimeoutError`` when nothing arrives within ``timeout``. The transport must be
    paused (reading) so that nothing else consumes the byte meanwhile.
    """
    raw = transport.get_extra_info("socket")
    if raw is None:
        raise OSError("the tunnel's transport has no socket to peek at")
    probe = socket.socket(fileno=os.dup(raw.fileno()))
    loop = asyncio.get_running_loop()
    try:
        probe.setblocking(False)
        async with asyncio.timeout(timeout):
            while True:
                try:
                    return probe.recv(1, socket.MSG_PEEK)
                except BlockingIOError:
                    await _readable(loop, probe.fileno())
                except ConnectionError:
                    return b""
    finally:
        probe.close()


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
