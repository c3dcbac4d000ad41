"""The official MCP conformance suite gives the same verdicts through the proxy as
against the server directly, scenario by scenario, check by check.

The suite (``@modelcontextprotocol/conformance``, 0.1.16 and 0.2.0-alpha, from the npm
registry in tests/node/conformance; it needs Node 22, from tests/node/versions) is run
twice against the test server: once at its own URL, once through an MCP route whose
recorded tools the suite never calls. The server passes some scenarios and fails others
(it is not the suite's reference server); what is asserted is that the proxy changes
none of the verdicts. Informational checks (timings, raw exchanges) are left out.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.harness import running_broker
from tests.integration.mcp_support import ToolStore, mcp_routes, serve_mcp
from tests.integration.node_support import node_binary

CONFORMANCE_DIR = Path(__file__).parents[1] / "node" / "conformance"
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
    entry = SUITES[version]
    if entry.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot fetch the conformance suite")
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=CONFORMANCE_DIR,
        capture_output=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not entry.exists():
        pytest.skip(f"npm ci in tests/node/conformance failed: {done.stderr[-300:]!r}")
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
    differing = {
        key: (direct.get(key), proxied.get(key))
        for key in sorted(direct.keys() | proxied.keys())
        if direct.get(key) != proxied.get(key)
    }
    assert differing == {}, differing
