"""One cell of the crash matrix: its directory, database, target and proxy processes.

A cell starts the real programs a user runs, the packaged demo payment target
(``python -m effect_broker.demo.payment_target``) and ``effect-broker serve``,
configured by environment, each with its log in the cell's directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from effect_broker.demo import payment_target
from effect_broker.demo.crash_matrix import agent
from effect_broker.demo.crash_matrix.agent import AgentResult
from effect_broker.demo.crash_matrix.ledger import SETTLE_TIMEOUT, Ledger, LedgerReader
from effect_broker.demo.crash_matrix.processes import (
    PROXY_BANNER,
    Proxy,
    Target,
    poll,
    spawn,
)

#: The routes every cell serves, after ``write_routes`` points them at its target.
ROUTES_TEMPLATE = files("effect_broker.demo.crash_matrix") / "routes.yaml"

TENANT = "crash-matrix"
#: The routes file's transactional route sends the kit's secret from this variable
#: (the demo target reads it from ``payment_target.KIT_SECRET_ENV``).
KIT_SECRET_ENV = "CRASH_MATRIX_KIT_SECRET"
LEASE_GRACE = "300ms"  # lease = contract timeout (1 s) + this; then the holder is dead
SETTLEMENT_DELAY = 0.3  # the target's lookup lags commits this much (bound: 500 ms)
DEATH_TIMEOUT = 20.0  # an armed proxy reaches its failpoint within this
AGENT_DEADLINE = 40.0  # an agent stops asking after this
#: ``effect-broker serve``: the serve command itself, run on its own so that the matrix
#: does not depend on every other command group of the CLI importing cleanly.
SERVE = "import typer; from effect_broker.cli.serve import serve; typer.run(serve)"
#: The same, with every dispatch given a random downstream key instead of the stable
#: derived one. The engine is the only caller of ``outgoing_request``; it imports it by
#: name, so the name is replaced there before the server starts.
SERVE_SABOTAGED = """
import secrets
import typer
import effect_broker.engine.engine as engine
from effect_broker.cli.serve import serve
original = engine.outgoing_request
def fresh_key(route, stored, downstream_key, *rest):
    return original(route, stored, secrets.token_urlsafe(32), *rest)
engine.outgoing_request = fresh_key
typer.run(serve)
"""


def serve_environment(
    *,
    ledger_url: str,
    master_key: str,
    routes: Path,
    listen: str,
    admin: str,
    tenant: str,
    kit_secret: str,
    failpoints: str | None = None,
    **settings: str,
) -> dict[str, str]:
    """The environment of one ``effect-broker serve`` of the proof (a crash matrix
    cell or an explorer round): none of the caller's own ``EFFECT_BROKER_`` settings,
    the reconciler on, a small pool, the short lease grace, and ``settings`` last."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    env.update(
        EFFECT_BROKER_DATABASE_URL=ledger_url,
        EFFECT_BROKER_MASTER_KEY=master_key,
        EFFECT_BROKER_ROUTES=str(routes),
        EFFECT_BROKER_LISTEN=listen,
        EFFECT_BROKER_ADMIN_LISTEN=admin,
        EFFECT_BROKER_TENANT=tenant,
        EFFECT_BROKER_LEASE_GRACE=LEASE_GRACE,
        EFFECT_BROKER_RECONCILER="true",
        EFFECT_BROKER_POOL_MAX_SIZE="4",
        **settings,
    )
    env[KIT_SECRET_ENV] = kit_secret
    if failpoints:
        env["EFFECT_BROKER_FAILPOINTS"] = failpoints
    return env


