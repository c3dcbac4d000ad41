"""``effect-broker keys``: which master keys protect what, and rotating to a new one.

Rotation is an online operation (docs/how-to/rotate-keys.md): every proxy first
runs with ``EFFECT_BROKER_MASTER_KEYS=new,old``, then ``keys rotate`` seals every stored
payload under the new key, then ``keys status`` shows nothing left under the old one and
the old key can be dropped from the configuration.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from effect_broker.cli.options import DatabaseUrl, require_database, settings_from
from effect_broker.config.settings import Settings
from effect_broker.crypto import Keyring
from effect_broker.engine import RotationReport, rotate
from effect_broker.errors import EffectBrokerError, MigrationError
from effect_broker.store import Store
from effect_broker.store.keys import RECEIPT, REQUEST, ROOT, KeyUsage

keys_app = typer.Typer(help="Master keys: what each protects, and rotation.")
console = Console(soft_wrap=True, highlight=False)


async def _open(dsn: str) -> Store:
    store = await Store.connect(dsn, max_size=2)
    try:
        pending = await store.pending_migrations()
        if pending:
            raise MigrationError(
                f"the ledger lacks migrations {', '.join(m.label for m in pending)}; "
                "run `effect-broker migrate` first"
            )
    except BaseException:
        await store.close()
        raise
    return store


async def _status(dsn: str) -> tuple[list[KeyUsage], list[str]]:
    store = await _open(dsn)
    try:
        return await store.key_usage(), await store.known_master_keys()
    finally:
        await store.close()


def status_table(
    usage: list[KeyUsage], known: list[str], configured: tuple[str, ...] | None
) -> Table:
    """One row per key id: how many requests, receipts and idempotency roots it still
    seals; "encrypts" marks the configured key new payloads are sealed with."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for use in usage:
        counts[use.key_id][use.kind] += use.payloads
    # Fits 80 columns: a key id is what an operator copies, so it is never cut.
    table = Table(title="Stored payloads by master key")
    table.add_column("key id", no_wrap=True)
    table.add_column("configured", no_wrap=True)
    table.add_column("in ledger", no_wrap=True)
    for column in ("requests", "receipts", "roots"):
        table.add_column(column, justify="right", no_wrap=True)
    for key_id in sorted(set(counts) | set(known) | set(configured or ())):
        if configured is None:
            role = "?"
        elif key_id == configured[0]:
            role = "encrypts"
        else:
            role = "yes" if key_id in configured else "[red]no[/]"
        row = counts[key_id]
        table.add_row(
            key_id,
            role,
            "yes" if key_id in known else "no",
            str(row[REQUEST]),
            str(row[RECEIPT]),
            str(row[ROOT]),
        )
    return table


def _configured(settings: Settings) -> tuple[str, ...] | None:
    try:
        return Keyring(settings.master_key_list()).key_ids
    except EffectBrokerError:
        return None


@keys_app.command("status")
def status(database_url: DatabaseUrl = None) -> None:
    """How many stored payloads each master key id still protects."""
    dsn = require_database(database_url, console)
    try:
        usage, known = asyncio.run(_status(dsn))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
    console.print(status_table(usage, known, _configured(settings_from())))


async def _rotate(dsn: str, keyring: Keyring, batch: int) -> RotationReport:
    store = await _open(dsn)
    try:
        # Records the new key: the receipts trigger accepts only keys the ledger knows.
        await store.check_master_keys(keyring.key_ids)
        return await rotate(store, keyring, batch=batch)
    finally:
        await store.close()


@keys_app.command("rotate")
def rotate_command(
    database_url: DatabaseUrl = None,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10_000, help="payloads per statement")
    ] = 100,
) -> None:
    """Re-encrypt every stored payload under the first of EFFECT_BROKER_MASTER_KEYS.

    Safe while proxies serve and safe to run again; it needs every key that sealed
    something in the list, the new one first.
    """
    dsn = require_database(database_url, console)
    try:
        keyring = Keyring(settings_from().master_key_list())
        report = asyncio.run(_rotate(dsn, keyring, batch))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
    console.print(
        f"re-encrypted under {report.key_id}: {report.resealed[REQUEST]} requests, "
        f"{report.resealed[RECEIPT]} receipts ({report.raced} changed while read and "
        "were taken again)"
    )
    for key_id, effects in sorted(report.unreadable.items()):
        console.print(
            f"[red]not configured:[/] key {key_id} seals {len(effects)} payloads "
            f"(e.g. effect {effects[0]}); add it to EFFECT_BROKER_MASTER_KEYS"
        )
    if not report.complete:
        console.print(
            f"[red]{report.remaining} payloads are still under other keys[/]; is a "
            "proxy still running with another key first? Run `keys rotate` again"
        )
        raise typer.Exit(1)
    console.print(f"[green]every stored payload is under {report.key_id}[/]")
