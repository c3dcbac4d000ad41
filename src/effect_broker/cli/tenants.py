"""``effect-broker tenants ...``: API keys for gateway mode."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from effect_broker.cli.options import DatabaseUrl, require_database
from effect_broker.errors import EffectBrokerError
from effect_broker.store import Store
from effect_broker.tenancy import NewApiKey, check_tenant_name, new_api_key

tenants_app = typer.Typer(help="Manage gateway tenants and their API keys.")
console = Console(soft_wrap=True, highlight=False)


async def _add(database_url: str, tenant: str) -> NewApiKey:
    check_tenant_name(tenant)
    store = await Store.connect(database_url, max_size=1)
    try:
        key = new_api_key()
        await store.add_api_key(tenant, key.key_id, key.secret_hash)
        return key
    finally:
        await store.close()


@tenants_app.command("add")
def add(
    tenant: Annotated[str, typer.Argument(help="tenant id, 1-128 characters, no ':'")],
    database_url: DatabaseUrl = None,
) -> None:
    """Create TENANT (if new) and print a new API key for it, once."""
    dsn = require_database(database_url, console)
    try:
        key = asyncio.run(_add(dsn, tenant))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
    console.print(f"API key for tenant {tenant!r} (shown once; only its hash is stored):")
    console.print(f"  {key.api_key}")
    console.print("Agents of this tenant use the gateway with:")
    console.print(f"  export HTTP_PROXY=http://{tenant}:{key.api_key}@127.0.0.1:8080")
