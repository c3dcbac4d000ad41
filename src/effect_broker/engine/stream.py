"""A recorded answer passed on while it arrives, and settled when it ends.

An answer whose length is not known up front (``text/event-stream``, a chunked or
close-delimited body) is not read whole before the client sees it: the dispatcher
hands the open answer to a ``RecordedStream`` and the proxy pumps it. Each chunk from
the target goes to the client at once and into the receipt's copy; when the target's
body ends the stream settles the effect (one ledger commit), and only then may the
proxy send the very end of the body (the last chunk of chunked framing, the close of
an unframed one). So a client that saw an answer end can rely on the ledger having
it; a client that saw a stream cut off holds a partial answer whose effect the ledger
settles on its own (a retry with the same key replays or explains it).

What keeps the pump honest:

- **Bounded memory.** Past ``max_body`` bytes the copy is dropped: the receipt keeps
  the head, the length and a SHA-256 digest of every byte, and says the body was too
  large to replay. Nothing is ever silently cut.
- **The client is not the owner.** A client that goes away (or stops reading for
  longer than the idle timeout) is detached; the target's answer is still read to its
  end and the effect settles as the target answered.
- **Silence is not success.** No byte for ``idle_timeout`` ends the read: the target
  may have applied the effect, so the outcome is unknown. A stream that keeps
  flowing may run longer than the contract's ``timeout``, which bounds only the wait
  for the answer's head.
- **No takeover while bytes flow.** The lease is renewed (a write fenced by the
  effect's version) before it can run out, so a reconciler never declares a flowing
  stream's holder dead; a proxy that dies mid-stream stops renewing, and its effect is
  taken over by the usual rules once the lease has run out.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

import aiohttp

from effect_broker.engine.messages import StoredResponse
from effect_broker.errors import EffectBrokerError, StaleVersion
from effect_broker.models import Effect

log = logging.getLogger("effect_broker.engine")

# In a receipt: the answer was streamed, so its replay is framed the same way (chunked,
# no Content-Length). The proxy reads it and never shows it to a client.
STREAMED_HEADER = "Effect-Receipt-Streamed"
# In a receipt whose body was too large to keep: what the body was, for comparison.
DIGEST_HEADER = "Effect-Receipt-Digest"
LENGTH_HEADER = "Effect-Receipt-Body-Length"

# How long after a failed lease renewal the next one is tried, at the soonest.
RENEW_RETRY = 0.25

# Where a chunk of the answer goes while the stream runs (the client, or nowhere).
Sink = Callable[[bytes], Awaitable[None]]


def streams_live(method: str, status: int, content_length: int | None) -> bool:
    """Whether an answer is passed on as it arrives rather than read whole first.

    Only bodies of unknown length: a sized body is bounded by what the target declared
    up front and is read whole (or, past a receipt's size, passed on as it stands).
    Answers that carry no body at all (HEAD, 1xx, 204, 304) are never streams.
    """
    if content_length is not None or method.upper() == "HEAD":
        return False
    return status >= 200 and status not in (
        HTTPStatus.NO_CONTENT,
        HTTPStatus.NOT_MODIFIED,
    )


class ReceiptCopy:
    """The receipt's copy of a streamed body: every byte until ``limit``, then only
    the length and a running digest (pure: no I/O)."""

    __slots__ = ("_digest", "_kept", "length", "limit", "omitted")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.length = 0
        self.omitted = False
        self._kept = bytearray()
        self._digest = hashlib.sha256()

    def add(self, chunk: bytes) -> None:
        self.length += len(chunk)
        self._digest.update(chunk)
        if self.omitted:
            return
        if self.length > self.limit:
            self.omitted = True
            self._kept = bytearray()  # give the memory back at once
        else:
            self._kept += chunk

    @property
    def body(self) -> bytes:
        return bytes(self._kept)

    @property
    def digest(self) -> str:
        """RFC 9530 style: ``sha-256=:<base64>:``."""
        return f"sha-256=:{base64.b64encode(self._digest.digest()).decode()}:"


@dataclass(frozen=True, slots=True)
class Ending:
    """How the target's body ended, and what the receipt keeps of it."""

    complete: bool  # the body ended as its framing says
    response: StoredResponse  # the head and the kept body (empty when omitted)
    omitted: bool  # longer than a receipt holds: only length and digest are kept
    detail: str = ""  # why the body is incomplete
    idle: bool = False  # incomplete because no byte came for the idle timeout
    elapsed: float = 0.0  # seconds the stream ran


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """What the pump did: ``finished`` when the body was whole *and* the ledger holds
    its outcome, the one case in which the client may be sent the end of the body."""

    effect: Effect
    finished: bool
    detail: str = ""


class RecordedStream:
    """One streamed answer of a recorded effect, from its head to its settlement.

    ``settle`` writes the outcome of an ``Ending`` for the effect it is given (and
    raises ``EffectBrokerError`` when the ledger refuses); ``renew`` extends the lease
    and returns the effect at its new version; ``release`` gives back the upstream
    connection slot. ``lease_ends_in`` is how long the lease surely still holds now,
    ``renew_every`` how long a renewal surely holds once asked for.
    """

    def __init__(
        self,
        effect: Effect,
        head: StoredResponse,
        live: aiohttp.ClientResponse,
        *,
        idle_timeout: float,
        max_body: int,
        settle: Callable[[Effect, Ending], Awaitable[Effect]],
        renew: Callable[[Effect], Awaitable[Effect]],
        release: Callable[[], Awaitable[object]],
        lease_ends_in: float,
        renew_lease: float,
    ) -> None:
        self.effect = effect
        self.head = head
        self._live = live
        self._idle = idle_timeout
        self._max_body = max_body
        self._settle = settle
        self._renew = renew
        self._release = release
        self._lease_ends_at = time.monotonic() + lease_ends_in
        self._renew_lease = renew_lease
        self._stopping = asyncio.Event()
        self._ran = False
        self._arrived = b""  # taken by ``take_arrived``: recorded, never offered again
        self.elapsed = 0.0  # seconds spent reading the body from the target, once run

    def take_arrived(self) -> bytes:
        """The body's bytes that came in with the head and wait in the buffer now.

        The caller sends them to the client itself, in one write with the head: one
        packet and one wake-up of the client fewer before its first byte. ``run``
        records them in the receipt first and does not offer them to its sink again.
        Nothing is waited for: a body whose first bytes are not here yet returns b"".
        """
        if self._ran or self._arrived:
            raise RuntimeError("the arrived bytes are taken once, before the stream runs")
        try:
            self._arrived = self._live.content.read_nowait()
        except (aiohttp.ClientError, OSError):
            return b""  # the read in ``run`` meets the same error and says so
        return self._arrived

    async def run(self, sink: Sink | None) -> StreamEnd:
        """Read the target's body to its end, give each chunk to ``sink`` while it
        keeps up, then settle the effect. Run it once; a sink that fails or stalls
        is dropped, the read goes on."""
        if self._ran:
            raise RuntimeError("a recorded stream runs once")
        self._ran = True
        renewer = asyncio.create_task(self._keep_lease())
        try:
            ending = await self._read(sink)
            self.elapsed = ending.elapsed
        finally:
            self._stopping.set()
            with contextlib.suppress(Exception):
                await renewer  # never cut a renewal in half: its version is needed
            self._live.close()
            await self._release()
        try:
            settled = await self._settle(self.effect, ending)
        except EffectBrokerError as exc:
            log.warning(
                "effect %s: streamed answer not recorded: %s",
                self.effect.effect_id,
                exc.message,
            )
            return StreamEnd(self.effect, finished=False, detail=exc.message)
        return StreamEnd(settled, finished=ending.complete, detail=ending.detail)

    async def discard(self) -> StreamEnd:
        """Settle without a client (the reconciler's resend, an answer nobody awaits)."""
        return await self.run(None)

    async def _read(self, sink: Sink | None) -> Ending:
        copy = ReceiptCopy(self._max_body)
        copy.add(self._arrived)  # already with the client (``take_arrived``)
        started = time.perf_counter()
        try:
            while True:
                async with asyncio.timeout(self._idle):
                    chunk = await self._live.content.readany()
                if not chunk:
                    break
                copy.add(chunk)
                if sink is not None:
                    sink = await self._offer(sink, chunk)
        except TimeoutError:
            return self._ending(
                copy,
                started,
                complete=False,
                idle=True,
                detail=f"the streamed answer went quiet for more than {self._idle:g}s "
                f"after {copy.length} bytes",
            )
        except (aiohttp.ClientError, OSError) as exc:
            return self._ending(
                copy,
                started,
                complete=False,
                detail=f"connection lost after {copy.length} bytes of a streamed "
                f"answer: {exc!r}",
            )
        return self._ending(copy, started, complete=True)

    async def _offer(self, sink: Sink, chunk: bytes) -> Sink | None:
        """Give ``chunk`` to the client; a client gone or stalled for the idle timeout
        is let go (None), never allowed to hold the target's answer up."""
        try:
            async with asyncio.timeout(self._idle):
                await sink(chunk)
        except (TimeoutError, ConnectionError, RuntimeError) as exc:
            log.info(
                "effect %s: client left a streamed answer (%r); reading it to the end",
                self.effect.effect_id,
                exc,
            )
            return None
        return sink

    def _ending(
        self,
        copy: ReceiptCopy,
        started: float,
        *,
        complete: bool,
        idle: bool = False,
        detail: str = "",
    ) -> Ending:
        headers = [*self.head.headers, (STREAMED_HEADER, "true")]
        if copy.omitted:
            headers += [(DIGEST_HEADER, copy.digest), (LENGTH_HEADER, str(copy.length))]
        return Ending(
            complete=complete,
            response=StoredResponse(
                self.head.status, self.head.reason, headers, copy.body
            ),
            omitted=copy.omitted,
            detail=detail,
            idle=idle,
            elapsed=time.perf_counter() - started,
        )

    async def _keep_lease(self) -> None:
        """Renew halfway through what is left of the lease, until the read ends.

        A renewal that fails is logged and tried again at the next turn; one fenced
        by another writer ends the renewals (the settling write is fenced too).
        """
        floor = 0.0  # after a failed renewal: not a tight loop against a ledger down
        while True:
            wait = max(floor, (self._lease_ends_at - time.monotonic()) / 2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=wait)
            if self._stopping.is_set():
                return
            asked_at = time.monotonic()
            try:
                self.effect = await self._renew(self.effect)
            except EffectBrokerError as exc:
                log.warning(
                    "effect %s: lease not renewed: %s", self.effect.effect_id, exc.message
                )
                if isinstance(exc, StaleVersion):
                    return
                # Unknown whether it held: keep the old bound, try again soon.
                floor = RENEW_RETRY
                continue
            floor = 0.0
            self._lease_ends_at = asked_at + self._renew_lease
