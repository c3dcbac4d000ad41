"""A real MCP server for tests, written with the official SDK, that counts the calls
each tool really ran in its own store: the ground truth the proxy's claims are checked
against. Served by uvicorn on a loopback socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.integration.harness import (
    Answer,
    Broker,
    ledger_rows,
    request,
    running_broker,
)
from tests.support import poll


@dataclass
class Seen:
    """One HTTP request as the server received it, and how it framed its answer."""

    method: str
    headers: dict[str, str]
    content_type: str | None = None
    body: bytes = b""

    @property
    def tool_call(self) -> str | None:
        """The tool this request called, if it was a ``tools/call``."""
        try:
            message = json.loads(self.body)
        except ValueError:
            return None
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        name = message.get("params", {}).get("name")
        return name if isinstance(name, str) else None


@dataclass
class ToolStore:
    """What the server really did: calls per tool, and the arguments each received."""

    calls: Counter[str] = field(default_factory=Counter)
    seen: list[Seen] = field(default_factory=list)  # every HTTP request, in order
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hang: asyncio.Event = field(default_factory=asyncio.Event)  # never set: hangs
    captures: dict[str, str] = field(default_factory=dict)  # idempotency key -> id
    started: asyncio.Event = field(default_factory=asyncio.Event)  # a slow tool began
    release: asyncio.Event = field(default_factory=asyncio.Event)  # lets it finish
    interrupted: Counter[str] = field(default_factory=Counter)  # stopped mid-call


class Approval(BaseModel):
    approver: str


def ask_approval(amount: int) -> Elicit[Approval]:
    return Elicit(f"Approve a payout of {amount}?", Approval)


def build_server(store: ToolStore) -> MCPServer:
    server = MCPServer("billing")

    @server.tool()
    def pay_out(
        amount: int, approval: Annotated[Approval, Resolve(ask_approval)]
    ) -> dict[str, Any]:
        """Pay out once someone approves: asks the client (elicitation) first. The
        2026-07-28 revision asks in an input_required result; earlier ones send an
        elicitation request on the call's own stream."""
        store.calls["pay_out"] += 1
        store.received.append(("pay_out", {"amount": amount}))
        return {"payout": f"po_{store.calls['pay_out']}", "approver": approval.approver}

    @server.tool()
    def create_charge(amount: int, currency: str) -> dict[str, Any]:
        """Charge the customer."""
        store.calls["create_charge"] += 1
        store.received.append(("create_charge", {"amount": amount, "currency": currency}))
        return {"charge_id": f"ch_{store.calls['create_charge']}", "amount": amount}

    @server.tool()
    def refund(charge_id: str, idempotency_key: str = "") -> str:
        """Refund a charge; deduplicates on idempotency_key."""
        store.calls["refund"] += 1
        store.received.append(
            ("refund", {"charge_id": charge_id, "idempotency_key": idempotency_key})
        )
        return f"refunded {charge_id}"

    @server.tool()
    async def capture_payment(order_id: str, idempotency_key: str = "") -> str:
        """Capture once per key; the first time, the answer never comes back."""
        store.calls["capture_payment"] += 1
        store.received.append(
            (
                "capture_payment",
                {"order_id": order_id, "idempotency_key": idempotency_key},
            )
        )
        if idempotency_key in store.captures:
            return store.captures[idempotency_key]
        store.captures[idempotency_key] = f"cap_{order_id}"
        await store.hang.wait()  # committed, then silent: the outcome is lost
        return store.captures[idempotency_key]

    @server.tool()
    async def send_receipt_email(to: str) -> str:
        """Send an email; hangs forever (the server never answers)."""
        store.calls["send_receipt_email"] += 1
        await store.hang.wait()
        return "sent"

    @server.tool()
    def quote_payout(
        amount: int, approval: Annotated[Approval, Resolve(ask_approval)]
    ) -> str:
        """Read-only, but asks the client too: unrecorded calls relay the question."""
        store.calls["quote_payout"] += 1
        return f"{amount} approved by {approval.approver}"

    @server.tool()
    async def open_account(owner: str, ctx: Context) -> dict[str, Any]:
        """Open an account, reporting progress (so the answer streams as SSE)."""
        await ctx.report_progress(1, 2, "opening")
        store.calls["open_account"] += 1
        store.received.append(("open_account", {"owner": owner}))
        return {"account": f"acc_{store.calls['open_account']}", "owner": owner}

    @server.tool()
    async def transfer(amount: int) -> dict[str, Any]:
        """Move money, slowly: runs until the test releases it."""
        store.calls["transfer"] += 1
        store.started.set()
        try:
            await store.release.wait()
        except asyncio.CancelledError:  # a cancellation reached the server
            store.interrupted["transfer"] += 1
            raise
        return {"transfer_id": f"tr_{store.calls['transfer']}", "amount": amount}

    @server.tool()
    async def watch_rates(currency: str) -> str:
        """Read-only and slow: runs until the test releases it or the call is
        cancelled (which the SDK's server does on ``notifications/cancelled``)."""
        store.calls["watch_rates"] += 1
        store.started.set()
        try:
            await store.release.wait()
        except asyncio.CancelledError:
            store.interrupted["watch_rates"] += 1
            raise
        return f"{currency}: 1.0"

    @server.tool()
    def get_balance() -> int:
        """Read the balance."""
        store.calls["get_balance"] += 1
        return 100

    @server.tool()
    def delete_everything() -> str:
        """Not classified in routes.yaml."""
        store.calls["delete_everything"] += 1
        return "gone"

    return server


