"""A proxy with a token-protected admin API, and effects made through it, for the tests
of the admin API, the ``effects`` commands and the Python client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from effect_broker.admin.app import build_admin_app
from effect_broker.cli import _register, app
from effect_broker.server import admin_state
from tests.integration.harness import (
    Answer,
    Broker,
    arm_faults,
    request,
    running_broker,
    serve_app,
)

TOKEN = "t0k-admin-secret"
# Route name -> reverse-mode path on the sidecar (see harness.ROUTES).
IDEMPOTENT = "payments"
RECONCILABLE = "tickets"
UNSAFE = "email"


@dataclass(frozen=True)
class Admin:
    """A broker plus an admin app that has a token (the harness's has none)."""

    broker: Broker
    url: str
    token: str | None

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = "default",
        params: list[tuple[str, str]] | None = None,
        body: object = None,
        raw: bytes | None = None,
    ) -> Answer:
        bearer = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        return await request(
            method, self.url + path, params=params, data=data, headers=headers
        )

    async def get(self, path: str, **kwargs: Any) -> Answer:
        return await self.call("GET", path, **kwargs)

    async def post(self, path: str, body: object = None, **kwargs: Any) -> Answer:
        return await self.call("POST", path, body=body, **kwargs)

    async def effect(self, effect_id: str) -> dict[str, Any]:
        answer = await self.get(f"/v1/effects/{effect_id}")
        assert answer.status == 200, answer
        document: dict[str, Any] = answer.json
        return document


@asynccontextmanager
async def admin_broker(
    database_url: str, tmp_path: Path, *, token: str | None = TOKEN, **settings: Any
) -> AsyncIterator[Admin]:
    """``running_broker`` plus an admin site built with ``admin_token``."""
    settings.setdefault("timeout", "500ms")
    async with (
        running_broker(database_url, tmp_path, **settings) as broker,
        serve_app(build_admin_app(admin_state(broker.state), admin_token=token)) as url,
    ):
        yield Admin(broker, url, token)


@pytest.fixture
async def admin(database_url: str, tmp_path: Path) -> AsyncIterator[Admin]:
    async with admin_broker(database_url, tmp_path) as running:
        yield running


def order(key: str) -> dict[str, Any]:
    return {"amount": 1200, "currency": "usd", "order_id": key}


async def send(
    broker: Broker, route: str, key: str, *, proxy_auth: str | None = None
) -> Answer:
    """One request through the proxy in reverse mode; the body names the key."""
    headers = {"Content-Type": "application/json", "Operation-Key": key}
    if proxy_auth is not None:
        headers["Proxy-Authorization"] = proxy_auth
    return await request(
        "POST",
        f"{broker.proxy_url}/{route}/v1/charges",
        data=json.dumps(order(key)).encode(),
        headers=headers,
    )


async def settled(broker: Broker, route: str, key: str) -> str:
    answer = await send(broker, route, key)
    assert answer.status == 201, answer
    return answer.headers["Effect-Id"]


async def unknown(broker: Broker, route: str, *keys: str) -> list[str]:
    """Effects whose target committed but whose answers were lost (proxy timeout)."""
    await arm_faults(broker, hang_after_commit=len(keys))
    answers = await asyncio.gather(*(send(broker, route, key) for key in keys))
    for answer in answers:
        assert answer.status == 504, answer
        assert answer.headers["Effect-Status"] == "outcome_unknown"
    return [answer.headers["Effect-Id"] for answer in answers]


NO_UP = Path("/nonexistent/effect-broker-data")


async def cli(
    admin: Admin, *args: str, token: str | None = TOKEN, env: dict[str, Any] | None = None
) -> Result:
    """Run ``effect-broker effects ARGS`` in a thread, with colours forced on."""
    _register()
    argv: Sequence[str] = ["effects", *args, "--admin-url", admin.url]
    if token is not None:
        argv = [*argv, "--token", token]
    environment = {
        "FORCE_COLOR": "1",
        "NO_COLOR": None,
        "COLUMNS": "250",
        "EFFECT_BROKER_ADMIN_TOKEN": None,
        "EFFECT_BROKER_ADMIN_URL": None,
        "EFFECT_BROKER_DATA_DIR": str(NO_UP),  # never a developer's own ./.effect-broker
        **(env or {}),
    }
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, app, argv, env=environment)
