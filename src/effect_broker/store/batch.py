"""Group commit without timers: requests that arrive while a write is in flight share
the next one.

A ``Batcher`` holds a queue of waiting requests. When nothing is in flight the first
request starts a flush at once, alone, so an idle proxy pays no waiting; every request
that arrives while that flush runs joins the next one, so under load one statement and
one commit serve many requests. No request gets its answer before the flush that carried
it returned, which for the ledger means: before its commit. The function that writes a
batch returns one result per request, an exception being a result, so one request's
failure is never its neighbours'.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Writes one batch; returns one result (or the exception for it) per item, in order.
BatchWriter = Callable[[Sequence[T]], Awaitable[Sequence[R | BaseException]]]


class Batcher(Generic[T, R]):
    """Coalesce concurrent ``submit`` calls into calls of ``write`` on whole batches.

    ``key`` names what two items in one batch must not share (an effect, a reservation
    key): a second item with a key already in the batch waits for the next one, so each
    statement touches a row at most once and sees the commit of the one before.
    ``lanes`` batches may be in flight at once (each holds a pool connection).
    """

    def __init__(
        self,
        write: BatchWriter[T, R],
        *,
        key: Callable[[T], Hashable],
        max_size: int = 64,
        lanes: int = 1,
    ) -> None:
        self._write = write
        self._key = key
        self._max_size = max_size
        self._lanes = lanes
        self._queue: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._flushing = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: Sizes of the batches written so far, for tests and the bench (bounded).
        self.sizes: deque[int] = deque(maxlen=1024)

    async def submit(self, item: T) -> R:
        """Write ``item`` with whatever else is waiting; return its own result."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._flushing < self._lanes:
            self._flushing += 1
            task = asyncio.get_running_loop().create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                self.sizes.append(len(batch))
                try:
                    results = await self._write([item for item, _ in batch])
                except BaseException as exc:  # the writer should not raise: be safe
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(_copy(exc))
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():  # its caller gave up waiting; the write stands
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._flushing -= 1

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        """Up to ``max_size`` waiting items with distinct keys, oldest first."""
        batch: list[tuple[T, asyncio.Future[R]]] = []
        keys: set[Hashable] = set()
        later: deque[tuple[T, asyncio.Future[R]]] = deque()
        while self._queue and len(batch) < self._max_size:
            entry = self._queue.popleft()
            if entry[1].done():  # cancelled before its batch was written: skip it
                continue
            key = self._key(entry[0])
            if key in keys:
                later.append(entry)
            else:
                keys.add(key)
                batch.append(entry)
        later.extend(self._queue)
        self._queue = later
        return batch


def _copy(exc: BaseException) -> BaseException:
    """A fresh exception of the same kind per waiter: one instance raised in several
    tasks would collect their tracebacks into one another."""
    try:
        fresh = type(exc)(*exc.args)
    except Exception:  # an exception class with a constructor of its own
        return exc
    fresh.__cause__ = exc
    return fresh
