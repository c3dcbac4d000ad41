"""``effect-broker mcp`` as a real stdio process, driven by the official MCP client,
against a running broker's admin API."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.integration.harness import running_broker
from tests.integration.mcp_support import ToolStore, mcp_routes, serve_mcp
from tests.integration.test_mcp_proxy import client

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
