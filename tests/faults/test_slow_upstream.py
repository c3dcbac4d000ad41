"""A slow target holds 200 requests while other routes and pass-through keep flowing.

The ``slow`` route's upstream is a gate in front of the payment target: it holds every
request until the test opens it, then forwards it, so the target's table still counts
every charge. With 200 requests held there, more requests on that route must be
refused quickly and truthfully (``upstream-busy``: nothing sent), while the other
routes (the unsafe one included) and pass-through answer in time with the target's own
answers. Once the gate opens, every held request is charged exactly once.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.faults.load import Agent, Deadline, Reply, make_ops, pass_through
from tests.faults.procs import Target, poll
from tests.faults.scenario import scenario
from tests.integration.harness import serve_app

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

HELD = 200
EXTRA = 20  # sent to the slow route once it is full: each must be upstream-busy
OTHER_OPS = 90
PASSTHROUGH = 30
QUEUE_TIMEOUT = 2.0
TIMELY = 2.0  # seconds: an answer on a route with free connections comes within this


class Gate:
    """The slow target: holds each request until ``opened``, then forwards it."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.opened = asyncio.Event()
        self.holding = 0

    async def full(self) -> bool | None:
        """For ``poll``: True once ``HELD`` requests wait here."""
        return True if self.holding >= HELD else None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.holding += 1
        try:
            await self.opened.wait()
        finally:
            self.holding -= 1
        forwarded = {
            name: request.headers[name]
            for name in ("Idempotency-Key", "Content-Type")
            if name in request.headers
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.target.url}{request.path_qs}", data=body, headers=forwarded
            ) as answer,
        ):
            return web.Response(
                status=answer.status,
                body=await answer.read(),
                content_type=answer.content_type,
            )


async def test_a_slow_route_with_200_in_flight_starves_nobody(
    database_url: str, tmp_path: Path
) -> None:
    gates: list[Gate] = []

    async def slow(stack: AsyncExitStack, target: Target) -> str:
        gate = Gate(target)
        gates.append(gate)
        app = web.Application()
        app.router.add_post("/{tail:.*}", gate.handle)
        return await stack.enter_async_context(serve_app(app))

    settings = {
        "EFFECT_BROKER_UPSTREAM_CONNECTIONS": str(HELD),
        "EFFECT_BROKER_UPSTREAM_QUEUE_TIMEOUT": f"{QUEUE_TIMEOUT:g}s",
    }
    async with scenario(
        "slow upstream", tmp_path, database_url, settings=settings, slow=slow
    ) as run:
        (gate,) = gates
        held_ops = make_ops("slow", HELD + EXTRA, modes=("slow",))
        holders = Agent(run.proxy.url, concurrency=HELD, timeout=90)
        held = asyncio.create_task(
            holders.run(held_ops[:HELD], deadline=Deadline.after(60))
        )
        try:
            await poll(gate.full, timeout=30, what="200 requests held at the target")
            refused = Agent(run.proxy.url, concurrency=EXTRA)
            await refused.run(held_ops[HELD:], deadline=Deadline.after(30))
            await refused.run(held_ops[:1], deadline=Deadline.after(30))  # held one
            others = make_ops("other", OTHER_OPS)
            flowing = run.agent.run(others, deadline=Deadline.after(30))
            _, passed = await asyncio.gather(
                flowing, pass_through(run.proxy.url, run.target.url, PASSTHROUGH)
            )
            ready = await run.readyz()
            still_held = gate.holding
        finally:
            gate.opened.set()
            await held
        other_replies = list(run.agent.replies)
        run.agent.replies[:0] = [*holders.replies, *refused.replies]
        audit, stuck = await run.finish([*held_ops, *others])

    *busy, again = refused.replies
    print(
        f"  slowest answer: busy {_slowest(busy):.2f}s, other routes "
        f"{_slowest(other_replies):.2f}s, pass-through {max(passed):.2f}s; "
        f"held at the target {still_held}, a held key again: {again.kind}"
    )
    assert [r.kind for r in busy] == ["503 upstream-busy"] * EXTRA
    assert _slowest(busy) < QUEUE_TIMEOUT + TIMELY
    assert again.kind == "409 in-flight"  # the same key is not sent a second time
    assert still_held >= HELD  # everything above happened while the 200 were held
    assert all(r.ok for r in other_replies), run.agent.kinds(other_replies)
    assert _slowest(other_replies) < TIMELY
    assert max(passed) < TIMELY and ready == 200
    assert all(r.ok for r in holders.replies), holders.kinds()
    assert not stuck, [op.key for op in stuck]
    assert audit.violations == [], audit.table()


def _slowest(replies: list[Reply]) -> float:
    return max(reply.finished - reply.started for reply in replies)
