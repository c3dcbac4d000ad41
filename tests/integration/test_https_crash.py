"""The crash variant over HTTPS: a real ``effect-broker serve`` process intercepting a
tunnel dies after the target charged but before the answer was recorded. A new process
(same ledger, same CA) settles the effect by redispatching under the same derived key,
and the client's retry through a new tunnel gets the receipt: one charge at the target.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from effect_broker.crypto import MasterKey
from effect_broker.failpoints import AFTER_UPSTREAM_RESPONSE, EXIT_CODE
from tests.integration.harness import ledger_rows
from tests.integration.tls_support import (
    ChargeTarget,
    TlsWorld,
    charge_request,
    open_tunnel,
    routes,
    serve_tls,
    split,
)

SERVE = "import typer; from effect_broker.cli.serve import serve; typer.run(serve)"
BANNER = re.compile(rb"effect-broker proxy on http://([0-9.]+):([0-9]+)")


@asynccontextmanager
async def serve_process(
    environ: dict[str, str],
) -> AsyncIterator[tuple[asyncio.subprocess.Process, tuple[str, int]]]:
    """``effect-broker serve`` in a process of its own; yields it and its proxy port."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVE,
        env=environ,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        seen = b""
        while (found := BANNER.search(seen)) is None:
            line = await asyncio.wait_for(process.stderr.readline(), 30)
            assert line, f"serve exited before it was ready: {seen.decode()}"
            seen += line
        yield process, (found.group(1).decode(), int(found.group(2)))
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


async def charge_through(proxy: tuple[str, int], world: TlsWorld) -> bytes:
    tunnel = await open_tunnel(
        proxy, "api.test:443", world.client_context(), server_hostname="api.test"
    )
    try:
        return await tunnel.exchange(charge_request("order-9:charge"))
    except ConnectionError:
        return b""
    finally:
        await tunnel.close()


async def test_proxy_dying_inside_an_intercepted_tunnel_charges_once(
    database_url: str, tmp_path: Path
) -> None:
    world = TlsWorld(tmp_path)
    target = ChargeTarget()
    async with serve_tls(target.handle, world.server_context()) as port:
        routes_file = tmp_path / "routes.yaml"
        # A short contract timeout keeps the dead process's lease short.
        text = (
            routes(port).replace("{untrusted}", "1").replace("timeout: 5s", "timeout: 1s")
        )
        routes_file.write_text(text)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_")}
        environ.update(
            EFFECT_BROKER_DATABASE_URL=database_url,
            EFFECT_BROKER_MASTER_KEY=MasterKey.generate().to_base64(),
            EFFECT_BROKER_ROUTES=str(routes_file),
            EFFECT_BROKER_LISTEN="127.0.0.1:0",
            EFFECT_BROKER_ADMIN_LISTEN="127.0.0.1:0",
            EFFECT_BROKER_TENANT="acme",
            EFFECT_BROKER_LEASE_GRACE="100ms",
            EFFECT_BROKER_CA_CERT=str(world.ca_cert),
            EFFECT_BROKER_CA_KEY=str(world.ca_key),
            EFFECT_BROKER_UPSTREAM_CA_FILE=str(world.target_ca_file),
        )
        armed = {**environ, "EFFECT_BROKER_FAILPOINTS": AFTER_UPSTREAM_RESPONSE}
        async with serve_process(armed) as (process, proxy):
            assert await charge_through(proxy, world) == b""  # the proxy died
            assert await process.wait() == EXIT_CODE
        assert len(target.charges) == 1  # the target did charge
        [row] = await ledger_rows(database_url)
        assert row["status"] == "dispatching"  # nothing recorded the answer

        async with serve_process(environ) as (_, proxy):
            # The client retries as an agent does: 409 (in flight, with Retry-After)
            # while the dead process's lease runs out, then the receipt. The pause is
            # the client's backoff, not synchronisation: every answer is checked.
            for _ in range(200):
                status, headers, body = split(await charge_through(proxy, world))
                if status != 409:
                    break
                await asyncio.sleep(0.05)
            assert status == 200, body
            assert headers["effect-status"] == "succeeded"
        assert len(target.charges) == 1
        keys = {seen.headers["idempotency-key"] for seen in target.posts()}
        assert len(keys) == 1  # every attempt carried the same derived key
