"""The kit's lookup and tombstone endpoints over real HTTP, on both frameworks and
both drivers: aiohttp (a real test server) and ASGI (Starlette through httpx), each
with asyncpg and psycopg behind it.

What the proxy relies on: the status codes of the protocol, documents it can parse
with ``AttemptReport.from_json``, and nothing changed by a request without the secret.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import asyncpg
import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from effect_broker.target import AttemptReport, AttemptState, KitNotInstalled
from effect_broker.target import aiohttp as kit_aiohttp
from effect_broker.target.asgi import KitMiddleware
from effect_broker.target.asyncpg import AsyncpgBackend
from effect_broker.target.endpoints import Backend
from effect_broker.target.protocol import (
    PROTOCOL,
    SECRET_HEADER,
    attempt_key,
    lookup_path,
    tombstone_path,
)
from effect_broker.target.psycopg import PsycopgBackend, connecting
from tests.integration.target_support import driver, prepare
from tests.support import poll

SECRET = "s3cret-shared-with-the-proxy"
AUTH = {SECRET_HEADER: SECRET}
KEY = attempt_key("downstream-key", 1)
PROBLEMS = "https://effect-broker.dev/problems/"


async def backend(name: str, url: str, stack: AsyncExitStack, wait: float) -> Backend:
    if name == "asyncpg":
        pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
        stack.push_async_callback(pool.close)
        return AsyncpgBackend(pool.acquire, tombstone_wait=wait)
    if name == "psycopg_pool":  # what the docs suggest: PsycopgBackend(pool.connection)
        pg_pool = AsyncConnectionPool(url, min_size=1, max_size=4, open=False)
        await pg_pool.open()
        stack.push_async_callback(pg_pool.close)
        return PsycopgBackend(pg_pool.connection, tombstone_wait=wait)
    return PsycopgBackend(connecting(url), tombstone_wait=wait)


async def serve(framework: str, kit: Backend, stack: AsyncExitStack) -> httpx.AsyncClient:
    """The service's own application with the kit on it, and a client for it."""
    if framework == "aiohttp":

        async def hello(_request: web.Request) -> web.Response:
            return web.Response(text="the service")

        app = web.Application()
        app.router.add_get("/hello", hello)
        kit_aiohttp.setup(app, kit, secret=SECRET)
        server = TestServer(app)
        await server.start_server()
        stack.push_async_callback(server.close)
        client = httpx.AsyncClient(base_url=str(server.make_url("")))
    else:

        async def hello_asgi(_request: Request) -> PlainTextResponse:
            return PlainTextResponse("the service")

        starlette = Starlette(routes=[Route("/hello", hello_asgi)])
        transport = httpx.ASGITransport(app=KitMiddleware(starlette, kit, secret=SECRET))
        client = httpx.AsyncClient(transport=transport, base_url="http://service")
    stack.push_async_callback(client.aclose)
    return client


@pytest.fixture(
    params=[
        ("aiohttp", "asyncpg"),
        ("aiohttp", "psycopg"),
        ("asgi", "asyncpg"),
        ("asgi", "psycopg"),
        ("asgi", "psycopg_pool"),
    ],
    ids=lambda p: "-".join(p),
)
async def service(
    request: pytest.FixtureRequest, empty_database_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, str, str]]:
    framework, driver_name = request.param
    await prepare(empty_database_url)
    async with AsyncExitStack() as stack:
        kit = await backend(driver_name, empty_database_url, stack, wait=0.3)
        client = await serve(framework, kit, stack)
        yield client, driver_name, empty_database_url


def report(answer: httpx.Response) -> AttemptReport:
    return AttemptReport.from_json(answer.json(), expected_key=KEY)


async def test_lookup_and_tombstone_follow_the_protocol(service: Any) -> None:
    client, _, _ = service

    absent = await client.get(lookup_path(KEY), headers=AUTH)
    created = await client.put(tombstone_path(KEY), headers=AUTH)
    again = await client.put(tombstone_path(KEY), headers=AUTH)
    found = await client.get(lookup_path(KEY), headers=AUTH)

    assert absent.status_code == 404
    assert absent.json()["protocol"] == PROTOCOL
    assert report(absent).state is AttemptState.ABSENT
    assert created.status_code == 201
    assert report(created).state is AttemptState.TOMBSTONED
    assert again.status_code == 200
    assert report(again).at == report(created).at
    assert found.status_code == 200
    assert report(found).state is AttemptState.TOMBSTONED
    assert found.headers["cache-control"] == "no-store"


async def test_a_committed_attempt_is_found_and_refuses_the_tombstone(
    service: Any,
) -> None:
    client, driver_name, url = service
    db = driver(driver_name, url)
    conn = await db.connect()
    try:
        committed = await db.kit.run_attempt(conn, KEY, lambda c: db.charge(c, KEY))
    finally:
        await conn.close()

    found = await client.get(lookup_path(KEY), headers=AUTH)
    refused = await client.put(tombstone_path(KEY), headers=AUTH)

    assert found.status_code == 200
    assert report(found).answer == committed
    assert refused.status_code == 409
    assert report(refused).state is AttemptState.COMMITTED
    assert report(refused).answer == committed


