"""A real broker for tests: the demo payment target, the proxy and admin ports, and
the ledger, all on loopback. The target's SQLite table is the ground truth for how many
charges really happened.

Also the small client side every integration module shares: ``request`` and its
``Answer``, ``arm_faults`` for the demo target, ``serve_app``/``serve_handler`` for a
test's own upstream, and ``ledger_rows`` for what the ledger recorded."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web
from aiohttp.typedefs import LooseHeaders
from yarl import URL

from effect_broker.admin.app import build_admin_app
from effect_broker.config.routes_file import parse_routes
from effect_broker.config.settings import Settings
from effect_broker.crypto import MasterKey
from effect_broker.demo import payment_target
from effect_broker.proxy.app import build_proxy_app
from effect_broker.proxy.connect import ConnectPolicy
from effect_broker.proxy.edge import EdgeLimits
from effect_broker.proxy.state import ProxyState
from effect_broker.runtime import open_runtime
from effect_broker.server import admin_state, connect_policy, leaf_contexts, start_site

PROBLEM_JSON = "application/problem+json"
PROBLEMS = "https://effect-broker.dev/problems/"

ROUTES = """\
version: 1
proxy:
  unmatched: {unmatched}
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: {key_retention}
    timeout: {timeout}
  - name: tickets.create
    version: "3"
    safety: reconcilable
    correlation_header: X-Correlation-Id
    settlement_bound: {settlement_bound}
    timeout: {timeout}
    probe:
      method: GET
      path: /v1/charges?correlation_id={{downstream_key}}
      found: {{status: [200], external_id: /id}}
      absent: {{status: [404]}}
  - name: email.send
    version: "1"
    safety: unsafe
    timeout: {timeout}
routes:
  - name: charge
    match: {{method: POST, host: payments.internal, path: /v1/charges}}
    upstream: {target}/idempotent
    contract: payments.charge
  - name: payments
    match: {{method: POST, path: /payments/v1/charges}}
    strip_prefix: /payments
    upstream: {target}/idempotent
    contract: payments.charge
  - name: tickets
    match: {{method: POST, path: /tickets/v1/charges}}
    strip_prefix: /tickets
    upstream: {target}/reconcilable
    contract: tickets.create
  - name: email
    match: {{method: POST, path: /email/v1/charges}}
    strip_prefix: /email
    upstream: {target}/unsafe
    contract: email.send
"""


@dataclass
class Broker:
    proxy_url: str
    admin_url: str
    target_url: str
    target_db: Path
    state: ProxyState

    def charges(self, order_id: str | None = None) -> list[dict[str, Any]]:
        """Rows in the target's own charges table: what really happened."""
        with closing(sqlite3.connect(self.target_db)) as conn:
            conn.row_factory = sqlite3.Row
            rows = conn.execute(
                "SELECT * FROM charges WHERE ?1 IS NULL OR order_id = ?1 ORDER BY rowid",
                (order_id,),
            ).fetchall()
        return [dict(row) for row in rows]


async def _serve(
    stack: AsyncExitStack,
    app: web.Application,
    connect: ConnectPolicy | None = None,
    edge: EdgeLimits | None = None,
    state: ProxyState | None = None,
) -> str:
    host, port = await start_site(
        stack,
        app,
        "127.0.0.1:0",
        connect=connect,
        edge=edge,
        leaves=leaf_contexts(state) if state is not None else None,
        gateway=state.gateway if state is not None else None,
    )
    return f"http://{host}:{port}"


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port; yields its base URL."""
    async with AsyncExitStack() as stack:
        yield await _serve(stack, app)


@asynccontextmanager
async def serve_handler(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """A tiny upstream: ``handler`` answers every method on every path."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    async with serve_app(app) as url:
        yield url


# --------------------------------------------------------------------- the client side


def address(url: str) -> tuple[str, int]:
    """host and port of a loopback URL, for raw-socket tests."""
    parsed = URL(url)
    assert parsed.host is not None and parsed.port is not None
    return parsed.host, parsed.port


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def problem(self) -> dict[str, Any]:
        """The body as a problem document; fails unless it is served as one."""
        assert self.headers["Content-Type"].startswith(PROBLEM_JSON), self
        document: dict[str, Any] = json.loads(self.body)
        return document


async def request(
    method: str,
    url: str | URL,
    *,
    proxy: str | None = None,
    headers: LooseHeaders | None = None,
    data: Any = None,
    params: list[tuple[str, str]] | None = None,
) -> Answer:
    """One request on a fresh session; the whole answer, body read."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, url, proxy=proxy, headers=headers, data=data, params=params
        ) as response,
    ):
        return Answer(response.status, dict(response.headers), await response.read())


async def arm_faults(broker: Broker, **faults: int) -> None:
    """Arm the demo target's faults: ``hang_after_commit=n``, the next n charges commit
    and never answer; ``fail_before_commit=n``, the next n get a 503 and write nothing."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{broker.target_url}/_faults", json=faults) as response,
    ):
        assert response.status == 200, await response.text()


async def ledger_rows(database_url: str) -> list[asyncpg.Record]:
    """Every effect in the ledger, oldest first: operation key, status, attempts."""
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch(
            "SELECT operation_key, status, attempts FROM effects ORDER BY created_at"
        )
    finally:
        await conn.close()


@asynccontextmanager
async def running_broker(
    database_url: str,
    tmp_path: Path,
    *,
    timeout: str = "2s",
    key_retention: str = "1h",
    settlement_bound: str = "300ms",
    settlement_delay: float = 0.0,
    unmatched: str = "pass",
    routes: Callable[[str], str] | None = None,
    **settings: Any,
) -> AsyncIterator[Broker]:
    target_db = tmp_path / "target.sqlite3"
    async with AsyncExitStack() as stack:
        target_url = await _serve(
            stack,
            payment_target.build_app(
                target_db, settlement_delay=settlement_delay, key_retention=3600.0
            ),
        )
        text = (
            routes(target_url)
            if routes
            else ROUTES.format(
                target=target_url,
                timeout=timeout,
                key_retention=key_retention,
                settlement_bound=settlement_bound,
                unmatched=unmatched,
            )
        )
        config = parse_routes(text, source="test-routes.yaml")
        if "master_keys" not in settings:  # a test may bring its own key or keys
            settings.setdefault("master_key", MasterKey.generate().to_base64())
        # Raw-socket tests name the sidecar "sidecar" or "x" in Host.
        settings.setdefault("allowed_hosts", "sidecar,x")
        options = Settings(database_url=database_url, tenant="acme", **settings)
        state = await stack.enter_async_context(open_runtime(options, config))
        edge = EdgeLimits.from_settings(options)
        proxy_url = await _serve(
            stack, build_proxy_app(state, edge=edge), connect_policy(state), edge, state
        )
        admin_url = await _serve(
            stack, build_admin_app(admin_state(state), admin_token=options.admin_token)
        )
        state.egress.protect(listen=address(proxy_url), admin=address(admin_url))
        yield Broker(proxy_url, admin_url, target_url, target_db, state)