@asynccontextmanager
async def serve_mcp(store: ToolStore, *, stateless: bool = False) -> AsyncIterator[str]:
    """Serve the test server; yields its base URL (the endpoint is /mcp)."""
    app = observed(
        build_server(store).streamable_http_app(stateless_http=stateless), store
    )
    async with serve_asgi(app) as url:
        try:
            yield url
        finally:  # before the server stops: a tool still waiting would hold it
            store.hang.set()
            store.release.set()


@asynccontextmanager
async def serve_asgi(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)  # polls uvicorn's start flag, not a timing guess
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


def observed(app: ASGIApp, store: ToolStore) -> ASGIApp:
    """``app``, noting each HTTP request's headers and its answer's content type in
    ``store.seen``: what the proxy really sent, and how the server really framed it."""

    async def observing(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {
            name.decode().lower(): value.decode() for name, value in scope["headers"]
        }
        seen = Seen(scope["method"], headers)
        store.seen.append(seen)

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen.body += message.get("body", b"")
            return message

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == b"content-type":
                        seen.content_type = value.decode()
            await send(message)

        await app(scope, receiving, sending)

    return observing


MCP_ROUTES = """\
version: 1
contracts:
  - name: billing.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 5s
  - name: billing.refund
    version: "1"
    safety: idempotent
    idempotency_argument: idempotency_key
    key_retention: 1h
    timeout: 5s
  - name: billing.capture
    version: "1"
    safety: idempotent
    idempotency_argument: idempotency_key
    key_retention: 1h
    timeout: {timeout}
  - name: email.send
    version: "1"
    safety: unsafe
    timeout: {timeout}
routes:
  - name: billing-mcp
    match: {{path: /mcp}}
    upstream: {upstream}
    mcp:
      tools:
        create_charge: {{contract: billing.charge}}
        open_account: {{contract: billing.charge}}
        transfer: {{contract: billing.charge}}
        pay_out: {{contract: email.send}}
        refund: {{contract: billing.refund}}
        capture_payment: {{contract: billing.capture}}
        send_receipt_email: {{contract: email.send}}
      read_only: [get_balance, quote_payout, watch_rates]
      unclassified: {unclassified}
"""


def mcp_routes(
    upstream: str, *, timeout: str = "1s", unclassified: str = "reject"
) -> str:
    return MCP_ROUTES.format(
        upstream=upstream, timeout=timeout, unclassified=unclassified
    )


@asynccontextmanager
async def mcp_broker(
    database_url: str, tmp_path: Path, store: ToolStore, **options: str
) -> AsyncIterator[Broker]:
    async with (
        serve_mcp(store) as upstream,
        running_broker(
            database_url, tmp_path, routes=lambda _: mcp_routes(upstream, **options)
        ) as broker,
    ):
        yield broker


@asynccontextmanager
async def client(broker: Broker) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(f"{broker.proxy_url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def structured(result: Any) -> Any:
    return result.structured_content or json.loads(result.content[0].text)


REVISION = "2026-07-28"


@asynccontextmanager
async def modern(broker: Broker) -> AsyncIterator[Client]:
    """A client that probes ``server/discover`` and must land on the new revision
    (``auto`` would fall back to the handshake silently, so it is checked)."""
    async with Client(f"{broker.proxy_url}/mcp", mode="auto", cache=None) as client:
        assert client.session.protocol_version == REVISION
        yield client


def calls_seen(store: ToolStore, tool: str) -> list[Seen]:
    """Every tools/call of ``tool`` that reached the server."""
    return [seen for seen in store.seen if seen.tool_call == tool]


def envelope() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


async def raw_call(
    broker: Broker,
    request_id: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    name_header: str | None = None,
) -> Answer:
    """One tools/call as the revision frames it, outside any SDK client."""
    return await request(
        "POST",
        f"{broker.proxy_url}/mcp",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": REVISION,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name_header or tool,
        },
        data=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": envelope()},
            }
        ),
    )


