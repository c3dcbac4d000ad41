"""``effect-broker reconciler``: only the reconciler, apart from any proxy."""

from __future__ import annotations

import asyncio
import logging
import signal

import typer
from rich.console import Console

from effect_broker.cli.options import DatabaseUrl, Routes, settings_from
from effect_broker.config.routes_file import load_routes
from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.reconciler import Reconciler
from effect_broker.runtime import open_runtime

console = Console(stderr=True, soft_wrap=True, highlight=False)


async def run_reconciler(settings: Settings) -> None:
    config = load_routes(settings.routes)
    async with open_runtime(settings, config, role="reconciler") as state:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        reconciler = Reconciler(state.engine)
        console.print(
            f"reconciler {reconciler.owner} running against {len(config.routes)} routes "
            "from " + str(settings.routes) + "; Ctrl-C stops it"
        )
        await reconciler.run(stop)


def reconciler(routes: Routes = None, database_url: DatabaseUrl = None) -> None:
    """Settle lost responses: any number may run against one ledger."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = settings_from(routes=routes, database_url=database_url)
    try:
        asyncio.run(run_reconciler(settings))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