@dataclass
class Cell:
    """One mode and scenario: its directory, database, processes and observations."""

    mode: str
    scenario: str
    directory: Path
    database_url: str
    master_key: str
    kit_secret: str
    sabotage: str | None
    stack: AsyncExitStack
    reader: LedgerReader
    proxies: int = 0
    routes: Path | None = None
    #: transactional mode: the target's own PostgreSQL database (kit and charges)
    target_database_url: str | None = None

    async def start_target(self) -> Target:
        db = self.directory / "target.sqlite3"
        argv = payment_target.command(
            db,
            settlement_delay=SETTLEMENT_DELAY,
            key_retention=86400,
            database_url=self.target_database_url,
        )
        env = dict(os.environ)
        if self.target_database_url is not None:
            env[payment_target.KIT_SECRET_ENV] = self.kit_secret
        process = await spawn(
            self.stack, "payment target", argv, self.directory / "target.log", env
        )
        url = (await process.wait_for_line(payment_target.BANNER)).group(1)
        self.routes = write_routes(self.directory / "routes.yaml", url)
        return Target(url, db, process, self.target_database_url)

    async def start_proxy(
        self,
        *,
        failpoint: str | None = None,
        listen: str = "127.0.0.1:0",
        admin_listen: str = "127.0.0.1:0",
    ) -> Proxy:
        """``effect-broker serve`` on this cell's ledger, armed at ``failpoint``."""
        assert self.routes is not None, "start the target first"
        self.proxies += 1
        env = serve_environment(
            ledger_url=self.database_url,
            master_key=self.master_key,
            routes=self.routes,
            listen=listen,
            admin=admin_listen,
            tenant=TENANT,
            kit_secret=self.kit_secret,
            failpoints=failpoint,
        )
        boot = SERVE_SABOTAGED if self.sabotage else SERVE
        name = f"proxy {self.proxies}" + (f" (armed: {failpoint})" if failpoint else "")
        process = await spawn(
            self.stack,
            name,
            [sys.executable, "-c", boot],
            self.directory / f"proxy-{self.proxies}.log",
            env,
        )
        match = await process.wait_for_line(PROXY_BANNER)
        return Proxy(match.group(1), match.group(2), process)

    async def restart(self, dead: Proxy) -> Proxy:
        """A new, unarmed proxy on the dead one's ports: the agent's URL stays valid."""
        return await self.start_proxy(listen=dead.listen, admin_listen=dead.admin_listen)

    async def ledger(self) -> Ledger | None:
        return await self.reader.ledger()

    async def settled_ledger(self) -> Ledger:
        """Poll until the effect is settled, or provably stays where it is."""
        return await self.reader.settled_ledger(self.mode)

    async def writes_after_takeover(self, *, zombie: Proxy, successor: Proxy) -> int:
        return await self.reader.writes_after_takeover(
            zombie.actor_pattern(), successor.actor_pattern()
        )

    async def write_history(self) -> None:
        """The effect's event history, next to the process logs, for whoever debugs."""
        await self.reader.write_history(self.directory / "ledger-events.txt")

    async def wait_for_event(self, kind: str, what: str) -> None:
        """Until the effect's history holds an event of ``kind``."""

        async def seen() -> bool | None:
            return True if await self.reader.events_of(kind) >= 1 else None

        await poll(seen, timeout=SETTLE_TIMEOUT, what=what)

    async def claimed_by(self, proxy: Proxy) -> bool:
        return await self.reader.claimed_by(proxy.actor_pattern())

    def run_agent(
        self, url: str, *, naive: bool = False
    ) -> Coroutine[Any, Any, AgentResult]:
        """The scripted agent for this cell's mode."""
        return agent.run_agent(url, self.mode, naive=naive, deadline=AGENT_DEADLINE)


def write_routes(path: Path, target_url: str) -> Path:
    """routes.yaml with every upstream's origin replaced by this cell's target."""
    document = yaml.safe_load(ROUTES_TEMPLATE.read_text())
    for route in document["routes"]:
        upstream = urlsplit(route["upstream"])
        target = urlsplit(target_url)
        route["upstream"] = urlunsplit(upstream._replace(netloc=target.netloc))
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
