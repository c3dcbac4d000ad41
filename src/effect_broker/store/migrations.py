"""Numbered plain-SQL migrations, applied in order under a table lock and recorded.

The lock is a ``LOCK TABLE`` on the bookkeeping table inside the migrating transaction,
not an advisory lock: the schema must stay portable to Postgres-wire engines, and a
concurrent ``migrate`` simply waits, then finds nothing left to do. Each applied file's
checksum is recorded, so a migration edited after it ran is refused loudly.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import suppress
from dataclasses import dataclass
from importlib import resources

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from effect_broker.errors import MigrationError

Connection = asyncpg.Connection | PoolConnectionProxy

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def load_migrations() -> tuple[Migration, ...]:
    """Every migration shipped in the package, in version order, with no gaps."""
    folder = resources.files("effect_broker.store").joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda migration: migration.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationError(f"migration {expected:04d} is missing from the package")
    return tuple(found)


async def _ensure_bookkeeping(conn: Connection) -> None:
    # Two first-ever runs can race on CREATE TABLE IF NOT EXISTS; the other one won.
    # PostgreSQL 18 reports the loser's clash on the table's row type as
    # DuplicateObjectError; older servers as a unique violation in pg_type.
    with suppress(
        asyncpg.UniqueViolationError,
        asyncpg.DuplicateTableError,
        asyncpg.DuplicateObjectError,
    ):
        await conn.execute(_CREATE_BOOKKEEPING)


async def _applied(conn: Connection) -> dict[int, str]:
    rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
    return {row["version"]: row["checksum"] for row in rows}


def _pending(applied: dict[int, str], shipped: tuple[Migration, ...]) -> list[Migration]:
    known = {migration.version for migration in shipped}
    unknown = sorted(set(applied) - known)
    if unknown:
        raise MigrationError(
            f"the database has migration {unknown[-1]:04d}, newer than this build knows; "
            "upgrade effect-broker instead of running an older one against it"
        )
    if sorted(applied) != list(range(1, len(applied) + 1)):
        raise MigrationError(
            f"the database recorded migrations {sorted(applied)}, which is not an "
            "unbroken sequence from 0001; repair schema_migrations before migrating"
        )
    for migration in shipped:
        recorded = applied.get(migration.version)
        if recorded is not None and recorded != migration.checksum:
            raise MigrationError(
                f"migration {migration.label} changed after it was applied; "
                "add a new migration instead of editing an applied one"
            )
    return [migration for migration in shipped if migration.version not in applied]


async def pending_migrations(conn: Connection) -> list[Migration]:
    """Migrations this build ships that the database lacks (empty means current)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    applied = await _applied(conn) if exists else {}
    return _pending(applied, load_migrations())


async def apply_migrations(conn: Connection) -> list[Migration]:
    """Apply every pending migration in one transaction; return what was applied."""
    shipped = load_migrations()
    await _ensure_bookkeeping(conn)
    async with conn.transaction():
        # A migration may rewrite whole tables: let it read them whole (a ledger
        # connection plans for its indexes only, ``store/postgres.py``).
        await conn.execute("SET LOCAL enable_seqscan = on")
        await conn.execute("LOCK TABLE schema_migrations IN SHARE ROW EXCLUSIVE MODE")
        pending = _pending(await _applied(conn), shipped)
        for migration in pending:
            try:
                await conn.execute(migration.sql)
            except asyncpg.PostgresError as exc:
                raise MigrationError(
                    f"migration {migration.label} failed: {exc}"
                ) from exc
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum)"
                " VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
    return pending
