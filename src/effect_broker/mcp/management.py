"""``effect-broker mcp``: the admin API's reading and reconciling, as MCP tools.

An operator's assistant can list unknown effects, read one with its history and
receipt, and ask for a reconciliation. Every tool goes through ``EffectsClient`` with
the admin token, so tenancy and authorization are decided by the admin API, in one
place, exactly as for the CLI. There is deliberately no resolve tool: settling an
unknown effect takes a person's evidence, not a model's guess.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from effect_broker.client import AdminProblem, AdminUnreachable, EffectsClient

T = TypeVar("T")
UNKNOWN_STATUSES = ("outcome_unknown", "manual_review")

INSTRUCTIONS = (
    "effect-broker records side effects (charges, emails, tickets) that agents send "
    "through its proxy. An effect whose outcome is unknown was possibly applied by its "
    "target and is never resent automatically. Use list_unknown_effects to find them, "
    "get_effect and get_receipt to read one, and request_reconciliation to ask the "
    "reconciler to look again where the target can be asked. Resolving an unknown "
    "effect is an operator's decision with evidence and is not offered here."
)


async def _admin(call: Callable[[], T]) -> T:
    """One admin API call off the event loop; its refusals become tool errors."""
    try:
        return await asyncio.to_thread(call)
    except AdminProblem as exc:
        raise ToolError(f"the admin API refused: {exc.title}: {exc.detail}") from None
    except AdminUnreachable as exc:
        raise ToolError(f"the admin API is unreachable: {exc}") from None


def build_management_server(client: EffectsClient) -> MCPServer:
    server = MCPServer("effect-broker", instructions=INSTRUCTIONS)

    @server.tool()
    async def list_unknown_effects(
        route: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Effects whose outcome is unknown or awaiting manual review, newest first.
        Pass next_cursor back as cursor for the next page."""
        return await _admin(
            lambda: client.list(
                status=UNKNOWN_STATUSES, route=route, limit=limit, cursor=cursor
            )
        )

    @server.tool()
    async def get_effect(effect_id: str) -> dict[str, Any]:
        """One effect: status, route, contract, attempts and its full history."""
        return await _admin(lambda: client.inspect(effect_id))

    @server.tool()
    async def get_receipt(effect_id: str) -> dict[str, Any]:
        """The stored answer of a settled effect (what a retry is given)."""
        return await _admin(lambda: client.receipt(effect_id))

    @server.tool()
    async def request_reconciliation(effect_id: str) -> dict[str, Any]:
        """Ask the reconciler to look at this effect at its next pass (where its
        contract lets the target be asked or the call be safely resent)."""
        return await _admin(lambda: client.reconcile(effect_id))

    return server
