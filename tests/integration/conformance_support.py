"""The official MCP conformance suite as the tests drive it: installed from the npm
registry in tests/node/conformance, run against a URL, its checks read back from the
files it writes; and the reference server pinned beside it. Kept apart from the test
module so the tests read as claims, not as plumbing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from tests.integration.node_support import npm_ci

CONFORMANCE_DIR = Path(__file__).parents[1] / "node" / "conformance"
EVERYTHING = (
    CONFORMANCE_DIR
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
SUITES = {
    "0.1.16": CONFORMANCE_DIR / "node_modules" / "conformance-0.1" / "dist" / "index.js",
    "0.2.0-alpha": CONFORMANCE_DIR
    / "node_modules"
    / "conformance-0.2"
    / "dist"
    / "index.js",
}

T = TypeVar("T")

RUN_DIR = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def suite(version: str) -> Path:
    """The suite's entry point (and the reference server beside it), installed with
    ``npm ci`` on first use; without npm or its registry the test skips, one line."""
    entry = SUITES[version]
    npm_ci(CONFORMANCE_DIR, entry, "the conformance suite")
    npm_ci(CONFORMANCE_DIR, EVERYTHING, "the reference server")
    return entry


class Check(NamedTuple):
    """One check's verdict and what the suite said about it (its error message, or
    "" when it gave none): the status is the verdict, the message says why."""

    status: str
    message: str


Checks = dict[str, Check]  # "scenario/check id" -> its verdict


async def run_suite(node: Path, entry: Path, url: str, workdir: Path) -> Checks:
    """Every non-informational check of one run of the suite against ``url``."""
    workdir.mkdir(parents=True)
    process = await asyncio.create_subprocess_exec(
        str(node),
        str(entry),
        "server",
        "--url",
        url,
        "--output-dir",
        str(workdir / "results"),
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 600)
    found: Checks = {}
    for checks in sorted(workdir.glob("results/*/checks.json")):
        # server-<scenario>-<ISO timestamp with dashes>
        scenario = RUN_DIR.sub("", checks.parent.name.removeprefix("server-"))
        for check in json.loads(checks.read_text()):
            if check.get("status") != "INFO":
                found[f"{scenario}/{check['id']}"] = Check(
                    check["status"], check.get("errorMessage") or ""
                )
    assert found, output.decode(errors="replace")[-2000:]
    return found


def scenario_of(key: str) -> str:
    return key.split("/")[0]


def statuses(found: Checks) -> dict[str, str]:
    return {key: check.status for key, check in found.items()}


def differences(
    direct: Mapping[str, T], proxied: Mapping[str, T]
) -> dict[str, tuple[T | None, T | None]]:
    """What differs, key by key: ``(direct, proxied)``, None where a run lacks it."""
    return {
        key: (direct.get(key), proxied.get(key))
        for key in sorted(direct.keys() | proxied.keys())
        if direct.get(key) != proxied.get(key)
    }


def passed(found: Checks, scenario: str) -> str:
    """``passed/all`` of a scenario's checks."""
    checks = [check for key, check in found.items() if scenario_of(key) == scenario]
    return f"{sum(check.status == 'SUCCESS' for check in checks)}/{len(checks)}"


def scenarios(*runs: Checks) -> list[str]:
    return sorted({scenario_of(key) for found in runs for key in found})


def scenario_table(
    direct: Checks, proxied: Checks, notes: Mapping[str, str] | None = None
) -> str:
    """One line per scenario: its checks passed directly and through the proxy, and a
    note on it (the report a reader compares; printed, so ``pytest -s`` shows it)."""
    notes = notes or {}
    return "\n".join(
        f"{scenario:<40} direct {passed(direct, scenario):>5}  "
        f"proxied {passed(proxied, scenario):>5}  {notes.get(scenario, '')}".rstrip()
        for scenario in scenarios(direct, proxied)
    )


@dataclass(frozen=True)
class DirectRun:
    """The suite's verdicts against a server at its own URL, and the tools the suite
    called there (None when the server cannot say: the reference server)."""

    checks: Checks
    called: frozenset[str] | None


def tools_called(names: Iterable[str | None]) -> frozenset[str]:
    return frozenset(name for name in names if name is not None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def everything_server(node: Path) -> AsyncIterator[str]:
    """The official reference server over Streamable HTTP; yields its base URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(node),
        str(EVERYTHING),
        "streamableHttp",
        env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    listening = asyncio.Event()

    async def read() -> None:  # to its end, so the pipe never fills and blocks it
        assert process.stderr is not None
        while line := await process.stderr.readline():
            if b"listening on port" in line:
                listening.set()

    reader = asyncio.create_task(read())
    try:
        async with asyncio.timeout(30):  # its start line says it listens
            waiting = asyncio.ensure_future(listening.wait())
            await asyncio.wait({waiting, reader}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        assert listening.is_set(), "the reference server exited before it listened"
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await reader
