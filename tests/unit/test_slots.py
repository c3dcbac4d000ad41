"""Per-route upstream slots: a free slot is taken at once, a full route queues in order
and gives up after the queue bound."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from effect_broker.engine.slots import NoFreeSlot, UpstreamSlots
from tests.support import poll


async def test_a_free_slot_is_taken_and_given_back() -> None:
    slots = UpstreamSlots(per_route=2, queue_timeout=timedelta(seconds=5))
    # Two of one route and one of another (routes do not share slots) at once.
    async with slots.hold("pay"), slots.hold("pay"), slots.hold("other"):
        pass
    # All given back: two more holds at once still need no wait.
    async with slots.hold("pay"), slots.hold("pay"):
        pass


async def test_a_full_route_gives_up_after_the_queue_bound() -> None:
    slots = UpstreamSlots(per_route=1, queue_timeout=timedelta(milliseconds=50))
    async with slots.hold("pay"):
        with pytest.raises(NoFreeSlot, match=r"stayed busy for 0\.05s"):
            async with slots.hold("pay"):
                pass
    async with slots.hold("pay"):  # the refused waiter took nothing
        pass


async def test_queued_requests_go_before_a_newcomer() -> None:
    slots = UpstreamSlots(per_route=1, queue_timeout=timedelta(seconds=5))
    order: list[str] = []

    async def take(name: str) -> None:
        async with slots.hold("pay"):
            order.append(name)

    first = slots.hold("pay")
    await first.__aenter__()
    waiter = asyncio.create_task(take("queued"))
    semaphore = slots._semaphores["pay"]
    await poll(lambda: semaphore._waiters, what="the second request to queue")
    await first.__aexit__(None, None, None)
    newcomer = asyncio.create_task(take("newcomer"))  # a slot is free, one is queued
    await asyncio.gather(waiter, newcomer)
    assert order == ["queued", "newcomer"]
