"""``effect-broker mcp`` as a real stdio process, driven by the official MCP client,
against a running broker's admin API."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from effect_broker.client import EffectsClient
from tests.integration.harness import PROBLEMS, Broker, running_broker
from tests.integration.mcp_support import ToolStore, client, mcp_routes, serve_mcp

TOKEN = "management-test-token"


def document(result: Any) -> Any:
    assert not result.is_error, result
    return result.structured_content or json.loads(result.content[0].text)


async def test_management_tools(database_url: str, tmp_path: Path) -> None:
    store = ToolStore()
    async with (
        serve_mcp(store) as upstream,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: mcp_routes(upstream),
            admin_token=TOKEN,
        ) as broker,
    ):
        async with client(broker) as agent:
            await agent.call_tool(
                "create_charge", {"amount": 3, "currency": "eur", "operation_key": "c-1"}
            )
            with pytest.raises(MCPError):  # hangs past its timeout: unknown
                await agent.call_tool(
                    "send_receipt_email", {"to": "x@example.com", "operation_key": "m-1"}
                )
        server = StdioServerParameters(
            command=str(Path(sys.executable).parent / "effect-broker"),
            args=["mcp", "--admin-url", broker.admin_url],
            env={"EFFECT_BROKER_ADMIN_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        )
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write) as ops,
        ):
            await ops.initialize()
            names = {tool.name for tool in (await ops.list_tools()).tools}
            listed = document(await ops.call_tool("list_unknown_effects", {}))
            [effect] = listed["effects"]
            effect_id = effect["id"]
            detail = document(await ops.call_tool("get_effect", {"effect_id": effect_id}))
            refused = await ops.call_tool(
                "request_reconciliation", {"effect_id": effect_id}
            )
            missing = await ops.call_tool("get_receipt", {"effect_id": effect_id})
    assert names == {
        "list_unknown_effects",
        "get_effect",
        "get_receipt",
        "request_reconciliation",
    }
    assert effect["operation_key"] == "m-1" and effect["status"] == "outcome_unknown"
    assert detail["id"] == effect_id and detail["route"] == "billing-mcp"
    # An unsafe effect cannot be looked up or resent: the admin API says so.
    assert refused.is_error and "admin API refused" in refused.content[0].text
    assert missing.is_error
    assert store.calls["send_receipt_email"] == 1


EXECUTABLE = str(Path(sys.executable).parent / "effect-broker")
DEADLINE = 30.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "outsider", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def start_http_management(
    admin_url: str, token: str | None, directory: Path
) -> tuple[asyncio.subprocess.Process, str]:
    """``effect-broker mcp --http`` as a real process, in a folder with no ``up``
    files (so a token can only come from the environment)."""
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "EFFECT_BROKER_DATA_DIR": str(directory)}
    if token is not None:
        env["EFFECT_BROKER_ADMIN_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        EXECUTABLE,
        "mcp",
        "--admin-url",
        admin_url,
        "--http",
        f"127.0.0.1:{port}",
        env=env,
        cwd=directory,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return process, f"http://127.0.0.1:{port}/mcp"


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
    with suppress(ProcessLookupError):
        await asyncio.wait_for(process.communicate(), DEADLINE)


async def wait_listening(process: asyncio.subprocess.Process, url: str) -> None:
    """Poll the port until it accepts a connection, or the process has ended."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    async with asyncio.timeout(DEADLINE):
        while process.returncode is None:
            try:
                _, writer = await asyncio.open_connection(host, int(port))
            except OSError:
                await asyncio.sleep(0.05)  # polling a port under a deadline
                continue
            writer.close()
            return
    raise AssertionError(f"mcp --http exited with {process.returncode}")


@asynccontextmanager
async def http_management(
    broker: Broker, token: str | None, directory: Path
) -> AsyncIterator[str]:
    process, url = await start_http_management(broker.admin_url, token, directory)
    try:
        await wait_listening(process, url)
        yield url
    finally:
        await stop(process)


@asynccontextmanager
async def broker_with_a_receipt(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, str]]:
    """A broker whose ledger holds one succeeded charge; yields it and the effect id."""
    store = ToolStore()
    async with (
        serve_mcp(store) as upstream,
        running_broker(
            database_url,
            tmp_path,
            routes=lambda _: mcp_routes(upstream),
            admin_token=TOKEN,
        ) as broker,
    ):
        async with client(broker) as agent:
            await agent.call_tool(
                "create_charge", {"amount": 3, "currency": "eur", "operation_key": "c-1"}
            )
        listed = await asyncio.to_thread(
            EffectsClient(broker.admin_url, TOKEN).list, status=("succeeded",)
        )
        [effect] = listed["effects"]
        yield broker, effect["id"]


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer"]
)
async def test_management_over_http_refuses_a_caller_without_the_admin_token(
    database_url: str, tmp_path: Path, authorization: str | None
) -> None:
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    async with (
        broker_with_a_receipt(database_url, tmp_path) as (broker, effect_id),
        http_management(broker, TOKEN, directory) as url,
    ):
        headers = dict(MCP_HEADERS)
        if authorization is not None:
            headers["Authorization"] = authorization
        async with httpx2.AsyncClient(timeout=DEADLINE) as http:
            answer = await http.post(url, json=INITIALIZE, headers=headers)
            receipt_call = await http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {
                        "name": "get_receipt",
                        "arguments": {"effect_id": effect_id},
                    },
                },
                headers=headers,
            )
    assert answer.status_code == 401, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.json()["type"] == PROBLEMS + "unauthorized"
    assert receipt_call.status_code == 401
    assert "ch_" not in receipt_call.text


async def test_management_over_http_serves_the_admin_token(
    database_url: str, tmp_path: Path
) -> None:
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    async with (
        broker_with_a_receipt(database_url, tmp_path) as (broker, effect_id),
        http_management(broker, TOKEN, directory) as url,
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=DEADLINE
        ) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as ops,
    ):
        await ops.initialize()
        receipt = document(await ops.call_tool("get_receipt", {"effect_id": effect_id}))
    assert "ch_" in json.dumps(receipt)


async def test_management_over_http_will_not_start_without_an_admin_token(
    tmp_path: Path,
) -> None:
    process, _ = await start_http_management(
        f"http://127.0.0.1:{free_port()}", None, tmp_path
    )
    try:
        async with asyncio.timeout(DEADLINE):
            _, stderr = await process.communicate()
    finally:
        await stop(process)
    assert process.returncode not in (0, None)
    message = stderr.decode()
    assert "EFFECT_BROKER_ADMIN_TOKEN" in message and "--http" in message
    assert "Traceback" not in message
