"""The URLs ``serve`` prints are usable as written, IPv6 listen addresses included."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import aiohttp

from effect_broker.config.hosts import http_url
from effect_broker.crypto import MasterKey

SERVE = "import typer; from effect_broker.cli.serve import serve; typer.run(serve)"
BANNER = re.compile(rb"proxy on (\S+), admin on (\S+),")
ROUTES = """\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
routes:
  - name: charge
    match: {method: POST, host: payments.internal, path: /v1/charges}
    contract: payments.charge
"""


def test_an_ipv6_host_is_bracketed() -> None:
    assert http_url("::1", 8080) == "http://[::1]:8080"
    assert http_url("[::1]", 8080) == "http://[::1]:8080"
    assert http_url("127.0.0.1", 80) == "http://127.0.0.1:80"


async def test_serve_on_ipv6_loopback_prints_urls_a_client_can_use(
    database_url: str, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_")}
    environ.update(
        EFFECT_BROKER_DATABASE_URL=database_url,
        EFFECT_BROKER_MASTER_KEY=MasterKey.generate().to_base64(),
        EFFECT_BROKER_ROUTES=str(routes),
        EFFECT_BROKER_LISTEN="[::1]:0",
        EFFECT_BROKER_ADMIN_LISTEN="[::1]:0",
        EFFECT_BROKER_RECONCILER="false",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVE,
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        seen = b""
        while (found := BANNER.search(seen)) is None:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            assert line, f"serve exited before it was ready: {seen.decode()}"
            seen += line
        proxy, admin = found.group(1).decode(), found.group(2).decode()
        assert proxy.startswith("http://[::1]:") and admin.startswith("http://[::1]:")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{admin}/healthz") as health,
        ):
            assert health.status == 200
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
