"""Gateway mode: the tenant comes from proxy credentials, never from the request."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
from typer.testing import CliRunner

from effect_broker.cli import _register, app
from tests.integration.gateway_support import basic, charge, make_key
from tests.integration.harness import running_broker


async def test_requests_without_valid_credentials_get_407(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, gateway=True) as broker:
        key = await make_key(broker.state.store, "acme")

        missing = await charge(broker.proxy_url, None)
        wrong_secret = await charge(broker.proxy_url, basic("acme", key + "x"))
        wrong_tenant = await charge(broker.proxy_url, basic("globex", key))

        for response in (missing, wrong_secret, wrong_tenant):
            assert response.status == 407
            assert response.headers["Proxy-Authenticate"].startswith("Basic")
            assert response.content_type == "application/problem+json"
        assert broker.charges() == []


async def test_each_tenant_gets_its_own_effect_for_the_same_key(
    database_url: str, tmp_path: Path
) -> None:
    async with running_broker(database_url, tmp_path, gateway=True) as broker:
        acme = basic("acme", await make_key(broker.state.store, "acme"))
        globex = basic("globex", await make_key(broker.state.store, "globex"))

        first = await charge(broker.proxy_url, acme)
        again = await charge(broker.proxy_url, acme)
        other = await charge(broker.proxy_url, globex)

        assert first.status == again.status == other.status == 201
        assert first.headers["Effect-Id"] == again.headers["Effect-Id"]
        assert other.headers["Effect-Id"] != first.headers["Effect-Id"]
        charges = broker.charges("order-7")
        assert len(charges) == 2
        assert charges[0]["idempotency_key"] != charges[1]["idempotency_key"]


async def test_tenants_add_prints_a_key_once_and_stores_only_its_hash(
    database_url: str,
) -> None:
    _register()
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["tenants", "add", "acme", "--database-url", database_url],
    )

    assert result.exit_code == 0, result.output
    [api_key] = [word for word in result.output.split() if word.startswith("ebk_")]
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT * FROM tenant_api_keys")
        tenants = await conn.fetch("SELECT tenant_id FROM tenants")
    finally:
        await conn.close()
    assert [row["tenant_id"] for row in tenants] == ["acme"]
    [row] = rows
    assert api_key.split("_")[1] == row["key_id"]
    assert api_key.encode() not in bytes(row["secret_hash"])
    assert api_key.split("_", 2)[2] not in str(dict(row))
