"""``effect-broker serve`` as one real process, for tests of what only a process shows
(signals, exit timing)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from effect_broker.crypto import MasterKey

BANNER = re.compile(r"effect-broker proxy on (http://\S+), admin on (http://\S+?),")
START_DEADLINE = 30.0


@dataclass
class ServeProcess:
    process: asyncio.subprocess.Process
    proxy: str
    lines: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


@asynccontextmanager
async def serve_process(
    database_url: str, routes_text: str, tmp_path: Path, **settings: str
) -> AsyncIterator[ServeProcess]:
    """``serve`` with ``routes_text`` on free loopback ports; ``settings`` are more
    environment (``EFFECT_BROKER_...``). Killed at the end if still running."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(routes_text)
    env = {
        **os.environ,
        "EFFECT_BROKER_DATABASE_URL": database_url,
        "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
        "EFFECT_BROKER_ROUTES": str(routes),
        "EFFECT_BROKER_LISTEN": "127.0.0.1:0",
        "EFFECT_BROKER_ADMIN_LISTEN": "127.0.0.1:0",
        "COLUMNS": "400",
        **settings,
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from effect_broker.cli import main; main()",
        "serve",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[str] = []
    assert child.stderr is not None
    try:
        async with asyncio.timeout(START_DEADLINE):
            while True:
                line = (await child.stderr.readline()).decode()
                assert line or child.returncode is None, "\n".join(lines)
                lines.append(line.rstrip("\n"))
                if found := BANNER.search(line):
                    break
        served = ServeProcess(child, found.group(1), lines)

        async def read() -> None:
            assert child.stderr is not None
            while line := (await child.stderr.readline()).decode():
                lines.append(line.rstrip("\n"))

        reader = asyncio.create_task(read())
        try:
            yield served
        finally:
            if child.returncode is None:
                child.kill()
            await asyncio.wait_for(reader, START_DEADLINE)
    finally:
        if child.returncode is None:
            child.kill()
        await asyncio.wait_for(child.wait(), START_DEADLINE)
