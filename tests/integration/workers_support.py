"""``serve --workers N`` as a real process tree, for the tests that need one."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from effect_broker.crypto import MasterKey
from tests.routes_yaml import one_idempotent_route
from tests.support import poll

DEADLINE = 30.0
SUPERVISOR = re.compile(r"(\d+) workers on proxy (\S+), admin (\S+)")
WORKER = re.compile(r"worker (\d+)/(\d+) \(pid (\d+)\): effect-broker proxy on")


CHARGE = {"Content-Type": "application/json"}


@dataclass
class Served:
    """A running ``serve --workers N``: the supervisor, its workers, what it printed."""

    process: asyncio.subprocess.Process
    proxy: str = ""
    admin: str = ""
    workers: dict[int, int] = field(default_factory=dict)  # pid -> index
    lines: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), DEADLINE)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) no longer serves.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@asynccontextmanager
async def serving(
    database_url: str,
    tmp_path: Path,
    upstream: str,
    workers: str = "2",
    *,
    routes_text: str | None = None,
    settings: dict[str, str] | None = None,
) -> AsyncIterator[Served]:
    """``serve --workers``; its routes are ``routes_text`` when given, else one plain
    HTTP route to ``upstream``; ``settings``: more environment, set last."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        routes_text or one_idempotent_route(upstream, prefix="/pay", route="charges")
    )
    env = {
        **os.environ,
        "EFFECT_BROKER_DATABASE_URL": database_url,
        "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
        "EFFECT_BROKER_ROUTES": str(routes),
        "EFFECT_BROKER_LISTEN": "127.0.0.1:0",
        "EFFECT_BROKER_ADMIN_LISTEN": "127.0.0.1:0",
        "COLUMNS": "400",
        **(settings or {}),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from effect_broker.cli import main; main()",
        "serve",
        "--workers",
        workers,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    served = Served(process)

    async def read() -> None:
        assert process.stderr is not None
        while line := (await process.stderr.readline()).decode():
            served.lines.append(line.rstrip("\n"))
            if found := SUPERVISOR.search(line):
                served.proxy, served.admin = (f"http://{a}" for a in found.groups()[1:])
            if found := WORKER.search(line):
                served.workers[int(found[3])] = int(found[1])

    reader = asyncio.create_task(read())
    try:

        async def ready() -> bool:
            assert process.returncode is None, served.stderr
            return len(served.workers) == int(workers)

        await poll(ready, within=DEADLINE, every=0.05, what="two worker start lines")
        yield served
    finally:
        if process.returncode is None:
            process.kill()
        # Before waiting: asyncio's wait() also waits for the stderr pipe, which a
        # worker left behind (a paused one, say) would hold open for ever.
        for pid in served.workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(process.wait(), DEADLINE)
        await asyncio.wait_for(reader, DEADLINE)
