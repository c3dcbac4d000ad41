"""A broker in front of a TLS target, with the proxy's CA ready to intercept: the
setting every interception test starts from (CONNECT, plain tunnels, SNI).

A support module, so that test modules share it without importing each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.integration.harness import Broker, address, running_broker
from tests.integration.tls_support import ChargeTarget, TlsWorld, routes, serve_tls


@dataclass
class Setup:
    world: TlsWorld
    target: ChargeTarget
    port: int
    broker: Broker

    @property
    def proxy(self) -> tuple[str, int]:
        return address(self.broker.proxy_url)


@asynccontextmanager
async def setup(
    database_url: str,
    tmp_path: Path,
    *,
    untrusted_port: int = 1,
    watch_loopback: bool = True,
    **settings: object,
) -> AsyncIterator[Setup]:
    world = TlsWorld(tmp_path)
    target = ChargeTarget()
    async with serve_tls(target.handle, world.server_context()) as port:
        text = routes(port, watch_loopback=watch_loopback).replace(
            "{untrusted}", str(untrusted_port)
        )
        options = {**world.settings(), **settings}
        async with running_broker(
            database_url, tmp_path, routes=lambda _: text, **options
        ) as broker:
            yield Setup(world, target, port, broker)
