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
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import aiohttp

from effect_broker.demo.crash_matrix.agent import ORDER_ID

POLL = 0.05  # seconds between looks while polling with a deadline
START_TIMEOUT = 30.0  # a process prints its "listening" line within this
STOP_GRACE = 5.0  # SIGTERM, then SIGKILL after this

PROXY_BANNER = re.compile(r"effect-broker proxy on (http://\S+), admin on (http://\S+?),")
TARGET_BANNER = re.compile(r"payment target listening on (http://\S+)")
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
    """The demo payment target of one cell; its SQLite table is the ground truth."""

    url: str
    db: Path
    process: Process

    async def charges(self) -> int:
        def count() -> int:
            with sqlite3.connect(self.db) as conn:
                (n,) = conn.execute(
                    "SELECT count(*) FROM charges WHERE order_id = ?", (ORDER_ID,)
                ).fetchone()
            return int(n)

        return await asyncio.to_thread(count)

    async def withhold_next_answer(self) -> None:
        """Arm ``hang_after_commit``: the next charge commits and is never answered."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/_faults", json={"hang_after_commit": 1}) as answer,
        ):
            answer.raise_for_status()

    async def wait_for_charge(self) -> None:
        async def committed() -> bool | None:
            return True if await self.charges() >= 1 else None

        await poll(committed, timeout=START_TIMEOUT, what="the target to commit")


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
