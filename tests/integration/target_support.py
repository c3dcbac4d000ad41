"""Both database drivers behind one face, for the target kit's tests.

The kit ships the same API twice (``effect_broker.target.asyncpg`` and ``.psycopg``);
each test runs against both through a ``Driver``, on connections configured the way a
service might have configured its own (a jsonb codec, a dict row factory), which the
kit must not depend on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import asyncpg
import psycopg
from psycopg.rows import dict_row

from effect_broker.target import asyncpg as kit_asyncpg
from effect_broker.target import psycopg as kit_psycopg
from effect_broker.target.protocol import StoredAnswer

CHARGES = (
    "CREATE TABLE IF NOT EXISTS charges"
    " (id serial PRIMARY KEY, attempt_key text NOT NULL)"
)


@dataclass(frozen=True)
class Driver:
    name: str
    kit: ModuleType
    url: str

    async def connect(self) -> Any:
        if self.name == "asyncpg":
            conn = await asyncpg.connect(self.url)
            await conn.set_type_codec(
                "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
            )
            return conn
        return await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=dict_row
        )

    async def charge(self, conn: Any, key: str) -> StoredAnswer:
        """The service's mutation: one row in its own charges table."""
        if self.name == "asyncpg":
            await conn.execute("INSERT INTO charges (attempt_key) VALUES ($1)", key)
        else:
            await conn.execute("INSERT INTO charges (attempt_key) VALUES (%s)", (key,))
        return StoredAnswer(201, {"Content-Type": "application/json"}, b'{"charged":1}')


async def count_charges(url: str, key: str | None = None) -> int:
    conn = await asyncpg.connect(url)
    try:
        if key is None:
            return int(await conn.fetchval("SELECT count(*) FROM charges"))
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM charges WHERE attempt_key = $1", key
            )
        )
    finally:
        await conn.close()


async def lock_waiters(url: str) -> int | None:
    """How many sessions of this database wait for a lock; None while there are none."""
    conn = await asyncpg.connect(url)
    try:
        n = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    finally:
        await conn.close()
    return int(n) if n else None


async def prepare(url: str) -> None:
    """The kit's table and the service's charges table."""
    conn = await asyncpg.connect(url)
    try:
        await kit_asyncpg.install(conn)
        await conn.execute(CHARGES)
    finally:
        await conn.close()


def driver(name: str, url: str) -> Driver:
    return Driver(name, kit_asyncpg if name == "asyncpg" else kit_psycopg, url)
