"""Master key rotation while the proxy serves: nothing lost, every receipt the same.

A broker runs with the new key first and the old one second; a bounded load of new
effects and replays runs while ``rotate`` re-encrypts the ledger in small batches; then
a broker with only the new key replays everything byte for byte.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner

from effect_broker.canonical import downstream_key
from effect_broker.cli import _register, app
from effect_broker.cli.doctor_ledger import payload_keys
from effect_broker.config.routes_file import parse_routes
from effect_broker.config.settings import Settings
from effect_broker.crypto import Keyring, MasterKey
from effect_broker.engine.rekey import rotate
from effect_broker.errors import MasterKeyError
from effect_broker.runtime import open_runtime
from effect_broker.store import Store
from tests.integration.harness import Answer, Broker, request, running_broker

OLD, NEW = MasterKey.generate(), MasterKey.generate()
ROTATING = f"{NEW.to_base64()},{OLD.to_base64()}"


async def charge(broker: Broker, key: str) -> Answer:
    return await request(
        "POST",
        f"{broker.proxy_url}/payments/v1/charges",
        data=json.dumps({"amount": 700, "currency": "usd", "order_id": key}).encode(),
        headers={"Content-Type": "application/json", "Operation-Key": key},
    )


async def counts(database_url: str) -> tuple[int, int]:
    conn = await asyncpg.connect(database_url)
    try:
        effects = await conn.fetchval("SELECT count(*) FROM effects")
        receipts = await conn.fetchval("SELECT count(*) FROM effect_receipts")
    finally:
        await conn.close()
    return effects, receipts


async def usage_by_key(store: Store) -> dict[str, int]:
    totals: dict[str, int] = {}
    for use in await store.key_usage():
        totals[use.key_id] = totals.get(use.key_id, 0) + use.payloads
    return totals


async def test_rotation_under_load_loses_nothing_and_replays_byte_for_byte(
    database_url: str, tmp_path: Path, store: Store
) -> None:
    first = [f"before-{n}" for n in range(12)]
    during = [f"during-{n}" for n in range(12)]
    receipts: dict[str, Answer] = {}
    async with running_broker(
        database_url, tmp_path, master_key=OLD.to_base64()
    ) as broker:
        for key in first:
            receipts[key] = await charge(broker, key)
            assert receipts[key].status == 201, receipts[key]
        hmac_before = broker.state.keyring.tenant_hmac_key("acme")
    assert await usage_by_key(store) == {OLD.key_id: 2 * len(first) + 1}
    effects_before, receipts_before = await counts(database_url)

    async with running_broker(database_url, tmp_path, master_keys=ROTATING) as broker:
        load = [charge(broker, key) for key in during]
        load += [charge(broker, key) for key in first for _ in range(2)]
        rotation = rotate(store, Keyring([NEW, OLD]), batch=3)
        report, *answers = await asyncio.gather(rotation, *load)
        for key, answer in zip(during, answers, strict=False):
            assert answer.status == 201, answer
            receipts[key] = answer
        replayed = [k for k in first for _ in "ab"]
        for answer, key in zip(answers[len(during) :], replayed, strict=True):
            assert (answer.status, answer.body) == (
                receipts[key].status,
                receipts[key].body,
            )
            assert answer.headers["Idempotent-Replayed"] == "true"
        assert broker.state.keyring.tenant_hmac_key("acme") == hmac_before

    assert report.complete, report
    assert report.resealed["request"] + report.resealed["receipt"] >= 2 * len(first)
    usage = await usage_by_key(store)
    assert OLD.key_id not in usage
    assert usage[NEW.key_id] == 2 * (len(first) + len(during)) + 1
    assert await store.known_master_keys() == [NEW.key_id]  # the old key is retired
    assert await counts(database_url) == (
        effects_before + len(during),
        receipts_before + len(during),
    )

    async with running_broker(
        database_url, tmp_path, master_key=NEW.to_base64()
    ) as broker:
        for key, stored in receipts.items():
            replay = await charge(broker, key)
            assert (replay.status, replay.body) == (stored.status, stored.body), key
            assert replay.headers["Idempotent-Replayed"] == "true"
        # The downstream key of a new effect is the one the old key's proxies derived.
        fresh = await charge(broker, "after-rotation")
        assert fresh.status == 201
        assert broker.state.keyring.tenant_hmac_key("acme") == hmac_before
    after = await store.get_by_key("acme", "after-rotation")
    assert after is not None
    assert after.downstream_key == downstream_key(hmac_before, "acme", "after-rotation")
    assert len(broker.charges()) == len(first) + len(during) + 1  # nothing twice


async def test_the_old_key_is_refused_after_rotation(
    database_url: str, tmp_path: Path, store: Store
) -> None:
    async with running_broker(database_url, tmp_path, master_key=OLD.to_base64()) as b:
        assert (await charge(b, "k-1")).status == 201
    await store.check_master_keys([NEW.key_id, OLD.key_id])
    await rotate(store, Keyring([NEW, OLD]))
    with pytest.raises(MasterKeyError, match=NEW.key_id):
        async with running_broker(database_url, tmp_path, master_key=OLD.to_base64()):
            pass


ROUTES = parse_routes("version: 1\ncontracts: []\nroutes: []\n", source="t.yaml")


async def start_error(database_url: str, **keys: Any) -> str:
    settings = Settings(database_url=database_url, **keys)
    with pytest.raises(MasterKeyError) as caught:
        async with open_runtime(settings, ROUTES):
            pass
    message = caught.value.message
    assert "\n" not in message
    return message


async def test_bad_key_lists_fail_at_start_with_one_line(database_url: str) -> None:
    other = MasterKey.generate()
    async with open_runtime(
        Settings(database_url=database_url, master_key=OLD.to_base64()), ROUTES
    ):
        pass

    malformed = await start_error(database_url, master_keys=f"{OLD.to_base64()},nope!")
    empty = await start_error(database_url, master_keys=f"{OLD.to_base64()},,")
    twice = await start_error(
        database_url, master_keys=f"{OLD.to_base64()},{NEW.to_base64()},{OLD.to_base64()}"
    )
    unknown = await start_error(
        database_url, master_keys=f"{NEW.to_base64()},{other.to_base64()}"
    )
    both = await start_error(
        database_url, master_key=OLD.to_base64(), master_keys=OLD.to_base64()
    )

    assert malformed.startswith("EFFECT_BROKER_MASTER_KEYS (key 2) is not valid base64")
    assert "key 2 of 3 is empty" in empty
    assert f"keys 1 and 3 are the same key ({OLD.key_id})" in twice
    assert OLD.key_id in unknown and NEW.key_id in unknown and other.key_id in unknown
    assert "both EFFECT_BROKER_MASTER_KEY and EFFECT_BROKER_MASTER_KEYS" in both
    assert OLD.to_base64() not in malformed + twice + unknown


async def test_the_database_allows_a_receipt_only_a_reencryption(
    database_url: str, tmp_path: Path, store: Store
) -> None:
    async with running_broker(database_url, tmp_path, master_key=OLD.to_base64()) as b:
        assert (await charge(b, "k-1")).status == 201
    conn = await asyncpg.connect(database_url)
    try:
        ciphertext = await conn.fetchval(
            "SELECT response_ciphertext FROM effect_receipts"
        )
        unknown_key = Keyring(MasterKey.generate()).encrypt(
            tenant_id="acme", effect_id="x", kind="response", plaintext=b"forged"
        )
        refused = [
            "UPDATE effect_receipts SET status_code = 500",
            "UPDATE effect_receipts SET response_ciphertext = "
            "response_ciphertext || '\\x00'",
            "UPDATE effect_receipts SET response_ciphertext = '\\x01'",
        ]
        for statement in refused:
            with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
                await conn.execute(statement)
        with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
            # A well-formed blob, but under a key the ledger has never seen.
            await conn.execute(
                "UPDATE effect_receipts SET response_ciphertext = $1", unknown_key
            )
        assert (
            await conn.fetchval("SELECT response_ciphertext FROM effect_receipts")
            == ciphertext
        )
    finally:
        await conn.close()


async def test_status_and_doctor_name_what_a_missing_key_would_lose(
    database_url: str, tmp_path: Path, store: Store
) -> None:
    async with running_broker(database_url, tmp_path, master_key=OLD.to_base64()) as b:
        effect_id = (await charge(b, "k-1")).headers["Effect-Id"]

    missing = await payload_keys(store, Keyring(NEW))
    fine = await payload_keys(store, Keyring([NEW, OLD]))
    _register()
    status = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["keys", "status", "--database-url", database_url],
        env={"EFFECT_BROKER_MASTER_KEYS": ROTATING, "COLUMNS": "200", "NO_COLOR": "1"},
    )

    assert not missing.ok
    assert f"key {OLD.key_id} seals 1 receipt payload(s)" in missing.detail
    assert f"key {OLD.key_id} seals 1 request payload(s), e.g. effect {effect_id}" in (
        missing.detail
    )
    assert fine.ok
    assert status.exit_code == 0, status.output
    [old_row] = [line for line in status.output.splitlines() if OLD.key_id in line]
    assert [cell.strip() for cell in old_row.split("│")[1:-1]] == [
        OLD.key_id,
        "yes",
        "yes",
        "1",
        "1",
        "1",  # the idempotency root (column "roots")
    ]
