"""What effect-broker's PostgreSQL backends wait on while a bench run drives them.

Workers scale until something serialises them. This samples ``pg_stat_activity`` of
the newest bench database every 10 ms and counts what each backend is doing: on the
CPU, waiting for a lock (``Lock``: a row or a tuple another transaction holds), for the
WAL to be flushed (``IO/WALSync``, and ``LWLock/WALWrite`` while another backend's
flush covers its commit too), or idle. Lock waits would mean workers queue behind each
other; WAL waits mean they are bounded by the database's commit rate.

Run it beside a bench run, from the repository's root:

    python bench/run.py --configs new_w2 --concurrency 64 --runs 1 --duration 25 &
    python -m bench.waits 15
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

import asyncpg

NEWEST_BENCH_DATABASE = (
    "SELECT datname FROM pg_database WHERE datname LIKE 'eb_bench%'"
    " ORDER BY oid DESC LIMIT 1"
)
ACTIVITY = (
    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
    " WHERE datname = $1 AND pid <> pg_backend_pid()"
)


async def sample(dsn: str, seconds: float, settle: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        before = await conn.fetchval(NEWEST_BENCH_DATABASE)
        database = before
        while database == before:  # the run's own database, not a leftover one
            await asyncio.sleep(0.2)
            database = await conn.fetchval(NEWEST_BENCH_DATABASE)
        await asyncio.sleep(settle)  # past the bench's start-up and warm-up
        counts: Counter[tuple[str, str]] = Counter()
        samples = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for row in await conn.fetch(ACTIVITY, database):
                if row["state"] == "active":
                    what = (row["wait_event_type"] or "CPU", row["wait_event"] or "-")
                else:
                    what = ("idle", row["state"] or "-")
                counts[what] += 1
            samples += 1
            await asyncio.sleep(0.01)
    finally:
        await conn.close()
    active = sum(n for (kind, _), n in counts.items() if kind != "idle")
    print(f"{samples} samples of {database}; {active / samples:.2f} backends active")
    print(f"| {'waiting on':<30} | backends | share |")
    print(f"|{'-' * 32}|---------:|------:|")
    total = sum(counts.values())
    for (kind, event), n in counts.most_common(12):
        share = 100 * n / total
        print(f"| {kind + ' ' + event:<30} | {n / samples:8.2f} | {share:4.1f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", type=float, help="how long to sample")
    parser.add_argument("--settle", type=float, default=6.0, help="seconds to wait first")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    options = parser.parse_args()
    asyncio.run(sample(options.dsn, options.seconds, options.settle))


if __name__ == "__main__":
    main()
