"""``effect-broker mcp``: the admin API's reading and reconciling, as MCP tools.

An operator's assistant can list unknown effects, read one with its history and
receipt, and ask for a reconciliation. Every tool goes through ``EffectsClient`` with
the admin token, so tenancy and authorization are decided by the admin API, in one
place, exactly as for the CLI. There is deliberately no resolve tool: settling an
unknown effect takes a person's evidence, not a model's guess.

Over stdio the caller is the process that started the server. Over HTTP anyone who
reaches the port would otherwise hold the admin token's power (decrypted receipts
included), so ``BearerGate`` lets through only requests that carry that same token.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Any, TypeVar

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.types import ASGIApp, Receive, Scope, Send

from effect_broker.client import AdminProblem, AdminUnreachable, EffectsClient
from effect_broker.errors import Unauthorized
from effect_broker.problems import PROBLEM_JSON, problem

T = TypeVar("T")
UNKNOWN_STATUSES = ("outcome_unknown", "manual_review")

INSTRUCTIONS = (
    "effect-broker records side effects (charges, emails, tickets) that agents send "
    "through its proxy. An effect whose outcome is unknown was possibly applied by its "
    "target and is never resent automatically. Use list_unknown_effects to find them, "
    "get_effect and get_receipt to read one, and request_reconciliation to ask the "
    "reconciler to look again where the target can be asked. Resolving an unknown "
    "effect is an operator's decision with evidence and is not offered here: a person "
    "resolves it in the console (/console on the admin port) or with `effect-broker "
    "effects resolve`, as succeeded (it happened; the agent's retry gets that "
    "receipt), not_committed (it did not; sent again with the same key, where the "
    "target deduplicates), did_not_happen (proof it did not; the agent may send it "
    "under a new key) or abandoned (given up without knowing; the agent is told it "
    "may have happened). Never describe an abandoned effect as one that did not "
    "happen."
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


REALM = 'Bearer realm="effect-broker-mcp"'


class BearerGate:
    """ASGI middleware in front of the Streamable HTTP app: every HTTP request must
    carry ``Authorization: Bearer <token>`` with the admin token this server calls the
    admin API with; anything else is a 401 problem document and reaches no tool."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token.strip():
            raise ValueError("a blank token would let every caller in")
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the app's own start and stop
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # a websocket: not part of MCP, and not checked
            await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self._refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        error, invalid = refusal
        answer = problem(error)
        challenge = REALM + (', error="invalid_token"' if invalid else "")
        headers = {
            **answer.headers,
            "Content-Type": PROBLEM_JSON,
            "Content-Length": str(len(answer.body)),
            "WWW-Authenticate": challenge,
        }
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in headers.items()
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer.body})

    def _refusal(self, scope: Scope) -> tuple[Unauthorized, bool] | None:
        """None when the request carries the token; else the error and whether a
        token was sent (and is wrong)."""
        written = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                written = bytes(value)
        scheme, _, credentials = written.partition(b" ")
        credentials = credentials.strip()
        if scheme.lower() != b"bearer" or not credentials:
            return (
                Unauthorized(
                    "send `Authorization: Bearer <EFFECT_BROKER_ADMIN_TOKEN>`: this "
                    "management server answers only the admin token it was started with"
                ),
                False,
            )
        if not hmac.compare_digest(credentials, self._token):
            return Unauthorized("the bearer token is not the admin token"), True
        return None


def serve_http(server: MCPServer, *, token: str, host: str, port: int) -> None:
    """Serve Streamable HTTP at ``/mcp`` on ``host:port``, behind ``BearerGate``."""
    app = BearerGate(server.streamable_http_app(host=host), token)
    uvicorn.run(app, host=host, port=port, log_level="info")
