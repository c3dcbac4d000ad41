"""The endpoints' access to the kit's table, the same over either driver.

Each call takes a connection, uses it for that one lookup or tombstone and gives it
back: the endpoints never hold a connection between requests, so a tombstone that waits
for an attempt's uncommitted row ties up one connection for at most ``tombstone_wait``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, Protocol, TypeVar

from effect_broker.target.outcomes import TombstoneResult
from effect_broker.target.protocol import AttemptReport

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)

#: How long a tombstone waits for an attempt's uncommitted receipt row by default.
TOMBSTONE_WAIT = 1.0


class Tombstone(Protocol[C_contra]):
    def __call__(
        self, conn: C_contra, key: str, *, wait: float
    ) -> Awaitable[TombstoneResult]: ...


class PerCallBackend(Generic[C]):
    """A connection per call, from ``acquire``, and the driver's three functions."""

    def __init__(
        self,
        acquire: Callable[[], AbstractAsyncContextManager[C]],
        *,
        lookup: Callable[[C, str], Awaitable[AttemptReport]],
        tombstone: Tombstone[C],
        check_installed: Callable[[C], Awaitable[None]],
        tombstone_wait: float,
    ) -> None:
        self._acquire = acquire
        self._lookup = lookup
        self._tombstone = tombstone
        self._check_installed = check_installed
        self._wait = tombstone_wait

    async def lookup(self, attempt_key: str) -> AttemptReport:
        async with self._acquire() as conn:
            return await self._lookup(conn, attempt_key)

    async def tombstone(self, attempt_key: str) -> TombstoneResult:
        async with self._acquire() as conn:
            return await self._tombstone(conn, attempt_key, wait=self._wait)

    async def check_installed(self) -> None:
        async with self._acquire() as conn:
            await self._check_installed(conn)
