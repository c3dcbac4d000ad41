"""Duplicates wait for the first answer instead of being turned away.

An agent retries on its own timeout, so the same key usually arrives again while the
first request is still running. Rather than a 409 with a Retry-After longer than the
work, the duplicate waits (bounded) until the effect moves and is then answered from the
ledger like any later retry: the replay of the first request's receipt.

Two ways an effect is seen to move, and no correctness rests on either (a waiter that
wakes for nothing re-reads the row and decides again; one that is never woken answers
409 at its deadline, as before):

* in this process, the engine ``notify``s when its work on an effect ends: instant;
* anywhere else (another worker, another proxy on the same ledger), one poller per
  process reads the versions of every awaited effect in one statement every
  ``interval`` while anyone waits, and nothing when nobody does. A waiting request holds
  no pool connection: only the poller does, for one short read per tick.

The same read says whether the awaited effect's lease has run out (on the database's
clock, the one takeovers are decided on). A holder that died never writes again, so
without that a duplicate would wait out its whole wait for a move that cannot come.
Once the lease is out, one waiter per process is woken to decide again: it takes the
effect over by its class's rules (resend, look up) or answers at once (unknown); the
others wait on, and wake when that waiter's work on the effect ends. Waking them all
would only make them race for one compare-and-swap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from effect_broker.errors import StoreError, StoreUnavailable
from effect_broker.models import AwaitedState, Effect

log = logging.getLogger("effect_broker.engine")

# The versions (and lease) of the awaited (tenant, effect) pairs, and the database's
# time of the read.
ReadVersions = Callable[
    [list[tuple[str, UUID]]], Awaitable[tuple[datetime, dict[UUID, AwaitedState]]]
]
POLL_INTERVAL = 0.025


@dataclass(frozen=True, slots=True)
class Moved:
    """The effect changed. ``observed_at``: the database's time when a poll saw it
    (None when this process's own engine said so; the row's ``updated_at`` tells)."""

    observed_at: datetime | None


@dataclass(slots=True)
class _Awaited:
    tenant: str
    version: int
    futures: list[asyncio.Future[Moved]] = field(default_factory=list)
    # The lease ran out at this version and one waiter was woken to take it over.
    taken_up: bool = False


class Waiters:
    """The requests waiting on effects in flight, one list per effect per process."""

    def __init__(self, read_versions: ReadVersions, *, interval: float = POLL_INTERVAL):
        self._read_versions = read_versions
        self._interval = interval
        self._awaited: dict[UUID, _Awaited] = {}
        self._poller: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return sum(len(awaited.futures) for awaited in self._awaited.values())

    async def wait(self, effect: Effect, timeout: float) -> Moved | None:
        """Until ``effect`` moves past the version given, or ``timeout`` seconds pass
        (None)."""
        awaited = self._awaited.get(effect.effect_id)
        if awaited is None or awaited.version != effect.version:
            if awaited is not None:  # waiters on an older version: it moved for them
                self._resolve(effect.effect_id, Moved(None))
            awaited = self._awaited[effect.effect_id] = _Awaited(
                effect.tenant_id, effect.version
            )
        future: asyncio.Future[Moved] = asyncio.get_running_loop().create_future()
        awaited.futures.append(future)
        self._ensure_poller()
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._forget(effect.effect_id, future)

    def notify(self, effect_id: UUID) -> None:
        """This process's engine is done with the effect for now: wake its waiters."""
        self._resolve(effect_id, Moved(None))

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None

    def _resolve(self, effect_id: UUID, moved: Moved) -> None:
        awaited = self._awaited.pop(effect_id, None)
        if awaited is None:
            return
        for future in awaited.futures:
            if not future.done():
                future.set_result(moved)

    def _forget(self, effect_id: UUID, future: asyncio.Future[Moved]) -> None:
        awaited = self._awaited.get(effect_id)
        if awaited is None:
            return
        if future in awaited.futures:
            awaited.futures.remove(future)
        if not awaited.futures:
            del self._awaited[effect_id]

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="effect-waiters")

    async def _poll(self) -> None:
        while self._awaited:
            await asyncio.sleep(self._interval)
            keys = [(a.tenant, effect_id) for effect_id, a in self._awaited.items()]
            if not keys:
                break
            try:
                observed_at, versions = await self._read_versions(keys)
            except (StoreUnavailable, StoreError) as exc:
                # Waiters time out into their 409 as before; nothing else depends on it.
                log.debug("waiters: could not read versions: %s", exc)
                continue
            for effect_id, awaited in list(self._awaited.items()):
                state = versions.get(effect_id)
                if state is None:
                    continue  # pruned or never there: the deadline answers
                if state.version != awaited.version:
                    self._resolve(effect_id, Moved(observed_at))
                elif state.lease_expired and not awaited.taken_up:
                    self._wake_one(awaited, Moved(observed_at))

    @staticmethod
    def _wake_one(awaited: _Awaited, moved: Moved) -> None:
        """Wake the longest-waiting request on an effect whose holder died; the rest
        stay until its work ends (``notify``) or the version moves."""
        for future in awaited.futures:
            if not future.done():
                future.set_result(moved)
                awaited.taken_up = True
                return
