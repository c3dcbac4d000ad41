"""``effect-broker reconciler``: only the reconciler, apart from any proxy.

It serves the admin port too (``/healthz``, ``/readyz``, ``/metrics`` and, with a token,
``/v1``), so a reconciler running as its own deployment is probed, scraped and alerted
on like a proxy: ``effect_broker_reconciler_last_pass_timestamp_seconds`` and the
unknown-effect gauges come from whichever process is settling effects.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import AsyncExitStack

import typer
from rich.console import Console

from effect_broker.admin.app import build_admin_app
from effect_broker.cli.options import AdminListen, DatabaseUrl, Routes, settings_from
from effect_broker.cli.words import plural
from effect_broker.config.hosts import http_url
from effect_broker.config.routes_file import load_routes
from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.reconciler import Reconciler
from effect_broker.runtime import open_runtime
from effect_broker.server import admin_state, start_site

console = Console(stderr=True, soft_wrap=True, highlight=False)


async def run_reconciler(settings: Settings) -> None:
    config = load_routes(settings.routes)
    async with (
        open_runtime(settings, config, role="reconciler") as state,
        AsyncExitStack() as stack,
    ):
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        host, port = await start_site(
            stack,
            build_admin_app(
                admin_state(state),
                admin_token=settings.admin_token,
                trace_url=settings.trace_url,
            ),
            settings.admin_listen,
        )
        reconciler = Reconciler(state.engine)
        console.print(
            f"reconciler {reconciler.owner} running against "
            f"{plural(len(config.routes), 'route')} "
            f"from {settings.routes}, admin on {http_url(host, port)}; Ctrl-C stops it"
        )
        await reconciler.run(stop)


def reconciler(
    routes: Routes = None,
    database_url: DatabaseUrl = None,
    admin_listen: AdminListen = None,
) -> None:
    """Settle lost responses: any number may run against one ledger."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = settings_from(
        routes=routes, database_url=database_url, admin_listen=admin_listen
    )
    try:
        asyncio.run(run_reconciler(settings))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(1) from exc
    except OSError as exc:  # the admin address is taken or cannot be bound
        console.print(f"[red]error:[/] admin port {settings.admin_listen}: {exc}")
        raise typer.Exit(1) from exc
