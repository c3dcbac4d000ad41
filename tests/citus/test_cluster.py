"""The ledger distributed by tenant on a real Citus cluster (the opt-in run).

Run with ``EFFECT_BROKER_TEST_CITUS_URL`` set to a coordinator (deploy/citus/cluster.sh);
the shared fixtures then distribute every test's ledger, so the ledger, reserve and
reconciler test modules that docs/how-to/citus.md lists run on the cluster too. This
module adds what only a cluster shows, and the crash matrix's kill and zombie cells on
distributed ledgers. Without the variable it is skipped with one line that says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from effect_broker.demo import crash_matrix
from effect_broker.demo.crash_matrix.verdicts import SIGKILL_IN_FLIGHT, ZOMBIE
from effect_broker.models import EffectStatus
from effect_broker.store import Store
from effect_broker.store.distribute import DISTRIBUTED_TABLES, distribute, is_distributed
from tests.citus_support import SKIP_REASON, citus_url, create_ledger, drop_everywhere
from tests.integration.ledger import LEASE, reserve

if citus_url() is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)


@pytest.fixture
async def raw(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


async def test_the_ledger_tables_are_co_located_by_tenant(
    raw: asyncpg.Connection,
) -> None:
    rows = await raw.fetch(
        "SELECT logicalrelid::regclass::text AS name, partmethod::text AS method,"
        " colocationid FROM pg_dist_partition"
    )
    placed = {row["name"]: (row["method"], row["colocationid"]) for row in rows}
    assert {placed[table][0] for table in DISTRIBUTED_TABLES} == {"h"}
    assert len({placed[table][1] for table in DISTRIBUTED_TABLES}) == 1
    assert placed["tenants"][0] == "n" and placed["master_keys"][0] == "n"
    assert await is_distributed(raw)


async def test_distributing_again_changes_nothing(raw: asyncpg.Connection) -> None:
    before = await raw.fetchval("SELECT count(*) FROM pg_dist_shard")
    await distribute(raw, "citus")
    assert await raw.fetchval("SELECT count(*) FROM pg_dist_shard") == before


async def test_effects_of_fifty_tenants_land_on_both_workers(
    store: Store, raw: asyncpg.Connection
) -> None:
    for n in range(50):
        await reserve(store, tenant_id=f"tenant-{n:02d}")
    ports = await raw.fetch(
        "SELECT DISTINCT s.nodeport FROM (SELECT DISTINCT tenant_id FROM effects) t,"
        " LATERAL (SELECT nodeport FROM citus_shards WHERE shardid ="
        " get_shard_id_for_distribution_column('effects', t.tenant_id)) s"
    )
    assert len(ports) == 2
    assert await raw.fetchval("SELECT count(*) FROM effects") == 50


async def test_the_reconciler_claims_due_work_of_every_tenant(store: Store) -> None:
    tenants = [f"tenant-{n}" for n in range(6)]
    for tenant in tenants:
        effect = (await reserve(store, tenant_id=tenant)).effect
        await store.start_attempt(effect, owner="dead-proxy", lease=timedelta(0))

    claimed = await store.claim_due(owner="worker-1", lease=LEASE, limit=100)

    assert sorted(effect.tenant_id for effect in claimed) == tenants
    for effect in claimed:
        assert effect.status is EffectStatus.DISPATCHING
        assert await store.verify_events(effect.tenant_id, effect.effect_id) is None


@pytest.fixture
async def bare_cluster_database(
    server_dsn: str, template_database: str
) -> AsyncIterator[str]:
    url = await create_ledger(server_dsn, template_database, migrated=False)
    yield url
    await drop_everywhere(server_dsn, urlsplit(url).path.lstrip("/"))


async def test_the_command_migrates_and_distributes_a_cluster_database(
    bare_cluster_database: str,
) -> None:
    _register("migrate")
    argv = ["migrate", "--database-url", bare_cluster_database, "--distribute", "citus"]

    first = await asyncio.to_thread(CliRunner().invoke, app, argv)
    again = await asyncio.to_thread(CliRunner().invoke, app, argv)

    assert first.exit_code == 0, first.output
    assert "Distributed by tenant on citus 13." in first.output
    assert again.exit_code == 0, again.output
    conn = await asyncpg.connect(bare_cluster_database)
    try:
        assert await is_distributed(conn)
        recorded = await conn.fetchval("SELECT count(*) FROM ledger_distribution")
        functions = await conn.fetch(
            "SELECT objid::regprocedure::text AS name, distribution_argument_index"
            " FROM pg_dist_object WHERE classid = 'pg_proc'::regclass"
        )
    finally:
        await conn.close()
    assert recorded == 1
    by_name = {row["name"].split("(")[0]: row for row in functions}
    assert by_name["reserve_effect"]["distribution_argument_index"] is not None
    assert by_name["append_effect_event"]["distribution_argument_index"] == 0


async def test_a_later_migration_may_change_the_ledger_triggers(
    raw: asyncpg.Connection,
) -> None:
    # A new session, as a later `migrate` is: the database carries the setting.
    assert await raw.fetchval("SHOW citus.enable_unsafe_triggers") == "on"
    async with raw.transaction():
        await raw.execute(
            "CREATE FUNCTION later_guard() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RETURN NEW; END $$"
        )
        await raw.execute(
            "CREATE TRIGGER later_guard BEFORE UPDATE ON effect_events"
            " FOR EACH ROW EXECUTE FUNCTION later_guard()"
        )
        await raw.execute("DROP TRIGGER later_guard ON effect_events")
        await raw.execute("DROP FUNCTION later_guard()")


# The crash matrix's kill and zombie cells: real `serve` processes on a distributed
# ledger, SIGKILLed in flight, and frozen past their lease while another proxy takes
# the effect over; judged by the matrix's own rules.
CRASH_SCENARIOS = (SIGKILL_IN_FLIGHT, ZOMBIE)


@pytest.fixture(scope="module")
def crash_cells(
    server_dsn: str, template_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    made: list[str] = []
    one_at_a_time: list[asyncio.Lock] = []  # made in the matrix's own loop

    async def make_ledger() -> str:
        # Adding workers to two new databases at once races on the cluster-wide role
        # sync ("tuple concurrently updated"): cells make their ledgers in turn.
        if not one_at_a_time:
            one_at_a_time.append(asyncio.Lock())
        async with one_at_a_time[0]:
            url = await create_ledger(server_dsn, template_database)
        made.append(url)
        return url

    try:
        yield crash_matrix.run_matrix(
            server_dsn,
            Path(tmp_path_factory.mktemp("citus-crash-cells")),
            progress=print,
            scenarios=CRASH_SCENARIOS,
            parallel=2,
            make_ledger=make_ledger,
        )
    finally:
        for url in made:
            asyncio.run(drop_everywhere(server_dsn, urlsplit(url).path.lstrip("/")))


@pytest.mark.timeout(1200)
def test_no_kill_or_zombie_cell_breaks_its_rule(crash_cells: Any) -> None:
    assert crash_cells.violations == []
    assert len(crash_cells.cells) == crash_matrix.cell_count(
        crash_matrix.MODES, CRASH_SCENARIOS
    )
