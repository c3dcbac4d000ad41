"""The send fence, end to end: a sender that wakes after its lease could have run out
sends nothing, and nothing decides a lease on the proxy's own clock.

The paused sender is a request held between its attempt's commit and its send (the
spot a SIGSTOP hits in the zombie schedule, which tests/crash/test_explore.py drives
with real processes); the target's own table says how many charges really happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from effect_broker.engine import dispatch
from effect_broker.engine import engine as engine_module
from tests.integration.harness import PROBLEMS, Answer, Broker, running_broker
from tests.integration.proxy_support import charge, post
from tests.support import poll

TICKETS = "/tickets/v1/charges"  # the harness's reconcilable route


@dataclass
class Hold:
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def first_send_held(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hold]:
    """Hold the first upstream send after its attempt committed until ``release`` is
    set (later sends go straight out): the zombie's pause, in one process."""
    real_send = dispatch.send
    hold = Hold()

    async def send(*args: Any, **kwargs: Any) -> Any:
        if not hold.entered.is_set():
            hold.entered.set()
            await hold.release.wait()
        return await real_send(*args, **kwargs)

    monkeypatch.setattr(dispatch, "send", send)
    try:
        yield hold
    finally:
        hold.release.set()


async def effect_row(database_url: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchrow(
            "SELECT status, attempts, lease_expires_at < now() AS lease_over "
            "FROM effects ORDER BY created_at DESC LIMIT 1"
        )
    finally:
        await conn.close()


def post_ticket(broker: Broker, key: str, order: str) -> Awaitable[Answer]:
    return post(broker.proxy_url + TICKETS, key=key, body=charge(order))


@pytest.mark.timeout(60)
async def test_a_sender_woken_after_a_takeover_sends_nothing(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commits its attempt and stalls; after the lease the effect is taken over,
    probed (absent) and sent again; A wakes: one charge, and A is told it sent nothing
    or that someone else owns the effect, never a success of its own."""
    async with (
        first_send_held(monkeypatch) as hold,
        running_broker(
            database_url,
            tmp_path,
            timeout="300ms",
            settlement_bound="200ms",
            upstream_queue_timeout=timedelta(milliseconds=100),
            lease_grace=timedelta(milliseconds=200),
        ) as broker,
    ):
        zombie = asyncio.ensure_future(post_ticket(broker, "t-1", "order-z"))
        await hold.entered.wait()

        async def settled_by_someone_else() -> bool:
            retry = await post_ticket(broker, "t-1", "order-z")
            return retry.headers.get("Effect-Status") == "succeeded"

        await poll(settled_by_someone_else, within=15.0)
        assert len(broker.charges("order-z")) == 1
        hold.release.set()
        woken = await zombie

        assert woken.status in (409, 503), woken
        assert woken.problem["type"] in (
            PROBLEMS + "send-withheld",
            PROBLEMS + "in-flight",
        )
        assert len(broker.charges("order-z")) == 1
        row = await effect_row(database_url)
        assert row is not None and row["status"] == "succeeded"


@pytest.mark.timeout(60)
async def test_a_sender_held_past_its_window_withholds_and_says_so(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody took over, but the lease could have run out: nothing goes out, the
    client hears 503 send-withheld, and the same key later sends it once."""
    async with (
        first_send_held(monkeypatch) as hold,
        running_broker(
            database_url,
            tmp_path,
            timeout="300ms",
            upstream_queue_timeout=timedelta(milliseconds=100),
            lease_grace=timedelta(milliseconds=200),
            reconciler=False,
        ) as broker,
    ):
        held = asyncio.ensure_future(post_ticket(broker, "t-2", "order-w"))
        await hold.entered.wait()

        async def window_closed() -> bool:
            row = await effect_row(database_url)
            return row is not None and bool(row["lease_over"])

        await poll(window_closed, within=15.0)
        hold.release.set()
        answer = await held

        assert answer.status == 503
        assert answer.problem["type"] == PROBLEMS + "send-withheld"
        assert "nothing was sent" in answer.problem["detail"]
        assert answer.headers["Effect-Status"] == "retryable"
        assert broker.charges("order-w") == []

        again = await post_ticket(broker, "t-2", "order-w")
        assert again.status == 201, again
        assert len(broker.charges("order-w")) == 1


@pytest.mark.timeout(60)
async def test_a_proxy_clock_an_hour_ahead_does_not_take_over_a_live_lease(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases are stamped on the database's clock and read on it: a proxy whose own
    clock runs ahead must still see another sender's lease as live (409 in-flight)."""

    class AheadByAnHour(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz or UTC) + timedelta(hours=1)

    async with (
        first_send_held(monkeypatch) as hold,
        running_broker(database_url, tmp_path, timeout="5s", reconciler=False) as broker,
    ):
        first = asyncio.ensure_future(post_ticket(broker, "t-3", "order-c"))
        await hold.entered.wait()
        monkeypatch.setattr(engine_module, "datetime", AheadByAnHour)

        duplicate = await post_ticket(broker, "t-3", "order-c")

        assert duplicate.status == 409, duplicate
        assert duplicate.problem["type"] == PROBLEMS + "in-flight"
        row = await effect_row(database_url)
        assert row is not None
        assert (row["status"], row["attempts"]) == ("dispatching", 1)
        hold.release.set()
        assert (await first).status == 201
        assert len(broker.charges("order-c")) == 1
