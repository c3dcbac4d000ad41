"""What each scenario breaks, and how its observation is taken.

One coroutine per scenario: start the cell's target and proxy, break something while
the scripted agent keeps asking, then ``observe`` once the ledger has settled.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from typing import Any, TypeVar

from effect_broker import failpoints
from effect_broker.demo.crash_matrix.agent import AgentResult
from effect_broker.demo.crash_matrix.cells import DEATH_TIMEOUT, Cell
from effect_broker.demo.crash_matrix.ledger import SETTLE_TIMEOUT, Ledger
from effect_broker.demo.crash_matrix.processes import CellError, Target, poll
from effect_broker.demo.crash_matrix.verdicts import (
    COMMIT_RACE,
    CONCURRENT,
    CONCURRENT_AGENTS,
    NAIVE,
    SIGKILL_IN_FLIGHT,
    SIGKILL_MID_STREAM,
    TOMBSTONE_RACE,
    ZOMBIE,
    Observation,
)

T = TypeVar("T")

# --------------------------------------------------------------------------- scenarios


async def crash_at_failpoint(cell: Cell, name: str) -> Observation:
    """The proxy kills itself at ``name`` during the agent's first attempt."""
    target = await cell.start_target()
    armed = await cell.start_proxy(failpoint=name)
    async with asking(cell.run_agent(armed.url)) as result:
        code = await armed.process.wait_exit(DEATH_TIMEOUT)
        if code != failpoints.EXIT_CODE:
            raise CellError(f"the armed proxy exited {code}, not {failpoints.EXIT_CODE}")
        await cell.restart(armed)
    return await observe(cell, target, [await result])


async def sigkill_in_flight(cell: Cell) -> Observation:
    """The target committed; the proxy is SIGKILLed before its answer (or receipt)."""
    target = await cell.start_target()
    await target.withhold_next_answer()
    proxy = await cell.start_proxy()
    async with asking(cell.run_agent(proxy.url)) as result:
        await target.wait_for_charge()
        proxy.process.signal(signal.SIGKILL)
        await proxy.process.wait_exit(DEATH_TIMEOUT)
        await cell.restart(proxy)
    return await observe(cell, target, [await result])


async def sigkill_mid_stream(cell: Cell) -> Observation:
    """The target committed and is streaming its answer; the proxy, passing the stream
    on while it records it, is SIGKILLed with half of the body through."""
    target = await cell.start_target()
    await target.stream_next_answer()
    proxy = await cell.start_proxy()
    async with asking(cell.run_agent(proxy.url)) as result:
        await target.wait_for_log(
            "answer streaming", "the target to stream half of its answer"
        )
        proxy.process.signal(signal.SIGKILL)
        await proxy.process.wait_exit(DEATH_TIMEOUT)
        await cell.restart(proxy)
    return await observe(cell, target, [await result])


async def concurrent(cell: Cell) -> Observation:
    """Ten agents, one intent, no failure: one dispatch, nine joins or replays."""
    target = await cell.start_target()
    proxy = await cell.start_proxy()
    results = await asyncio.gather(
        *(cell.run_agent(proxy.url) for _ in range(CONCURRENT_AGENTS))
    )
    return await observe(cell, target, results)


async def zombie(cell: Cell) -> Observation:
    """A frozen proxy outlives its lease; its late write, on waking, must be refused."""
    target = await cell.start_target()
    await target.withhold_next_answer()
    first = await cell.start_proxy()
    async with asking(cell.run_agent(first.url)) as result:
        await target.wait_for_charge()
        first.process.signal(signal.SIGSTOP)
        second = await cell.start_proxy()

        async def taken_over() -> Ledger | None:
            ledger = await cell.ledger()
            if ledger is None or not ledger.at_rest(cell.mode):
                return None
            return ledger if await cell.claimed_by(second) else None

        await poll(taken_over, timeout=SETTLE_TIMEOUT, what="the second proxy's takeover")
        first.process.signal(signal.SIGCONT)

        async def fenced() -> float | None:
            count = await first.fenced_writes()
            return count if count > 0 else None

        fenced_writes = await poll(
            fenced, timeout=SETTLE_TIMEOUT, what="the woken proxy's fenced write"
        )
    seen = await observe(cell, target, [await result], fenced=fenced_writes)
    late_writes = await cell.writes_after_takeover(zombie=first, successor=second)
    last_actor = seen.ledger.last_actor if seen.ledger else ""
    return replace(
        seen,
        taken_over=True,
        second_proxy_kept_it=late_writes == 0 and f":{second.process.pid}:" in last_actor,
    )


