"""The shape every fault scenario shares: processes up, load, fault, retries, audit.

A scenario starts the payment target and a proxy on a ledger, runs the agent while it
breaks something, then lets the agent retry with the same keys, waits for the ledger to
come to rest and audits the result. Its table is printed (``pytest -s`` shows it) and
returned so the test can also assert on what the fault really did.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.faults.audit import Audit, settle_and_collect
from tests.faults.load import Agent, Op
from tests.faults.procs import Proxy, ProxyLauncher, Target, poll, start_target

RETRY_SECONDS = 45.0
SETTLE_SECONDS = 30.0


@dataclass
class Scenario:
    name: str
    directory: Path
    database_url: str
    stack: AsyncExitStack
    target: Target
    launcher: ProxyLauncher
    proxy: Proxy
    agent: Agent

    async def wait_answered(self, count: int, *, timeout: float) -> None:
        """Until the agent has ``count`` replies in all (polled, with a deadline)."""

        async def look() -> bool | None:
            return True if self.agent.answered >= count else None

        await poll(look, timeout=timeout, what=f"{count} replies")

    async def readyz(self) -> int:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"{self.proxy.admin_url}/readyz") as response,
        ):
            return response.status

    async def wait_ready(self, *, timeout: float = 30.0) -> None:
        async def look() -> bool | None:
            try:
                return True if await self.readyz() == 200 else None
            except (aiohttp.ClientError, TimeoutError):
                return None

        await poll(look, timeout=timeout, what="/readyz to answer 200")

    async def finish(
        self, ops: Sequence[Op], *, strict_unsafe: bool = True
    ) -> tuple[Audit, list[Op]]:
        """Let the reconciler settle what it can alone, then retry every op that is
        not final with the same key, let it settle again, audit, print the table.

        Every effect in the ledger must come to rest through the reconciler alone: a
        client that never retries must not leave work behind. Returns the audit (its
        ``violations`` checked) and the ops still not final at the retry deadline.
        """
        fault_replies = list(self.agent.replies)
        started = time.monotonic()
        alone = await settle_and_collect(
            self.database_url, self.target.db, timeout=SETTLE_SECONDS
        )
        took = time.monotonic() - started
        stuck = await self.agent.retry_until_settled(ops, seconds=RETRY_SECONDS)
        retry_replies = self.agent.replies[len(fault_replies) :]
        evidence = await settle_and_collect(
            self.database_url, self.target.db, timeout=SETTLE_SECONDS
        )
        audit = Audit(
            self.name, ops, fault_replies, retry_replies, evidence, strict_unsafe
        )
        for key, ledger in sorted(alone.effects.items()):
            if not ledger.at_rest():
                audit.violations.append(
                    f"{key}: the reconciler alone left it {ledger.status} "
                    f"for {SETTLE_SECONDS:g}s"
                )
        audit.check()
        print(f"\n  the reconciler alone settled the ledger in {took:.1f}s", end="")
        print("\n" + audit.table(), flush=True)
        return audit, stuck


@asynccontextmanager
async def scenario(
    name: str,
    directory: Path,
    database_url: str,
    *,
    settings: Mapping[str, str] | None = None,
    slow: Callable[[AsyncExitStack, Target], Awaitable[str]] | None = None,
    concurrency: int = 8,
) -> AsyncIterator[Scenario]:
    """Target, proxy and agent for one scenario; every process stopped on the way out.

    ``slow`` starts the upstream of the ``slow`` route (given the target) and returns
    its URL; without it that route goes straight to the target.
    """
    started = time.monotonic()
    async with AsyncExitStack() as stack:
        target = await start_target(stack, directory)
        slow_url = await slow(stack, target) if slow is not None else None
        launcher = ProxyLauncher(
            stack, directory, database_url, target, slow_url=slow_url, settings=settings
        )
        proxy = await launcher.start()
        agent = Agent(proxy.url, concurrency=concurrency)
        yield Scenario(
            name, directory, database_url, stack, target, launcher, proxy, agent
        )
    print(f"  {name}: {time.monotonic() - started:.1f}s", flush=True)
