"""``effect-broker serve``: the proxy and admin ports against an existing database."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console

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
from effect_broker.config.routes_file import load_routes
from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.failpoints import ARMED
from effect_broker.proxy.edge import EdgeLimits
from effect_broker.runtime import open_runtime
from effect_broker.server import serve_until_stopped, split_address

console = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")


def run_on_fastest_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where it is installed (a dependency on Linux and macOS),
    else on asyncio's loop. uvloop cuts the event loop's share of each request (tasks,
    futures, socket callbacks: about a quarter of the proxy's CPU on asyncio's loop).

    ``EFFECT_BROKER_EVENT_LOOP=asyncio`` opts out (to rule the loop out when chasing a
    bug, or on a platform where uvloop misbehaves); ``uvloop`` or unset means uvloop
    when it can be imported.
    """
    if event_loop_choice() == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
    return asyncio.run(main)


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
    if ARMED:
        console.print(
            f"[bold red]FAILPOINTS ARMED: {', '.join(sorted(ARMED))}. This process will "
            "kill itself on purpose; never run it in production.[/]"
        )


# Which flag and variable set each address, for errors that must say how to change it.
ADDRESS_SETTINGS = {
    "listen": ("proxy", "--listen", "EFFECT_BROKER_LISTEN"),
    "admin_listen": ("admin", "--admin-listen", "EFFECT_BROKER_ADMIN_LISTEN"),
}
_BIND_ERRORS = {errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES}
_BOUND_PORT = re.compile(r"address \('[^']*', (\d+)\)")


def _check_addresses(settings: Settings) -> None:
    """Refuse an address that is not host:port before anything starts."""
    for field, (role, flag, variable) in ADDRESS_SETTINGS.items():
        address = getattr(settings, field)
        try:
            split_address(address)
        except ValueError:
            raise EffectBrokerError(
                f"the {role} address {address!r} is not host:port; "
                f"set {flag} or {variable}"
            ) from None


def bind_failure(settings: Settings, exc: OSError) -> EffectBrokerError | None:
    """A listening socket that could not open, as one line that says what to change.

    asyncio names the port in its message; that tells the proxy from the admin port.
    """
    if exc.errno not in _BIND_ERRORS:
        return None
    found = _BOUND_PORT.search(str(exc))
    culprits = [
        field
        for field in ADDRESS_SETTINGS
        if found is None or split_address(getattr(settings, field))[1] == int(found[1])
    ] or list(ADDRESS_SETTINGS)
    reason = {
        errno.EADDRINUSE: "is already in use (another effect-broker, or another program)",
        errno.EADDRNOTAVAIL: "is not an address of this machine",
        errno.EACCES: "needs privileges this process lacks (a port below 1024?)",
    }[exc.errno]
    parts = []
    for field in culprits:
        role, flag, variable = ADDRESS_SETTINGS[field]
        parts.append(
            f"the {role} address {getattr(settings, field)} {reason}; "
            f"choose another with {flag} or {variable}"
        )
    return EffectBrokerError("; ".join(parts))


async def run_proxy(
    settings: Settings,
    *,
    migrate: bool = False,
    banner: str | None = None,
    on_ready: Callable[[str, str], None] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM. ``banner`` may use {proxy} and {admin} URLs;
    ``on_ready`` gets both URLs once the ports are open (``up`` records them).

    Every failure a person can fix (routes, database, addresses) leaves as an
    ``EffectBrokerError`` whose message is the whole story: callers print one line.
    """
    _check_addresses(settings)
    config = load_routes(settings.routes)
    async with open_runtime(settings, config, migrate=migrate) as state:

        def ready(proxy: tuple[str, int], admin: tuple[str, int]) -> None:
            proxy_url = f"http://{proxy[0]}:{proxy[1]}"
            admin_url = f"http://{admin[0]}:{admin[1]}"
            console.print(
                f"effect-broker proxy on {proxy_url}, admin on {admin_url}, "
                f"tenant {settings.tenant!r}, {len(config.routes)} routes from "
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
                edge=EdgeLimits.from_settings(settings),
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
    try:
        run_on_fastest_loop(run_proxy(settings))
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {exc.message}", highlight=False)
        raise typer.Exit(1) from exc
