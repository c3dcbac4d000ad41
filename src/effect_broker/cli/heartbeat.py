"""The heartbeat between a worker of ``serve --workers N`` and its supervisor.

A worker whose process is paused (SIGSTOP, a debugger, a frozen container) or whose
event loop is stuck still holds its share of the port: the kernel keeps handing it new
connections, which hang unnoticed, and its exit, the one thing the supervisor watched,
never comes. So each worker's event loop writes a byte to a pipe every ``interval``
seconds; it is the loop that writes, so a loop that cannot run a task cannot beat. The
supervisor reads each pipe and kills (then restarts) a worker silent for longer than
its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Before its first beat a worker is importing, connecting and migrating: this long,
# at least, before silence counts against it.
STARTUP_GRACE = 60.0


def beat_interval(deadline: float) -> float:
    """How often a worker beats for a supervisor that waits ``deadline`` seconds."""
    return max(0.05, min(1.0, deadline / 4))


async def _beat(fd: int, interval: float) -> None:
    os.set_blocking(fd, False)
    while True:
        with contextlib.suppress(BlockingIOError):  # a full pipe: beats enough queued
            os.write(fd, b".")
        await asyncio.sleep(interval)


async def with_heartbeat(main: Coroutine[Any, Any, T], fd: int, interval: float) -> T:
    """Run ``main`` while this event loop beats on ``fd`` every ``interval`` seconds."""
    beating = asyncio.create_task(_beat(fd, interval))
    try:
        return await main
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await beating


class Pulse:
    """The supervisor's side of one worker's pipe: when it last beat."""

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd = fd
        self.deadline = deadline
        self._loop = asyncio.get_running_loop()
        self.started = self._loop.time()
        self.last: float | None = None
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return
        if not data:  # the worker is gone; its exit is reported elsewhere
            self.close()
            return
        self.last = self._loop.time()

    def silent_for(self) -> float | None:
        """Seconds past due, the beat silent beyond the deadline; None while alive."""
        now = self._loop.time()
        if self.last is None:
            allowed = max(STARTUP_GRACE, self.deadline)
            silent = now - self.started
        else:
            allowed = self.deadline
            silent = now - self.last
        return silent if silent > allowed else None

    def close(self) -> None:
        if self.fd >= 0:
            self._loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
