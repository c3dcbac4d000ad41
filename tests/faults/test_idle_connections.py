"""5,000 idle connections on the proxy port, and the proxy keeps serving.

Any local process can open thousands of sockets to a sidecar and send nothing. With the
connection cap above that number and the timeouts longer than the test, every idle
connection stays open and unanswered, while new requests still get their effects
recorded and answered in time, pass-through flows, and ``/readyz`` on the admin port
says ready. The file limit is respected: the test raises its soft ``RLIMIT_NOFILE`` only
as far as the hard limit allows (the proxy inherits it) and opens fewer connections
when even that is too low.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.faults.load import Deadline, make_ops, pass_through
from tests.faults.scenario import scenario
from tests.integration.harness import address

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

IDLE = 5000
SPARE_FDS = 1024  # for everything else each process has open
BATCH = 250
OPS = 150
TIMELY = 3.0


class Idle(asyncio.Protocol):
    """A client connection that never sends a byte, and notes what it is sent."""

    def __init__(self) -> None:
        self.received = 0
        self.closed = False
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True


@contextmanager
def file_limit(wanted: int) -> Iterator[int]:
    """Raise the soft fd limit towards ``wanted`` (never past the hard limit); yields
    the limit in force, and restores the old one afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
    try:
        yield resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def open_idle(url: str, count: int) -> list[Idle]:
    host, port = address(url)
    loop = asyncio.get_running_loop()
    idle: list[Idle] = []
    for start in range(0, count, BATCH):
        batch = await asyncio.gather(
            *(
                loop.create_connection(Idle, host, port)
                for _ in range(min(BATCH, count - start))
            )
        )
        idle += [protocol for _, protocol in batch]
    return idle


async def test_5000_idle_connections_do_not_stop_the_proxy(
    database_url: str, tmp_path: Path
) -> None:
    with file_limit(IDLE + SPARE_FDS) as limit:
        count = min(IDLE, limit - SPARE_FDS)
        assert count >= 1000, f"the file limit ({limit}) is too low for this test"
        settings = {
            "EFFECT_BROKER_MAX_CONNECTIONS": str(count + SPARE_FDS // 2),
            "EFFECT_BROKER_HEADER_TIMEOUT": "120s",
            "EFFECT_BROKER_KEEPALIVE_TIMEOUT": "120s",
        }
        async with scenario(
            "idle connections", tmp_path, database_url, settings=settings
        ) as run:
            idle = await open_idle(run.proxy.url, count)
            try:
                started = time.monotonic()
                ready = await run.readyz()
                ready_took = time.monotonic() - started
                ops = make_ops("idle", OPS)
                _, passed = await asyncio.gather(
                    run.agent.run(ops, deadline=Deadline.after(60)),
                    pass_through(run.proxy.url, run.target.url, 20),
                )
                load = list(run.agent.replies)
                disturbed = [p for p in idle if p.closed or p.received]
            finally:
                for protocol in idle:
                    if protocol.transport is not None:
                        protocol.transport.close()
            audit, stuck = await run.finish(ops)
    slowest = max(r.finished - r.started for r in load)
    print(
        f"  {count} idle connections, {len(disturbed)} disturbed; /readyz {ready} in "
        f"{ready_took:.2f}s; slowest effect {slowest:.2f}s, "
        f"pass-through {max(passed):.2f}s"
    )
    assert ready == 200 and ready_took < TIMELY
    assert all(r.ok for r in load), run.agent.kinds(load)
    assert slowest < TIMELY
    assert max(passed) < TIMELY
    assert disturbed == [], f"{len(disturbed)} idle connections were answered or closed"
    assert not stuck, [op.key for op in stuck]
    assert audit.violations == [], audit.table()
