"""A safety net for tests of refused destinations: no socket may leave loopback.

Tests about metadata or private addresses must prove the proxy refuses them before any
connection attempt. ``outside_attempts`` patches ``socket.socket.connect`` (which asyncio
and aiohttp both reach through ``loop.sock_connect``) for the test: a connection to a
loopback address proceeds, any other is recorded and fails as unreachable without a
packet being sent. A test asserts the record is empty.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


def _is_loopback(address: Any) -> bool:
    if not isinstance(address, tuple) or not address:
        return True  # a Unix socket path: local by definition
    try:
        return ipaddress.ip_address(str(address[0]).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@contextmanager
def outside_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Yields the list of non-loopback addresses something tried to connect to."""
    attempts: list[Any] = []
    original = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> None:
        if not _is_loopback(address):
            attempts.append(address)
            raise OSError(errno.ENETUNREACH, "blocked by the test: not loopback")
        original(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    try:
        yield attempts
    finally:
        monkeypatch.setattr(socket.socket, "connect", original)
