"""Run the proxy and admin ports in one process until asked to stop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from aiohttp import web
from pydantic import SecretStr

from effect_broker.admin.app import build_admin_app
from effect_broker.proxy.app import build_proxy_app
from effect_broker.proxy.state import ProxyState


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


async def start_site(
    stack: AsyncExitStack, app: web.Application, address: str
) -> tuple[str, int]:
    """Start ``app`` on ``address``; returns the bound address (port 0 picks one)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    host, port = split_address(address)
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname() if sockets else (host, port)
    return str(bound[0]), int(bound[1])


async def serve_until_stopped(
    state: ProxyState,
    *,
    listen: str,
    admin_listen: str,
    on_ready: Callable[[tuple[str, int], tuple[str, int]], Awaitable[None] | None]
    | None = None,
    reconcile: bool = True,
    admin_token: SecretStr | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with AsyncExitStack() as stack:
        proxy_address = await start_site(
            stack, build_proxy_app(state, reconcile=reconcile), listen
        )
        admin_address = await start_site(
            stack, build_admin_app(state, admin_token=admin_token), admin_listen
        )
        if on_ready is not None:
            result = on_ready(proxy_address, admin_address)
            if result is not None:
                await result
        await stop.wait()
