"""What the main table cannot show: the ledger's work per new effect, and the cost of a
write once the ledger is large.

* **Commits (and statements) per new effect**: a fixed number of new effects at c=1
  and c=64 through each effect-broker (1 and 2 workers), with the database's
  ``pg_stat_database.xact_commit`` read before and after (and
  ``pg_stat_statements.calls`` when that extension is loaded; it needs
  ``shared_preload_libraries``, so usually it is not). At c=1 every new effect pays its
  own commits; at c=64 group commit shares them, so the number falls below the c=1 one.
* **Write cost at ledger size**: new effects at c=1 on a fresh, empty ledger of their
  own, then again after ``fill`` settled effects (with their receipts) are written
  straight into it with one ``generate_series`` statement and the tables are analyzed.
  The p50 of a new effect is reserve + dispatch + receipt; its growth is what the size of
  the tables and their indexes adds to a write.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bench import ledger
from bench.loadgen import LoadSpec, drive

# Settled effects as the proxy leaves them (status, version, attempts, receipt), of the
# bench route's contract, old enough to look like history but inside key retention.
FILL_EFFECTS = """
INSERT INTO effects (
    effect_id, tenant_id, operation_key, request_hash, route, contract_name,
    contract_version, safety, downstream_key, status, version, attempts,
    first_dispatched_at, retention_deadline, request_preview, created_at, updated_at)
SELECT md5('fill' || g)::uuid, 'default', 'fill-' || g, md5('hash' || g), 'charge',
       'bench.charge', '1', 'idempotent', md5('key' || g), 'succeeded', 3, 1,
       now() - interval '1 hour', now() + interval '23 hours',
       '{"amount": 1, "currency": "usd"}'::jsonb,
       now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, $1) AS g
"""
FILL_RECEIPTS = """
INSERT INTO effect_receipts (tenant_id, effect_id, status_code, response_ciphertext,
                             source, recorded_at)
SELECT 'default', md5('fill' || g)::uuid, 200, decode(md5('body' || g), 'hex'),
       'response', now() - interval '1 hour'
FROM generate_series(1, $1) AS g
"""


async def _one(dsn: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


def _counter(dsn: str, query: str, *args: Any) -> float | None:
    try:
        value = asyncio.run(_one(dsn, query, *args))
    except asyncpg.PostgresError:
        return None
    return None if value is None else float(value)


def commits(dsn: str) -> float | None:
    """Commits in ``dsn``'s database, read from the server's ``postgres`` database: a
    read from the bench database would itself be a commit there, and the count would
    never stand still for ``settled``."""
    name = urlsplit(dsn).path.lstrip("/")
    return _counter(
        ledger.with_database(dsn, "postgres"),
        "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
        name,
    )


def statements(dsn: str) -> float | None:
    """Statement calls in ``dsn``'s database, read like ``commits`` from the server's
    ``postgres`` database; None unless pg_stat_statements is loaded and created there."""
    name = urlsplit(dsn).path.lstrip("/")
    return _counter(
        ledger.with_database(dsn, "postgres"),
        "SELECT sum(calls) FROM pg_stat_statements s JOIN pg_database d "
        "ON d.oid = s.dbid WHERE d.datname = $1",
        name,
    )


def settled(read: Callable[[], float | None], deadline: float = 15.0) -> float | None:
    """``read()`` once it stops moving: backends report their counts to the statistics
    system about a second after they go idle, not at each commit."""
    last = read()
    stop = time.monotonic() + deadline
    while time.monotonic() < stop:
        time.sleep(1.2)
        now = read()
        if now == last:
            return now
        last = now
    return last


def per_effect(
    dsn: str, upstream_url: str, proxy_url: str, concurrency: int, count: int
) -> dict[str, Any]:
    """Commits and statements per new effect over ``count`` new effects."""
    commits_before = settled(lambda: commits(dsn))
    statements_before = statements(dsn)
    spec = LoadSpec(
        url=upstream_url.rstrip("/") + ledger.CHARGE_PATH,
        proxy=proxy_url,
        concurrency=concurrency,
        count=count,
    )
    result = drive(spec, "python")
    commits_after = settled(lambda: commits(dsn))
    statements_after = statements(dsn)

    def rate(before: float | None, after: float | None) -> float | None:
        if before is None or after is None or not result.requests:
            return None
        # Read from the postgres database, the counters' reads are not counted.
        return (after - before) / result.requests

    return {
        "effects": result.requests,
        "errors": result.errors,
        "commits_per_effect": rate(commits_before, commits_after),
        "statements_per_effect": rate(statements_before, statements_after),
    }


def fill(dsn: str, effects: int) -> float:
    """Write ``effects`` settled effects and receipts; the seconds it took."""

    async def write() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            await conn.execute(FILL_EFFECTS, effects, timeout=3600)
            await conn.execute(FILL_RECEIPTS, effects, timeout=3600)
            await conn.execute("ANALYZE effects, effect_receipts", timeout=3600)
        finally:
            await conn.close()

    started = time.perf_counter()
    asyncio.run(write())
    return time.perf_counter() - started


def p50_at_c1(upstream_url: str, proxy_url: str, count: int) -> dict[str, Any]:
    spec = LoadSpec(
        url=upstream_url.rstrip("/") + ledger.CHARGE_PATH,
        proxy=proxy_url,
        concurrency=1,
        count=count,
        warmup=0.5,
    )
    result = drive(spec, "python")
    return {
        "effects": result.requests,
        "errors": result.errors,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
    }


def p50_at_c1_alternating(
    upstream_url: str, proxies: dict[str, str], count: int, *, rounds: int
) -> dict[str, dict[str, Any]]:
    """``p50_at_c1`` for each proxy, ``count`` effects each, taken in ``rounds``
    alternating slices: each proxy's p50 and p99 are the medians of its slices'."""
    slices: dict[str, list[dict[str, Any]]] = {name: [] for name in proxies}
    for _ in range(rounds):
        for name, proxy_url in proxies.items():
            slices[name].append(p50_at_c1(upstream_url, proxy_url, count // rounds))
    return {
        name: {
            "effects": sum(s["effects"] for s in measured),
            "errors": sum(s["errors"] for s in measured),
            "p50_ms": statistics.median(s["p50_ms"] for s in measured),
            "p99_ms": statistics.median(s["p99_ms"] for s in measured),
        }
        for name, measured in slices.items()
    }


def ledger_rows(dsn: str) -> int:
    return int(asyncio.run(_one(dsn, "SELECT count(*) FROM effects")))
