"""``effect-broker migrate``: bring a ledger database to this build's schema."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effect_broker.cli.options import DatabaseUrl, require_database
from effect_broker.errors import EffectBrokerError
from effect_broker.store import Store
from effect_broker.store.migrations import Migration, load_migrations

Distribute = Annotated[
    str | None,
    typer.Option(
        "--distribute",
        help="after migrating, shard the ledger by tenant on this engine (citus: run "
        "on the coordinator)",
        show_default=False,
    ),
]


async def _migrate(
    database_url: str, engine: str | None
) -> tuple[list[Migration], str | None]:
    store = await Store.connect(database_url, max_size=1)
    try:
        if engine is not None:
            # Refuse before any change where the engine is missing.
            await store.require_engine(engine)
        applied = await store.migrate()
        version = await store.distribute(engine) if engine is not None else None
        return applied, version
    finally:
        await store.close()


def migrate(database_url: DatabaseUrl = None, distribute: Distribute = None) -> None:
    """Apply pending migrations; safe to run again and from several places at once."""
    console = Console()
    # Errors go to stderr unwrapped: one line a script or a person can grep.
    errors = Console(stderr=True, soft_wrap=True, highlight=False)
    dsn = require_database(database_url, errors)
    try:
        done, version = asyncio.run(_migrate(dsn, distribute))
    except EffectBrokerError as exc:
        errors.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
    applied = {migration.version for migration in done}
    table = Table("version", "migration", "status", title="Ledger schema")
    for migration in load_migrations():
        status = "[green]applied now[/]" if migration.version in applied else "up to date"
        table.add_row(f"{migration.version:04d}", migration.name, status)
    console.print(table)
    if version is not None:
        console.print(
            f"Distributed by tenant on {distribute} {version}: reference tables "
            "tenants, tenant_api_keys, master_keys, idempotency_root; effects and their "
            "attempts, receipts and events co-located by tenant_id."
        )
