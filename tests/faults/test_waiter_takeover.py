"""A duplicate waiting on a request whose proxy was killed does not wait for nothing.

Proxy A sends a charge the target commits and never answers, then dies by SIGKILL:
nothing will ever move its effect again, but its lease still runs. A duplicate with
the same key at proxy B (another process on the same ledger, its reconciler off so
that only the waiting duplicate can notice) asks to wait 30 s. The moment the lease
has run out by the database's clock, the duplicate decides again, as any later retry
would: for the idempotent target it takes the effect over and resends the same derived
key (the target answers with the charge it already holds), for the unsafe target it
answers ``outcome_unknown`` at once and sends nothing. The target's table is the
ground truth: one charge either way.
"""

from __future__ import annotations

import asyncio
import signal
import time
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from tests.faults.audit import read_charges
from tests.faults.load import PROBLEMS, Op
from tests.faults.procs import Proxy, ProxyLauncher, Target, poll, start_target

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

WAIT = 30  # seconds the duplicate asks to wait: far beyond the lease
# The faults routes: timeout 2 s, queue timeout 1 s, lease grace 500 ms.
LEASE = 3.5
# From the duplicate's arrival: the lease left, one poll, the takeover and the resend.
WITHIN = LEASE + 3.0


async def send(proxy: Proxy, op: Op, *headers: tuple[str, str]) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT + 15)) as s,
        s.post(
            f"{proxy.url}/{op.mode}/v1/charges",
            data=op.body,
            headers={
                "Content-Type": "application/json",
                "Operation-Key": op.key,
                **dict(headers),
            },
        ) as response,
    ):
        document = await response.json(content_type=None)
        return response.status, {"headers": dict(response.headers), "body": document}


async def charges_of(target: Target, order: str) -> int:
    return len((await asyncio.to_thread(read_charges, target.db)).get(order, []))


async def killed_mid_flight(
    stack: AsyncExitStack, tmp_path: Path, database_url: str, op: Op
) -> tuple[Target, Proxy, asyncio.Task[tuple[int, dict]]]:
    """The target, proxy B, and proxy A's request, left in flight by A's death after
    the target committed the charge."""
    target = await start_target(stack, tmp_path)
    launcher = ProxyLauncher(
        stack,
        tmp_path,
        database_url,
        target,
        settings={"EFFECT_BROKER_RECONCILER": "false"},
    )
    first, second = await launcher.start(), await launcher.start()
    await target.withhold_answers(1)
    original = asyncio.create_task(send(first, op))

    async def committed() -> bool | None:
        return True if await charges_of(target, op.key) == 1 else None

    await poll(committed, timeout=10, what="the target to commit the first charge")
    first.process.signal(signal.SIGKILL)
    await first.process.wait_exit(10)
    return target, second, original


@pytest.mark.parametrize("mode", ["idempotent", "unsafe"])
async def test_a_waiting_duplicate_decides_once_the_dead_holders_lease_ends(
    database_url: str, tmp_path: Path, mode: str
) -> None:
    op = Op(f"takeover-{mode}", mode, 4200)
    async with AsyncExitStack() as stack:
        target, second, original = await killed_mid_flight(
            stack, tmp_path, database_url, op
        )
        started = time.monotonic()
        # Two duplicates wait at B: one takes the effect over, the other waits on
        # until that work ends, then answers from the ledger (no race for the row).
        answers = await asyncio.gather(
            *(send(second, op, ("Prefer", f"wait={WAIT}")) for _ in range(2))
        )
        took = time.monotonic() - started
        charges = await charges_of(target, op.key)
        assert original.done(), "the killed proxy's client is still connected"
        assert isinstance(original.exception(), aiohttp.ClientError)

    assert took < WITHIN, f"the duplicates waited {took:.1f}s for a dead holder"
    assert charges == 1, f"{charges} charges for one operation"
    for status, answer in answers:
        if mode == "idempotent":
            # Taken over and resent with the same derived key: the target's charge.
            assert status == 201, answer
            assert answer["headers"]["Effect-Status"] == "succeeded"
            assert answer["body"]["order_id"] == op.key
        else:
            # Nothing may be resent: the honest answer at once, not after 30 s.
            assert status == 409, answer
            assert answer["body"]["type"] == PROBLEMS + "outcome-unknown", answer
            assert answer["headers"]["Effect-Status"] == "outcome_unknown"
    if mode == "idempotent":
        assert answers[0][1]["body"] == answers[1][1]["body"]  # one charge, one answer
