"""How long a duplicate waits: the same key again 100 ms into a 1 s call.

An agent retries on its own timeout while the first call still runs. effect-broker makes
that duplicate wait for the first request's answer and replays it (``in_flight_wait``);
this measures how much later than the first request the duplicate is answered, for
``--pairs`` keys one after another, through ``effect-broker serve`` with 1 and 2 workers
(two workers: each request on a fresh connection, so the kernel spreads them, and a
duplicate on the other worker sees the settle through the ledger's poll).

Goal: the duplicate answered within 50 ms of the first request's answer (the median),
with one upstream call per key. Run: ``python -m bench.duplicates [--pairs 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import aiohttp

from bench import ledger
from bench.harness import _ready
from bench.procs import python_module, start_server

WORK_SECONDS = 1.0
DUPLICATE_AFTER = 0.1
GOAL_MS = 50.0


async def _one_pair(proxy: str, upstream: str) -> tuple[float, bool, bool]:
    """(ms between the two answers, duplicate marked replayed, both succeeded)."""
    key = f"dup-{uuid.uuid4().hex}"
    url = upstream.rstrip("/") + ledger.CHARGE_PATH

    async def send() -> tuple[float, int, bool]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url,
                proxy=proxy,
                json={"amount": 1, "currency": "usd"},
                headers={"Operation-Key": key, "X-Bench-Delay": str(WORK_SECONDS)},
            ) as response,
        ):
            await response.read()
            replayed = response.headers.get("Idempotent-Replayed") == "true"
            return time.monotonic(), response.status, replayed

    first = asyncio.ensure_future(send())
    await asyncio.sleep(DUPLICATE_AFTER)
    second = asyncio.ensure_future(send())
    (first_at, first_status, _), (second_at, second_status, replayed) = (
        await first,
        await second,
    )
    both = first_status == second_status == 200
    return (second_at - first_at) * 1000, replayed, both


def measure(proxy: str, upstream: str, pairs: int) -> dict[str, float]:
    results = [asyncio.run(_one_pair(proxy, upstream)) for _ in range(pairs)]
    lags = [lag for lag, _, _ in results]
    return {
        "pairs": pairs,
        "p50_ms": statistics.median(lags),
        "max_ms": max(lags),
        "replayed": sum(replayed for _, replayed, _ in results),
        "succeeded": sum(ok for _, _, ok in results),
    }


def run(pairs: int, database_url: str | None = None) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        upstream = start_server(
            "upstream",
            python_module("bench.upstream"),
            log=workdir / "upstream.log",
            ready=_ready(),
        )
        stack.callback(upstream.stop)
        upstream_url = upstream.match.group(1)
        server = stack.enter_context(ledger.postgres_server(database_url, workdir))
        routes = ledger.write_routes(upstream_url, workdir / "routes.yaml")
        for workers in (1, 2):
            database = stack.enter_context(ledger.bench_database(server))
            broker = ledger.start_broker(
                database, routes, workdir / f"broker-{workers}.log", workers=workers
            )
            try:
                results[f"{workers} worker{'s' if workers > 1 else ''}"] = measure(
                    broker.proxy_url, upstream_url, pairs
                )
            finally:
                broker.server.stop()
    return results


def render(results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"A duplicate {DUPLICATE_AFTER * 1000:.0f} ms into a {WORK_SECONDS:g} s call: "
        f"how much later than the first it is answered (goal: p50 <= {GOAL_MS:.0f} ms)",
        f"{'effect-broker':<16}{'pairs':>6}{'p50 ms':>9}{'max ms':>9}"
        f"{'replayed':>10}{'goal':>7}",
    ]
    for name, row in results.items():
        met = "met" if row["p50_ms"] <= GOAL_MS else "missed"
        lines.append(
            f"{name:<16}{row['pairs']:>6.0f}{row['p50_ms']:>9.1f}{row['max_ms']:>9.1f}"
            f"{row['replayed']:>6.0f}/{row['pairs']:<3.0f}{met:>7}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--database-url", default=None)
    options = parser.parse_args(argv)
    print(render(run(options.pairs, options.database_url)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