DEADLINE = 10.0


async def settled_rows(database_url: str) -> list[tuple[str, str]]:
    """Poll the ledger until no effect is in flight any more (or fail at a deadline)."""
    seen: list[tuple[str, str]] = []

    async def settled() -> list[tuple[str, str]] | None:
        seen[:] = [
            (r["operation_key"], r["status"]) for r in await ledger_rows(database_url)
        ]
        if seen and all(status != "dispatching" for _, status in seen):
            return list(seen)
        return None

    rows: list[tuple[str, str]] = await poll(
        settled, within=DEADLINE, every=0.05, what=lambda: f"the effect to settle: {seen}"
    )
    return rows


CANCELLED = "notifications/cancelled"


def cancellations_seen(store: ToolStore) -> list[Any]:
    """The ids named by every cancellation that reached the server."""
    found = []
    for seen in store.seen:
        try:
            message = json.loads(seen.body)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("method") == CANCELLED:
            found.append(message["params"]["requestId"])
    return found


HANDSHAKE = "2025-11-25"


async def open_session(proxy_url: str) -> dict[str, str]:
    """The 2025-11-25 handshake in raw POSTs; the headers every later message of the
    session carries."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    hello = await request(
        "POST",
        f"{proxy_url}/mcp",
        headers=headers,
        data=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": HANDSHAKE,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        ),
    )
    assert hello.status == 200, hello
    [session_id] = [v for k, v in hello.headers.items() if k.lower() == "mcp-session-id"]
    session = {
        **headers,
        "Mcp-Session-Id": session_id,
        "Mcp-Protocol-Version": HANDSHAKE,
    }
    ready = await request(
        "POST",
        f"{proxy_url}/mcp",
        headers=session,
        data=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    assert ready.status == 202, ready
    return session


async def session_call(
    proxy_url: str,
    session: dict[str, str],
    request_id: Any,
    tool: str,
    arguments: dict[str, Any],
) -> Answer:
    return await request(
        "POST",
        f"{proxy_url}/mcp",
        headers=session,
        data=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        ),
    )


async def session_cancel(
    proxy_url: str, session: dict[str, str], request_id: Any
) -> Answer:
    return await request(
        "POST",
        f"{proxy_url}/mcp",
        headers=session,
        data=json.dumps(
            {
                "jsonrpc": "2.0",
                "method": CANCELLED,
                "params": {"requestId": request_id, "reason": "gave up"},
            }
        ),
    )
