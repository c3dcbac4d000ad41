"""Reverse mode passes through under a route's prefix.

An SDK pointed at a route's prefix (``OPENAI_BASE_URL=http://sidecar/openai/v1``) makes
calls the routes do not record: they go to that route's upstream, prefix stripped, with
the route's injected headers, unrecorded. ``passthrough: false`` refuses them with a
problem that names the routes there; in forward mode it refuses unrecorded requests to
the route's host.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.harness import (
    PROBLEMS,
    Broker,
    ledger_rows,
    request,
    running_broker,
    serve_handler,
)

MODELS = {
    "object": "list",
    "data": [{"id": "gpt-test", "object": "model", "created": 0, "owned_by": "me"}],
}


def routes(upstream: str) -> str:
    return f"""\
version: 1
contracts:
  - name: chat.create
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 5s
routes:
  - name: openai-chat
    match: {{method: POST, path: /openai/v1/chat/completions}}
    strip_prefix: /openai
    upstream: {upstream}/base
    contract: chat.create
    inject_headers: {{X-Upstream-Token: "${{env:TEST_UPSTREAM_TOKEN}}"}}
  - name: closed-create
    match: {{method: POST, path: /closed/v1/things}}
    strip_prefix: /closed
    upstream: {upstream}/closed
    contract: chat.create
    passthrough: false
  - name: shut-create
    match: {{method: POST, host: shut.internal, path: /v1/things}}
    upstream: {upstream}/shut
    contract: chat.create
    passthrough: false
"""


@dataclass
class Upstream:
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path_qs, dict(request.headers)))
        if request.path == "/base/v1/models":
            return web.json_response(MODELS)
        return web.json_response({"path": request.path_qs}, status=201)


@asynccontextmanager
async def broker(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Broker, Upstream]]:
    monkeypatch.setenv("TEST_UPSTREAM_TOKEN", "injected-secret")
    upstream = Upstream()
    async with (
        serve_handler(upstream.handle) as url,
        running_broker(database_url, tmp_path, routes=lambda _: routes(url)) as b,
    ):
        yield b, upstream


async def test_an_unrecorded_get_under_a_prefix_goes_to_the_routes_upstream(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with broker(database_url, tmp_path, monkeypatch) as (b, upstream):
        answer = await request("GET", f"{b.proxy_url}/openai/v1/models?limit=2")
        assert answer.status == 200, answer
        assert answer.json == MODELS
        assert "Effect-Id" not in answer.headers
        [(method, path, headers)] = upstream.seen
        assert (method, path) == ("GET", "/base/v1/models?limit=2")
        assert headers["X-Upstream-Token"] == "injected-secret"
        assert await ledger_rows(database_url) == []


async def test_an_unrecorded_post_with_a_key_says_it_was_not_recorded(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with broker(database_url, tmp_path, monkeypatch) as (b, upstream):
        answer = await request(
            "POST",
            f"{b.proxy_url}/openai/v1/files",
            headers={"Operation-Key": "upload-1"},
            data=b"{}",
        )
        assert answer.status == 201, answer
        assert answer.headers["Effect-Status"] == "unrecorded"
        assert [(m, p) for m, p, _ in upstream.seen] == [("POST", "/base/v1/files")]
        assert await ledger_rows(database_url) == []


async def test_passthrough_false_refuses_and_names_the_routes(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with broker(database_url, tmp_path, monkeypatch) as (b, upstream):
        answer = await request("GET", f"{b.proxy_url}/closed/v1/things")
        assert answer.status == 404, answer
        problem = answer.problem
        assert problem["type"] == PROBLEMS + "route-not-found"
        assert "closed-create (POST /closed/v1/things)" in problem["detail"]
        assert "passthrough: false" in problem["detail"]

        forward = await request("GET", "http://shut.internal/v1/other", proxy=b.proxy_url)
        assert forward.status == 403, forward
        assert forward.problem["type"] == PROBLEMS + "route-refused"
        assert "shut-create" in forward.problem["detail"]
        assert upstream.seen == []


async def test_a_path_under_no_prefix_is_a_404_listing_the_prefixes(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with broker(database_url, tmp_path, monkeypatch) as (b, upstream):
        answer = await request("GET", f"{b.proxy_url}/elsewhere/v1/models")
        assert answer.status == 404
        assert "/closed, /openai" in answer.problem["detail"]
        assert upstream.seen == []


async def test_the_openai_sdk_pointed_at_the_sidecar_lists_models(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai = pytest.importorskip("openai")
    async with broker(database_url, tmp_path, monkeypatch) as (b, upstream):
        client = openai.OpenAI(
            base_url=f"{b.proxy_url}/openai/v1", api_key="sk-test", max_retries=0
        )
        try:
            models = await asyncio.to_thread(lambda: list(client.models.list()))
        finally:
            client.close()
        assert [model.id for model in models] == ["gpt-test"]
        assert upstream.seen[0][2]["Authorization"] == "Bearer sk-test"
