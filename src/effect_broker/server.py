"""Run the proxy and admin ports in one process until asked to stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial

from aiohttp import web
from pydantic import SecretStr

from effect_broker.admin.app import build_admin_app
from effect_broker.admin.state import AdminState
from effect_broker.heap import freeze_startup_heap
from effect_broker.proxy.app import build_proxy_app
from effect_broker.proxy.connect import ConnectPolicy, FrontProtocol
from effect_broker.proxy.edge import (
    ConnectionGate,
    EdgeLimits,
    handler_factory,
    quiet_accept_errors,
)
from effect_broker.proxy.intercept import Interception
from effect_broker.proxy.leaves import LeafContexts
from effect_broker.proxy.state import ProxyState
from effect_broker.reconciler import Reconciler
from effect_broker.tenancy import TenantResolver

log = logging.getLogger("effect_broker.server")

# How long requests in flight may finish once shutdown begins (``drain_timeout``'s
# default, for callers without settings).
DRAIN_SECONDS = 20.0


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


async def start_site(
    stack: AsyncExitStack,
    app: web.Application,
    address: str,
    *,
    connect: ConnectPolicy | None = None,
    edge: EdgeLimits | None = None,
    leaves: LeafContexts | None = None,
    gateway: TenantResolver | None = None,
    reuse_port: bool = False,
    drain: float = DRAIN_SECONDS,
) -> tuple[str, int]:
    """Start ``app`` on ``address``; returns the bound address (port 0 picks one).

    When ``stack`` closes, the port stops accepting first; requests in flight then
    have ``drain`` seconds to finish (the app's ``on_shutdown`` hooks run first, so
    what never finishes by itself is ended), and are cancelled past it.

    With ``reuse_port`` the socket is opened with ``SO_REUSEPORT``: several worker
    processes listen on the same address and the kernel spreads new connections
    among them.

    With ``connect`` each connection first meets the CONNECT front (proxy port only),
    which also caps open connections and bounds the wait for a first byte. With
    ``leaves`` (a CA) it intercepts CONNECT to guarded hosts and serves the requests
    inside with ``app``; ``gateway`` then authenticates each CONNECT.
    """
    edge = edge or EdgeLimits()
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=drain
    )
    await runner.setup()
    listening: list[asyncio.Server] = []
    stack.push_async_callback(_stop, listening, runner, drain)
    http = runner.server
    assert http is not None
    loop = asyncio.get_running_loop()
    factory: Callable[[], asyncio.Protocol]
    if connect is None:
        factory = handler_factory(http, keepalive_timeout=edge.keepalive_timeout)
    else:
        gate = ConnectionGate(edge.max_connections)
        # Without a CA (``leaves`` None) the interception serves plain HTTP only.
        intercept = Interception(
            leaves,
            http,
            keepalive_timeout=edge.keepalive_timeout,
            handshake_timeout=edge.header_timeout,
            gateway=gateway,
        )
        factory = partial(
            FrontProtocol,
            handler_factory(http, keepalive_timeout=edge.keepalive_timeout, gate=gate),
            connect,
            gate=gate,
            header_timeout=edge.header_timeout,
            intercept=intercept,
        )
        quiet_accept_errors(loop)
    host, port = split_address(address)
    server = await loop.create_server(
        factory, host, port, reuse_address=True, reuse_port=reuse_port or None
    )
    listening.append(server)
    bound = server.sockets[0].getsockname()
    return str(bound[0]), int(bound[1])


async def _stop(
    listening: list[asyncio.Server], runner: web.AppRunner, drain: float
) -> None:
    """Stop accepting, drain the requests in flight, then wait for the sockets.

    The order matters: on Python 3.12 and later ``wait_closed`` waits for every
    connection, so waiting on it before the runner had ended them (an open event
    stream, an idle keep-alive) held the process until the client went away."""
    for server in listening:
        server.close()
    await runner.cleanup()
    for server in listening:
        try:
            async with asyncio.timeout(drain):
                await server.wait_closed()
        except TimeoutError:  # a blind tunnel, say: the process ends it by exiting
            log.warning(
                "connections still open %gs after shutdown began; closing anyway", drain
            )


def admin_state(state: ProxyState) -> AdminState:
    """The part of the running process the admin API may use."""
    return AdminState(
        store=state.store,
        keyring=state.keyring,
        engine=state.engine,
        metrics=state.metrics,
        tenant=state.tenant,
        gateway=state.gateway,
    )


def leaf_contexts(state: ProxyState) -> LeafContexts | None:
    """Leaf certificates for intercepted tunnels, when the process has a CA."""
    return LeafContexts(state.ca) if state.ca is not None else None


def connect_policy(state: ProxyState) -> ConnectPolicy:
    return ConnectPolicy(
        is_guarded=state.config.table.is_guarded_host,
        tunnel=state.config.proxy.connect == "tunnel",
        gateway=state.gateway is not None,
        egress=state.egress,
    )


@asynccontextmanager
async def reconciling(state: ProxyState) -> AsyncIterator[None]:
    """The built-in reconciler runs beside the proxy and stops cleanly with it."""
    stop = asyncio.Event()
    task = asyncio.create_task(Reconciler(state.engine).run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


async def serve_until_stopped(
    state: ProxyState,
    *,
    listen: str,
    admin_listen: str,
    on_ready: Callable[[tuple[str, int], tuple[str, int]], Awaitable[None] | None]
    | None = None,
    reconcile: bool = True,
    admin_token: SecretStr | None = None,
    trace_url: str | None = None,
    edge: EdgeLimits | None = None,
    reuse_port: bool = False,
    drain: float = DRAIN_SECONDS,
) -> None:
    """Serve until SIGINT or SIGTERM; then drain for at most ``drain`` seconds."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with AsyncExitStack() as stack:
        proxy_address = await start_site(
            stack,
            build_proxy_app(state, edge=edge),
            listen,
            connect=connect_policy(state),
            edge=edge,
            leaves=leaf_contexts(state),
            gateway=state.gateway,
            reuse_port=reuse_port,
            drain=drain,
        )
        if reconcile:
            await stack.enter_async_context(reconciling(state))
        admin_address = await start_site(
            stack,
            build_admin_app(
                admin_state(state), admin_token=admin_token, trace_url=trace_url
            ),
            admin_listen,
            reuse_port=reuse_port,
            drain=drain,
        )
        state.egress.protect(listen=proxy_address, admin=admin_address)
        freeze_startup_heap()
        if on_ready is not None:
            result = on_ready(proxy_address, admin_address)
            if result is not None:
                await result
        await stop.wait()
