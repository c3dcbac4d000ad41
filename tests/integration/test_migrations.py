"""Migrations: exactly the declared schema, idempotent, safe to run concurrently.

``src/effect_broker/store/declared_schema.txt`` is the schema a reviewer reads. After
adding a migration, regenerate it with ``EFFECT_BROKER_UPDATE_SCHEMA=1 pytest
tests/integration/test_migrations.py`` and review the diff like code.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import pytest

from effect_broker.store import Store
from effect_broker.store.migrations import (
    apply_migrations,
    load_migrations,
    pending_migrations,
)
from effect_broker.store.sql import queries

DECLARED = Path(__file__).parents[2] / "src/effect_broker/store/declared_schema.txt"

# Catalog queries whose output does not depend on the server version (15 or 18): PG18
# lists NOT NULL constraints in pg_constraint, so only the classic kinds are compared.
CATALOG = {
    "columns": """
        SELECT table_name || '.' || column_name || ' ' || data_type
               || CASE WHEN is_nullable = 'NO' THEN ' not null' ELSE '' END
               || coalesce(' default ' || column_default, '')
        FROM information_schema.columns WHERE table_schema = 'public'
        ORDER BY table_name, ordinal_position""",
    "constraints": """
        SELECT conrelid::regclass::text || ' ' || conname || ': '
               || pg_get_constraintdef(oid)
        FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace AND contype IN ('p', 'u', 'c', 'f')
        ORDER BY conrelid::regclass::text, conname""",
    "indexes": """
        SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'
        ORDER BY tablename, indexname""",
    "triggers": """
        SELECT pg_get_triggerdef(oid) FROM pg_trigger
        WHERE NOT tgisinternal ORDER BY tgrelid::regclass::text, tgname""",
    "functions": """
        SELECT proname || '(' || pg_get_function_identity_arguments(oid) || ') -> '
               || pg_get_function_result(oid) || ' '
               || CASE provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable'
                  ELSE 'volatile' END
               || ' md5:' || md5(prosrc)
        FROM pg_proc WHERE pronamespace = 'public'::regnamespace
        ORDER BY proname""",
}


async def describe_schema(conn: asyncpg.Connection) -> str:
    sections = []
    for title, query in CATALOG.items():
        lines = [row[0] for row in await conn.fetch(query)]
        sections.append(f"## {title}\n" + "\n".join(lines))
    return "\n\n".join(sections) + "\n"


async def test_all_migrations_yield_exactly_the_declared_schema(
    empty_database_url: str,
) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn)
        actual = await describe_schema(conn)
    finally:
        await conn.close()
    if os.environ.get("EFFECT_BROKER_UPDATE_SCHEMA"):
        DECLARED.write_text(actual)
    assert actual == DECLARED.read_text()


async def test_event_digests_are_the_ones_every_earlier_schema_computed(
    empty_database_url: str,
) -> None:
    """The digest function changed how it is planned (0009), never what it computes:
    a chain written before still verifies."""
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn)
        digest = await conn.fetchval(
            "SELECT effect_event_digest('\\x'::bytea, "
            "'00000000-0000-0000-0000-000000000001', 1, 'reserved', NULL, 'prepared', "
            "'o', '{\"a\": 1}', '2026-01-01 00:00:00+00')"
        )
    finally:
        await conn.close()
    # Computed by the schema of migrations 0001-0008, before 0009 existed.
    assert digest.hex() == (
        "1ddd7a72e8f697736940a3447eceb3116d4ea99d1034b069ddbd38a839916209"
    )


async def test_migrating_twice_is_a_no_op(empty_database_url: str) -> None:
    store = await Store.connect(empty_database_url)
    try:
        first = await store.migrate()
        second = await store.migrate()
        assert [m.version for m in first] == [m.version for m in load_migrations()]
        assert second == []
        assert await store.pending_migrations() == []
    finally:
        await store.close()


async def test_concurrent_migrate_runs_do_not_collide(empty_database_url: str) -> None:
    conns = [await asyncpg.connect(empty_database_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(apply_migrations(conn) for conn in conns))
        applied = await conns[0].fetch("SELECT version FROM schema_migrations")
    finally:
        for conn in conns:
            await conn.close()
    assert sum(len(result) for result in results) == len(load_migrations())
    assert [row["version"] for row in applied] == [m.version for m in load_migrations()]


async def test_an_empty_database_reports_every_migration_pending(
    empty_database_url: str,
) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        assert await pending_migrations(conn) == list(load_migrations())
    finally:
        await conn.close()


async def _apply_up_to(conn: asyncpg.Connection, last: int) -> None:
    """The schema as a ledger written by an older build left it, recorded as applied."""
    await conn.execute(
        "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
        " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in load_migrations()[:last]:
        await conn.execute(migration.sql)
        await conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            migration.version,
            migration.name,
            migration.checksum,
        )


async def test_sharding_by_tenant_migrates_a_ledger_written_before_it(
    empty_database_url: str,
) -> None:
    """0012 copies each row's tenant from its effect: the attempts, receipts and
    events of effects written under 0011 keep belonging to them, chains still verify,
    receipts stay immutable and a pruned effect still takes its rows with it."""
    conn = await asyncpg.connect(empty_database_url)
    try:
        await _apply_up_to(conn, 11)
        ids = {}
        for tenant in ("acme", "globex"):
            ids[tenant] = await conn.fetchval(
                "SELECT (effect).effect_id FROM reserve_effect(gen_random_uuid(), $1,"
                " 'k', 'h', 'charge', 'c', '1', 'idempotent', 'dk', NULL, '{}', 'o',"
                " '1 minute', true, '1 day', '1 minute')",
                tenant,
            )
        settled = ids["acme"]
        await conn.execute(
            "UPDATE effects SET status = 'succeeded', version = 3, due_at = NULL"
            " WHERE effect_id = $1",
            settled,
        )
        await conn.execute(
            "INSERT INTO effect_receipts (effect_id, status_code, response_ciphertext,"
            " source) VALUES ($1, 200, '\\x01', 'response')",
            settled,
        )
        await conn.execute(
            "SELECT append_effect_event($1, 3, 'settled', 'dispatching', 'succeeded',"
            " 'o', '{}', now())",
            settled,
        )

        applied = await apply_migrations(conn)
        # 0012 and every migration after it
        assert [m.version for m in applied] == [m.version for m in load_migrations()][11:]

        for table in ("effect_attempts", "effect_receipts", "effect_events"):
            mismatched = await conn.fetchval(
                f"SELECT count(*) FROM {table} AS t JOIN effects AS e"
                " USING (effect_id) WHERE t.tenant_id IS DISTINCT FROM e.tenant_id"
            )
            assert mismatched == 0, table
        by_tenant = await conn.fetch(
            "SELECT tenant_id, count(*) AS n FROM effect_events GROUP BY tenant_id"
            " ORDER BY tenant_id"
        )
        assert [(r["tenant_id"], r["n"]) for r in by_tenant] == [
            ("acme", 3),
            ("globex", 2),
        ]
        verify = queries()["verify_events"]
        for tenant, effect_id in ids.items():
            assert await conn.fetchval(verify, tenant, effect_id) is None
        # The same effect id under another tenant is another effect: nothing of it.
        assert await conn.fetchval(queries()["get_receipt"], "globex", settled) is None

        with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
            await conn.execute("UPDATE effect_receipts SET status_code = 500")
        with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
            await conn.execute("UPDATE effect_events SET actor = 'mallory'")

        await conn.execute(
            "DELETE FROM effects WHERE tenant_id = 'acme' AND effect_id = $1", settled
        )
        for table in ("effect_attempts", "effect_receipts", "effect_events"):
            left = await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE effect_id = $1",
                settled,
            )
            assert left == 0, table
    finally:
        await conn.close()
