"""Fifty tenants' lost answers, settled by two proxies on one distributed ledger.

Real processes, as the crash matrix runs them: the demo payment target, whose
reconcilable charges commit and are never answered, and two ``effect-broker serve``
processes in gateway mode (each tenant authenticates with its own API key) on one
ledger distributed by tenant on the Citus cluster, both running the built-in
reconciler. Every tenant's charge is sent once, its answer is lost, the agent is told
``outcome_unknown``; the reconcilers' lookups (tenant by tenant on the sharded ledger)
must then settle every effect with a receipt from the probe, without sending anything
again: one charge per tenant, counted in the target's own table.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, closing, suppress
from pathlib import Path

import aiohttp
import asyncpg
import pytest
import yaml

from effect_broker.demo import payment_target
from effect_broker.demo.crash_matrix.cells import SERVE, serve_environment, write_routes
from effect_broker.demo.crash_matrix.processes import (
    PROXY_BANNER,
    CellError,
    poll,
    spawn,
)
from effect_broker.store import Store
from tests.citus_support import SKIP_REASON, citus_url
from tests.integration.gateway_support import basic, make_key

if citus_url() is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)

TENANTS = [f"tenant-{n:02d}" for n in range(50)]
#: The reconcilable route's path at the target: every charge there commits unanswered.
LOST = "/reconcilable/"
SETTLE_DEADLINE = 180.0  # seconds for both reconcilers to settle every effect


@pytest.fixture
async def processes() -> AsyncIterator[AsyncExitStack]:
    """Every process the test starts, stopped (and reaped) when it ends."""
    async with AsyncExitStack() as stack:
        yield stack


async def _start_target(stack: AsyncExitStack, directory: Path) -> tuple[str, Path]:
    db = directory / "target.sqlite3"
    argv = payment_target.command(db, settlement_delay=0.3, hang_after_commit=[LOST])
    target = await spawn(
        stack, "payment target", argv, directory / "target.log", dict(os.environ)
    )
    [url] = (await target.wait_for_line(payment_target.BANNER)).groups()
    return url, db


def _routes(directory: Path, target_url: str) -> Path:
    """The crash matrix's routes at this target, loopback allowed: a gateway refuses
    internal hosts unless routes.yaml allows them."""
    path = write_routes(directory / "routes.yaml", target_url)
    document = yaml.safe_load(path.read_text())
    document["proxy"]["allow"] = ["127.0.0.1"]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def _start_proxy(
    stack: AsyncExitStack, directory: Path, number: int, ledger: str, routes: Path
) -> str:
    env = serve_environment(
        ledger_url=ledger,
        master_key=base64.b64encode(b"k" * 32).decode(),
        routes=routes,
        listen="127.0.0.1:0",
        admin="127.0.0.1:0",
        tenant="unused-in-gateway-mode",
        kit_secret="unused",
        EFFECT_BROKER_GATEWAY="true",
    )
    proxy = await spawn(
        stack,
        f"proxy {number}",
        [sys.executable, "-c", SERVE],
        directory / f"proxy-{number}.log",
        env,
    )
    url, _admin = (await proxy.wait_for_line(PROXY_BANNER)).groups()
    return url


async def _charge(
    session: aiohttp.ClientSession, proxy: str, tenant: str, api_key: str
) -> tuple[int, str | None]:
    body = {"amount": 500, "currency": "usd", "order_id": f"order-{tenant}"}
    async with session.post(
        f"{proxy}/reconcilable/v1/charges",
        data=json.dumps(body).encode(),
        headers={
            "Operation-Key": f"order-{tenant}:charge",
            "Content-Type": "application/json",
            "Proxy-Authorization": basic(tenant, api_key),
        },
    ) as answer:
        await answer.read()
        return answer.status, answer.headers.get("Effect-Status")


def _charges_by_order(db: Path) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT order_id, count(*) FROM charges GROUP BY order_id"
        ).fetchall()
    return {order: int(n) for order, n in rows}


@pytest.mark.timeout(600)
async def test_two_proxies_settle_every_tenants_lost_answer_with_one_charge(
    database_url: str, processes: AsyncExitStack, tmp_path: Path
) -> None:
    store = await Store.connect(database_url)
    try:
        keys = {tenant: await make_key(store, tenant) for tenant in TENANTS}
    finally:
        await store.close()
    target_url, target_db = await _start_target(processes, tmp_path)
    routes = _routes(tmp_path, target_url)
    proxies = [
        await _start_proxy(processes, tmp_path, n, database_url, routes) for n in (1, 2)
    ]

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        answers = await asyncio.gather(
            *(
                _charge(session, proxies[n % 2], tenant, keys[tenant])
                for n, tenant in enumerate(TENANTS)
            )
        )
    # every answer was lost at the target: each agent was told so, none got a 2xx
    assert {status for _, status in answers} == {"outcome_unknown"}, answers
    assert all(code >= 500 for code, _ in answers), answers

    conn = await asyncpg.connect(database_url)
    try:

        async def all_settled() -> bool | None:
            settled = await conn.fetchval(
                "SELECT count(*) FROM effects WHERE status = 'succeeded'"
            )
            return True if settled == len(TENANTS) else None

        with suppress(CellError):  # the assertions below say what is left unsettled
            await poll(all_settled, timeout=SETTLE_DEADLINE, what="every effect settled")
        effects = await conn.fetch(
            "SELECT e.tenant_id, e.status, e.attempts, r.source"
            " FROM effects AS e LEFT JOIN effect_receipts AS r"
            " ON r.tenant_id = e.tenant_id AND r.effect_id = e.effect_id"
        )
        lost = await conn.fetchval(
            "SELECT count(DISTINCT (tenant_id, effect_id)) FROM effect_events"
            " WHERE to_status = 'outcome_unknown'"
        )
        workers = await conn.fetchval(
            "SELECT count(DISTINCT s.nodeport) FROM (SELECT DISTINCT tenant_id"
            " FROM effects) AS t, LATERAL (SELECT nodeport FROM citus_shards"
            " WHERE shardid = get_shard_id_for_distribution_column('effects',"
            " t.tenant_id)) AS s"
        )
    finally:
        await conn.close()

    assert sorted(row["tenant_id"] for row in effects) == TENANTS
    unsettled = [dict(row) for row in effects if row["status"] != "succeeded"]
    assert unsettled == [], f"{len(unsettled)} effects not settled: {unsettled[:5]}"
    # settled by the reconcilers' lookups, from the one attempt each: nothing resent
    assert {(row["attempts"], row["source"]) for row in effects} == {(1, "probe")}
    assert lost == len(TENANTS)
    assert workers == 2
    # the target's own table: one charge per tenant, no more
    assert _charges_by_order(target_db) == {f"order-{t}": 1 for t in TENANTS}
    store = await Store.connect(database_url)
    try:
        for row in await _effect_ids(database_url):
            assert await store.verify_events(row["tenant_id"], row["effect_id"]) is None
    finally:
        await store.close()


async def _effect_ids(database_url: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch("SELECT tenant_id, effect_id FROM effects")
    finally:
        await conn.close()
