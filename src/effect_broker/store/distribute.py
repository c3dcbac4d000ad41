"""Spread a migrated ledger over a Citus cluster, sharded by tenant.

Citus distributes a table by one column and keeps rows with the same value on one shard;
since migration 0012 every ledger table leads its keys with ``tenant_id``, so an effect,
its attempts, receipt and events share a shard and every uniqueness, foreign key and
trigger holds there as on one PostgreSQL. This module only states where each table and
function lives: the small shared tables become reference tables (a copy on every node),
the four ledger tables are distributed and co-located by ``tenant_id``, and each function
with a ``p_tenant_id`` argument is distributed by it, so a call runs whole on the shard
that holds the tenant (its nested calls included) instead of on the coordinator.

Each step is idempotent: running it again after new migrations changes only what is new.
The step is recorded in ``ledger_distribution``, which the store reads to know it must
claim work tenant by tenant (see ``store/claims.py``).
"""

from __future__ import annotations

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from effect_broker.errors import MigrationError

Connection = asyncpg.Connection | PoolConnectionProxy

#: The engines ``distribute`` knows.
ENGINES = ("citus",)
#: Copied to every node: small, read by tenant-scoped statements and triggers on shards.
REFERENCE_TABLES = ("tenants", "tenant_api_keys", "master_keys", "idempotency_root")
#: Distributed by tenant_id; the first is the one the others are co-located with.
DISTRIBUTED_TABLES = ("effects", "effect_attempts", "effect_receipts", "effect_events")
#: The argument a function is distributed by, when it has one.
TENANT_ARGUMENT = "p_tenant_id"

NO_CITUS = (
    "this server has no Citus extension in this database: `--distribute citus` needs a "
    "Citus coordinator (CREATE EXTENSION citus, with its workers added); for one "
    "PostgreSQL run `effect-broker migrate` without --distribute"
)

_RECORD = """
CREATE TABLE IF NOT EXISTS ledger_distribution (
    engine          text PRIMARY KEY,
    engine_version  text NOT NULL,
    distributed_at  timestamptz NOT NULL DEFAULT now()
)
"""

# Every function of the ledger's schema (not the extension's), with its identity
# arguments and whether it takes the tenant argument.
_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature,
       $1 = ANY (coalesce(p.proargnames, '{}')) AS by_tenant
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema()
  AND NOT EXISTS (
      SELECT 1 FROM pg_depend d
      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
ORDER BY 1
"""


async def citus_version(conn: Connection) -> str | None:
    """The Citus extension's version in this database, or None without Citus."""
    version = await conn.fetchval(
        "SELECT extversion FROM pg_extension WHERE extname = 'citus'"
    )
    return str(version) if version is not None else None


async def is_distributed(conn: Connection) -> bool:
    """Whether ``distribute`` ran on this ledger (the store then claims per tenant)."""
    return bool(
        await conn.fetchval(
            "SELECT to_regclass('ledger_distribution') IS NOT NULL AND EXISTS"
            " (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
        )
    )


async def _placed(conn: Connection) -> dict[str, str]:
    """Tables Citus already manages, by name: 'n' reference, 'h' hash-distributed."""
    rows = await conn.fetch(
        "SELECT logicalrelid::regclass::text AS name, partmethod::text AS method"
        " FROM pg_dist_partition"
    )
    return {row["name"]: row["method"] for row in rows}


async def require_engine(conn: Connection, engine: str) -> str:
    """The engine's version here, or ``MigrationError`` saying why it cannot be used."""
    if engine not in ENGINES:
        raise MigrationError(
            f"cannot distribute on {engine!r}: known engines are {', '.join(ENGINES)}"
        )
    version = await citus_version(conn)
    if version is None:
        raise MigrationError(NO_CITUS)
    return version


async def distribute(
    conn: Connection, engine: str = "citus", *, shard_count: int | None = None
) -> str:
    """Place a migrated ledger's tables and functions on the cluster; return the
    engine's version. Refuses (``MigrationError``) where the engine is not installed."""
    version = await require_engine(conn, engine)
    try:
        await _place(conn, version, shard_count)
    except asyncpg.PostgresError as exc:
        raise MigrationError(f"distributing the ledger on Citus failed: {exc}") from exc
    return version


async def _place(conn: Connection, version: str, shard_count: int | None) -> None:
    # The ledger's append-only and delete guards are row triggers; Citus runs them on
    # each shard and asks for this setting to accept them (here and for any later
    # migration's trigger DDL, hence also on the database).
    await conn.execute("SET citus.enable_unsafe_triggers = on")
    database = await conn.fetchval("SELECT current_database()")
    await conn.execute(
        f'ALTER DATABASE "{database}" SET citus.enable_unsafe_triggers = on'
    )
    placed = await _placed(conn)
    for table in REFERENCE_TABLES:
        if table not in placed:
            await conn.execute("SELECT create_reference_table($1)", table)
    for position, table in enumerate(DISTRIBUTED_TABLES):
        if table in placed:
            continue
        colocate = "none" if position == 0 else DISTRIBUTED_TABLES[0]
        if shard_count is not None and position == 0:
            await conn.execute(
                "SELECT create_distributed_table($1, 'tenant_id', colocate_with => $2,"
                " shard_count => $3)",
                table,
                colocate,
                shard_count,
            )
        else:
            await conn.execute(
                "SELECT create_distributed_table($1, 'tenant_id', colocate_with => $2)",
                table,
                colocate,
            )
    for row in await conn.fetch(_FUNCTIONS, TENANT_ARGUMENT):
        if row["by_tenant"]:
            await conn.execute(
                "SELECT create_distributed_function($1, $2, colocate_with => $3)",
                row["signature"],
                TENANT_ARGUMENT,
                DISTRIBUTED_TABLES[0],
            )
        else:
            await conn.execute("SELECT create_distributed_function($1)", row["signature"])
    await conn.execute(_RECORD)
    await conn.execute(
        "INSERT INTO ledger_distribution (engine, engine_version) VALUES ('citus', $1)"
        " ON CONFLICT (engine) DO UPDATE SET engine_version = EXCLUDED.engine_version,"
        " distributed_at = now()",
        version,
    )
