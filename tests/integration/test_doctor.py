"""effect-broker doctor: a deployment gate that names what is wrong."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner, Result

from effect_broker.cli import _register, app
from effect_broker.cli.up import load_or_create_secret
from effect_broker.crypto import MasterKey
from effect_broker.store import Store

ROOT_ROUTES = Path(__file__).resolve().parents[2] / "routes.yaml"


async def run_doctor(
    database_url: str,
    master_key: str | None,
    data_dir: Path | None = None,
    admin_listen: str = "127.0.0.1:9",
) -> Result:
    """``doctor`` with ``master_key`` as the shell's (None: unset) and up's data dir;
    ``admin_listen`` is where it looks for a running proxy's metrics (by default a port
    where nothing listens, so another proxy on this machine cannot answer)."""
    _register()
    argv = ["doctor", "--database-url", database_url, "--routes", str(ROOT_ROUTES)]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    return await asyncio.to_thread(
        CliRunner().invoke,
        app,
        argv,
        env={
            "EFFECT_BROKER_MASTER_KEY": master_key,
            "EFFECT_BROKER_DATA_DIR": None,
            "EFFECT_BROKER_ADMIN_LISTEN": admin_listen,
            "COLUMNS": "1000",
        },
    )


def up_data_dir(tmp_path: Path) -> tuple[Path, MasterKey]:
    """A data directory as ``effect-broker up`` leaves it: the key in master.key."""
    directory = tmp_path / ".effect-broker"
    directory.mkdir()
    value, created = load_or_create_secret(
        directory / "master.key", lambda: MasterKey.generate().to_base64()
    )
    assert created
    return directory, MasterKey.from_base64(value)


def flat(result: Result) -> str:
    return re.sub(r"\s+", " ", result.output)


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
    result = await run_doctor(empty_database_url, "", Path("/nonexistent"))

    assert result.exit_code == 1
    assert "pending: 0001_initial" in result.output
    assert "master key" in result.output


async def test_doctor_never_writes_to_the_ledger(
    database_url: str, master_key: str, store: Store
) -> None:
    await run_doctor(database_url, master_key)

    # A first proxy start records its key; doctor must not have claimed the ledger.
    await store.check_master_key(MasterKey.generate().key_id)


async def test_after_up_an_unset_key_is_read_from_ups_key_file_and_said(
    database_url: str, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key = up_data_dir(tmp_path)
    await store.check_master_key(key.key_id)  # up's proxy started and recorded it
    monkeypatch.chdir(tmp_path)

    result = await run_doctor(database_url, None)

    text = flat(result)
    assert result.output.splitlines()[0] == "using ./.effect-broker/master.key"
    assert f"using ./.effect-broker/master.key: key id {key.key_id}" in text
    assert "the ledger was written with ./.effect-broker/master.key" in text
    assert "master key FAIL" not in text and "ledger key FAIL" not in text
    assert "Create one" not in text


async def test_an_unreadable_key_file_fails_and_is_named(
    database_url: str, tmp_path: Path
) -> None:
    directory = tmp_path / ".effect-broker"
    directory.mkdir()
    (directory / "master.key").write_text("not a key\n")

    result = await run_doctor(database_url, None, directory)

    assert result.exit_code == 1
    assert f"{directory}/master.key is not a valid key" in flat(result)


async def test_a_wrong_key_is_told_apart_and_never_replaced_by_a_new_one(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    data_dir, key = up_data_dir(tmp_path)
    await store.check_master_key(key.key_id)

    result = await run_doctor(database_url, MasterKey.generate().to_base64(), data_dir)

    text = flat(result)
    assert result.exit_code == 1
    assert (
        f"wrong key for this ledger: its payloads are under master key {key.key_id}"
        in text
    )
    assert f"(it is in {data_dir}/master.key: export EFFECT_BROKER_MASTER_KEY" in text
    assert "never a new one" in text
    assert "Create one" not in text


@pytest.mark.parametrize("shell_key", [None, "not base64!"])
async def test_a_ledger_with_payloads_never_gets_a_new_key_advised(
    database_url: str, store: Store, tmp_path: Path, shell_key: str | None
) -> None:
    ledger_key = MasterKey.generate()
    await store.check_master_key(ledger_key.key_id)

    result = await run_doctor(database_url, shell_key, tmp_path / "nothing-here")

    text = flat(result)
    assert result.exit_code == 1
    assert f"holds payloads under master key {ledger_key.key_id}" in text
    assert "Create one" not in text


async def test_a_fresh_ledger_without_a_key_is_told_how_to_make_one(
    database_url: str, tmp_path: Path
) -> None:
    result = await run_doctor(database_url, None, tmp_path / "nothing-here")

    assert result.exit_code == 1
    assert "EFFECT_BROKER_MASTER_KEY is not set. Create one with" in flat(result)


async def test_a_route_whose_keys_look_minted_per_call_is_named(
    database_url: str, master_key: str, tmp_path: Path
) -> None:
    """A client that makes up a key per call: twelve equal charges, twelve keys."""
    from tests.integration.harness import request, running_broker

    async with running_broker(database_url, tmp_path, master_key=master_key) as broker:
        for n in range(12):
            answer = await request(
                "POST",
                f"{broker.proxy_url}/payments/v1/charges",
                headers={
                    "Operation-Key": f"fresh-{n}",
                    "Content-Type": "application/json",
                },
                data=b'{"amount": 100, "currency": "usd", "order_id": "order-7"}',
            )
            assert answer.status == 201
        honest = await request(
            "POST",
            f"{broker.proxy_url}/email/v1/charges",
            headers={"Operation-Key": "welcome:1", "Content-Type": "application/json"},
            data=b'{"amount": 1, "currency": "usd", "order_id": "order-8"}',
        )
        assert honest.status == 201

    result = await run_doctor(database_url, master_key)

    assert result.exit_code == 0, result.output  # a warning, not a failed gate
    text = flat(result)
    assert re.search(r"key scope\W+warning", text), text
    assert "route payments: 11 of 12 effects" in text
    assert "route email" not in text


async def test_key_scope_is_quiet_on_a_healthy_ledger(
    database_url: str, master_key: str
) -> None:
    result = await run_doctor(database_url, master_key)
    assert "no route's keys look minted per call" in flat(result)
    assert "stuck keys not checked: no proxy metrics at 127.0.0.1:9" in flat(result)


async def test_a_key_stuck_in_default_headers_is_named(
    database_url: str, master_key: str, tmp_path: Path
) -> None:
    """One key on every call, as an SDK's default headers would send it: the first
    charge is made, every later one is refused 422 and counted by the proxy."""
    from tests.integration.harness import request, running_broker

    async with running_broker(database_url, tmp_path, master_key=master_key) as broker:
        statuses = []
        for amount in range(100, 112):
            answer = await request(
                "POST",
                f"{broker.proxy_url}/payments/v1/charges",
                headers={
                    "Operation-Key": "sdk-default",
                    "Content-Type": "application/json",
                },
                data=json.dumps(
                    {"amount": amount, "currency": "usd", "order_id": "o"}
                ).encode(),
            )
            statuses.append(answer.status)
        listen = broker.admin_url.removeprefix("http://")
        result = await run_doctor(database_url, master_key, admin_listen=listen)

    assert statuses == [201] + [422] * 11
    assert result.exit_code == 0, result.output
    text = flat(result)
    assert "route payments: 11 requests reused an operation key" in text
    assert "against 1 effects made" in text


async def test_a_ledger_table_without_autovacuum_is_warned_about(
    database_url: str, master_key: str
) -> None:
    """A ledger whose statistics never refresh is planned as empty and falls to
    sequential scans as it grows: doctor names the tables and does not fail the gate.
    The server's own setting decides which tables: all four when its autovacuum is off
    (a server-wide setting a test cannot change), else the one turned off here."""
    admin = await asyncpg.connect(database_url)
    try:
        server_autovacuum = await admin.fetchval("SELECT current_setting('autovacuum')")
        healthy = await run_doctor(database_url, master_key)
        await admin.execute("ALTER TABLE effect_attempts SET (autovacuum_enabled = off)")
    finally:
        await admin.close()
    result = await run_doctor(database_url, master_key)

    assert result.exit_code == 0, result.output
    if server_autovacuum == "on":
        assert re.search(r"autovacuum\W+ok\W+on for every ledger table", flat(healthy))
        named = "effect_attempts:"
    else:
        named = "effect_attempts, effect_events, effect_receipts, effects:"
    assert re.search(rf"autovacuum\W+warning\W+off for {named}", flat(result)), (
        result.output
    )
