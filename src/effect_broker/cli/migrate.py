"""``effect-broker migrate``: bring a ledger database to this build's schema."""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console
from rich.table import Table

from effect_broker.cli.options import DatabaseUrl, require_database
from effect_broker.errors import EffectBrokerError
from effect_broker.store import Store
from effect_broker.store.migrations import Migration, load_migrations


async def _migrate(database_url: str) -> list[Migration]:
    store = await Store.connect(database_url, max_size=1)
    try:
        return await store.migrate()
    finally:
        await store.close()


def migrate(database_url: DatabaseUrl = None) -> None:
    """Apply pending migrations; safe to run again and from several places at once."""
    console = Console()
    # Errors go to stderr unwrapped: one line a script or a person can grep.
    errors = Console(stderr=True, soft_wrap=True, highlight=False)
    dsn = require_database(database_url, errors)
    try:
        applied = {migration.version for migration in asyncio.run(_migrate(dsn))}
    except EffectBrokerError as exc:
        errors.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
    table = Table("version", "migration", "status", title="Ledger schema")
    for migration in load_migrations():
        status = "[green]applied now[/]" if migration.version in applied else "up to date"
        table.add_row(f"{migration.version:04d}", migration.name, status)
    console.print(table)
