"""``effect-broker serve``: the proxy and admin ports against an existing database."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from effect_broker.cli.addresses import bind_failure, check_addresses
from effect_broker.cli.local_state import up_database, using, with_up_secrets
from effect_broker.cli.options import (
    AdminListen,
    CaCert,
    CaKey,
    DatabaseUrl,
    Gateway,
    Listen,
    Routes,
    Tenant,
    settings_from,
)
from effect_broker.cli.words import plural
from effect_broker.cli.workers import parse_workers, supervise
from effect_broker.config.hosts import http_url
from effect_broker.config.routes_file import load_routes
from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.failpoints import PLANS
from effect_broker.proxy.edge import EdgeLimits
from effect_broker.runtime import open_runtime
from effect_broker.server import serve_until_stopped

console = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")


def _workers_option(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_workers(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        envvar="EFFECT_BROKER_WORKERS",
        parser=_workers_option,
        metavar="N|auto",
        help="processes serving the same ports (SO_REUSEPORT); auto: one per core",
        show_default="1",
    ),
]


def run_on_fastest_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where it is installed (a dependency on Linux and macOS),
    else on asyncio's loop. uvloop cuts the event loop's share of each request (tasks,
    futures, socket callbacks: about a quarter of the proxy's CPU on asyncio's loop).

    ``EFFECT_BROKER_EVENT_LOOP=asyncio`` opts out (to rule the loop out when chasing a
    bug, or on a platform where uvloop misbehaves); ``uvloop`` or unset means uvloop
    when it can be imported.
    """
    if resolved_event_loop() == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)


def resolved_event_loop() -> str:
    """The loop ``run_on_fastest_loop`` runs on: the choice, unless that is uvloop and
    uvloop is not installed."""
    if event_loop_choice() == "uvloop" and importlib.util.find_spec("uvloop"):
        return "uvloop"
    return "asyncio"


EVENT_LOOPS = ("uvloop", "asyncio")


def event_loop_choice() -> str:
    """``EFFECT_BROKER_EVENT_LOOP``: uvloop (the default) or asyncio; anything else is
    refused, so a typo cannot silently pick a loop nobody asked for."""
    choice = os.environ.get("EFFECT_BROKER_EVENT_LOOP", "").strip().lower() or "uvloop"
    if choice not in EVENT_LOOPS:
        raise EffectBrokerError(
            f"EFFECT_BROKER_EVENT_LOOP={choice!r} is not one of "
            f"{', '.join(EVENT_LOOPS)} (unset: uvloop where installed)"
        )
    return choice


def announce_failpoints() -> None:
    if PLANS:
        armed = ", ".join(plan.describe(name) for name, plan in sorted(PLANS.items()))
        console.print(
            f"[bold red]FAILPOINTS ARMED: {armed}. This process will kill (exit) or "
            "freeze (stop) itself on purpose; never run it in production.[/]"
        )


async def run_proxy(
    settings: Settings,
    *,
    migrate: bool = False,
    banner: str | None = None,
    on_ready: Callable[[str, str], None] | None = None,
    reuse_port: bool = False,
    worker: str | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM. ``banner`` may use {proxy} and {admin} URLs;
    ``on_ready`` gets both URLs once the ports are open (``up`` records them).
    ``reuse_port`` and ``worker`` (its name, for the start line) are set in a worker
    of ``serve --workers N``.

    Every failure a person can fix (routes, database, addresses) leaves as an
    ``EffectBrokerError`` whose message is the whole story: callers print one line.
    """
    check_addresses(settings)
    config = load_routes(settings.routes)
    async with open_runtime(settings, config, migrate=migrate) as state:

        def ready(proxy: tuple[str, int], admin: tuple[str, int]) -> None:
            proxy_url = http_url(*proxy)
            admin_url = http_url(*admin)
            console.print(
                f"{worker + ': ' if worker else ''}"
                f"effect-broker proxy on {proxy_url}, admin on {admin_url}, "
                f"tenant {settings.tenant!r}, {plural(len(config.routes), 'route')} from "
                f"{settings.routes}",
                highlight=False,
            )
            if state.ca is not None:
                console.print(
                    f"CONNECT to hosts routes watch is intercepted with the CA "
                    f"{settings.ca_cert}",
                    highlight=False,
                )
            if banner:
                console.print(
                    banner.format(proxy=proxy_url, admin=admin_url), highlight=False
                )
            if on_ready is not None:
                on_ready(proxy_url, admin_url)

        try:
            await serve_until_stopped(
                state,
                listen=settings.listen,
                admin_listen=settings.admin_listen,
                on_ready=ready,
                reconcile=settings.reconciler,
                admin_token=settings.admin_token,
                trace_url=settings.trace_url,
                edge=EdgeLimits.from_settings(settings),
                reuse_port=reuse_port,
                drain=settings.drain_timeout.total_seconds(),
            )
        except OSError as exc:
            failure = bind_failure(settings, exc)
            if failure is None:
                raise
            raise failure from exc


def serve(
    routes: Routes = None,
    database_url: DatabaseUrl = None,
    listen: Listen = None,
    admin_listen: AdminListen = None,
    tenant: Tenant = None,
    gateway: Gateway = None,
    ca_cert: CaCert = None,
    ca_key: CaKey = None,
    workers: Workers = None,
) -> None:
    """Serve the proxy (default 127.0.0.1:8080) and admin API (127.0.0.1:8081)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    announce_failpoints()
    settings = settings_from(
        routes=routes,
        database_url=database_url,
        listen=listen,
        admin_listen=admin_listen,
        tenant=tenant,
        gateway=gateway,
        ca_cert=ca_cert,
        ca_key=ca_key,
    )
    settings, used = with_up_secrets(settings)
    if settings.database_url is None and (dsn := up_database(settings.data_dir)):
        settings = settings.model_copy(update={"database_url": dsn})
        used.append(settings.data_dir / "postgres")
    if used:
        console.print(using(used), highlight=False)
    count = workers or 1
    try:
        if count > 1:
            # Checked once here rather than N times, once per worker.
            check_addresses(settings)
            load_routes(settings.routes)
            status = supervise(settings, count)
            if status:
                raise typer.Exit(status)
            return
        run_on_fastest_loop(run_proxy(settings))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}", highlight=False)
        raise typer.Exit(1) from exc
