"""Real processes for the fault suite: the demo payment target, ``effect-broker serve``,
and a PostgreSQL of the test's own that it may stop and restart.

Faults are only worth testing against the real thing: a proxy process that can be
killed with SIGKILL, a database server that really shuts down. Every process started
here is registered on an ``AsyncExitStack`` and stopped there (SIGTERM, then SIGKILL
after a grace), so a failing test never leaves one behind.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import asyncpg

from effect_broker.crypto import MasterKey
from effect_broker.demo import payment_target
from effect_broker.demo.crash_matrix.processes import CellError, Process, spawn
from effect_broker.demo.crash_matrix.processes import poll as poll
from effect_broker.store.migrations import apply_migrations
from tests.database import with_database

#: ``effect-broker serve`` alone, so the suite does not depend on every CLI group.
SERVE = "import typer; from effect_broker.cli.serve import serve; typer.run(serve)"
PROXY_BANNER = re.compile(r"effect-broker proxy on (http://\S+), admin on (http://\S+?),")
TENANT = "faults"
SETTLEMENT_DELAY = 0.2  # the target's lookup lags its commits this much

ROUTES = """\
version: 1
proxy:
  unmatched: pass
contracts:
  - name: faults.idempotent
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 2s
  - name: faults.reconcilable
    version: "1"
    safety: reconcilable
    correlation_header: X-Correlation-Id
    settlement_bound: 500ms
    timeout: 2s
    probe:
      method: GET
      path: /v1/charges?correlation_id={{downstream_key}}
      found: {{status: [200], external_id: /id}}
      absent: {{status: [404]}}
  - name: faults.unsafe
    version: "1"
    safety: unsafe
    timeout: 2s
  - name: faults.slow
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 60s
routes:
  - name: idempotent
    match: {{method: POST, path: /idempotent/v1/charges}}
    strip_prefix: /idempotent
    upstream: {target}/idempotent
    contract: faults.idempotent
  - name: reconcilable
    match: {{method: POST, path: /reconcilable/v1/charges}}
    strip_prefix: /reconcilable
    upstream: {target}/reconcilable
    contract: faults.reconcilable
  - name: unsafe
    match: {{method: POST, path: /unsafe/v1/charges}}
    strip_prefix: /unsafe
    upstream: {target}/unsafe
    contract: faults.unsafe
  - name: slow
    match: {{method: POST, path: /slow/v1/charges}}
    strip_prefix: /slow
    upstream: {slow}/idempotent
    contract: faults.slow
"""


# A process would not start or stop as the scenario needs: the crash matrix's error, so
# that its ``poll`` (deadline-bounded, no sleeps as synchronisation), ``Process`` and
# ``spawn`` serve here too.
FaultSetupError = CellError


@dataclass
class Target:
    url: str
    db: Path

    async def withhold_answers(self, count: int) -> None:
        """The next ``count`` charges commit and are never answered: the classic lost
        response, so that a fault meets effects committed at the target in flight."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/_faults", json={"hang_after_commit": count}) as r,
        ):
            r.raise_for_status()


async def start_target(stack: AsyncExitStack, directory: Path) -> Target:
    """The demo payment target on a free port; its SQLite table is the ground truth."""
    db = directory / "target.sqlite3"
    argv = payment_target.command(
        db, settlement_delay=SETTLEMENT_DELAY, key_retention=86400
    )
    process = await spawn(
        stack, "target", argv, directory / "target.log", dict(os.environ)
    )
    return Target((await process.wait_for_line(payment_target.BANNER)).group(1), db)


@dataclass
class Proxy:
    url: str
    admin_url: str
    process: Process


class ProxyLauncher:
    """Starts ``effect-broker serve`` processes on one ledger, with one routes file and
    one master key, so a restarted proxy carries on where a killed one stopped."""

    def __init__(
        self,
        stack: AsyncExitStack,
        directory: Path,
        database_url: str,
        target: Target,
        *,
        slow_url: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.stack = stack
        self.directory = directory
        self.database_url = database_url
        self.routes = directory / "routes.yaml"
        self.routes.write_text(
            ROUTES.format(target=target.url, slow=slow_url or target.url)
        )
        self.master_key = MasterKey.generate().to_base64()
        self.settings = dict(settings or {})
        self.started = 0

    async def start(
        self, *, listen: str = "127.0.0.1:0", admin: str = "127.0.0.1:0"
    ) -> Proxy:
        self.started += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
        env.update(
            EFFECT_BROKER_DATABASE_URL=self.database_url,
            EFFECT_BROKER_MASTER_KEY=self.master_key,
            EFFECT_BROKER_ROUTES=str(self.routes),
            EFFECT_BROKER_LISTEN=listen,
            EFFECT_BROKER_ADMIN_LISTEN=admin,
            EFFECT_BROKER_TENANT=TENANT,
            EFFECT_BROKER_LEASE_GRACE="500ms",
            EFFECT_BROKER_UPSTREAM_QUEUE_TIMEOUT="1s",
            EFFECT_BROKER_RECONCILER="true",
        )
        env.update(self.settings)
        log = self.directory / f"proxy-{self.started}.log"
        process = await spawn(
            self.stack, f"proxy {self.started}", [sys.executable, "-c", SERVE], log, env
        )
        match = await process.wait_for_line(PROXY_BANNER)
        return Proxy(match.group(1), match.group(2), process)

    async def restart(self, dead: Proxy) -> Proxy:
        """A new proxy on the dead one's ports: the agent's URL stays valid."""
        return await self.start(
            listen=urlsplit(dead.url).netloc, admin=urlsplit(dead.admin_url).netloc
        )


async def migrated_database(server_dsn: str, name: str) -> str:
    """A new database on ``server_dsn`` with the ledger's schema; returns its DSN."""
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = with_database(server_dsn, name)
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    return dsn
