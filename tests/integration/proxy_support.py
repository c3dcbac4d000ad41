"""Requests as an agent sends them to the sidecar, for the proxy's tests."""

from __future__ import annotations

import json
import socket
from typing import Any

from tests.integration.harness import (
    Answer,
    request,
)


def charge(order_id: str, amount: int = 1000) -> dict[str, Any]:
    return {"amount": amount, "currency": "usd", "order_id": order_id}


async def post(
    url: str,
    *,
    key: str | None,
    body: object,
    extra: list[tuple[str, str]] | None = None,
) -> Answer:
    """POST a JSON body straight to the sidecar (reverse mode)."""
    headers: list[tuple[str, str]] = [("Content-Type", "application/json")]
    if key is not None:
        headers.append(("Operation-Key", key))
    headers.extend(extra or [])
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await request("POST", url, headers=headers, data=data)


def closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
