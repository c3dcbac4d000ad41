"""``kill -9`` of the proxy under load, a restart on the same ports, and load again.

A proxy killed mid-flight leaves effects recorded as dispatching, some of them already
committed at the target. Its successor's reconciler must take them over once their
lease runs out and settle them as far as each contract can prove: the same derived key
resent to the idempotent target, a lookup at the reconcilable one, and for the unsafe
target an ``outcome_unknown`` that is shown, never resent. A killed proxy cannot know
whether an unsafe dispatch left, so an unsafe unknown without a charge is allowed here.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.faults.load import Deadline, make_ops
from tests.faults.scenario import scenario

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

OPS = 300
LOAD_SECONDS = 60.0  # to send every op, counted again at the fault and at recovery
WITHHELD = 6  # charges committed, answers lost, just before the fault
DOWN_REPLIES = 16  # replies (no answer at all) the agent must get while no proxy runs


async def test_proxy_sigkill_and_restart_mid_load(
    database_url: str, tmp_path: Path
) -> None:
    async with scenario("proxy kill -9", tmp_path, database_url) as run:
        ops = make_ops("kill", OPS)
        load_bound = Deadline.after(LOAD_SECONDS)
        load = asyncio.create_task(run.agent.run(ops, deadline=load_bound))
        try:
            await run.wait_answered(OPS // 3, timeout=30)
            await run.target.withhold_answers(WITHHELD)
            run.proxy.process.signal(signal.SIGKILL)  # a power cut, no cleanup
            load_bound.extend(LOAD_SECONDS)  # not to run out while it is down
            await run.proxy.process.wait_exit(10)
            killed_at = run.agent.answered
            await run.wait_answered(killed_at + DOWN_REPLIES, timeout=20)
            run.agent.flowing.clear()
            run.proxy = await run.launcher.restart(run.proxy)
            await run.wait_ready()
            load_bound.extend(LOAD_SECONDS)
        finally:
            run.agent.flowing.set()
            unsent = await load
        during = run.agent.replies[killed_at : killed_at + DOWN_REPLIES]
        after = run.agent.replies[killed_at + DOWN_REPLIES :]
        audit, stuck = await run.finish(ops, strict_unsafe=False)
    assert not unsent, f"{len(unsent)} operations never sent within the bound"
    assert all(reply.status is None for reply in during), run.agent.kinds(during)
    assert any(reply.ok for reply in after), run.agent.kinds(after)  # it kept going
    assert not stuck, [op.key for op in stuck]
    assert audit.violations == [], audit.table()
