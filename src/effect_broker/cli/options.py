"""Options shared by the commands that start a proxy: flags override the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from effect_broker.config.settings import Settings

Routes = Annotated[
    Path | None,
    typer.Option("--routes", help="routes.yaml to serve \\[env: EFFECT_BROKER_ROUTES]"),
]
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="EFFECT_BROKER_DATABASE_URL",
        help="PostgreSQL DSN of the ledger",
        show_default=False,
    ),
]
Listen = Annotated[
    str | None,
    typer.Option("--listen", help="proxy host:port \\[env: EFFECT_BROKER_LISTEN]"),
]
AdminListen = Annotated[
    str | None,
    typer.Option(
        "--admin-listen", help="admin host:port \\[env: EFFECT_BROKER_ADMIN_LISTEN]"
    ),
]
Tenant = Annotated[
    str | None,
    typer.Option("--tenant", help="sidecar tenant \\[env: EFFECT_BROKER_TENANT]"),
]
Gateway = Annotated[
    bool | None,
    typer.Option(
        "--gateway/--sidecar",
        help="tenant from Proxy-Authorization API keys, or the one --tenant "
        "[env: EFFECT_BROKER_GATEWAY]",
        show_default=False,
    ),
]


def require_database(database_url: str | None, console: Console) -> str:
    """The ledger DSN, or a clear error (exit 2) for commands that need one."""
    if not database_url:
        console.print(
            "[red]error:[/] no database: pass --database-url or set "
            "EFFECT_BROKER_DATABASE_URL (`effect-broker up` runs its embedded "
            "PostgreSQL by itself)"
        )
        raise typer.Exit(2)
    return database_url


def settings_from(**flags: Any) -> Settings:
    """Settings from the environment, with every flag the user gave on top."""
    return Settings(**{name: value for name, value in flags.items() if value is not None})


CaCert = Annotated[
    Path | None,
    typer.Option(
        "--ca-cert",
        help="local CA certificate: intercept CONNECT to hosts routes watch "
        "\\[env: EFFECT_BROKER_CA_CERT]",
    ),
]
CaKey = Annotated[
    Path | None,
    typer.Option("--ca-key", help="the local CA's key \\[env: EFFECT_BROKER_CA_KEY]"),
]
