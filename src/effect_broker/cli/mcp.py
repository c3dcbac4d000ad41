"""``effect-broker mcp``: serve the management tools to an MCP client."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from effect_broker.cli.effects import AdminUrl, Token
from effect_broker.cli.local_state import admin_access
from effect_broker.client import EffectsClient
from effect_broker.mcp.management import build_management_server, serve_http

NO_TOKEN_OVER_HTTP = (
    "effect-broker mcp --http refuses to start without an admin token: over HTTP any "
    "local process could otherwise read effects and decrypted receipts with the admin "
    "token's power. Set EFFECT_BROKER_ADMIN_TOKEN (or --token); MCP clients then send "
    "`Authorization: Bearer <token>`. Over stdio (no --http) no token check is needed."
)


def mcp(
    admin_url: AdminUrl = None,
    token: Token = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            help="serve Streamable HTTP on HOST:PORT (at /mcp) instead of stdio",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve list_unknown_effects, get_effect, get_receipt and request_reconciliation
    over stdio (the default) or Streamable HTTP, calling the admin API. Over HTTP every
    request must carry the admin token as `Authorization: Bearer <token>`."""
    # Like `effects`: flags and variables first, else a running `up` in this folder.
    # Nothing is printed: over stdio, stdout belongs to the MCP protocol.
    url, secret, _ = admin_access(admin_url, token)
    server = build_management_server(EffectsClient(url, secret))
    if http is None:
        server.run("stdio")
        return
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(
            "expected HOST:PORT, e.g. 127.0.0.1:8090", param_hint="--http"
        )
    if secret is None or not secret.strip():
        Console(stderr=True, highlight=False, soft_wrap=True).print(NO_TOKEN_OVER_HTTP)
        raise typer.Exit(2)
    serve_http(server, token=secret, host=host.strip("[]"), port=int(port))
