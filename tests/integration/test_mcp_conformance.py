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
(timings, raw exchanges) are left out. The direct runs are shared by the module's
tests. Without the npm registry the tests skip, saying so in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conformance_support import (
    SUITES,
    DirectRun,
    differences,
    everything_server,
    run_suite,
    scenario_table,
    statuses,
    suite,
    tools_called,
)
from tests.integration.harness import running_broker
from tests.integration.mcp_support import ToolStore, mcp_routes, serve_mcp
from tests.integration.node_support import node_binary

OWN = "the project's test server"
REFERENCE = "reference server (server-everything)"

DirectRuns = dict[tuple[str, str], DirectRun]


@pytest.fixture(scope="module")
def direct_runs() -> DirectRuns:
    """The suite's verdicts per (server, version) at the server's own URL, run once
    for the module: a server gives the same verdicts whichever test starts it, and a
    run of the suite takes about eight seconds."""
    return {}


async def direct(
    runs: DirectRuns,
    server: str,
    version: str,
    upstream: str,
    workdir: Path,
    store: ToolStore | None = None,
) -> DirectRun:
    """The shared direct run, made now if no test has made it yet (``store``: the
    project's server's record, whose tool calls then say which tools the suite
    reached)."""
    if (server, version) not in runs:
        checks = await run_suite(
            node_binary("22"), suite(version), f"{upstream}/mcp", workdir
        )
        called = None if store is None else tools_called(s.tool_call for s in store.seen)
        runs[server, version] = DirectRun(checks, called)
    return runs[server, version]


def rebinding_refused(
    differing: dict[str, tuple[str | None, str | None]],
) -> dict[str, tuple[str | None, str | None]]:
    """The one difference allowed against the reference server: it takes any Host,
    the proxy checks its own (so a page that rebinds a name to the sidecar gets no
    session through it). The proxy may pass a rebinding check the server fails, never
    the other way round."""
    return {
        key: pair
        for key, pair in differing.items()
        if key.startswith("dns-rebinding-protection/") and pair == ("FAILURE", "SUCCESS")
    }


@pytest.mark.parametrize("version", list(SUITES))
async def test_the_proxy_changes_no_verdict_of_the_conformance_suite(
    database_url: str, tmp_path: Path, version: str, direct_runs: DirectRuns
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
        found = await direct(
            direct_runs, OWN, version, upstream, tmp_path / "direct", store
        )
        proxied = await run_suite(
            node, entry, f"{broker.proxy_url}/mcp", tmp_path / "proxied"
        )
    print(f"\nconformance {version}, {OWN}:")
    print(scenario_table(found.checks, proxied))
    assert differences(statuses(found.checks), statuses(proxied)) == {}


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


@pytest.mark.parametrize("version", list(SUITES))
async def test_the_reference_server_gets_the_same_verdicts_through_the_proxy(
    database_url: str, tmp_path: Path, version: str, direct_runs: DirectRuns
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
        found = await direct(
            direct_runs, REFERENCE, version, upstream, tmp_path / "direct"
        )
        proxied = await run_suite(
            node, entry, f"{broker.proxy_url}/mcp", tmp_path / "proxied"
        )
    print(f"\nconformance {version}, {REFERENCE}:")
    print(scenario_table(found.checks, proxied))
    direct_statuses = statuses(found.checks)
    assert sum(status == "SUCCESS" for status in direct_statuses.values()) > 0
    differing = differences(direct_statuses, statuses(proxied))
    allowed = rebinding_refused(differing)
    assert {k: v for k, v in differing.items() if k not in allowed} == {}