async def tombstone_race(cell: Cell) -> Observation:
    """The attempt holds its transaction open; the proxy's tombstone commits first.

    Only once the ledger holds the tombstone's proof is the held transaction let go: its
    receipt INSERT then meets the tombstone's row and fails, and its charge rolls back.
    """
    target = await cell.start_target()
    await target.arm("hold_before_receipt")
    proxy = await cell.start_proxy()
    async with asking(cell.run_agent(proxy.url)) as result:
        await target.wait_until_held()
        await cell.wait_for_event("absence_proven", "the tombstone's proof of absence")
        await target.release()
        # Counted only once the held attempt has met the tombstone and rolled back:
        # an uncommitted charge is invisible, so counting earlier would prove nothing.
        await target.wait_for_log(
            "lost the attempt key (rolled back)", "the held attempt to lose its key"
        )
    return await observe(cell, target, [await result])


async def commit_race(cell: Cell) -> Observation:
    """The attempt's receipt is written and its COMMIT held: the tombstone must wait.

    Once a lookup has come back inconclusive (the tombstone could not take the key the
    held transaction has), the COMMIT goes through; the next lookup must find it.
    """
    target = await cell.start_target()
    await target.arm("hold_before_commit")
    proxy = await cell.start_proxy()
    async with asking(cell.run_agent(proxy.url)) as result:
        await target.wait_until_held()
        await cell.wait_for_event("lookup_unknown", "an inconclusive lookup")
        await target.release()
    return await observe(cell, target, [await result])


async def naive(cell: Cell) -> Observation:
    """No proxy: a fresh key per attempt and a 1 s timeout against a late answer."""
    target = await cell.start_target()
    await target.withhold_next_answer()
    result = await cell.run_agent(target.url, naive=True)
    return Observation(cell.mode, cell.scenario, await target.charges(), None, (result,))


@asynccontextmanager
async def asking(agent_run: Coroutine[Any, Any, T]) -> AsyncIterator[asyncio.Task[T]]:
    """Run an agent in the background while the block breaks things around it.

    If the block fails, the agent is cancelled and awaited, so no request outlives it.
    """
    task = asyncio.create_task(agent_run)
    try:
        yield task
    except BaseException:
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task
        raise


async def observe(
    cell: Cell,
    target: Target,
    agents: Sequence[AgentResult],
    *,
    fenced: float | None = None,
) -> Observation:
    """Wait for the ledger to settle, *then* count the target's charges.

    Counting first could miss a redispatch still to come; once the effect is settled
    (or provably waits for a person) nothing more will be sent for it.
    """
    ledger: Ledger | None
    try:
        ledger = await cell.settled_ledger()
    except CellError:
        ledger = await cell.ledger()  # judged as it is: unsettled fails the rules
    return Observation(
        cell.mode,
        cell.scenario,
        await target.charges(),
        ledger,
        tuple(agents),
        fenced=fenced,
    )


async def run_scenario(cell: Cell) -> Observation:
    if cell.scenario in failpoints.ALL:
        return await crash_at_failpoint(cell, cell.scenario)
    scenarios: dict[str, Callable[[Cell], Awaitable[Observation]]] = {
        SIGKILL_IN_FLIGHT: sigkill_in_flight,
        SIGKILL_MID_STREAM: sigkill_mid_stream,
        CONCURRENT: concurrent,
        ZOMBIE: zombie,
        TOMBSTONE_RACE: tombstone_race,
        COMMIT_RACE: commit_race,
        NAIVE: naive,
    }
    return await scenarios[cell.scenario](cell)
