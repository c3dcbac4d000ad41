"""A request addressed to the proxy itself must name the proxy in Host.

A page that rebinds its own name to the sidecar reaches it with ``Host:
evil.example.com``; routed, it would defeat the upstream's own DNS-rebinding check
(the proxy sets the upstream's Host). It is refused before routing; ``Origin`` still
reaches the upstream so its own checks work.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.harness import (
    PROBLEMS,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)

ROUTES = """\
version: 1
contracts:
  - name: tool.call
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 5s
routes:
  - name: tool
    match: {{method: POST, path: /tool/v1/call}}
    strip_prefix: /tool
    upstream: {upstream}
    contract: tool.call
"""


@pytest.mark.parametrize("path", ["/tool/v1/call", "/tool/v1/other", "/nowhere"])
async def test_a_foreign_host_is_refused_before_routing(
    database_url: str, tmp_path: Path, path: str
) -> None:
    seen: list[dict[str, str]] = []

    async def upstream(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"ok": True})

    async with (
        serve_handler(upstream) as url,
        running_broker(
            database_url, tmp_path, routes=lambda _: ROUTES.format(upstream=url)
        ) as broker,
    ):
        refused = await request(
            "POST",
            f"{broker.proxy_url}{path}",
            headers={
                "Host": "evil.example.com:8080",
                "Origin": "http://evil.example.com:8080",
                "Operation-Key": "k-1",
            },
            data=b"{}",
        )
        assert refused.status == 421, refused
        assert refused.problem["type"] == PROBLEMS + "misdirected-request"
        assert "EFFECT_BROKER_ALLOWED_HOSTS" in refused.problem["detail"]
        assert seen == []
        assert await ledger_rows(database_url) == []

        # Its own name passes, and the client's Origin reaches the upstream.
        passed = await request(
            "POST",
            f"{broker.proxy_url}/tool/v1/call",
            headers={
                "Host": "localhost",
                "Origin": "http://localhost:3000",
                "Operation-Key": "k-2",
            },
            data=b"{}",
        )
        assert passed.status == 200, passed
        assert seen[0]["Origin"] == "http://localhost:3000"