async def test_a_tombstone_behind_an_uncommitted_receipt_answers_503(
    service: Any,
) -> None:
    """Bounded (0.3 s here): the proxy hears "ask again", never a blocked request."""
    client, driver_name, url = service
    db = driver(driver_name, url)
    conn = await db.connect()
    try:
        async with conn.transaction():
            await db.kit.record(conn, KEY, await db.charge(conn, KEY))
            busy = await client.put(tombstone_path(KEY), headers=AUTH)
        after = await client.put(tombstone_path(KEY), headers=AUTH)
    finally:
        await conn.close()

    assert busy.status_code == 503
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["type"] == PROBLEMS + "target-attempt-in-progress"
    assert after.status_code == 409


@pytest.mark.parametrize("presented", [None, "", "wrong", SECRET + "x"])
async def test_without_the_secret_nothing_is_answered_or_changed(
    service: Any, presented: str | None
) -> None:
    client, _, _ = service
    headers = {} if presented is None else {SECRET_HEADER: presented}

    tombstone = await client.put(tombstone_path(KEY), headers=headers)
    lookup = await client.get(lookup_path(KEY), headers=headers)

    for answer in (tombstone, lookup):
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"] == PROBLEMS + "target-secret"
    still = await client.get(lookup_path(KEY), headers=AUTH)
    assert report(still).state is AttemptState.ABSENT


@pytest.mark.parametrize("key", ["short", "has.a.dot.and-is-long-enough", "x" * 129])
async def test_a_malformed_attempt_key_is_400(service: Any, key: str) -> None:
    client, _, _ = service

    for answer in (
        await client.get(lookup_path(key), headers=AUTH),
        await client.put(tombstone_path(key), headers=AUTH),
    ):
        assert answer.status_code == 400
        assert answer.json()["type"] == PROBLEMS + "target-attempt-key"


async def test_wrong_methods_and_paths_are_refused_and_the_app_still_answers(
    service: Any,
) -> None:
    client, _, _ = service

    delete = await client.delete(lookup_path(KEY), headers=AUTH)
    get_tombstone = await client.get(tombstone_path(KEY), headers=AUTH)
    nested = await client.get(lookup_path(KEY) + "/other", headers=AUTH)
    own = await client.get("/hello")

    assert delete.status_code == 405
    assert delete.headers["allow"] == "GET"
    assert get_tombstone.status_code == 405
    assert get_tombstone.headers["allow"] == "PUT"
    assert nested.status_code == 404
    assert own.status_code == 200
    assert own.text == "the service"
    assert report(await client.get(lookup_path(KEY), headers=AUTH)).state is (
        AttemptState.ABSENT
    )


@pytest.mark.parametrize("driver_name", ["asyncpg", "psycopg"])
async def test_an_aiohttp_app_without_the_table_refuses_to_start(
    empty_database_url: str, driver_name: str
) -> None:
    async with AsyncExitStack() as stack:
        kit = await backend(driver_name, empty_database_url, stack, wait=1.0)
        app = web.Application()
        kit_aiohttp.setup(app, kit, secret=SECRET)
        runner = web.AppRunner(app)
        with pytest.raises(KitNotInstalled, match="effect_broker_attempts is missing"):
            await runner.setup()
        await runner.cleanup()


@pytest.mark.parametrize("driver_name", ["asyncpg", "psycopg"])
async def test_an_asgi_app_without_the_table_fails_its_lifespan_startup(
    empty_database_url: str, driver_name: str
) -> None:
    async with AsyncExitStack() as stack:
        kit = await backend(driver_name, empty_database_url, stack, wait=1.0)
        app = KitMiddleware(Starlette(), kit, secret=SECRET)
        sent = await _lifespan_startup(app)
        client = await serve("asgi", kit, stack)
        lookup = await client.get(lookup_path(KEY), headers=AUTH)

    assert sent["type"] == "lifespan.startup.failed"
    assert "table effect_broker_attempts is missing" in sent["message"]
    assert "install(conn)" in sent["message"]
    # Without a lifespan the endpoints say the same, as a 503 the proxy can read.
    assert lookup.status_code == 503
    assert lookup.json()["type"] == PROBLEMS + "target-kit-not-installed"


async def test_an_asgi_app_with_the_table_completes_its_startup(
    empty_database_url: str,
) -> None:
    await prepare(empty_database_url)
    kit = PsycopgBackend(connecting(empty_database_url))
    sent = await _lifespan_startup(KitMiddleware(Starlette(), kit, secret=SECRET))
    assert sent["type"] == "lifespan.startup.complete"


def test_an_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty shared secret"):
        KitMiddleware(Starlette(), PsycopgBackend(connecting("postgresql://")), secret="")


async def _lifespan_startup(app: KitMiddleware) -> dict[str, Any]:
    """Drive an ASGI lifespan as a server does; the first message the app sends."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: Any) -> None:
        await outbox.put(dict(message))

    running = asyncio.create_task(app({"type": "lifespan"}, receive, send))
    first = await poll(lambda: _next(outbox))
    await inbox.put({"type": "lifespan.shutdown"})
    if first["type"] == "lifespan.startup.complete":
        await asyncio.wait_for(running, 10)
    else:
        running.cancel()
    return first


async def _next(queue: asyncio.Queue[dict[str, Any]]) -> dict[str, Any] | None:
    return None if queue.empty() else queue.get_nowait()
