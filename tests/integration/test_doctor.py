"""effect-broker doctor: a deployment gate that names what is wrong."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from effect_broker.cli import _register, app
from effect_broker.crypto import MasterKey
from effect_broker.store import Store

ROOT_ROUTES = Path(__file__).resolve().parents[2] / "routes.yaml"


async def run_doctor(database_url: str, master_key: str) -> Result:
    _register()
    return await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["doctor", "--database-url", database_url, "--routes", str(ROOT_ROUTES)],
        env={"EFFECT_BROKER_MASTER_KEY": master_key, "COLUMNS": "200"},
    )


@pytest.fixture
def master_key() -> str:
    return MasterKey.generate().to_base64()


async def test_a_healthy_setup_passes(database_url: str, master_key: str) -> None:
    result = await run_doctor(database_url, master_key)

    assert result.exit_code == 0, result.output
    for check in ("routes", "master key", "database", "migrations", "clock skew"):
        assert check in result.output
    assert "FAIL" not in result.output


async def test_another_master_key_than_the_ledgers_fails(
    database_url: str, master_key: str, store: Store
) -> None:
    await store.check_master_key(MasterKey.generate().key_id)

    result = await run_doctor(database_url, master_key)

    assert result.exit_code == 1
    assert "ledger key" in result.output and "FAIL" in result.output
    assert "EFFECT_BROKER_MASTER_KEY" in result.output


async def test_pending_migrations_and_a_missing_key_fail(empty_database_url: str) -> None:
    result = await run_doctor(empty_database_url, "")

    assert result.exit_code == 1
    assert "pending: 0001_initial" in result.output
    assert "master key" in result.output


async def test_doctor_never_writes_to_the_ledger(
    database_url: str, master_key: str, store: Store
) -> None:
    await run_doctor(database_url, master_key)

    # A first proxy start records its key; doctor must not have claimed the ledger.
    await store.check_master_key(MasterKey.generate().key_id)
