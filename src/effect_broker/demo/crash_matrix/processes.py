"""Child processes of a cell, and handles on the two kinds it starts.

Every process is registered on the cell's ``AsyncExitStack`` the moment it starts and
stopped there (SIGCONT if frozen, SIGTERM, SIGKILL after a grace), so no cell, however
it fails, leaves a process behind. Waiting is always ``poll`` with a deadline on an
observable fact (a log line, a row), never a bare sleep.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp
import asyncpg

from effect_broker.demo.crash_matrix.agent import ORDER_ID

POLL = 0.05  # seconds between looks while polling with a deadline
START_TIMEOUT = 30.0  # a process prints its "listening" line within this
STOP_GRACE = 5.0  # SIGTERM, then SIGKILL after this

PROXY_BANNER = re.compile(r"effect-broker proxy on (http://\S+), admin on (http://\S+?),")
FENCED_METRIC = re.compile(r"^effect_broker_fenced_writes_total (\S+)$", re.MULTILINE)

T = TypeVar("T")


class CellError(Exception):
    """A cell could not be run as designed (a process would not start, a deadline)."""


# --------------------------------------------------------------------------- processes


@dataclass
class Process:
    """A child process whose output goes to a log file, stopped on the way out."""

    name: str
    proc: asyncio.subprocess.Process
    log: Path
    frozen: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    async def wait_for_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first log match of ``pattern``: how a child says it is listening."""

        async def look() -> re.Match[str] | None:
            if match := pattern.search(self.output()):
                return match
            if self.proc.returncode is not None:
                raise CellError(
                    f"{self.name} exited ({self.proc.returncode}) before it was "
                    f"ready:\n{self.tail()}"
                )
            return None

        return await poll(look, timeout=START_TIMEOUT, what=f"{self.name} to start")

    async def wait_exit(self, timeout: float) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise CellError(f"{self.name} still running after {timeout:g}s") from None

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)
        if signum is signal.SIGSTOP:
            self.frozen = True
        elif signum is signal.SIGCONT:
            self.frozen = False

    async def stop(self) -> None:
        """SIGTERM (after SIGCONT if frozen), SIGKILL if it lingers; always reaped."""
        if self.proc.returncode is None:
            with suppress(ProcessLookupError):
                if self.frozen:
                    self.signal(signal.SIGCONT)
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_GRACE)
            except TimeoutError:
                with suppress(ProcessLookupError):
                    self.proc.kill()
        await self.proc.wait()


async def spawn(
    stack: AsyncExitStack, name: str, argv: Sequence[str], log: Path, env: dict[str, str]
) -> Process:
    """Start ``argv`` with stdout and stderr in ``log``; stopped when ``stack`` closes."""
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=sink, env=env
        )
    process = Process(name, proc, log)
    stack.push_async_callback(process.stop)
    return process


async def poll(
    look: Callable[[], Awaitable[T | None]], *, timeout: float, what: str
) -> T:
    """Call ``look`` until it returns something other than None; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        found = await look()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise CellError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(POLL)


# --------------------------------------------------------------------------- the pieces


@dataclass
class Target:
    """The demo payment target of one cell; its charges table is the ground truth.

    SQLite for the idempotent, reconcilable and unsafe modes; in transactional mode
    (``database_url`` set) a PostgreSQL database of its own, where the kit's receipts
    share each charge's transaction.
    """

    url: str
    db: Path
    process: Process
    database_url: str | None = None

    async def charges(self) -> int:
        if self.database_url is not None:
            conn = await asyncpg.connect(self.database_url)
            try:
                count: int = await conn.fetchval(
                    "SELECT count(*) FROM charges WHERE order_id = $1", ORDER_ID
                )
            finally:
                await conn.close()
            return count

        def count_sqlite() -> int:
            with closing(sqlite3.connect(self.db)) as conn:
                (n,) = conn.execute(
                    "SELECT count(*) FROM charges WHERE order_id = ?", (ORDER_ID,)
                ).fetchone()
            return int(n)

        return await asyncio.to_thread(count_sqlite)

    async def arm(self, fault: str) -> None:
        """Arm one use of a ``/_faults`` fault on the target."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/_faults", json={fault: 1}) as answer,
        ):
            answer.raise_for_status()

    async def withhold_next_answer(self) -> None:
        """Arm ``hang_after_commit``: the next charge commits and is never answered."""
        await self.arm("hang_after_commit")

    async def stream_next_answer(self) -> None:
        """Arm ``stream_after_commit``: the next charge commits, and its answer goes
        out as a chunked stream that stops after half of its body."""
        await self.arm("stream_after_commit")

    async def wait_for_charge(self) -> None:
        async def committed() -> bool | None:
            return True if await self.charges() >= 1 else None

        await poll(committed, timeout=START_TIMEOUT, what="the target to commit")

    async def wait_until_held(self) -> None:
        """Until a charge waits inside its open transaction (an armed hold)."""

        async def held() -> bool | None:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{self.url}/_faults") as answer,
            ):
                shown = await answer.json()
            return True if shown.get("held", 0) >= 1 else None

        await poll(held, timeout=START_TIMEOUT, what="a charge held in its transaction")

    async def wait_for_log(self, text: str, what: str) -> None:
        """Until the target's log shows ``text`` (how it reports a charge's end)."""

        async def logged() -> bool | None:
            return True if text in self.process.output() else None

        await poll(logged, timeout=START_TIMEOUT, what=what)

    async def release(self) -> None:
        """Let every held charge go on to its receipt and COMMIT."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/_faults/release") as answer,
        ):
            answer.raise_for_status()


@dataclass
class Proxy:
    url: str
    admin_url: str
    process: Process

    @property
    def listen(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def admin_listen(self) -> str:
        return urlsplit(self.admin_url).netloc

    def actor_pattern(self) -> str:
        """SQL LIKE pattern for this process's lease owners (role@host:PID:suffix)."""
        return f"%:{self.process.pid}:%"

    async def fenced_writes(self) -> float:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.admin_url}/metrics") as answer,
        ):
            text = await answer.text()
        match = FENCED_METRIC.search(text)
        return float(match.group(1)) if match else 0.0
