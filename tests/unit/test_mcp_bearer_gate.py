"""The management server's HTTP gate: only the admin token reaches the MCP app."""

from __future__ import annotations

import json
from typing import Any

import pytest

from effect_broker.mcp.management import BearerGate

TOKEN = "s3cret-token"


class App:
    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(scope["type"])


async def call(scope: dict[str, Any]) -> tuple[App, list[dict[str, Any]]]:
    app, sent = App(), []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await BearerGate(app, TOKEN)(scope, receive, send)
    return app, sent


def http(authorization: bytes | None) -> dict[str, Any]:
    headers = [] if authorization is None else [(b"authorization", authorization)]
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}


async def test_the_admin_token_passes_and_lifespan_is_the_apps() -> None:
    app, sent = await call(http(b"Bearer " + TOKEN.encode()))
    assert app.scopes == ["http"] and sent == []
    app, sent = await call(http(b"bearer  " + TOKEN.encode()))
    assert app.scopes == ["http"]
    app, _ = await call({"type": "lifespan"})
    assert app.scopes == ["lifespan"]


@pytest.mark.parametrize(
    ("authorization", "invalid"),
    [
        (None, False),
        (b"Basic " + TOKEN.encode(), False),
        (b"Bearer", False),
        (b"Bearer " + TOKEN.encode() + b"x", True),
        (b"Bearer " + TOKEN[:-1].encode(), True),
    ],
)
async def test_anything_else_is_a_401_problem(
    authorization: bytes | None, invalid: bool
) -> None:
    app, sent = await call(http(authorization))
    assert app.scopes == []
    start, body = sent
    headers = dict(start["headers"])
    assert start["status"] == 401
    assert headers[b"content-type"] == b"application/problem+json"
    assert headers[b"www-authenticate"].startswith(b"Bearer")
    assert (b'error="invalid_token"' in headers[b"www-authenticate"]) is invalid
    assert json.loads(body["body"])["type"].endswith("/unauthorized")


async def test_a_websocket_is_closed_unread() -> None:
    app, sent = await call({"type": "websocket", "headers": []})
    assert app.scopes == [] and sent == [{"type": "websocket.close", "code": 1008}]


def test_a_blank_token_is_refused() -> None:
    with pytest.raises(ValueError):
        BearerGate(App(), " ")
