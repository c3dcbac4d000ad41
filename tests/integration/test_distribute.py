"""`migrate --distribute citus` without Citus: refused, and nothing changes."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from effect_broker.errors import MigrationError
from effect_broker.store import Store
from effect_broker.store.distribute import NO_CITUS, is_distributed


async def test_distributing_without_citus_is_refused(store: Store) -> None:
    with pytest.raises(MigrationError) as refused:
        await store.distribute("citus")
    assert refused.value.message == NO_CITUS


async def test_an_unknown_engine_is_refused_by_name(store: Store) -> None:
    with pytest.raises(MigrationError, match=r"'cockroach'.*known engines are citus"):
        await store.distribute("cockroach")


async def test_the_command_refuses_before_migrating_anything(
    empty_database_url: str,
) -> None:
    _register("migrate")
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["migrate", "--database-url", empty_database_url, "--distribute", "citus"],
    )
    assert result.exit_code == 1, result.output
    assert "has no Citus extension" in result.output
    conn = await asyncpg.connect(empty_database_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('effects')") is None
        assert not await is_distributed(conn)
    finally:
        await conn.close()
