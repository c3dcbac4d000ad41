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

from effect_broker.store import Store
from effect_broker.store.migrations import (
    apply_migrations,
    load_migrations,
    pending_migrations,
)

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
