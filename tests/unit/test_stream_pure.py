"""Recorded streams without a network: which answers stream, the receipt's copy, and
how the pump keeps its lease when the ledger refuses."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import time
from types import SimpleNamespace
from typing import cast

import aiohttp
import pytest

from effect_broker.engine.messages import StoredResponse
from effect_broker.engine.stream import (
    RENEW_RETRY,
    Ending,
    ReceiptCopy,
    RecordedStream,
    streams_live,
)
from effect_broker.errors import StoreUnavailable
from effect_broker.models import Effect


@pytest.mark.parametrize(
    ("method", "status", "length", "expected"),
    [
        ("POST", 200, None, True),  # chunked or close-delimited
        ("POST", 500, None, True),  # an error body of unknown length streams too
        ("POST", 200, 12, False),  # sized: read whole
        ("POST", 200, 0, False),
        ("HEAD", 200, None, False),  # no body, whatever the headers say
        ("POST", 204, None, False),
        ("POST", 304, None, False),
        ("POST", 101, None, False),
    ],
)
def test_only_bodies_of_unknown_length_stream(
    method: str, status: int, length: int | None, expected: bool
) -> None:
    assert streams_live(method, status, length) is expected


def test_a_copy_within_the_limit_keeps_every_byte() -> None:
    copy = ReceiptCopy(limit=10)
    for chunk in (b"abc", b"defg", b"hij"):
        copy.add(chunk)
    assert (copy.body, copy.length, copy.omitted) == (b"abcdefghij", 10, False)


def test_a_copy_past_the_limit_keeps_only_length_and_digest() -> None:
    copy = ReceiptCopy(limit=4)
    for chunk in (b"abc", b"defg", b"hij"):
        copy.add(chunk)
    digest = base64.b64encode(hashlib.sha256(b"abcdefghij").digest()).decode()
    assert (copy.body, copy.length, copy.omitted) == (b"", 10, True)
    assert copy.digest == f"sha-256=:{digest}:"


class _Body:
    """The open answer's body: one chunk, then the end once ``done`` is set."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self._sent = False

    async def readany(self) -> bytes:
        if not self._sent:
            self._sent = True
            return b"data: 1\n\n"
        await self.done.wait()
        return b""


class _Live:
    def __init__(self) -> None:
        self.content = _Body()

    def close(self) -> None:
        pass


async def test_a_ledger_that_refuses_renewals_is_not_hammered() -> None:
    """Renewals that fail are retried no sooner than RENEW_RETRY apart, even when the
    lease is already due, so a ledger outage is not met with a tight loop."""
    live = _Live()
    renewals: list[float] = []

    async def renew(effect: Effect) -> Effect:
        renewals.append(time.monotonic())
        if len(renewals) == 3:
            live.content.done.set()
        raise StoreUnavailable("the ledger is down")

    async def settle(effect: Effect, ending: Ending) -> Effect:
        assert ending.complete and ending.response.body == b"data: 1\n\n"
        return effect

    async def release() -> None:
        return None

    effect = cast(Effect, SimpleNamespace(effect_id="e-1"))
    stream = RecordedStream(
        effect,
        StoredResponse(200, "OK", [("Content-Type", "text/event-stream")], b""),
        cast(aiohttp.ClientResponse, live),
        idle_timeout=5.0,
        max_body=1024,
        settle=settle,
        renew=renew,
        release=release,
        lease_ends_in=0.0,
        renew_lease=1.0,
    )
    ended = await asyncio.wait_for(stream.run(None), 10)
    assert ended.finished
    gaps = [b - a for a, b in itertools.pairwise(renewals)]
    assert len(gaps) == 2 and min(gaps) >= RENEW_RETRY * 0.9, gaps


class _BufferedBody:
    """A body whose first event came in with the head; one more follows, then the end."""

    def __init__(self) -> None:
        self._chunks = [b"data: 1\n\n", b""]
        self._buffered = b"data: 0\n\n"

    def read_nowait(self) -> bytes:
        buffered, self._buffered = self._buffered, b""
        return buffered

    async def readany(self) -> bytes:
        return self._chunks.pop(0)


async def test_bytes_taken_with_the_head_are_recorded_and_not_offered_again() -> None:
    """What ``take_arrived`` hands the caller (to send with the head) is the receipt's
    first bytes, and the sink gets only what came after."""
    live = SimpleNamespace(content=_BufferedBody(), close=lambda: None)
    kept: list[bytes] = []

    async def settle(effect: Effect, ending: Ending) -> Effect:
        kept.append(ending.response.body)
        return effect

    async def unused(*_: object) -> Effect:
        raise AssertionError("no renewal within the lease")

    async def release() -> None:
        return None

    stream = RecordedStream(
        cast(Effect, SimpleNamespace(effect_id="e-2")),
        StoredResponse(200, "OK", [("Content-Type", "text/event-stream")], b""),
        cast(aiohttp.ClientResponse, live),
        idle_timeout=5.0,
        max_body=1024,
        settle=settle,
        renew=unused,
        release=release,
        lease_ends_in=60.0,
        renew_lease=60.0,
    )
    assert stream.take_arrived() == b"data: 0\n\n"
    offered: list[bytes] = []

    async def sink(chunk: bytes) -> None:
        offered.append(chunk)

    ended = await asyncio.wait_for(stream.run(sink), 10)
    assert ended.finished
    assert offered == [b"data: 1\n\n"]
    assert kept == [b"data: 0\n\ndata: 1\n\n"]
    with pytest.raises(RuntimeError):
        stream.take_arrived()
