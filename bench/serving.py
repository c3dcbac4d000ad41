"""Serve an aiohttp app the way effect-broker does (AppRunner, no access log) until
SIGTERM, printing the bound address so the bench can find it."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

READY_LINE = "listening on http://{host}:{port}"
READY_PATTERN = r"listening on (http://[\d.]+:\d+)"


async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound_port = sockets[0].getsockname()[1] if sockets else port
        print(READY_LINE.format(host=host, port=bound_port), flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
