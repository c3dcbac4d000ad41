"""One round's processes: the payment target and K proxies on one ledger, each proxy
reaching it through a relay of its own (so a ledger fault can cut off one proxy or all).

Built from the crash matrix's pieces (``spawn``, ``Process``, ``Proxy``, ``Target``,
its routes file and its ``serve`` boot line). A proxy slot keeps its ports for the whole
round, so an agent's URL stays valid across a kill and restart, and it remembers why
the process is frozen: it is thawed only once every reason has ended (a short pause
must not wake a proxy that froze itself before a send).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from effect_broker.demo import payment_target
from effect_broker.demo.crash_matrix.cells import (
    SERVE,
    SETTLEMENT_DELAY,
    serve_environment,
    write_routes,
)
from effect_broker.demo.crash_matrix.processes import (
    PROXY_BANNER,
    CellError,
    Process,
    Proxy,
    Target,
    spawn,
)
from effect_broker.demo.explorer.relay import LedgerRelay, through, upstream_of

TENANT = "explorer"
#: lease = queue timeout + the routes' 1 s timeout + the proof's 300 ms grace
#: (``serve_environment``) = 1.8 s: short, so a pause or stall longer than that (and
#: the 0.5 s settlement bound) is quick to stage.
QUEUE_TIMEOUT = "500ms"
LEASE_SECONDS = 1.8
TARGET_DB = "target.sqlite3"
RESTART_TIMEOUT = 30.0  # a killed proxy is up again within this (the ledger may be down)
RESTART_PAUSE = 0.2


def is_stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): its state in ``/proc`` is ``T``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


@dataclass
class Slot:
    """Proxy number ``index``: its current process, and why it is frozen, if it is."""

    index: int
    proxy: Proxy
    relay: LedgerRelay
    armed: str | None = None
    frozen_by: set[str] = field(default_factory=set)
    dead: bool = False

    @property
    def url(self) -> str:
        return self.proxy.url


@dataclass
class Cluster:
    stack: AsyncExitStack
    directory: Path
    ledger_dsn: str  # direct; each proxy gets it through its own relay
    master_key: str
    kit_secret: str
    target: Target | None = None
    slots: list[Slot] = field(default_factory=list)
    started: int = 0

    async def start_target(self, target_database_url: str | None) -> Target:
        """The demo payment target; with a database, its transactional mode too."""
        db = self.directory / TARGET_DB
        argv = payment_target.command(
            db,
            settlement_delay=SETTLEMENT_DELAY,
            key_retention=86400,
            database_url=target_database_url,
        )
        env = dict(os.environ)
        if target_database_url is not None:
            env[payment_target.KIT_SECRET_ENV] = self.kit_secret
        process = await spawn(
            self.stack, "payment target", argv, self.directory / "target.log", env
        )
        url = (await process.wait_for_line(payment_target.BANNER)).group(1)
        write_routes(self.directory / "routes.yaml", url)
        self.target = Target(url, db, process, target_database_url)
        return self.target

    async def start_proxy(
        self,
        ledger_url: str,
        *,
        armed: str | None = None,
        listen: str = "127.0.0.1:0",
        admin: str = "127.0.0.1:0",
    ) -> Proxy:
        """``effect-broker serve`` on the round's ledger, at ``ledger_url``."""
        self.started += 1
        env = serve_environment(
            ledger_url=ledger_url,
            master_key=self.master_key,
            routes=self.directory / "routes.yaml",
            listen=listen,
            admin=admin,
            tenant=TENANT,
            kit_secret=self.kit_secret,
            failpoints=armed,
            EFFECT_BROKER_UPSTREAM_QUEUE_TIMEOUT=QUEUE_TIMEOUT,
        )
        name = f"proxy {self.started}" + (f" (armed: {armed})" if armed else "")
        process = await spawn(
            self.stack,
            name,
            [sys.executable, "-c", SERVE],
            self.directory / f"proxy-{self.started}.log",
            env,
        )
        match = await process.wait_for_line(PROXY_BANNER)
        return Proxy(match.group(1), match.group(2), process)

    async def add_slot(self, armed: str | None = None) -> Slot:
        """A new proxy behind a new relay, kept for the whole round."""
        relay = LedgerRelay(upstream_of(self.ledger_dsn))
        port = await relay.start()
        self.stack.push_async_callback(relay.close)
        proxy = await self.start_proxy(through(self.ledger_dsn, port), armed=armed)
        slot = Slot(len(self.slots), proxy, relay, armed)
        self.slots.append(slot)
        return slot

    def kill(self, slot: Slot) -> None:
        slot.proxy.process.proc.kill()
        slot.frozen_by.clear()
        slot.proxy.process.frozen = False
        slot.dead = True

    async def restart(self, slot: Slot) -> None:
        """A new process on the slot's ports, armed as the first one was.

        A proxy cannot start while the ledger is down (it exits): like a supervisor,
        try again until it is up or ``RESTART_TIMEOUT`` has passed.
        """
        await slot.proxy.process.stop()  # reaped before its ports are taken again
        old = slot.proxy
        deadline = time.monotonic() + RESTART_TIMEOUT
        while True:
            try:
                slot.proxy = await self.start_proxy(
                    through(self.ledger_dsn, slot.relay.port),
                    armed=slot.armed,
                    listen=urlsplit(old.url).netloc,
                    admin=urlsplit(old.admin_url).netloc,
                )
                break
            except CellError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(RESTART_PAUSE)  # a supervisor's restart delay
        slot.dead = False

    def freeze(self, slot: Slot, reason: str) -> bool:
        """SIGSTOP (unless dead); False when the slot could not be frozen."""
        if slot.dead:
            return False
        if not slot.frozen_by:
            _signal(slot.proxy.process, signal.SIGSTOP)
        slot.frozen_by.add(reason)
        return True

    def thaw(self, slot: Slot, reason: str) -> None:
        """Drop ``reason``; SIGCONT once no reason is left."""
        slot.frozen_by.discard(reason)
        if not slot.frozen_by and not slot.dead:
            _signal(slot.proxy.process, signal.SIGCONT)

    def froze_itself(self, slot: Slot) -> bool:
        """Whether the slot's armed process stopped itself at its failpoint (nobody
        from outside has frozen it, yet it is stopped)."""
        return (
            slot.armed is not None
            and not slot.dead
            and not slot.frozen_by
            and is_stopped(slot.proxy.process.pid)
        )

    def hold(self, slot: Slot, reason: str) -> None:
        """Keep a process that stopped itself stopped until ``thaw(slot, reason)``."""
        slot.frozen_by.add(reason)
        slot.proxy.process.frozen = True

    async def arm_target(self, fault: str, count: int) -> None:
        assert self.target is not None
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.target.url}/_faults", json={fault: count}) as answer,
        ):
            answer.raise_for_status()


def _signal(process: Process, signum: signal.Signals) -> None:
    if process.proc.returncode is None:
        process.signal(signum)
