"""The official MCP conformance suite gives the same verdicts through the proxy as
against the server directly, scenario by scenario, check by check.

The suite (``@modelcontextprotocol/conformance``, 0.1.16 and 0.2.0-alpha, from the npm
registry in tests/node/conformance; it needs Node 22, from tests/node/versions) is run
twice against each server: once at its own URL, once through an MCP route whose
recorded tools the suite never calls. The servers are the project's own test server
(written with the Python SDK) and the official reference server
(``@modelcontextprotocol/server-everything``, pinned beside the suite: the suite's
package ships no server of its own). Each passes some scenarios and fails others;
what is asserted is that the proxy changes none of the verdicts, but one: the
reference server accepts a rebinding ``Host``, which the proxy's own Host check
refuses, so that check passes through the proxy only. Informational checks
(timings, raw exchanges) are left out. Without the npm registry the tests skip, saying
so in one line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.integration.harness import running_broker
from tests.integration.mcp_support import ToolStore, mcp_routes, serve_mcp
from tests.integration.node_support import node_binary

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


RUN_DIR = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def suite(version: str) -> Path:
    """The suite's entry point (and the reference server beside it), installed with
    ``npm ci`` on first use; without npm or its registry the test skips, one line."""
    entry = SUITES[version]
    if entry.exists() and EVERYTHING.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot fetch the conformance suite")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=CONFORMANCE_DIR,
            capture_output=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm ci in tests/node/conformance ran 600s: no npm registry?")
    if done.returncode != 0 or not entry.exists():
        last = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        pytest.skip(f"npm ci in tests/node/conformance failed (registry?): {last[:200]}")
    return entry


async def verdicts(node: Path, entry: Path, url: str, workdir: Path) -> dict[str, str]:
    """``scenario/check -> status`` for every non-informational check of a run."""
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
    found: dict[str, str] = {}
    for checks in sorted(workdir.glob("results/*/checks.json")):
        # server-<scenario>-<ISO timestamp with dashes>
        scenario = RUN_DIR.sub("", checks.parent.name.removeprefix("server-"))
        for check in json.loads(checks.read_text()):
            if check.get("status") != "INFO":
                found[f"{scenario}/{check['id']}"] = check["status"]
    assert found, output.decode(errors="replace")[-2000:]
    return found


def differences(
    direct: dict[str, str], proxied: dict[str, str]
) -> dict[str, tuple[str | None, str | None]]:
    return {
        key: (direct.get(key), proxied.get(key))
        for key in sorted(direct.keys() | proxied.keys())
        if direct.get(key) != proxied.get(key)
    }


def scenario_table(direct: dict[str, str], proxied: dict[str, str]) -> str:
    """One line per scenario: its checks passed directly and through the proxy (the
    report a reader compares; printed, so ``pytest -s`` shows it)."""
    lines = []
    for scenario in sorted({key.split("/")[0] for key in direct | proxied}):

        def passed(found: dict[str, str], scenario: str = scenario) -> str:
            checks = [v for k, v in found.items() if k.split("/")[0] == scenario]
            return f"{checks.count('SUCCESS')}/{len(checks)}"

        lines.append(
            f"{scenario:<40} direct {passed(direct):>5}  proxied {passed(proxied):>5}"
        )
    return "\n".join(lines)


@pytest.mark.parametrize("version", list(SUITES))
async def test_the_proxy_changes_no_verdict_of_the_conformance_suite(
    database_url: str, tmp_path: Path, version: str
) -> None:
    node = node_binary("22")
    entry = suite(version)
    store = ToolStore()
    async with (
        serve_mcp(store) as upstream,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: mcp_routes(upstream, timeout="5s", unclassified="pass"),
        ) as broker,
    ):
        direct = await verdicts(node, entry, f"{upstream}/mcp", tmp_path / "direct")
        proxied = await verdicts(
            node, entry, f"{broker.proxy_url}/mcp", tmp_path / "proxied"
        )
    print(f"\nconformance {version}, project's test server:")
    print(scenario_table(direct, proxied))
    assert differences(direct, proxied) == {}


# The reference server's route: one recorded tool the suite never calls, every other
# tool passed through unrecorded (the suite's own scenarios call many).
EVERYTHING_ROUTES = """\
version: 1
contracts:
  - name: reference.effect
    version: "1"
    safety: unsafe
    timeout: 30s
routes:
  - name: everything
    match: {{path: /mcp}}
    upstream: {upstream}
    mcp:
      tools:
        never_called_by_the_suite: {{contract: reference.effect}}
      unclassified: pass
"""


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


@pytest.mark.parametrize("version", list(SUITES))
async def test_the_reference_server_gets_the_same_verdicts_through_the_proxy(
    database_url: str, tmp_path: Path, version: str
) -> None:
    node = node_binary("22")
    entry = suite(version)
    async with (
        everything_server(node) as upstream,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: EVERYTHING_ROUTES.format(upstream=upstream),
        ) as broker,
    ):
        direct = await verdicts(node, entry, f"{upstream}/mcp", tmp_path / "direct")
        proxied = await verdicts(
            node, entry, f"{broker.proxy_url}/mcp", tmp_path / "proxied"
        )
    print(f"\nconformance {version}, reference server (server-everything):")
    print(scenario_table(direct, proxied))
    assert sum(status == "SUCCESS" for status in direct.values()) > 0, direct
    differing = differences(direct, proxied)
    # The one difference allowed: this server takes any Host, the proxy checks its own
    # (so a page that rebinds a name to the sidecar gets no session through it). The
    # proxy may pass a rebinding check the server fails, never the other way round.
    stricter = {
        key: pair
        for key, pair in differing.items()
        if key.startswith("dns-rebinding-protection/") and pair == ("FAILURE", "SUCCESS")
    }
    assert {k: v for k, v in differing.items() if k not in stricter} == {}
