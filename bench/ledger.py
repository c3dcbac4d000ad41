"""effect-broker for the bench: a fresh database on a real PostgreSQL, the routes file,
and ``effect-broker serve`` as a process of its own.

The server is the one given with ``--database-url``, else the system PostgreSQL on
127.0.0.1:5432 when it answers, else the embedded one from ``effect_broker.embedded``
(durable, as a production ledger). The bench creates ``eb_bench_<random>`` there,
migrates it with ``effect-broker migrate`` and drops it at the end.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.procs import ROOT, Server, child_env, cpu_seconds, start_server

SYSTEM_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
ROUTES_TEMPLATE = Path(__file__).with_name("routes.yaml")
CHARGE_PATH = "/pay/charge"  # the route records effects here ...
UNMATCHED_PATH = "/pay/other"  # ... and passes everything else through
# One key for every effect-broker of a run: two of them share the bench database.
MASTER_KEY = base64.b64encode(os.urandom(32)).decode()
_BANNER = re.compile(r"proxy on (http://\S+?), admin on (http://\S+?),")


@dataclass(frozen=True)
class PostgresInfo:
    dsn: str  # the server's DSN (the bench's own database lives beside it)
    origin: str  # "given", "system" or "embedded"
    version: str
    fsync: str
    synchronous_commit: str


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointing at another database."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + database))


async def _fetch_info(dsn: str, origin: str) -> PostgresInfo:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        row = await conn.fetchrow(
            "SELECT current_setting('server_version') AS version, "
            "current_setting('fsync') AS fsync, "
            "current_setting('synchronous_commit') AS synchronous_commit"
        )
    finally:
        await conn.close()
    assert row is not None
    return PostgresInfo(
        dsn, origin, row["version"], row["fsync"], row["synchronous_commit"]
    )


def _reachable(dsn: str) -> bool:
    try:
        asyncio.run(_fetch_info(dsn, "system"))
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    return True


@contextmanager
def postgres_server(given: str | None, workdir: Path) -> Iterator[PostgresInfo]:
    """The PostgreSQL server to use, started (embedded) only when no other answers."""
    if given:
        yield asyncio.run(_fetch_info(given, "given"))
        return
    if _reachable(SYSTEM_POSTGRES):
        yield asyncio.run(_fetch_info(SYSTEM_POSTGRES, "system"))
        return
    from effect_broker.embedded import embedded_postgres

    with embedded_postgres(workdir / "pg", durable=True, keep_data=False) as dsn:
        yield asyncio.run(_fetch_info(dsn, "embedded"))


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def bench_database(
    server: PostgresInfo,
    overrides: Mapping[str, str] | None = None,
    *,
    migrate: bool = True,
    command: Sequence[str] | None = None,
) -> Iterator[str]:
    """A fresh, migrated database of the bench's own, dropped when the block ends.

    ``overrides`` are per-database settings for experiments (``ALTER DATABASE ... SET``,
    e.g. ``synchronous_commit=off`` to see what commit flushes cost); never the default.
    ``migrate=False`` leaves it empty: a demo target's own database, which creates its
    tables itself and must not look like a ledger. ``command`` migrates with another
    build's ``effect-broker`` (``--broker-command``): an older build refuses a ledger
    that a newer one migrated.
    """
    name = f"eb_bench_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(server.dsn, f'CREATE DATABASE "{name}"'))
    try:
        for setting, value in (overrides or {}).items():
            if not re.fullmatch(r"[a-z_]+", setting):
                raise ValueError(f"{setting!r} is not a PostgreSQL setting name")
            quoted = value.replace("'", "''")
            asyncio.run(
                _admin(
                    server.dsn, f"ALTER DATABASE \"{name}\" SET {setting} = '{quoted}'"
                )
            )
        dsn = with_database(server.dsn, name)
        if not migrate:
            yield dsn
            return
        subprocess.run(
            [*(command or effect_broker_command()), "migrate", "--database-url", dsn],
            check=True,
            capture_output=True,
            env=child_env(),
            cwd=ROOT,
        )
        yield dsn
    finally:
        asyncio.run(_admin(server.dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _backend_pids(database_url: str) -> list[int]:
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return [row["pid"] for row in rows]


def database_cpu_seconds(database_url: str) -> dict[int, float] | None:
    """CPU seconds used so far by each PostgreSQL backend serving ``database_url``
    (effect-broker's pool), or None when they are not local processes we can read."""
    seconds = {}
    for pid in asyncio.run(_backend_pids(database_url)):
        try:
            if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"postgres"):
                return None  # a remote server's pid names some other local process
            seconds[pid] = cpu_seconds(pid)
        except OSError:
            return None
    return seconds


def effect_broker_command() -> list[str]:
    """``effect-broker`` of this interpreter's environment (its console script)."""
    script = Path(sys.executable).with_name("effect-broker")
    if script.is_file():
        return [str(script)]
    found = shutil.which("effect-broker")
    if found:
        return [found]
    return [sys.executable, "-c", "from effect_broker.cli import main; main()"]


def write_routes(upstream: str, path: Path) -> Path:
    """bench/routes.yaml with the upstream's host:port filled in."""
    authority = upstream.removeprefix("http://").rstrip("/")
    path.write_text(ROUTES_TEMPLATE.read_text().replace("UPSTREAM_AUTHORITY", authority))
    return path


@dataclass
class Broker:
    server: Server
    proxy_url: str
    admin_url: str


def start_broker(
    database_url: str,
    routes: Path,
    log: Path,
    command: Sequence[str] | None = None,
    workers: int = 1,
    settings: Mapping[str, str] | None = None,
) -> Broker:
    """``effect-broker serve`` on ephemeral ports, the reconciler off, pool of 20 (per
    worker); with ``workers`` > 1 ready once every worker has said where it listens.

    ``command`` replaces ``effect-broker`` (``serve`` is appended), to compare builds.
    ``settings`` are more environment variables, set last: the reconciliation bench
    turns the reconciler on there, so that the throughput runs keep it off.
    """
    env = child_env(
        {
            "EFFECT_BROKER_DATABASE_URL": database_url,
            "EFFECT_BROKER_MASTER_KEY": MASTER_KEY,
            "EFFECT_BROKER_ROUTES": str(routes),
            "EFFECT_BROKER_LISTEN": "127.0.0.1:0",
            "EFFECT_BROKER_ADMIN_LISTEN": "127.0.0.1:0",
            "EFFECT_BROKER_RECONCILER": "false",
            "EFFECT_BROKER_POOL_MAX_SIZE": "20",
            "COLUMNS": "400",  # keep rich from wrapping the banner we parse
            **(settings or {}),
        }
    )
    server = start_server(
        "effect-broker",
        [
            *(command or effect_broker_command()),
            "serve",
            *(["--workers", str(workers)] if workers > 1 else []),
        ],
        log=log,
        ready=re.compile(".*".join([_BANNER.pattern] * workers), re.DOTALL),
        env=env,
    )
    return Broker(server, server.match.group(1), server.match.group(2))
