"""PostgreSQL stopped (fast shutdown) and restarted under load.

The ledger is the proxy's only authority, so a database outage must make it refuse
honestly (``store-unavailable``: nothing was sent) or, when bytes already left, say the
outcome is unknown; never a 2xx without a receipt, never a charge behind a "nothing was
sent", and once the database is back the same keys must converge to one charge each.
The server is an embedded PostgreSQL of this test's own: the system server is never
stopped.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest

from effect_broker.demo.explorer import OwnedPostgres
from tests.faults.load import Deadline, make_ops
from tests.faults.procs import migrated_database
from tests.faults.scenario import scenario

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

OPS = 300
LOAD_SECONDS = 60.0  # to send every op, counted again at the fault and at recovery
WITHHELD = 6  # charges committed, answers lost, just before the fault
OUTAGE_REPLIES = 40  # replies the agent must get while the database is down


async def test_postgres_fast_shutdown_and_restart_mid_load(tmp_path: Path) -> None:
    # Not under pytest's base directory: a concurrent pytest run resets that to 0700,
    # and the server runs as another user when the tests run as root.
    home = Path(tempfile.mkdtemp(prefix="eb-faults-pg-"))
    home.chmod(0o755)
    postgres = OwnedPostgres(home / "data")
    try:
        server = await asyncio.to_thread(postgres.start)
        dsn = await migrated_database(server, "ledger")
        settings = {"EFFECT_BROKER_POOL_MAX_SIZE": "8"}
        async with scenario("postgres restart", tmp_path, dsn, settings=settings) as run:
            ops = make_ops("pg", OPS)
            load_bound = Deadline.after(LOAD_SECONDS)
            load = asyncio.create_task(run.agent.run(ops, deadline=load_bound))
            try:
                await run.wait_answered(OPS // 3, timeout=30)
                await run.target.withhold_answers(WITHHELD)
                await asyncio.to_thread(postgres.stop_fast)
                load_bound.extend(LOAD_SECONDS)  # not to run out while it is down
                down_at = run.agent.answered
                await run.wait_answered(down_at + OUTAGE_REPLIES, timeout=20)
                run.agent.flowing.clear()
                assert await run.readyz() == 503
                await asyncio.to_thread(postgres.start_again)
                await run.wait_ready()
                load_bound.extend(LOAD_SECONDS)
            finally:
                run.agent.flowing.set()
                unsent = await load
            during = run.agent.replies[down_at : down_at + OUTAGE_REPLIES]
            audit, stuck = await run.finish(ops)
        assert not unsent, f"{len(unsent)} operations never sent within the bound"
        kinds = run.agent.kinds(during)
        assert kinds["503 store-unavailable"] > 0, kinds  # the outage was really met
        assert kinds["2xx"] < len(during), kinds
        assert not stuck, [op.key for op in stuck]
        assert audit.violations == [], audit.table()
    finally:
        await asyncio.to_thread(postgres.cleanup)
        shutil.rmtree(home, ignore_errors=True)
