"""The official MCP conformance suite gives the same verdicts through the proxy as
against the server directly, scenario by scenario, check by check; and when the route
records the tools the suite calls, only the scenarios whose call the proxy refuses
(the suite sends no operation key) differ.

The suite (``@modelcontextprotocol/conformance``, 0.1.16 and 0.2.0-alpha, from the npm
registry in tests/node/conformance; it needs Node 22, from tests/node/versions) is run
against each server at its own URL, through an MCP route whose recorded tools the suite
never calls, and through one that records the tools it does call. The servers are the
project's own test server (written with the Python SDK) and the official reference
server (``@modelcontextprotocol/server-everything``, pinned beside the suite: the
suite's package ships no server of its own). Each passes some scenarios and fails
others; neither has the suite's own test tools, so a tool call the server receives
ends in an "unknown tool" result, which two scenarios count as a pass.

What is asserted: with no recorded tool called, the proxy changes none of the verdicts
but one (the reference server accepts a rebinding ``Host``, which the proxy's own Host
check refuses, so that check passes through the proxy only). With recorded tools, the
checks that differ are exactly those of the scenarios that call a recorded tool, each
failing on the proxy's refusal that names the tool; every other check, tool-calling
scenarios of unrecorded tools included, keeps its status and its message.
Informational checks (timings, raw exchanges) are left out. The direct runs are shared
by the module's tests. Without the npm registry the tests skip, saying so in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conformance_support import (
    SUITES,
    Checks,
    DirectRun,
    differences,
    everything_server,
    run_suite,
    scenario_of,
    scenario_table,
    statuses,
    suite,
    tools_called,
)
from tests.integration.harness import ledger_rows, running_broker
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


# The tool each scenario of the suite's server run calls, read from the suite's own
# scenario code (each scenario's run() calls client.callTool or request("tools/call")
# with a literal tool name), the same in 0.1.16 and 0.2.0-alpha. The other scenarios
# call no tool: they list, ping, get prompts, read resources or test the transport.
SCENARIO_TOOLS = {
    "elicitation-sep1034-defaults": "test_elicitation_sep1034_defaults",
    "elicitation-sep1330-enums": "test_elicitation_sep1330_enums",
    "tools-call-audio": "test_audio_content",
    "tools-call-elicitation": "test_elicitation",
    "tools-call-embedded-resource": "test_embedded_resource",
    "tools-call-error": "test_error_handling",
    "tools-call-image": "test_image_content",
    "tools-call-mixed-content": "test_multiple_content_types",
    "tools-call-sampling": "test_sampling",
    "tools-call-simple-text": "test_simple_text",
    "tools-call-with-logging": "test_tool_with_logging",
    "tools-call-with-progress": "test_tool_with_progress",
}
# Two of them stay unrecorded, so the test also shows the proxy refuses a call for
# being a recorded tool's, not for being a tools/call: one listed read-only, one
# passed as unclassified. Every other tool is recorded under a contract.
READ_ONLY = "test_image_content"
UNCLASSIFIED = "test_audio_content"
RECORDED = sorted(set(SCENARIO_TOOLS.values()) - {READ_ONLY, UNCLASSIFIED})
# A scenario that ends before its call: tools-call-with-logging sets the log level
# first, and the project's test server has no logging/setLevel (its
# logging-set-level scenario fails), so the suite never calls the tool there.
NEVER_CALLED = {OWN: {"tools-call-with-logging"}, REFERENCE: set()}

RECORDED_ROUTES = """\
version: 1
contracts:
  - name: conformance.effect
    version: "1"
    safety: unsafe
    timeout: 30s
routes:
  - name: conformance
    match: {{path: /mcp}}
    upstream: {upstream}
    mcp:
      tools:
{tools}
      read_only: [{read_only}]
      unclassified: pass
"""


def recorded_routes(upstream: str) -> str:
    return RECORDED_ROUTES.format(
        upstream=upstream,
        tools="\n".join(
            f"        {t}: {{contract: conformance.effect}}" for t in RECORDED
        ),
        read_only=READ_ONLY,
    )


def refused(tool: str, message: str) -> bool:
    """Whether the suite's message is the proxy's refusal of a call of ``tool``
    without an operation key."""
    return f"tool {tool!r} has side effects" in message and "'operation_key'" in message


def notes(server: str, proxied: Checks) -> dict[str, str]:
    """Per tool-calling scenario: its tool, how the route classifies it, and whether
    the proxy refused the call."""
    found = {}
    for scenario, tool in SCENARIO_TOOLS.items():
        kind = {READ_ONLY: "read-only", UNCLASSIFIED: "unclassified"}.get(
            tool, "recorded"
        )
        if scenario in NEVER_CALLED[server]:
            verdict = "never called"
        elif any(
            scenario_of(key) == scenario and refused(tool, check.message)
            for key, check in proxied.items()
        ):
            verdict = "refused by the proxy"
        else:
            verdict = "passed through"
        found[scenario] = f"{tool} ({kind}): {verdict}"
    return found


@pytest.mark.parametrize("server", [OWN, REFERENCE])
@pytest.mark.parametrize("version", list(SUITES))
async def test_with_recorded_tools_only_the_calls_without_a_key_differ(
    database_url: str,
    tmp_path: Path,
    version: str,
    server: str,
    direct_runs: DirectRuns,
) -> None:
    node = node_binary("22")
    entry = suite(version)
    store = ToolStore()
    serving = serve_mcp(store) if server == OWN else everything_server(node)
    async with (
        serving as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: recorded_routes(upstream)
        ) as broker,
    ):
        found = await direct(
            direct_runs,
            server,
            version,
            upstream,
            tmp_path / "direct",
            store if server == OWN else None,
        )
        before = len(store.seen)
        proxied = await run_suite(
            node, entry, f"{broker.proxy_url}/mcp", tmp_path / "proxied"
        )
        reached = tools_called(seen.tool_call for seen in store.seen[before:])
    print(f"\nconformance {version}, {server}, the suite's tools recorded:")
    print(scenario_table(found.checks, proxied, notes(server, proxied)))

    called = {
        scenario: tool
        for scenario, tool in SCENARIO_TOOLS.items()
        if scenario not in NEVER_CALLED[server]
    }
    if found.called is not None:
        # The server's own record agrees with the reading of the suite: directly it
        # got every call, through the proxy only those of the unrecorded tools.
        assert found.called == set(called.values())
        assert reached == set(called.values()) - set(RECORDED)
    expected = {scenario for scenario, tool in called.items() if tool in RECORDED}
    differing = differences(found.checks, proxied)
    # The reference server's rebinding check, as without recorded tools.
    allowed = rebinding_refused(differences(statuses(found.checks), statuses(proxied)))
    others = {k: v for k, v in differing.items() if k not in allowed}
    # Every check outside the refused scenarios is identical, status and message.
    assert {k: v for k, v in others.items() if scenario_of(k) not in expected} == {}
    # Every refused scenario differs, and each differing check fails on the refusal.
    assert {scenario_of(key) for key in others} == expected
    for key, (_, through) in others.items():
        tool = SCENARIO_TOOLS[scenario_of(key)]
        assert through is not None
        assert through.status == "FAILURE" and refused(tool, through.message), key
    assert await ledger_rows(database_url) == []  # a refused call records nothing
