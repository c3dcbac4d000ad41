"""How many requests may be out at one route's target at once, and how long to queue.

One slow target must not starve the others: each route has its own budget of concurrent
requests, and a request that cannot get a slot within the queue bound is not sent at
all. The wait is deliberately outside the contract's timeout, so time spent queueing in
this proxy is never mistaken for a target that took the request and went silent: a
request that never got a slot provably sent nothing, and is retryable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta


class NoFreeSlot(Exception):
    """Every slot of the route stayed taken for the whole queue bound."""


class Slot:
    """One slot of a route, taken: ``release`` gives it back, once (again is nothing).
    A plain object rather than a context manager, because an attempt whose answer
    streams holds its slot past the call that took it, until the stream ends."""

    __slots__ = ("_semaphore",)

    def __init__(self, semaphore: asyncio.Semaphore | None) -> None:
        self._semaphore = semaphore

    def release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
            self._semaphore = None

    async def aclose(self) -> None:
        """``release``, for whoever gives resources back by awaiting."""
        self.release()


class UpstreamSlots:
    def __init__(self, *, per_route: int, queue_timeout: timedelta) -> None:
        if per_route < 1:
            raise ValueError("a route needs at least one slot")
        self.per_route = per_route
        self.queue_timeout = queue_timeout
        self._semaphores: dict[str, asyncio.Semaphore] = {}

    async def take(self, route: str) -> Slot:
        """One slot of ``route``, to be released by the caller, or ``NoFreeSlot``."""
        semaphore = self._semaphores.get(route)
        if semaphore is None:
            semaphore = self._semaphores[route] = asyncio.Semaphore(self.per_route)
        if not semaphore.locked():
            # A free slot and nobody queued: acquire() returns without waiting, so the
            # queue bound's timer (scheduled and cancelled per request) is not needed.
            await semaphore.acquire()
        else:
            await self._queue(semaphore, route)
        return Slot(semaphore)

    @asynccontextmanager
    async def hold(self, route: str) -> AsyncIterator[None]:
        """One slot of ``route`` for the duration of the block, or ``NoFreeSlot``."""
        slot = await self.take(route)
        try:
            yield
        finally:
            slot.release()

    async def _queue(self, semaphore: asyncio.Semaphore, route: str) -> None:
        """Wait for a slot of ``route`` at most the queue bound."""
        try:
            async with asyncio.timeout(self.queue_timeout.total_seconds()):
                await semaphore.acquire()
        except TimeoutError:
            raise NoFreeSlot(
                f"all {self.per_route} connections this proxy allows to route {route} "
                f"stayed busy for {self.queue_timeout.total_seconds():g}s"
            ) from None
